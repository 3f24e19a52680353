"""The scripted expert: the demonstration source every later issue trains on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.demos import run_demos
from diffpolicy_ros.sim.expert import ScriptedPushExpert


@pytest.mark.slow
def test_expert_succeeds_on_push_over_200_seeded_episodes():
    summary, dataset = run_demos("push", episodes=200, seed=0, progress=False)
    assert summary.success_rate >= 0.95
    # both routes around the block are demonstrated, about equally often
    assert 0.35 <= summary.left_fraction <= 0.65
    assert dataset.n_episodes == 200


@pytest.mark.quick
def test_expert_succeeds_on_two_goals():
    summary, dataset = run_demos("push_two_goals", episodes=40, seed=100, progress=False)
    assert summary.success_rate >= 0.9
    assert set(dataset.episode["instruction"]) == {
        "push the block to the red target",
        "push the block to the blue target",
    }


@pytest.mark.quick
def test_expert_routes_go_around_the_chosen_side():
    """While passing the block, the pusher is on the robot's left (+y) or right (-y), as the expert chose."""
    env = make_env("push")
    expert = ScriptedPushExpert(env)
    sides = []
    for seed in range(12):
        env.reset(seed=seed)
        side = expert.reset(np.random.default_rng(seed))
        sides.append(side)
        offsets = []
        for _ in range(env.cfg.max_episode_steps):
            _, _, terminated, truncated, info = env.step(expert.act())
            block = env.block_pose[0]
            tip = env.pusher_position
            if abs(tip[0] - block[0]) < 0.02:  # abreast of the block
                offsets.append(tip[1] - block[1])
            if terminated or truncated:
                break
        assert info["is_success"]
        assert offsets, "the pusher never passed the block"
        passing = offsets[0]
        assert (passing > 0.05) if side == "left" else (passing < -0.05), (seed, side, passing)
    assert set(sides) == {"left", "right"}


def _within_limits(dataset, max_speed: float, max_accel: float, dt: float = 0.1) -> None:
    for e in range(dataset.n_episodes):
        actions = dataset.action[dataset.episode_slice(e)]
        assert np.linalg.norm(actions, axis=1).max() <= max_speed + 1e-6
        steps = np.diff(np.vstack([np.zeros((1, 3)), actions]), axis=0)  # from rest, as the arm starts
        assert np.linalg.norm(steps, axis=1).max() <= max_accel * dt + 1e-6


@pytest.mark.quick
def test_demonstrations_stay_within_a_deployments_speed_and_acceleration(tmp_path, run_cli):
    summary, dataset = run_demos(
        "push", episodes=10, seed=0, progress=False, expert_limits={"max_speed": 0.1, "max_accel": 0.5}
    )
    _within_limits(dataset, 0.1, 0.5)
    assert summary.success_rate >= 0.8  # 200 episodes: the slow tier
    real_arm = Path(__file__).resolve().parents[2] / "config" / "real_arm.yaml"
    out = run_cli("demo", "--episodes", 2, "--deploy", real_arm, "--out", tmp_path / "d.npz")
    assert out["expert_limits"] == {"max_speed": 0.1, "max_accel": 0.5}  # read from the real_arm file


@pytest.mark.slow
def test_the_expert_within_real_arms_limits_still_succeeds_over_200_episodes():
    summary, dataset = run_demos(
        "push", episodes=200, seed=0, progress=False, expert_limits={"max_speed": 0.1, "max_accel": 0.5}
    )
    _within_limits(dataset, 0.1, 0.5)
    assert summary.success_rate >= 0.95 and 0.35 <= summary.left_fraction <= 0.65  # measured: 0.99 on 100
