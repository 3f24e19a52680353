"""The sim as deployed (sim/deployed.py): one step is one decision of the policy node — the sim runs until the
policy decides again (its re-plan interval, or once it is free when its chunk lands later than that), its chunk
lands a latency late, and the arm obeys the filter core."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffpolicy_ros.errors import UserError
from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.deployed import DeployedChunkEnv, expected_periods_per_decision
from diffpolicy_ros.sim.vector import make_vec_env


def deployment(low_ms: float, high_ms: float | None = None, **kwargs) -> Deployment:
    high_ms = low_ms if high_ms is None else high_ms
    return Deployment(max_speed=0.1, max_accel=0.5, executor_rate_hz=30.0, latency_s=(low_ms / 1e3, high_ms / 1e3),
                      **kwargs)  # fmt: skip


@pytest.fixture(scope="module")
def push_env():
    env = make_env("push")
    yield env
    env.close()


@pytest.mark.quick
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(latency_ms=st.floats(0, 350), replan_steps=st.sampled_from([1, 2, 4, 6]))
def test_a_decision_lasts_its_re_plan_interval_or_until_the_policy_is_free_again(push_env, latency_ms, replan_steps):
    env = DeployedChunkEnv(push_env, deployment(latency_ms, replan_steps=replan_steps))
    env.reset(seed=3)
    expected = max(replan_steps, math.ceil(latency_ms / 100 - 1e-9))
    _, reward, _, _, info = env.step(np.zeros((16, 3)))
    assert info["steps_executed"] == expected and env.now == pytest.approx(0.1 * expected)
    assert info["step_rewards"][expected:].sum() == 0 and reward == pytest.approx(info["step_rewards"].sum())


@pytest.mark.quick
def test_the_arm_plays_each_chunk_over_the_re_plan_interval_from_its_observation(push_env):
    """Chunk k's point i says (k, i): every executor tick plays the newest chunk's point due at now - stamp."""
    env = DeployedChunkEnv(push_env, deployment(70, replan_steps=4))
    env.reset(seed=3)
    played = []
    tick = env._executor_tick

    def spy(now, pose):
        command = tick(now, pose)
        played.append((now, env.player.command(now)[0].copy()))
        return command

    env._executor_tick = spy
    for k in range(3):
        chunk = np.zeros((16, 3))
        chunk[:, 0], chunk[:, 1] = k, np.arange(16)
        env.step(chunk / 1e3)  # small: what the player plays, not what the filter lets through
    for now, command in played:
        k, i = np.rint(command[:2] * 1e3).astype(int)
        if now < 0.07 - 1e-9:  # before the first chunk lands: nothing
            assert np.allclose(command, 0)
            continue
        stamp = 0.4 * max(k for k in range(3) if 0.4 * k + 0.07 <= now + 1e-9)
        assert (k, i) == (round(stamp / 0.4), int(np.floor((now - stamp) / 0.1 + 1e-9)))
    assert max(i for _, c in played for i in [int(np.rint(c[1] * 1e3))]) == 4  # points 0-4 of a chunk play


@pytest.mark.quick
def test_the_arm_waits_for_the_first_chunk_then_obeys_the_filter(push_env):
    env = DeployedChunkEnv(push_env, deployment(150, replan_steps=1))
    obs, _ = env.reset(seed=3)
    start = push_env.pusher_position.copy()
    fast = np.tile([0.3, 0.0, 0.0], (16, 1))  # 3x the speed cap
    env.step(fast)  # arrives at 0.15 s: two periods, the second half of the second one moving
    moved = push_env.pusher_position - start
    # ramped from rest at 0.5 m/s^2 per 1/30 s tick for under 0.05 s: far less than 0.3 m/s would go
    assert 0 < moved[0] < 0.1 * 0.05 + 1e-3
    for _ in range(5):
        env.step(fast)
    stats = env.episode_stats()
    assert stats["speed_limited"] > 0 and stats["accel_limited"] > 0 and stats["latency_s"] == pytest.approx(0.15)
    assert stats["jumps"] and max(stats["jumps"]) == 0.0  # every chunk says the same: switches change nothing


@pytest.mark.quick
def test_latency_follows_the_seed_and_a_chunk_of_the_wrong_shape_is_refused(push_env):
    env = DeployedChunkEnv(push_env, deployment(60, 110))
    first = [env.reset(seed=s)[1]["latency_s"] for s in (1, 2, 1)]
    assert first[0] == first[2] != first[1] and all(0.06 <= x <= 0.11 for x in first)
    assert env.reset()[1]["latency_s"] != first[0]  # an unseeded reset (autoreset) draws the next
    with pytest.raises(ValueError, match=r"\[16, 3\]"):
        env.step(np.zeros((8, 3)))
    with pytest.raises(UserError, match="outlasts"):
        DeployedChunkEnv(push_env, deployment(2000))
    with pytest.raises(UserError, match="re-planning every 16"):  # the next chunk would land after this one ends
        DeployedChunkEnv(push_env, deployment(60, 110, replan_steps=16))
    assert expected_periods_per_decision(deployment(60, 110, replan_steps=1), 0.1) == pytest.approx(1.2, abs=0.02)
    assert expected_periods_per_decision(deployment(60, 110, replan_steps=2), 0.1) == 2.0


@pytest.mark.quick
def test_a_vector_of_deployed_envs_reproduces_single_ones():
    dep = deployment(60, 110)
    chunks = np.tile(np.array([0.05, 0.02, 0.0]), (2, 16, 1))
    vec = make_vec_env("push", 2, chunk_horizon=16, asynchronous=False, deployment=dep)
    vec.reset(seed=11)
    steps = [vec.step(chunks) for _ in range(4)]
    vec.close()
    for i in range(2):
        env = DeployedChunkEnv(make_env("push"), dep)
        env.reset(seed=11 + i)
        for obs, reward, _, _, info in steps:
            o, r, _, _, inf = env.step(chunks[i])
            np.testing.assert_array_equal(o["proprio"], obs["proprio"][i])
            assert r == reward[i] and inf["steps_executed"] == info["steps_executed"][i]
        env.close()
