"""Diffusion-PPO from a weak BC start clearly improves the deployed policy (the fine-tuned stochastic chain):
on the 2-D point-mass two-route task within a CPU minute (the source article's debugging advice as a test), and on the
arm task (`push`) with a small policy within ~10 CPU minutes."""

from __future__ import annotations

import pytest

from diffpolicy_ros.assets import config_file
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.rl.bc import load_bc_run, train_bc
from diffpolicy_ros.rl.ppo import PPOTrainer, load_ppo_run
from diffpolicy_ros.sim.demos import run_demos


@pytest.mark.slow
def test_diffusion_ppo_clearly_improves_a_weak_bc_start(tmp_path):
    demos = tmp_path / "demos.npz"
    run_demos("point_mass", episodes=10, seed=0, out=demos, progress=False)
    bc = load_bc_run(config_file("policy/diffusion_point_mass.yaml"))
    bc.train.iters, bc.train.eval_every, bc.train.final_eval_episodes = 400, 400, 10  # deliberately weak
    init = train_bc(bc, demos, tmp_path / "bc", progress=False)["checkpoint"]

    run = load_ppo_run(config_file("train/point_mass.yaml"))
    run.init = init
    run.train.total_env_steps = 48_000  # 20 iterations of 64 envs
    run.train.eval_every, run.train.eval_episodes = 0, 200
    trainer = PPOTrainer(run, tmp_path / "ppo", progress=False)
    initial = trainer.evaluate(200)["success_rate"]  # the stochastic chain PPO fine-tunes (and deploys)
    result = trainer.train()
    final = result["final_eval"]["success_rate"]
    assert result["nonfinite_updates"] == 0
    assert final >= initial + 0.1, (initial, final)  # measured here: 0.13 -> 0.32
    # the policy still uses both routes: PPO sharpened it, it did not collapse to one side
    assert min(result["final_eval"]["left_fraction"], result["final_eval"]["right_fraction"]) >= 0.15


@pytest.mark.slow
def test_diffusion_ppo_clearly_improves_a_weak_bc_start_on_the_arm_task(tmp_path):
    demos = tmp_path / "demos.npz"
    run_demos("push", episodes=50, seed=0, out=demos, progress=False)
    bc = load_bc_run(config_file("policy/diffusion_state_small.yaml"))  # stopped at 1100 it: a weak start
    init = train_bc(bc, demos, tmp_path / "bc", progress=False)["checkpoint"]

    run = load_ppo_run(config_file("train/push_small.yaml"))  # 76.8k env steps, 20 iterations of 32 envs
    run.init = init
    trainer = PPOTrainer(run, tmp_path / "ppo", progress=False)
    initial = trainer.evaluate(100)["success_rate"]
    result = trainer.train()
    final = result["final_eval"]
    assert result["nonfinite_updates"] == 0
    assert final["episodes"] == 100 and final["success_rate"] >= initial + 0.15, (initial, final["success_rate"])
    # Both routes still taken: a collapse abandons one (a share near 0). The share itself is machine-dependent
    # (left 0.33 on one machine, 0.10 on a slower one, 0.08 from a 1500-it start), so the check is the route
    # share's 95 % lower bound on 300 held-out episodes: 0.08 -> 24/300 -> 0.054, while a collapse (<= 2 %)
    # stays below 0.01 — a margin a single number at 0.09 never had.
    routes = trainer.evaluate(300)
    minority = round(min(routes["left_fraction"], routes["right_fraction"]) * 300)
    assert wilson_interval(minority, 300)[0] >= 0.03, (routes["left_fraction"], routes["right_fraction"])
