"""The ``diffpolicy`` command: everything a node does can also be done from here, without ROS.

    diffpolicy demo --episodes N --seed S [--task push|push_two_goals] [--out FILE] [--json]
    diffpolicy train-bc --data DEMOS --config config/policy/<name>.yaml [--iters N] [--device D]
    diffpolicy train-ppo --config config/train/<name>.yaml [--init CKPT] [--device D] [--resume auto|CKPT]
    diffpolicy eval --checkpoint CKPT --episodes N [--task T] [--json]
    diffpolicy plot RUN_DIR
    diffpolicy bench sim|policy|ros|learn [--json]
    diffpolicy launch sim_train|real_arm|replay_eval [name:=value ...]

Heavy imports happen inside each command so ``diffpolicy --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from diffpolicy_ros.runs import EVAL_SEED, new_run_dir

TASK_CHOICES = ("push", "push_two_goals", "point_mass")  # = diffpolicy_ros.sim.TASKS, without importing it


def _print_json_or_table(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
        return
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


def load_task_config(path: Path | None, task: str | None) -> tuple[str, dict]:
    """Read ``task`` and ``env`` overrides from a YAML file; an explicit ``--task`` wins."""
    if path is None:
        return task or "push", {}
    import yaml

    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    if not isinstance(cfg, dict) or not isinstance(cfg.get("env", {}), dict):
        raise SystemExit(f"diffpolicy: {path}: expected a mapping with optional 'task' and 'env' keys")
    return task or cfg.get("task", "push"), dict(cfg.get("env") or {})


def cmd_demo(args: argparse.Namespace) -> int:
    from diffpolicy_ros.sim.demos import run_demos

    task, env_overrides = load_task_config(args.config, args.task)

    out = args.out
    if out is None and args.run_dir is not None:
        out = new_run_dir("demos", args.run_dir) / "demos.npz"
    summary, _ = run_demos(
        task=task,
        episodes=args.episodes,
        seed=args.seed,
        obs_mode="image" if args.images else "state",
        out=out,
        progress=not args.json,
        env_overrides=env_overrides,
    )
    _print_json_or_table(summary.as_dict(), args.json)
    return 0


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.sim import bench_sim

    _print_json_or_table(bench_sim(steps=args.steps, n_workers=args.workers, seed=args.seed), args.json)
    return 0


def cmd_train_bc(args: argparse.Namespace) -> int:
    from diffpolicy_ros.rl.bc import load_bc_run, train_bc

    run = load_bc_run(args.config)
    for key in ("iters", "batch_size", "device", "seed", "eval_every", "eval_episodes", "final_eval_episodes"):
        value = getattr(args, key)
        if value is not None:
            setattr(run.train, key, value)
    run_dir = new_run_dir("bc", args.run_dir) if args.run_dir else None
    result = train_bc(run, args.data, run_dir, progress=not args.json)
    _print_json_or_table(result, args.json)
    return 0


def cmd_train_ppo(args: argparse.Namespace) -> int:
    from diffpolicy_ros.rl.ppo import load_ppo_run, train_ppo

    run = load_ppo_run(args.config)
    if args.init is not None:
        run.init = str(args.init)
    for key in ("device", "seed", "total_env_steps", "n_envs"):
        value = getattr(args, key)
        if value is not None:
            setattr(run.train, key, value)
    if args.ddim_steps is not None:
        run.train.sampler.ddim_steps = args.ddim_steps
    if args.resume == "auto" and args.run_dir is None:
        print("diffpolicy train-ppo: --resume auto needs --run-dir (the run to continue)", file=sys.stderr)
        return 2
    result = train_ppo(run, args.run_dir, resume=args.resume, progress=not args.json)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        _print_json_or_table(result, args.json)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from diffpolicy_ros.eval.plots import plot_run

    try:
        print(plot_run(args.run_dir, args.out))
    except (FileNotFoundError, ValueError) as exc:
        print(f"diffpolicy plot: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from diffpolicy_ros.device import resolve_device
    from diffpolicy_ros.eval.rollout import evaluate_policy
    from diffpolicy_ros.models.checkpoint import checkpoint_meta, load_policy

    device = resolve_device(args.device)
    policy, ckpt = load_policy(args.checkpoint, device)
    meta = checkpoint_meta(ckpt)
    result = evaluate_policy(
        policy,
        task=args.task or meta.task,
        episodes=args.episodes,
        seed=args.seed,
        obs_mode=meta.obs_mode,
        device=device,
        ddim_steps=args.ddim_steps,
        execute_horizon=args.execute_horizon or meta.execute_horizon,
        progress=not args.json,
    )
    if not args.per_episode:
        result.pop("per_episode")
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_policy(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.policy import bench_policy

    _print_json_or_table(
        bench_policy(args.checkpoint, args.device, args.iters, args.backend, args.threads),
        args.json,
    )
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from diffpolicy_ros.nodes.runner import parse_overrides, run_graph

    try:
        overrides = parse_overrides(args.arguments)
        if args.graph == "sim_train" and not overrides.get("run_dir"):
            overrides["run_dir"] = str(new_run_dir("sim_train"))
        return run_graph(args.graph, overrides)
    except ValueError as exc:
        print(f"diffpolicy launch: {exc}", file=sys.stderr)
        return 2


def cmd_bench_learn(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.learn import bench_learn

    result = bench_learn(
        tasks=args.tasks,
        variants=args.variants,
        total_env_steps=args.total_env_steps,
        out_dir=args.out_dir,
        init={"push": args.init_push, "push_two_goals": args.init_push_two_goals},
        progress=not args.json,
    )
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_ros(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.ros import bench_ros

    _print_json_or_table(bench_ros(duration_s=args.duration, checkpoint=args.checkpoint), args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diffpolicy", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the scripted expert; optionally record a demonstration dataset")
    demo.add_argument("--episodes", type=int, default=20)
    demo.add_argument("--seed", type=int, default=0, help="episode i uses seed S + i")
    demo.add_argument("--task", choices=TASK_CHOICES, default=None, help="default: push, or the config's")
    demo.add_argument("--config", type=Path, default=None, help="task YAML, e.g. config/sim/push.yaml")
    demo.add_argument("--out", type=Path, default=None, help="write the episodes to this .npz dataset")
    demo.add_argument("--run-dir", type=Path, default=None, help="write to RUN_DIR/demos-<timestamp>/demos.npz")
    demo.add_argument("--images", action="store_true", help="record both 128x128 camera images too")
    demo.add_argument("--json", action="store_true", help="print one JSON object, no progress bar")
    demo.set_defaults(func=cmd_demo)

    bc = sub.add_parser("train-bc", help="behaviour cloning of a diffusion or Gaussian policy on demonstrations")
    bc.add_argument("--data", type=Path, required=True, help="dataset from `diffpolicy demo --out`")
    bc.add_argument("--config", type=Path, required=True, help="e.g. config/policy/diffusion.yaml")
    bc.add_argument("--run-dir", type=Path, default=Path("runs"), help="writes RUN_DIR/bc-<timestamp>/")
    bc.add_argument("--iters", type=int, default=None)
    bc.add_argument("--batch-size", type=int, default=None)
    bc.add_argument("--device", default=None, help="auto|npu|cuda|cpu (default: the config's)")
    bc.add_argument("--seed", type=int, default=None)
    bc.add_argument("--eval-every", type=int, default=None)
    bc.add_argument("--eval-episodes", type=int, default=None)
    bc.add_argument("--final-eval-episodes", type=int, default=None)
    bc.add_argument("--json", action="store_true")
    bc.set_defaults(func=cmd_train_bc)

    ppo = sub.add_parser("train-ppo", help="PPO fine-tuning (diffusion: DPPO chain likelihood; or Gaussian)")
    ppo.add_argument("--config", type=Path, required=True, help="e.g. config/train/push.yaml")
    ppo.add_argument("--init", type=Path, default=None, help="BC checkpoint to start from (default: the config's)")
    ppo.add_argument("--run-dir", type=Path, default=None, help="default: runs/ppo-<timestamp>")
    ppo.add_argument("--resume", default=None, help="auto (newest checkpoint in --run-dir, if any) or a path")
    ppo.add_argument("--device", default=None, help="auto|npu|cuda|cpu (default: the config's)")
    ppo.add_argument("--seed", type=int, default=None)
    ppo.add_argument("--total-env-steps", type=int, default=None)
    ppo.add_argument("--n-envs", type=int, default=None)
    ppo.add_argument("--ddim-steps", type=int, default=None)
    ppo.add_argument("--json", action="store_true", help="one JSON summary on stdout (log lines stay on stderr)")
    ppo.set_defaults(func=cmd_train_ppo)

    plot = sub.add_parser("plot", help="write RUN_DIR/curves.png from a training run's metrics.csv")
    plot.add_argument("run_dir", type=Path)
    plot.add_argument("--out", type=Path, default=None)
    plot.set_defaults(func=cmd_plot)

    ev = sub.add_parser("eval", help="closed-loop evaluation of a checkpoint in the sim")
    ev.add_argument("--checkpoint", type=Path, required=True)
    ev.add_argument("--episodes", type=int, default=50)
    ev.add_argument("--seed", type=int, default=EVAL_SEED, help="episode i uses seed S + i (held out from demos)")
    ev.add_argument("--task", choices=TASK_CHOICES, default=None, help="default: the checkpoint's task")
    ev.add_argument("--ddim-steps", type=int, default=None)
    ev.add_argument("--execute-horizon", type=int, default=None, help="default: the checkpoint's")
    ev.add_argument("--device", default="auto")
    ev.add_argument("--per-episode", action="store_true", help="include every episode's result")
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(func=cmd_eval)

    launch = sub.add_parser("launch", help="run a node graph (one process per node) without launch_ros")
    launch.add_argument("graph", choices=("sim_train", "real_arm", "replay_eval"))
    launch.add_argument("arguments", nargs="*", help="name:=value graph arguments")
    launch.set_defaults(func=cmd_launch)

    bench = sub.add_parser("bench", help="benchmarks; each prints one JSON object with --json")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    bsim = bench_sub.add_parser("sim", help="physics / env / render / vectorized env throughput")
    bsim.add_argument("--steps", type=int, default=400)
    bsim.add_argument("--workers", type=int, default=None, help="vector env workers (default: CPU count)")
    bsim.add_argument("--seed", type=int, default=0)
    bsim.add_argument("--json", action="store_true")
    bsim.set_defaults(func=cmd_bench_sim)
    bpol = bench_sub.add_parser("policy", help="observation -> chunk latency (DDIM-10/20, batch 1 and 32)")
    bpol.add_argument("--checkpoint", type=Path, default=None, help="default: an untrained default policy")
    bpol.add_argument("--device", default="auto")
    bpol.add_argument("--iters", type=int, default=200)
    bpol.add_argument("--backend", default="auto", help="auto|eager|fast|traced|native")
    bpol.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the policy node's default: 1)")
    bpol.add_argument("--json", action="store_true")
    bpol.set_defaults(func=cmd_bench_policy)
    blearn = bench_sub.add_parser("learn", help="long: PPO success vs env steps, diffusion DDIM-10/20 vs Gaussian")
    blearn.add_argument("--tasks", nargs="+", default=["push", "push_two_goals"], choices=TASK_CHOICES)
    blearn.add_argument("--variants", nargs="+", default=["diffusion_ddim10", "diffusion_ddim20", "gaussian"])
    blearn.add_argument("--total-env-steps", type=int, default=200_000)
    blearn.add_argument("--out-dir", type=Path, default=Path("runs/bench_learn"))
    blearn.add_argument("--init-push", type=Path, default=None, help="BC checkpoints (default: trained here)")
    blearn.add_argument("--init-push-two-goals", type=Path, default=None)
    blearn.add_argument("--json", action="store_true")
    blearn.set_defaults(func=cmd_bench_learn)
    bros = bench_sub.add_parser("ros", help="sim graph: camera stamp -> chunk latency, chunk rate, executor jitter")
    bros.add_argument("--duration", type=float, default=30.0)
    bros.add_argument("--checkpoint", type=Path, default=None, help="default: a freshly BC-trained state policy")
    bros.add_argument("--json", action="store_true")
    bros.set_defaults(func=cmd_bench_ros)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "episodes", 1) < 1:
        print("diffpolicy: --episodes must be at least 1", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
