"""The 2-D point-mass two-route task: the expert covers both routes, the middle is a wall, the interface
matches the push task's (so the same trainer, demos and evaluation drive it)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from diffpolicy_ros.sim import TASKS, ChunkStepEnv, make_env
from diffpolicy_ros.sim.demos import run_demos

pytestmark = pytest.mark.quick


def test_passes_gymnasium_env_checker_and_is_registered():
    check_env(make_env("point_mass"), skip_render_check=True)
    env = gym.make(TASKS["point_mass"])
    obs, _ = env.reset(seed=0)
    assert obs["proprio"].shape == (4,) and env.action_space.shape == (2,)


def test_expert_succeeds_on_both_routes():
    summary, dataset = run_demos("point_mass", episodes=100, seed=0, progress=False)
    assert summary.success_rate == 1.0
    assert 0.3 <= summary.left_fraction <= 0.7
    assert dataset.action.shape[1] == 2


def test_straight_line_hits_the_obstacle_and_fails():
    env = make_env("point_mass")
    env.reset(seed=3)
    for _ in range(40):
        _, reward, terminated, truncated, info = env.step(np.array([0.0, 1.0]))
        if terminated or truncated:
            break
    assert terminated and info["collided"] and not info["is_success"]
    assert reward < 0


def test_chunk_step_executes_the_horizon_and_rejects_bad_chunks():
    env = ChunkStepEnv(make_env("point_mass", execute_horizon=3), horizon=8)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.full((8, 2), 0.5, dtype=np.float32))
    assert info["steps_executed"] == 3 and info["elapsed_steps"] == 3
    assert np.count_nonzero(info["step_rewards"]) == 3
    with pytest.raises(ValueError):
        env.step(np.full((8, 2), np.nan, dtype=np.float32))
    with pytest.raises(ValueError):
        env.step(np.zeros((8, 3), dtype=np.float32))
