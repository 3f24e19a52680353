"""The ``diffpolicy`` command: everything a node does can also be done from here, without ROS.

    diffpolicy demo --episodes N --seed S [--task push|push_two_goals] [--out FILE] [--json]
    diffpolicy train-bc --data DEMOS --config config/policy/<name>.yaml [--iters N] [--device D]
    diffpolicy train-ppo --config config/train/<name>.yaml [--init CKPT] [--device D] [--resume auto|CKPT]
    diffpolicy eval --checkpoint CKPT --episodes N [--task T] [--video DIR] [--json]
    diffpolicy eval-bag BAG --checkpoint CKPT [--samples N] [--out DIR] [--json]
    diffpolicy record OUT [--topics ...] [--storage mcap|sqlite3] [--duration S]
    diffpolicy plot RUN_DIR
    diffpolicy bench sim|policy|ros|learn|safety|hil|startup|threads [--json]
    diffpolicy launch sim_train|real_arm|replay_eval [name:=value ...]

Heavy imports happen inside each command so ``diffpolicy --help`` stays instant.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
from pathlib import Path

from diffpolicy_ros.config import override
from diffpolicy_ros.contract import TASK_NAMES as TASK_CHOICES
from diffpolicy_ros.device import default_threads
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.nodes.graph import VISION_CHECKPOINT
from diffpolicy_ros.runs import EVAL_SEED, RunDir, new_run_dir
from diffpolicy_ros.user_files import (
    BAG,
    CELL_FILE,
    CHECKPOINT,
    DATASET,
    DEPLOYMENT,
    OPERATOR_FILE,
    POLICY_CONFIG,
    RUN_DIR,
    TASK_CONFIG,
    TOPIC_MAP,
    TRAIN_CONFIG,
    InputPath,
    OutputPath,
)

OPERATOR_PRESET_NAMES = ("teleop", "novice")  # = sim.operator.OPERATOR_PRESETS (the CLI imports no sim to parse)
LEARN_VARIANTS = ("diffusion", "diffusion_ddim10", "diffusion_ddim20", "few_step", "gaussian")  # = bench.learn.VARIANTS


def _warn(text: str) -> None:
    print(f"diffpolicy: {text}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse, strict: no abbreviated options (``--sample`` is not ``--samples``), and a mistyped option is
    named as such (``--confg``: "unrecognized --confg, did you mean --config?") rather than reported as the
    required option it was meant to be."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._argv: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        known = set(self._option_string_actions)
        unknown = [a.split("=")[0] for a in self._argv if a.startswith("--") and a.split("=")[0] not in known]
        if unknown and "required" in message:  # the typo is the cause; the missing option only its effect
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            message = f"unrecognized argument {unknown[0]}" + (f" (did you mean {close[0]}?)" if close else "")
        super().error(message)


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's default in --help, also for options without a help text: a value (0 too), ``none`` for
    an option that is off unless given, or the help's own words where it says what the default is (``default:
    the config's``). Flags (store_true) and required options have none to show."""

    def _format_action(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        flag = action.nargs == 0
        if action.option_strings and not (flag or action.required or action.default is argparse.SUPPRESS):
            if "default:" not in help_text:
                shown = "none" if action.default is None else "%(default)s"
                action.help = f"{help_text} (default: {shown})".strip()
        return super()._format_action(action)


def _flatten(result: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in result.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], dict):  # e.g. per-file results: the count and the first
            return f"{len(value)} × {', '.join(f'{k} {_cell(v)}' for k, v in value[0].items())} …"
        if len(value) > 8:
            return f"[{len(value)} values: {_cell(value[0])} … {_cell(value[-1])}]"
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(value)


def _print_json_or_table(result: dict, as_json: bool) -> None:
    """``--json``: one JSON object for machines; otherwise a two-column table for people."""
    if as_json:
        print(json.dumps(result))
        return
    rows = _flatten(result)
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        print(f"{key:<{width}}  {_cell(value)}")


def cmd_demo(args: argparse.Namespace) -> int:
    from diffpolicy_ros.sim import load_task_config
    from diffpolicy_ros.sim.demos import run_demos

    if args.config is not None:
        task, env_overrides = load_task_config(args.config, args.task)
    else:
        task, env_overrides = args.task or "push", {}
    limits = None
    if args.deploy is not None:  # demonstrations the arm can follow: within the deployment's filter limits
        from diffpolicy_ros.nodes.graph import load_deployment

        limits = load_deployment(args.deploy).expert_limits()
    operator = None
    if args.operator is not None:
        from diffpolicy_ros.sim.operator import load_operator

        operator = load_operator(args.operator)
    if args.to_bag is not None:  # the whole topic contract as a cell would record it
        from diffpolicy_ros.bags.record import write_demo_bag

        if operator is not None:
            raise UserError("--to-bag records the scripted expert; drop --operator")
        if env_overrides:
            raise UserError("--to-bag records the task's default settings; drop --config")
        summary = write_demo_bag(
            args.to_bag, task, args.episodes, args.seed, args.storage, args.metadata_version, not args.json,
            compressed=args.compressed, expert_limits=limits, cells=_cells(args).get("cells"),
        )  # fmt: skip
        _print_json_or_table(summary, args.json)
        return 0

    env_overrides = {**env_overrides, **_cells(args)}
    out = args.out
    if out is None and args.run_dir is not None:
        out = new_run_dir("demos", args.run_dir).start() / "demos.npz"
    summary, _ = run_demos(
        task=task,
        episodes=args.episodes,
        seed=args.seed,
        obs_mode="image" if args.images else "state",
        out=out,
        progress=not args.json,
        env_overrides=env_overrides,
        video_dir=args.video,
        video_episodes=args.video_episodes,
        expert_limits=limits,
        workers=args.workers,
        operator=operator,
    )
    extra = {"expert_limits": limits} if limits else {}
    if operator is not None:
        extra["operator"] = str(args.operator)
    _print_json_or_table({**summary.as_dict(), **extra}, args.json)
    return 0


def _cells(args: argparse.Namespace) -> dict:
    """The env setting of ``--cells FILE``: a cell sampled from the file's ranges at every reset."""
    if getattr(args, "cells", None) is None:
        return {}
    from diffpolicy_ros.sim.cell import load_cell_ranges

    return {"cells": load_cell_ranges(args.cells)}


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.sim import bench_sim

    _print_json_or_table(bench_sim(steps=args.steps, n_workers=args.workers, seed=args.seed), args.json)
    return 0


def cmd_train_bc(args: argparse.Namespace) -> int:
    from diffpolicy_ros.rl.bc import latest_bc_checkpoint, load_bc_run, train_bc

    run = load_bc_run(args.config)
    if args.estimator_from is not None:  # the file first: what is wrong with it before what it is for
        from diffpolicy_ros.models.checkpoint import load_checkpoint

        load_checkpoint(args.estimator_from)
    keys = ("iters", "batch_size", "device", "seed", "eval_every", "eval_episodes", "final_eval_episodes",
            "estimator_iters", "estimator_from")  # fmt: skip
    values = {key: getattr(args, key) for key in keys}
    if args.estimator_from is not None:  # configs hold plain strings (what a checkpoint stores)
        values["estimator_from"] = str(args.estimator_from)
    run.train = override(run.train, **values)
    data = args.data
    bags = data.is_dir() or data.suffix in (".mcap", ".db3")
    if bags or args.topic_map is not None:  # rosbag2 bags, through the live preprocessing
        from diffpolicy_ros.bags.dataset import dataset_from_bags
        from diffpolicy_ros.messages.topic_map import TopicMap
        from diffpolicy_ros.models.factory import policy_spec

        topic_map = TopicMap.load(args.topic_map)
        if not bags:
            raise UserError(f"--topic-map {args.topic_map} names a cell's topics in bags; --data {data} is a .npz")
        fusion = policy_spec(run.policy).active().fusion
        task_state = fusion.use_task_state or fusion.aux_task_state_weight > 0  # inputs, or the auxiliary labels
        calibrated = fusion.task_state_estimator == "calibrated"  # needs each camera's calibration, per step
        data, summary = dataset_from_bags(data, topic_map, task_state, warn=_warn, calibration=calibrated or None)
        _warn(f"from bags: {summary}")
    resume = args.resume
    if resume == "auto":  # the newest BC run under --run-dir; say which, or that there is none
        resume = latest_bc_checkpoint(args.run_dir)
        _warn(f"resume: {resume}" if resume else f"resume auto: no BC run with a last.pt in {args.run_dir}: a new one")
    if resume is not None:  # it continues in its own run folder
        run_dir = RunDir(Path(resume).parent.parent)
    else:
        run_dir = new_run_dir("bc", args.run_dir) if args.run_dir else None
    result = train_bc(run, data, run_dir, progress=not args.json, resume=resume)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        _print_json_or_table(result, args.json)
    return 0


def cmd_train_ppo(args: argparse.Namespace) -> int:
    from diffpolicy_ros.rl.ppo import load_ppo_run, train_ppo

    run = load_ppo_run(args.config)
    if args.init is not None:
        run.init = str(args.init)
    keys = ("device", "seed", "total_env_steps", "n_envs", "eval_episodes")
    sampler = override(run.train.sampler, ddim_steps=args.ddim_steps)
    run.train = override(run.train, sampler=sampler, **{key: getattr(args, key) for key in keys})
    if args.deploy is not None:  # fine-tune in the sim as deployed: executor, filter core, the cell's latency
        from diffpolicy_ros.nodes.graph import load_deployment
        from diffpolicy_ros.nodes.runner import parse_overrides

        run.deploy = load_deployment(args.deploy, parse_overrides(args.deploy_args)).as_dict()
    elif args.deploy_args:
        raise UserError(f"{' '.join(args.deploy_args)}: real_arm arguments need --deploy FILE")
    run.env = {**run.env, **_cells(args)}  # rollouts and evaluations in sampled cells
    if args.resume == "auto" and args.run_dir is None:
        print("diffpolicy train-ppo: --resume auto needs --run-dir (the run to continue)", file=sys.stderr)
        return 2
    result = train_ppo(run, args.run_dir, resume=args.resume, progress=not args.json)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        _print_json_or_table(result, args.json)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from diffpolicy_ros.eval.plots import plot_run, plot_runs

    if len(args.run_dir) == 1:
        print(plot_run(args.run_dir[0], args.out))
    else:
        print(plot_runs(args.run_dir, args.out or Path("compare.png")))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from diffpolicy_ros.device import resolve_device
    from diffpolicy_ros.eval.rollout import evaluate_policy
    from diffpolicy_ros.models.checkpoint import checkpoint_meta, load_policy

    device = resolve_device(args.device)
    policy, ckpt = load_policy(args.checkpoint, device)
    meta = checkpoint_meta(ckpt)
    if args.task and meta.task and args.task != meta.task and not args.any_task:
        raise UserError(
            f"{args.checkpoint} was trained on {meta.task!r}, not {args.task!r} (--any-task to evaluate it anyway)"
        )
    if args.deploy is not None:  # as the real_arm graph would run it: executor, filter core, latency
        from diffpolicy_ros.eval.deployed import evaluate_deployed
        from diffpolicy_ros.nodes.graph import load_deployment
        from diffpolicy_ros.nodes.runner import parse_overrides

        deployment = load_deployment(args.deploy, parse_overrides(args.deploy_args))
        result = evaluate_deployed(policy, deployment, args.task or meta.task, args.episodes, args.seed,
                                   meta.obs_mode, device, progress=not args.json, env_kwargs=_cells(args))  # fmt: skip
        if not args.per_episode:
            result.pop("per_episode")
        _print_json_or_table(result, args.json)
        return 0
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
        video_dir=args.video,
        video_episodes=args.video_episodes,
        env_kwargs=_cells(args),
    )
    if not args.per_episode:
        result.pop("per_episode")
    if args.write_evaluation:  # what the deploy gate reads: this evaluation, stored in the checkpoint itself
        from diffpolicy_ros.models.checkpoint import save_checkpoint
        from diffpolicy_ros.rl.best import evaluation_record

        if args.ddim_steps is not None or args.execute_horizon is not None or args.cells is not None:
            raise UserError("--write-evaluation stores an evaluation of the checkpoint as deployed: drop "
                            "--ddim-steps, --execute-horizon and --cells")  # fmt: skip
        ckpt["meta"] = {**ckpt.get("meta", {}), "evaluation": evaluation_record(result)}
        save_checkpoint(args.checkpoint, {k: v for k, v in ckpt.items() if k not in ("format", "version")})
        result["written_to"] = str(args.checkpoint)
    _print_json_or_table(result, args.json)
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from diffpolicy_ros.messages.topic_map import TopicMap
    from diffpolicy_ros.nodes.bag_recorder import main as recorder

    topics = args.topics or []
    if args.topic_map is not None:  # the cell's topics of the contract's roles (and any listed besides)
        topics = sorted({*topics, *TopicMap.load(args.topic_map).topics.values()})
    params = {
        "out": str(args.out),
        "topics": topics or [""],
        "compress_images": args.compressed,
        "storage": args.storage,
        "metadata_version": args.metadata_version,
        "duration_s": float(args.duration),
    }
    ros_args = [f"{k}:={json.dumps(v)}" for k, v in params.items()]
    return recorder(["diffpolicy-record", "--ros-args", *[a for p in ros_args for a in ("-p", p)]])


def cmd_eval_bag(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bags.evaluate import evaluate_bag
    from diffpolicy_ros.device import resolve_device
    from diffpolicy_ros.messages.topic_map import TopicMap

    report = evaluate_bag(
        args.bag,
        args.checkpoint,
        samples=args.samples,
        seed=args.seed,
        device=resolve_device(args.device),
        batch_size=args.batch_size,
        ddim_steps=args.ddim_steps,
        topic_map=TopicMap.load(args.topic_map).with_command(args.command_topic),
        out_dir=args.out,
        warn=_warn,
    )
    _print_json_or_table(report, args.json)
    return 0


def cmd_bench_policy(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.policy import bench_policy

    _print_json_or_table(
        bench_policy(args.checkpoint, args.device, args.iters, args.backend, args.threads, args.config, args.busy),
        args.json,
    )
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    from diffpolicy_ros.nodes.runner import parse_overrides, run_graph

    overrides = parse_overrides(args.arguments)
    if args.graph == "sim_train" and not overrides.get("run_dir"):
        overrides["run_dir"] = str(new_run_dir("sim_train").path)  # the trainer starts it
    return run_graph(args.graph, overrides)


def cmd_bench_learn(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.learn import bench_learn

    result = bench_learn(
        tasks=args.tasks,
        variants=args.variants,
        total_env_steps=args.total_env_steps,
        out_dir=args.out_dir,
        init={"push": args.init_push, "push_two_goals": args.init_push_two_goals},
        progress=not args.json,
        start=args.start,
    )
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_startup(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.ros import bench_startup
    from diffpolicy_ros.nodes.runner import parse_overrides

    _print_json_or_table(bench_startup(parse_overrides(args.overrides), timeout_s=args.timeout), args.json)
    return 0


def cmd_bench_threads(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.threads import bench_threads

    _print_json_or_table(bench_threads(args.config, steps=args.steps, counts=tuple(args.counts)), args.json)
    return 0


def cmd_bench_ros(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.ros import bench_ros

    _print_json_or_table(bench_ros(duration_s=args.duration, checkpoint=args.checkpoint, busy=args.busy), args.json)
    return 0


def cmd_bench_device(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.device import bench_device

    result = bench_device(args.device, latency_iters=args.latency_iters, bc_iters=args.bc_iters,
                          demo_episodes=args.demo_episodes, n_envs=args.n_envs, rollout_steps=args.rollout_steps,
                          cpu_reference=not args.no_cpu_reference)  # fmt: skip
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_safety(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.safety import bench_safety

    result = bench_safety(streams=args.streams, ticks=args.ticks, hil=not args.no_hil, hil_duration_s=args.hil_duration)
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_cells(args: argparse.Namespace) -> int:
    from diffpolicy_ros.assets import config_file
    from diffpolicy_ros.bench.cells import bench_cells
    from diffpolicy_ros.device import resolve_device
    from diffpolicy_ros.nodes.runner import parse_overrides
    from diffpolicy_ros.sim.cell import load_cell_ranges

    if args.deploy_args and args.deploy is None:
        raise UserError(f"{' '.join(args.deploy_args)}: real_arm arguments need --deploy FILE")
    cells = args.cells or config_file("cells/train.yaml")
    result = bench_cells(
        args.checkpoint, load_cell_ranges(cells), cells_file=str(cells), episodes=args.episodes,
        sampled_episodes=args.sampled_episodes, seed=args.seed, deploy=args.deploy,
        deploy_overrides=parse_overrides(args.deploy_args), device=resolve_device(args.device),
        progress=not args.json, out_dir=args.out,
    )  # fmt: skip
    _print_json_or_table(result, args.json)
    return 0


def cmd_bench_hil(args: argparse.Namespace) -> int:
    from diffpolicy_ros.bench.hil import bench_hil
    from diffpolicy_ros.nodes.runner import parse_overrides

    result = bench_hil(
        args.checkpoint,
        episodes=args.episodes,
        episode_timeout_s=args.episode_timeout,
        seed=args.seed,
        overrides=parse_overrides(args.overrides),
        progress=not args.json,
        out_dir=args.out,
        busy=args.busy,
    )
    _print_json_or_table(result, args.json)
    return 0


def _video_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--video",
        type=OutputPath("folder", "video folder"),
        default=None,
        help="write an MP4 per episode to this folder",
    )
    parser.add_argument("--video-episodes", type=int, default=3, help="how many episodes --video records")


def _threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads", type=int, default=default_threads(), help="torch intra-op threads (0: torch's default)"
    )


def _add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        formatter_class=_HelpFormatter,
        help="run the scripted expert; optionally record a demonstration dataset",
    )
    demo.add_argument("--episodes", type=int, default=20)
    demo.add_argument("--seed", type=int, default=0, help="episode i uses seed S + i")
    demo.add_argument("--task", choices=TASK_CHOICES, default=None, help="default: push, or the config's")
    demo.add_argument(
        "--config", type=InputPath(TASK_CONFIG), default=None, help="task YAML, e.g. config/sim/push.yaml"
    )
    demo.add_argument(
        "--out", type=OutputPath("file", "dataset"), default=None, help="write the episodes to this .npz dataset"
    )
    demo.add_argument(
        "--run-dir",
        type=OutputPath("folder", "runs folder"),
        default=None,
        help="write to RUN_DIR/demos-<timestamp>/demos.npz",
    )
    demo.add_argument("--images", action="store_true", help="record both 128x128 camera images too")
    _cells_option(demo, "episodes in cells sampled from this cell file's ranges (config/cells/train.yaml)")
    demo.add_argument("--json", action="store_true", help="print one JSON object, no progress bar")
    demo.add_argument(
        "--workers", type=int, default=1,
        help="processes recording blocks of episodes (the same dataset; --images on 2 cores: 2 halve the time)",
    )  # fmt: skip
    demo.add_argument(
        "--deploy", type=InputPath(DEPLOYMENT), default=None,
        help="a real_arm argument file: the expert stays within its max_speed and max_accel",
    )  # fmt: skip
    demo.add_argument(
        "--operator", type=InputPath(OPERATOR_FILE, also=tuple(OPERATOR_PRESET_NAMES)), default=None,
        help="the expert's plan played as a teleoperator plays it (hesitations, overshoot, jitter, wrong-side "
        f"starts): a preset ({', '.join(OPERATOR_PRESET_NAMES)}) or an operator YAML file (docs/training.md)",
    )  # fmt: skip
    _video_options(demo)
    demo.add_argument(
        "--to-bag",
        type=OutputPath("new folder", "bag"),
        default=None,
        help="write the episodes as a rosbag2 bag (a new folder)",
    )
    demo.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage (--to-bag)")
    demo.add_argument(
        "--compressed", action="store_true", help="--to-bag: cameras as JPEG CompressedImage on <topic>/compressed"
    )
    demo.add_argument("--metadata-version", type=int, choices=(8, 9), default=9, help="9: Jazzy; 8: Humble can read")
    demo.set_defaults(func=cmd_demo)


def _add_train_bc(sub: argparse._SubParsersAction) -> None:
    bc = sub.add_parser(
        "train-bc",
        formatter_class=_HelpFormatter,
        help="behaviour cloning of a diffusion or Gaussian policy on demonstrations",
    )
    bc.add_argument(
        "--data",
        type=InputPath(DATASET),
        required=True,
        help="a dataset from `diffpolicy demo --out`, or rosbag2 bag(s)",
    )
    bc.add_argument("--config", type=InputPath(POLICY_CONFIG), required=True, help="e.g. config/policy/diffusion.yaml")
    bc.add_argument(
        "--run-dir",
        type=OutputPath("folder", "runs folder"),
        default=Path("runs"),
        help="writes RUN_DIR/bc-<timestamp>/",
    )
    bc.add_argument(
        "--resume", type=InputPath(CHECKPOINT, also=("auto",)), default=None,
        help="a BC run's last.pt to continue (in its run folder), or auto: the newest BC run's under --run-dir",
    )  # fmt: skip
    bc.add_argument("--iters", type=int, default=None, help="default: the config's train.iters")
    bc.add_argument("--batch-size", type=int, default=None, help="default: the config's train.batch_size")
    bc.add_argument("--device", default=None, help="auto|npu|cuda|cpu (default: the config's)")
    bc.add_argument("--seed", type=int, default=None, help="default: the config's train.seed")
    bc.add_argument("--eval-every", type=int, default=None, help="default: the config's train.eval_every")
    bc.add_argument("--eval-episodes", type=int, default=None, help="default: the config's train.eval_episodes")
    bc.add_argument(
        "--final-eval-episodes", type=int, default=None, help="default: the config's train.final_eval_episodes"
    )
    bc.add_argument(
        "--estimator-iters", type=int, default=None, help="staged BC: the estimator's iterations (default: config's)"
    )
    bc.add_argument(
        "--estimator-from",
        type=InputPath(CHECKPOINT),
        default=None,
        metavar="CHECKPOINT",
        help="staged BC: copy the estimator of this staged checkpoint (frozen) instead of training one",
    )
    bc.add_argument(
        "--topic-map", type=InputPath(TOPIC_MAP), default=None, help="bags: the cell's topic names (a role: topic YAML)"
    )
    bc.add_argument("--json", action="store_true")
    _threads_option(bc)
    bc.set_defaults(func=cmd_train_bc)


def _add_train_ppo(sub: argparse._SubParsersAction) -> None:
    ppo = sub.add_parser(
        "train-ppo",
        formatter_class=_HelpFormatter,
        help="PPO fine-tuning (diffusion: DPPO chain likelihood; or Gaussian)",
    )
    ppo.add_argument("--config", type=InputPath(TRAIN_CONFIG), required=True, help="e.g. config/train/push.yaml")
    ppo.add_argument(
        "--init", type=InputPath(CHECKPOINT), default=None, help="BC checkpoint to start from (default: the config's)"
    )
    ppo.add_argument(
        "--run-dir", type=OutputPath("folder", "run folder"), default=None, help="default: runs/ppo-<timestamp>"
    )
    _cells_option(ppo, "rollouts and evaluations in cells sampled from this cell file's ranges")
    ppo.add_argument(
        "--resume",
        type=InputPath(CHECKPOINT, also=("auto",)),
        default=None,
        help="auto (newest checkpoint in --run-dir, if any) or a path",
    )
    ppo.add_argument("--device", default=None, help="auto|npu|cuda|cpu (default: the config's)")
    ppo.add_argument("--seed", type=int, default=None, help="default: the config's train.seed")
    ppo.add_argument("--total-env-steps", type=int, default=None, help="default: the config's train.total_env_steps")
    ppo.add_argument("--n-envs", type=int, default=None, help="default: the config's train.n_envs")
    ppo.add_argument(
        "--eval-episodes", type=int, default=None, help="held-out episodes per evaluation (default: the config's)"
    )
    ppo.add_argument(
        "--ddim-steps", type=int, default=None, help="sampling steps (default: the config's train.sampler)"
    )
    ppo.add_argument(
        "--deploy", type=InputPath(DEPLOYMENT), default=None,
        help="a real_arm argument file: fine-tune and evaluate as deployed (executor, safety-filter core, latency)",
    )  # fmt: skip
    ppo.add_argument(
        "deploy_args", nargs="*", metavar="name:=value", help="--deploy: real_arm arguments over the file's",
    )  # fmt: skip
    ppo.add_argument("--json", action="store_true", help="one JSON summary on stdout (log lines stay on stderr)")
    _threads_option(ppo)
    ppo.set_defaults(func=cmd_train_ppo)


def _add_plot(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser(
        "plot",
        formatter_class=_HelpFormatter,
        help="write RUN_DIR/curves.png from a training run's metrics.csv; with several PPO runs, their held-out "
        "evaluations in one plot (e.g. the diffusion and the Gaussian head)",
    )
    plot.add_argument("run_dir", type=InputPath(RUN_DIR), nargs="+")
    plot.add_argument(
        "--out", type=OutputPath("file", "plot"), default=None,
        help="default: RUN_DIR/curves.png (one run), compare.png (several)",
    )  # fmt: skip
    plot.set_defaults(func=cmd_plot)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval", formatter_class=_HelpFormatter, help="closed-loop evaluation of a checkpoint in the sim"
    )
    ev.add_argument("--checkpoint", type=InputPath(CHECKPOINT), required=True)
    ev.add_argument("--episodes", type=int, default=50)
    ev.add_argument("--seed", type=int, default=EVAL_SEED, help="episode i uses seed S + i (held out from demos)")
    ev.add_argument("--task", choices=TASK_CHOICES, default=None, help="default: the checkpoint's task")
    ev.add_argument("--ddim-steps", type=int, default=None, help="default: the checkpoint's")
    ev.add_argument("--execute-horizon", type=int, default=None, help="default: the checkpoint's")
    ev.add_argument("--device", default="auto")
    _video_options(ev)
    ev.add_argument("--any-task", action="store_true", help="allow --task to differ from the checkpoint's")
    _cells_option(ev, "episodes in cells sampled from this cell file's ranges (held-out seeds: held-out cells)")
    ev.add_argument("--per-episode", action="store_true", help="include every episode's result")
    ev.add_argument(
        "--deploy",
        type=InputPath(DEPLOYMENT),
        default=None,
        help="a real_arm argument file: evaluate as deployed (executor, safety-filter core, the cell's latency)",
    )
    ev.add_argument(
        "deploy_args", nargs="*", metavar="name:=value", help="--deploy: real_arm arguments over the file's",
    )  # fmt: skip
    ev.add_argument(
        "--write-evaluation", action="store_true",
        help="store this evaluation in the checkpoint (what real_arm's deploy gate, min_success, reads)",
    )  # fmt: skip
    ev.add_argument("--json", action="store_true")
    _threads_option(ev)
    ev.set_defaults(func=cmd_eval)


def _add_record(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser(
        "record", formatter_class=_HelpFormatter, help="record live ROS topics to a rosbag2 bag (Ctrl-C stops)"
    )
    rec.add_argument("out", type=OutputPath("new folder", "bag"), help="the bag folder to create")
    rec.add_argument("--topics", nargs="*", default=None, help="default: every topic")
    rec.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    rec.add_argument("--metadata-version", type=int, choices=(8, 9), default=9, help="9: Jazzy; 8: Humble can read")
    rec.add_argument("--duration", type=float, default=0.0, help="seconds (0: until Ctrl-C)")
    rec.add_argument(
        "--topic-map", type=InputPath(TOPIC_MAP), default=None, help="record the cell's topics of this role: topic YAML"
    )
    rec.add_argument(
        "--compressed", action="store_true", help="write raw sensor_msgs/Image topics as JPEG on <topic>/compressed"
    )
    rec.set_defaults(func=cmd_record)


def _add_eval_bag(sub: argparse._SubParsersAction) -> None:
    evb = sub.add_parser(
        "eval-bag",
        formatter_class=_HelpFormatter,
        help="open-loop evaluation of a checkpoint against the commands recorded in a rosbag2 bag",
    )
    evb.add_argument("bag", type=InputPath(BAG))
    evb.add_argument("--checkpoint", type=InputPath(CHECKPOINT), required=True)
    evb.add_argument("--samples", type=int, default=1, help="chunks sampled per observation (best-of-N)")
    evb.add_argument("--seed", type=int, default=0)
    evb.add_argument("--device", default="auto")
    evb.add_argument("--batch-size", type=int, default=32)
    evb.add_argument("--ddim-steps", type=int, default=None, help="default: the checkpoint's")
    evb.add_argument(
        "--command-topic", default=None, help="the recorded commands to compare with (default: the topic map's)"
    )
    evb.add_argument(
        "--topic-map", type=InputPath(TOPIC_MAP), default=None, help="the cell's topic names (a role: topic YAML)"
    )
    evb.add_argument(
        "--out", type=OutputPath("folder", "report folder"), default=None, help="write report.json and PNGs here"
    )
    evb.add_argument("--json", action="store_true")
    _threads_option(evb)
    evb.set_defaults(func=cmd_eval_bag)


def _add_launch(sub: argparse._SubParsersAction) -> None:
    from diffpolicy_ros.nodes.graph import ARGUMENTS  # plain data: no ROS import

    graph_args = "\n".join(
        f"  {name}:\n" + "\n".join(f"    {k}:={v!r}" for k, v in args.items()) for name, args in ARGUMENTS.items()
    )
    launch = sub.add_parser(
        "launch",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="run a node graph (one process per node) without launch_ros",
        epilog=f"graph arguments and their defaults:\n{graph_args}",
    )
    launch.add_argument("graph", choices=tuple(ARGUMENTS))
    launch.add_argument("arguments", nargs="*", help="name:=value graph arguments")
    launch.set_defaults(func=cmd_launch)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser(
        "bench", formatter_class=_HelpFormatter, help="benchmarks; each prints one JSON object with --json"
    )
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for add in (
        _add_bench_sim,
        _add_bench_policy,
        _add_bench_learn,
        _add_bench_ros,
        _add_bench_startup,
        _add_bench_threads,
        _add_bench_safety,
        _add_bench_hil,
        _add_bench_cells,
        _add_bench_device,
    ):
        add(bench_sub)


def _add_bench_sim(bench_sub: argparse._SubParsersAction) -> None:
    bsim = bench_sub.add_parser(
        "sim", formatter_class=_HelpFormatter, help="physics / env / render / vectorized env throughput"
    )
    bsim.add_argument("--steps", type=int, default=400)
    bsim.add_argument("--workers", type=int, default=None, help="vector env workers (default: CPU count)")
    bsim.add_argument("--seed", type=int, default=0)
    bsim.add_argument("--json", action="store_true")
    bsim.set_defaults(func=cmd_bench_sim)


def _add_bench_policy(bench_sub: argparse._SubParsersAction) -> None:
    bpol = bench_sub.add_parser(
        "policy",
        formatter_class=_HelpFormatter,
        help="observation -> chunk latency, its encoding and denoising parts, against the default DDIM-10 policy",
    )
    bpol.add_argument(
        "--checkpoint", type=InputPath(CHECKPOINT), default=None, help="default: an untrained default policy"
    )
    bpol.add_argument(
        "--config",
        type=InputPath(POLICY_CONFIG),
        default=None,
        help="a policy config: a randomly initialised policy of it",
    )
    bpol.add_argument("--device", default="auto")
    bpol.add_argument("--iters", type=int, default=200)
    bpol.add_argument("--backend", default="auto", help="auto|eager|fast|traced|native")
    bpol.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the policy node's)")
    bpol.add_argument("--busy", action="store_true", help="then measure again beside one busy process (key: busy)")
    bpol.add_argument("--json", action="store_true")
    bpol.set_defaults(func=cmd_bench_policy)


def _add_bench_learn(bench_sub: argparse._SubParsersAction) -> None:
    blearn = bench_sub.add_parser(
        "learn", formatter_class=_HelpFormatter, help="long: PPO success vs env steps, diffusion vs Gaussian"
    )
    blearn.add_argument("--tasks", nargs="+", default=["push", "push_two_goals"], choices=TASK_CHOICES)
    blearn.add_argument("--variants", nargs="+", default=["diffusion", "gaussian"], choices=LEARN_VARIANTS)
    blearn.add_argument(
        "--start", default="bc", choices=("bc", "weak"),
        help="BC start: trained to convergence, or stopped early (push: the small policy on 50 demos, "
        "1100 iterations, ~0.5 success, then config/train/push_weak.yaml)",
    )  # fmt: skip
    blearn.add_argument("--total-env-steps", type=int, default=200_000)
    blearn.add_argument("--out-dir", type=OutputPath("folder", "output folder"), default=Path("runs/bench_learn"))
    blearn.add_argument(
        "--init-push", type=InputPath(CHECKPOINT), default=None, help="BC checkpoints (default: trained here)"
    )
    blearn.add_argument("--init-push-two-goals", type=InputPath(CHECKPOINT), default=None)
    blearn.add_argument("--json", action="store_true")
    _threads_option(blearn)
    blearn.set_defaults(func=cmd_bench_learn)


def _add_bench_ros(bench_sub: argparse._SubParsersAction) -> None:
    bros = bench_sub.add_parser(
        "ros",
        formatter_class=_HelpFormatter,
        help="sim graph: camera stamp -> chunk latency, chunk rate, executor jitter",
    )
    bros.add_argument("--duration", type=float, default=30.0, help="seconds measured (twice with --busy)")
    bros.add_argument(
        "--checkpoint", type=InputPath(CHECKPOINT), default=None, help="default: an untrained default (image) policy"
    )
    bros.add_argument("--busy", action="store_true", help="then measure again beside one busy process (key: busy)")
    bros.add_argument("--json", action="store_true")
    bros.set_defaults(func=cmd_bench_ros)


def _add_bench_startup(bench_sub: argparse._SubParsersAction) -> None:
    bstart = bench_sub.add_parser(
        "startup",
        formatter_class=_HelpFormatter,
        help="make sim-train from nothing: seconds to the first checkpoint and to the arm's first motion",
    )
    bstart.add_argument("overrides", nargs="*", metavar="name:=value", help="sim_train arguments")
    bstart.add_argument("--timeout", type=float, default=600.0)
    bstart.add_argument("--json", action="store_true")
    bstart.set_defaults(func=cmd_bench_startup)


def _add_bench_threads(bench_sub: argparse._SubParsersAction) -> None:
    bthreads = bench_sub.add_parser(
        "threads",
        formatter_class=_HelpFormatter,
        help="BC step time per torch thread count, quiet and beside a busy process (how --threads was chosen)",
    )
    bthreads.add_argument(
        "--config",
        type=InputPath(POLICY_CONFIG),
        default=None,
        help="policy config (default: config/policy/diffusion_state.yaml)",
    )
    bthreads.add_argument("--steps", type=int, default=20, help="timed BC steps per measurement")
    bthreads.add_argument(
        "--counts", type=int, nargs="+", default=[1, 2, 0], help="thread counts to measure (0: torch's default)"
    )
    bthreads.add_argument("--json", action="store_true")
    bthreads.set_defaults(func=cmd_bench_threads)


def _add_bench_safety(bench_sub: argparse._SubParsersAction) -> None:
    bsafe = bench_sub.add_parser(
        "safety",
        formatter_class=_HelpFormatter,
        help="safety filter: adversarial streams offline and on the live real_arm graph (hil)",
    )
    bsafe.add_argument("--streams", type=int, default=200, help="offline adversarial streams")
    bsafe.add_argument("--ticks", type=int, default=600, help="ticks per offline stream (30 Hz)")
    bsafe.add_argument("--hil-duration", type=float, default=15.0, help="seconds of adversarial chunks, live")
    bsafe.add_argument("--no-hil", action="store_true", help="offline only (no ROS graph)")
    bsafe.add_argument("--json", action="store_true")
    bsafe.set_defaults(func=cmd_bench_safety)


def _cells_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--cells", type=InputPath(CELL_FILE), default=None, help=what)


def _add_bench_cells(bench_sub: argparse._SubParsersAction) -> None:
    bcell = bench_sub.add_parser(
        "cells", formatter_class=_HelpFormatter,
        help="success on held-out cells: nominal, each factor alone at each edge, sampled cells with all at once",
    )  # fmt: skip
    bcell.add_argument("--checkpoint", type=InputPath(CHECKPOINT), default=Path(VISION_CHECKPOINT))
    bcell.add_argument("--cells", type=InputPath(CELL_FILE), default=None,
                       help="the ranges whose edges and samples are measured (default: the shipped training cells, "
                            "config/cells/train.yaml)")  # fmt: skip
    bcell.add_argument("--episodes", type=int, default=100, help="episodes per condition")
    bcell.add_argument("--sampled-episodes", type=int, default=None, help="sampled cells (default: --episodes)")
    bcell.add_argument("--seed", type=int, default=EVAL_SEED, help="episode i: scene seed + i (held-out seeds)")
    bcell.add_argument(
        "--deploy", type=InputPath(DEPLOYMENT), default=None,
        help="a real_arm argument file: every condition as deployed (executor, safety-filter core, latency)",
    )  # fmt: skip
    bcell.add_argument("deploy_args", nargs="*", metavar="name:=value", help="--deploy: real_arm arguments")
    bcell.add_argument("--device", default="auto")
    bcell.add_argument(
        "--out", type=OutputPath("folder", "output folder"), default=None, help="also write cells.json and cells.png"
    )
    bcell.add_argument("--json", action="store_true")
    _threads_option(bcell)
    bcell.set_defaults(func=cmd_bench_cells)


def _add_bench_hil(bench_sub: argparse._SubParsersAction) -> None:
    bhil = bench_sub.add_parser(
        "hil",
        formatter_class=_HelpFormatter,
        help="episodes on the live real_arm graph in HIL mode: does it push the block, and what the filter did",
    )
    bhil.add_argument("overrides", nargs="*", metavar="name:=value", help="real_arm arguments (e.g. max_speed:=0.25)")
    bhil.add_argument(
        "--checkpoint", type=InputPath(CHECKPOINT), default=Path(VISION_CHECKPOINT), help="the policy real_arm loads"
    )
    bhil.add_argument("--episodes", type=int, default=10)
    bhil.add_argument("--episode-timeout", type=float, default=60.0, help="seconds before an episode counts as failed")
    bhil.add_argument("--seed", type=int, default=EVAL_SEED, help="episode i is scene seed + i (eval's held-out seeds)")
    bhil.add_argument(
        "--out",
        type=OutputPath("folder", "output folder"),
        default=None,
        help="also write hil_episodes.png and hil.json here",
    )
    bhil.add_argument("--busy", action="store_true", help="one busy process beside the graph, as on a robot PC")
    bhil.add_argument("--json", action="store_true")
    bhil.set_defaults(func=cmd_bench_hil)


def _add_bench_device(bench_sub: argparse._SubParsersAction) -> None:
    bdev = bench_sub.add_parser(
        "device", formatter_class=_HelpFormatter,
        help="an accelerator against this machine's CPU: chunk latency (fp32, bf16), BC it/s, PPO env steps/s",
    )  # fmt: skip
    bdev.add_argument("--device", default="auto", help="the accelerator (auto: npu > cuda > cpu)")
    bdev.add_argument("--latency-iters", type=int, default=100, help="timed chunk calls per policy and precision")
    bdev.add_argument("--bc-iters", type=int, default=40, help="iterations of each BC stage")
    bdev.add_argument("--demo-episodes", type=int, default=6, help="recorded demonstrations (with images) for BC")
    bdev.add_argument("--n-envs", type=int, default=8, help="PPO sim workers")
    bdev.add_argument("--rollout-steps", type=int, default=10, help="PPO decisions per worker in the iteration")
    bdev.add_argument("--no-cpu-reference", action="store_true", help="the accelerator's figures only")
    bdev.add_argument("--json", action="store_true")
    bdev.set_defaults(func=cmd_bench_device)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diffpolicy", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    for add in (
        _add_demo,
        _add_train_bc,
        _add_train_ppo,
        _add_plot,
        _add_eval,
        _add_record,
        _add_eval_bag,
        _add_launch,
        _add_bench,
    ):
        add(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser, func) -> argparse.ArgumentParser | None:
    """The (sub)command parser whose command is ``func``."""
    if parser.get_default("func") is func:
        return parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found = _command_parser(sub, func)
                if found is not None:
                    return found
    return None


def check_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every path the command was given (``InputPath``, ``OutputPath`` options and positionals), checked before
    it starts: a UserError naming the argument and what is wrong with the file."""
    for action in _command_parser(parser, args.func)._actions:
        value = getattr(args, action.dest, None)
        if value is None or not isinstance(action.type, (InputPath, OutputPath)):
            continue
        try:
            for one in value if isinstance(value, list) else [value]:  # nargs: each path
                action.type.check(one)
        except UserError as exc:
            raise UserError(f"argument {'/'.join(action.option_strings) or action.dest}: {exc}") from None


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler, ``timeout``, ``docker stop``, ``kill``): the same clean stop as Ctrl-C."""


def _terminated(signum, frame) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminated)  # `diffpolicy launch` installs its own while its graph runs
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "episodes", 1) < 1:
        print("diffpolicy: --episodes must be at least 1", file=sys.stderr)
        return 2
    if getattr(args, "threads", 0) and args.func is not cmd_bench_policy:  # bench policy sets its own
        import torch

        torch.set_num_threads(args.threads)
    try:
        check_paths(parser, args)
        return args.func(args)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        print(f"diffpolicy: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 128 + (signal.SIGTERM if terminated else signal.SIGINT)
    except UserError as exc:  # raised where an input is read (arguments, configs, checkpoints, bags, datasets)
        # a mistake in the input, not a bug: one line (DIFFPOLICY_DEBUG=1 shows the traceback); any other
        # exception is a bug and keeps its traceback
        if os.environ.get("DIFFPOLICY_DEBUG"):
            raise
        print(f"diffpolicy {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
