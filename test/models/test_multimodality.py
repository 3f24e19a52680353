"""The point of the seed: demonstrations go left or right of an obstacle. The diffusion policy's samples
cover both routes and almost never the middle; the Gaussian head's mean goes through the middle."""

from __future__ import annotations

import math

import pytest
import torch

from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.gaussian_policy import GaussianPolicy, GaussianPolicyConfig
from diffpolicy_ros.models.unet1d import UNetConfig


def two_route_demos(n: int, gen: torch.Generator) -> torch.Tensor:
    """Chunks [n, 16, 3] of waypoints from (0, 0) to (1, 0) around an obstacle at (0.5, 0), left or right."""
    t = torch.linspace(0, 1, 16)
    side = torch.where(torch.rand(n, generator=gen) < 0.5, 1.0, -1.0)
    amp = 0.4 + 0.05 * torch.randn(n, generator=gen)
    x = t.expand(n, 16)
    y = (side * amp)[:, None] * torch.sin(math.pi * t)[None]
    return torch.stack([x, y, torch.zeros_like(x)], dim=-1)


def classify(chunks: torch.Tensor) -> tuple[float, float, float]:
    mid_y = chunks[:, 7:9, 1].mean(dim=1)
    left, right = (mid_y > 0.2).float().mean().item(), (mid_y < -0.2).float().mean().item()
    return left, right, 1 - left - right


def train(policy, demos: torch.Tensor, obs: dict, iters: int, gen: torch.Generator) -> None:
    policy.action_norm.fit(demos)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    for _ in range(iters):
        idx = torch.randint(0, len(demos), (128,), generator=gen)
        batch_obs = {k: v.expand(128, -1) for k, v in obs.items()}
        loss = policy.bc_loss(batch_obs, demos[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.slow
def test_diffusion_keeps_both_modes_gaussian_averages_them():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    demos = two_route_demos(512, gen)
    obs = {"proprio": torch.zeros(1, 16)}
    fusion = FusionConfig(dim=32, heads=2, use_images=False, use_text=False)

    diffusion = DiffusionPolicy(
        DiffusionPolicyConfig(fusion=fusion, unet=UNetConfig(down_dims=[32, 64], timestep_embed_dim=32))
    )
    train(diffusion, demos, obs, iters=600, gen=gen)
    samples = diffusion.predict_chunk({"proprio": torch.zeros(400, 16)}, ddim_steps=10)
    left, right, middle = classify(samples)
    print(f"diffusion modes: left {left:.2f} right {right:.2f} middle {middle:.2f}")
    assert left >= 0.25 and right >= 0.25, (left, right, middle)
    assert middle <= 0.1, (left, right, middle)

    gaussian = GaussianPolicy(GaussianPolicyConfig(fusion=fusion, hidden=64))
    train(gaussian, demos, obs, iters=300, gen=gen)
    mean_chunk = gaussian.predict_chunk(obs)
    assert abs(mean_chunk[0, 7:9, 1].mean().item()) < 0.1  # through the obstacle
    assert classify(mean_chunk)[2] == 1.0
