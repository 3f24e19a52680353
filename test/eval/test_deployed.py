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


@pytest.mark.quick
def test_real_time_chunking_lands_each_switch_on_the_plan_the_arm_follows():
    """A policy whose chunks differ at every call: naive switching jumps at every switch; with real-time
    chunking the new chunk's steps that play at the switch are the old chunk's, so the executor does not jump."""
    import dataclasses

    import torch

    from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
    from diffpolicy_ros.models.fusion import FusionConfig

    torch.manual_seed(0)
    policy = DiffusionPolicy(DiffusionPolicyConfig(fusion=FusionConfig(use_images=False, use_text=False))).eval()
    for param in policy.unet.parameters():  # away from the near-zero init: chunks that move and differ
        param.data.add_(0.1 * torch.randn_like(param))
    policy.action_norm.fit(torch.tensor([[-0.1, -0.1, -0.05], [0.1, 0.1, 0.05]]))
    naive = Deployment(max_speed=0.25, max_accel=5.0, executor_rate_hz=30.0, latency_s=(0.03, 0.08))
    jumps = {}
    for rtc in (False, True):
        deployment = dataclasses.replace(naive, real_time_chunking=rtc)
        out = evaluate_deployed(policy, deployment, episodes=1, progress=False)
        assert out["deployment"]["real_time_chunking"] is rtc
        jumps[rtc] = out["switch_jump_mean"]
    assert jumps[False] > 0.01
    assert jumps[True] < 0.05 * jumps[False]
