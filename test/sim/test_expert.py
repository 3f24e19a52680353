"""The scripted expert: the demonstration source every later issue trains on."""

from __future__ import annotations

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
