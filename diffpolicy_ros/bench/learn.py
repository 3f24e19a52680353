"""``diffpolicy bench learn``: PPO success rate against env steps, diffusion vs Gaussian.

Per task: record expert demos, behaviour-clone a diffusion and a Gaussian policy (state observations, or the
given BC checkpoints), then fine-tune each variant with PPO from its BC start, evaluating the deployed policy
(diffusion: the fine-tuned stochastic chain; Gaussian: its mean) on held-out seeds along the way.

``start``: ``bc`` trains the BC start to convergence; ``weak`` stops it early (DPPO's practice: a start with
room to improve; push: the small diffusion policy on 50 demos stopped at 1100 iterations, ~0.5 success, then
``train/push_weak.yaml``). Variants:
``diffusion`` (the train config's sampler), ``diffusion_ddim10`` / ``diffusion_ddim20`` (that many DDIM
steps), ``few_step`` (the few-step actor, a shortcut model fine-tuned through its own one-step chain; weak
start), ``gaussian``. Long (tens of minutes per variant on 2 CPU cores); not in CI.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from diffpolicy_ros.assets import config_file
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.eval.plots import plot_success_vs_steps
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.models.checkpoint import load_checkpoint
from diffpolicy_ros.rl.bc import load_bc_run, train_bc
from diffpolicy_ros.rl.ppo import PPOTrainer, load_ppo_run
from diffpolicy_ros.rl.recipes import WEAK_START
from diffpolicy_ros.sim.demos import run_demos

OWN_STEPS = 0  # fine-tune with the policy's own sampling steps, not the train config's
VARIANTS = {  # name -> (its BC start, sampling steps while fine-tuning; None: the train config's)
    "diffusion": ("diffusion", None),
    "diffusion_ddim10": ("diffusion", 10),
    "diffusion_ddim20": ("diffusion", 20),
    "few_step": ("few_step", OWN_STEPS),
    "gaussian": ("gaussian", None),
}
STARTS = ("bc", "weak")


@dataclass(frozen=True)
class BCStart:
    policy_config: str  # config/policy/<name>.yaml
    iters: int


@dataclass(frozen=True)
class TaskRecipe:
    train_config: str  # config/train/<name>.yaml
    bc: dict[str, BCStart]  # start "bc": BC start name -> its policy and iterations
    demos: int
    weak_train_config: str  # start "weak": the PPO recipe (a BC start may name its own: ``weak_train_configs``),
    weak: dict[str, BCStart]  # its BC starts
    weak_demos: int  # and the demos they clone
    weak_train_configs: dict[str, str] = field(default_factory=dict)  # BC start name -> its own PPO recipe


_POINT_MASS_BC = {  # a deliberately weak start (~30-60 % success) either way
    "diffusion": BCStart("policy/diffusion_point_mass.yaml", 600),
    "gaussian": BCStart("policy/gaussian_point_mass.yaml", 600),
}
RECIPES = {
    "point_mass": TaskRecipe(
        "train/point_mass.yaml",
        _POINT_MASS_BC,
        demos=10,
        weak_train_config="train/point_mass.yaml",
        weak=_POINT_MASS_BC,
        weak_demos=10,
    ),
    "push": TaskRecipe(
        "train/push.yaml",
        {  # 200 demos: diffusion 0.86 on 100 held-out seeds
            "diffusion": BCStart("policy/diffusion_state.yaml", 2000),
            "gaussian": BCStart("policy/gaussian_state.yaml", 2000),
        },
        demos=200,
        # the graph's `sim_train start:=weak` runs the same recipe: one definition (nodes/graph.py)
        weak_train_config=WEAK_START.ppo_config,
        weak={  # 50 demos: the small diffusion policy 0.46-0.51 on 100 held-out seeds (docs/experiments.md)
            "diffusion": BCStart(WEAK_START.policy_config, WEAK_START.iters),
            "few_step": BCStart("policy/few_step_state_small.yaml", WEAK_START.iters),
            "gaussian": BCStart("policy/gaussian_state.yaml", 600),
        },
        weak_demos=WEAK_START.demo_episodes,
        weak_train_configs={"few_step": "train/push_weak_few_step.yaml"},  # its one-step chain needs a smaller lr
    ),
}
RECIPES["push_two_goals"] = replace(RECIPES["push"], train_config="train/push_two_goals.yaml")


def _bc_start(task: str, kind: str, recipe: TaskRecipe, start: str, out_dir: Path, progress: bool) -> str:
    """The BC checkpoint a variant starts from; one already finished in ``out_dir`` is reused, so re-running
    the benchmark with more variants does not retrain it."""
    bc, demos = (recipe.weak, recipe.weak_demos) if start == "weak" else (recipe.bc, recipe.demos)
    if kind not in bc:
        raise UserError(f"{task}: no {start!r} BC start for {kind!r} (available: {sorted(bc)})")
    bc = bc[kind]
    folder = out_dir / task / (f"bc_{kind}_weak" if start == "weak" else f"bc_{kind}")
    done = folder / "checkpoints" / "last.pt"
    if done.exists() and load_checkpoint(done)["train_state"]["iter"] == bc.iters:
        return str(done)
    data = out_dir / task / f"demos_{demos}.npz"
    if not data.exists():
        run_demos(task, demos, seed=0, out=data, progress=progress)
    run = load_bc_run(config_file(bc.policy_config))
    run.train.iters = bc.iters
    run.train.eval_every = bc.iters
    return train_bc(run, data, folder, progress=progress)["checkpoint"]


def _eval_curve(run_dir: Path) -> list[tuple[int, float]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["eval_success_rate"]]
    return [(int(r["env_steps"]), float(r["eval_success_rate"])) for r in rows]


def bench_learn(
    tasks: list[str],
    variants: list[str],
    total_env_steps: int,
    out_dir: str | Path,
    init: dict[str, str | os.PathLike | None] | None = None,
    progress: bool = True,
    eval_points: int = 8,
    start: str = "bc",
) -> dict:
    out_dir = Path(out_dir)
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise UserError(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    if start not in STARTS:
        raise UserError(f"unknown start {start!r}; choose from {list(STARTS)}")
    began = time.perf_counter()
    results: dict = {
        "machine": f"{platform.machine()} x{os.cpu_count()} CPU",
        "total_env_steps": total_env_steps,
        "start": start,
    }
    for given in (init or {}).values():
        if given:
            load_checkpoint(given)  # a file that is not one ends here, not after an hour of the other task
    for task in tasks:
        recipe = RECIPES[task]
        starts: dict[str, str] = {}
        given = (init or {}).get(task)
        if given:
            starts["diffusion"] = str(given)
        curves, task_result = {}, {}
        for variant in variants:
            kind, ddim_steps = VARIANTS[variant]
            if kind not in starts:
                starts[kind] = _bc_start(task, kind, recipe, start, out_dir, progress)
            weak_config = recipe.weak_train_configs.get(kind, recipe.weak_train_config)
            run = load_ppo_run(config_file(weak_config if start == "weak" else recipe.train_config))
            run.task, run.init = task, starts[kind]
            cfg = run.train
            cfg.total_env_steps = total_env_steps
            if ddim_steps == OWN_STEPS:
                cfg.sampler.ddim_steps = None
            elif ddim_steps is not None:
                cfg.sampler.ddim_steps = ddim_steps
            trainer = PPOTrainer(run, out_dir / task / variant, progress=progress)
            cfg.eval_every = max(1, trainer.total_iterations() // eval_points)
            initial = trainer.evaluate(cfg.eval_episodes)["success_rate"]
            summary = trainer.train()
            curve = [(0, initial), *_eval_curve(trainer.run_dir)]
            curves[variant] = curve
            reached = [steps for steps, rate in curve if rate >= 0.9]
            n = cfg.eval_episodes
            late = [rate for _, rate in curve[1:][-3:]]  # the last 3 evaluations pooled: 3x the episodes
            late_successes = round(sum(late) * n)
            task_result[variant] = {
                "initial_success_rate": initial,
                "final_success_rate": curve[-1][1],
                "final_success_ci95": wilson_interval(round(curve[-1][1] * n), n),
                "late_success_rate": late_successes / (len(late) * n),
                "late_success_ci95": wilson_interval(late_successes, len(late) * n),
                "eval_episodes": n,
                "best_success_rate": max(rate for _, rate in curve),
                "env_steps_to_90pct": reached[0] if reached else None,
                "env_steps": summary["env_steps"],
                "env_steps_per_s": summary["env_steps_per_s"],
                "learner_overhead_ratio": summary["learner_overhead_ratio"],
                "wall_s": summary["wall_s"],
                "curve": curve,
            }
        png = plot_success_vs_steps(
            curves, out_dir / f"{task}_success_vs_steps.png", f"PPO on {task}", episodes=cfg.eval_episodes
        )
        task_result["png"] = str(png)
        results[task] = task_result
        results["wall_s"] = round(time.perf_counter() - began, 1)
        # after every task: an interrupted multi-hour run keeps what it finished
        (out_dir / "bench_learn.json").write_text(json.dumps(results, indent=1))
    return results
