"""Vectorized rollouts in worker processes return what N single envs return for the same seeds."""

from __future__ import annotations

import numpy as np
import pytest

from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.vector import make_vec_env


@pytest.mark.quick
@pytest.mark.parametrize("obs_mode", ["state", "image"])
def test_vector_env_equals_single_envs_with_same_seeds(obs_mode):
    n, seed, horizon = 2, 11, 16
    chunks = np.random.default_rng(0).uniform(-0.2, 0.2, (3, n, horizon, 3)).astype(np.float32)
    venv = make_vec_env("push", n, chunk_horizon=horizon, obs_mode=obs_mode)
    try:
        vobs, _ = venv.reset(seed=seed)
        vtrace = [vobs]
        vrewards = []
        for chunk in chunks:
            vobs, reward, _, _, info = venv.step(chunk)
            vtrace.append(vobs)
            vrewards.append(info["step_rewards"])
    finally:
        venv.close()
    assert vtrace[0]["proprio"].shape == (n, 16)
    for i in range(n):
        env = make_env("push", obs_mode=obs_mode)
        obs, _ = env.reset(seed=seed + i)
        trace = [obs]
        rewards = []
        for chunk in chunks:
            obs, r, *_ = env.step_chunk(chunk[i])
            trace.append(obs)
            rewards.append(r)
        for vo, o in zip(vtrace, trace):
            for key in o:
                if key == "instruction":
                    assert vo[key][i] == o[key]
                else:
                    assert np.array_equal(vo[key][i], o[key]), key
        for vr, r in zip(vrewards, rewards):
            np.testing.assert_array_equal(vr[i][: len(r)], r)
        env.close()


@pytest.mark.quick
def test_vector_env_autoresets_finished_envs_in_the_same_step():
    venv = make_vec_env("push", 2, chunk_horizon=16, max_episode_steps=20, execute_horizon=16)
    try:
        venv.reset(seed=0)
        venv.step(np.zeros((2, 16, 3), np.float32))
        obs, _, _, truncated, info = venv.step(np.zeros((2, 16, 3), np.float32))
        assert truncated.all()
        assert "final_obs" in info
        assert np.all(obs["proprio"][:, 6:12] == 0)  # fresh episodes start at rest
    finally:
        venv.close()
