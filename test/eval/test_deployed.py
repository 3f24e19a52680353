"""``eval --deploy``: the sim behind the executor and the safety-filter core, with the cell's latency."""

from __future__ import annotations

import pytest

from diffpolicy_ros.bench.safety import constant_velocity_checkpoint
from diffpolicy_ros.eval.deployed import evaluate_deployed
from diffpolicy_ros.models.checkpoint import load_policy
from diffpolicy_ros.safety.deployment import Deployment


@pytest.mark.quick
def test_a_deployed_episode_obeys_the_filter_and_switches_chunks_without_a_jump_when_they_agree(tmp_path):
    ckpt = constant_velocity_checkpoint(tmp_path / "c.pt", (0.2, 0.0, 0.0), use_task_state=True)
    policy, _ = load_policy(ckpt)
    deployment = Deployment(max_speed=0.1, max_accel=0.5, executor_rate_hz=30.0, latency_s=(0.05, 0.15))
    out = evaluate_deployed(policy, deployment, episodes=2, obs_mode="image", progress=False)
    assert out["episodes"] == 2 and out["active_ticks"] > 100
    assert out["speed_limited"] > 0 and out["accel_limited"] > 0  # 0.2 m/s asked: capped at 0.1, ramped from rest
    assert out["switch_jump_mean"] == 0.0  # every chunk says the same: a switch changes nothing
    assert 50 <= out["latency_ms_mean"] <= 150
    again = evaluate_deployed(policy, deployment, episodes=2, obs_mode="image", progress=False)
    assert {k: v for k, v in again.items() if k != "wall_s"} == {k: v for k, v in out.items() if k != "wall_s"}
