"""DDPM/DDIM maths against diffusers' schedulers (an independent reference), and the chain likelihood."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributions import Normal

from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.scheduler import NoiseSchedule, NoiseScheduleConfig
from diffpolicy_ros.models.unet1d import UNetConfig

diffusers = pytest.importorskip("diffusers", reason="diffusers is the test-only reference (requirements/test.txt)")


def reference_ddim(steps: int, eta: float):
    ref = diffusers.DDIMScheduler(
        num_train_timesteps=100,
        beta_schedule="squaredcos_cap_v2",
        clip_sample=True,
        set_alpha_to_one=True,
        steps_offset=0,
        prediction_type="epsilon",
        timestep_spacing="leading",
    )
    ref.set_timesteps(steps)
    return ref


@pytest.mark.quick
def test_schedule_matches_diffusers_cosine():
    ours = NoiseSchedule(NoiseScheduleConfig(num_train_timesteps=100))
    ref = diffusers.DDPMScheduler(num_train_timesteps=100, beta_schedule="squaredcos_cap_v2")
    torch.testing.assert_close(ours.betas, ref.betas.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours.alphas_cumprod, ref.alphas_cumprod.float(), rtol=1e-5, atol=1e-6)
    x0, noise, t = torch.randn(4, 16, 3), torch.randn(4, 16, 3), torch.tensor([0, 10, 50, 99])
    torch.testing.assert_close(ours.q_sample(x0, t, noise), ref.add_noise(x0, noise, t), rtol=1e-5, atol=1e-5)


@pytest.mark.quick
@pytest.mark.parametrize("steps", [10, 20])
@pytest.mark.parametrize("eta", [0.0, 0.7])
def test_ddim_step_matches_diffusers(steps, eta):
    ours = NoiseSchedule(NoiseScheduleConfig(num_train_timesteps=100))
    ref = reference_ddim(steps, eta)
    assert ours.sampling_timesteps(steps) == ref.timesteps.tolist()
    coefs = ours.step_coefficients(steps, eta)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16, 3, generator=gen)
    for k, t in enumerate(ref.timesteps):
        eps = torch.randn(3, 16, 3, generator=gen)
        z = torch.randn(3, 16, 3, generator=gen)
        expected = ref.step(eps, t, x, eta=eta, variance_noise=z).prev_sample
        mine = ours.step_mean(x, eps, coefs, k) + coefs.sigma[k] * z
        torch.testing.assert_close(mine, expected, rtol=1e-4, atol=1e-5)
        x = expected


def tiny_policy() -> DiffusionPolicy:
    cfg = DiffusionPolicyConfig(
        fusion=FusionConfig(dim=32, heads=2, use_images=False, use_text=False),
        unet=UNetConfig(down_dims=[16, 32], timestep_embed_dim=16),
    )
    return DiffusionPolicy(cfg)


@pytest.mark.quick
def test_record_log_prob_equals_direct_normal_and_reaches_the_unet():
    torch.manual_seed(0)
    policy = tiny_policy()
    cond = torch.randn(5, 32)
    steps, eta, min_std, last_k = 10, 1.0, 0.1, 4
    policy.config = dataclasses.replace(
        policy.config, ddim_steps=steps, eta=eta, min_std=min_std, finetune_steps=last_k
    )
    with torch.no_grad():
        _, chain, sampled = policy.explore(cond)
    terms = policy.record_log_prob(cond, chain)  # [B, K', H]
    assert terms.shape == (5, last_k, policy.config.horizon)
    # the sampler's own densities (from its noise) are the recomputed ones
    torch.testing.assert_close(sampled, terms.detach(), rtol=1e-4, atol=1e-3)
    # one step per row: the same terms, one U-Net pass each
    per_row = torch.tensor([0, 3, 1, 2, 3])
    one = policy.record_log_prob(cond, chain, per_row)
    torch.testing.assert_close(one[:, 0], terms[torch.arange(5), per_row], rtol=1e-5, atol=1e-5)
    logp = terms.sum((1, 2))

    sched, unet = policy.schedule, policy.unet
    coefs = sched.step_coefficients(steps, eta)
    expected = torch.zeros(5)
    for k in range(steps - last_k, steps):
        t = torch.full((5,), sched.sampling_timesteps(steps)[k])
        mean = sched.step_mean(chain[:, k], unet(chain[:, k], t, cond), coefs, k)
        std = coefs.sigma[k].clamp(min=min_std)
        expected += Normal(mean, std).log_prob(chain[:, k + 1]).sum(dim=(1, 2))
    torch.testing.assert_close(logp, expected, rtol=1e-4, atol=1e-3)

    logp.sum().backward()
    grads = [p.grad for p in policy.unet.parameters() if p.grad is not None]
    assert grads and sum(g.abs().sum() for g in grads) > 0


@pytest.mark.quick
def test_schedule_is_saved_and_restored_not_rederived(tmp_path):
    policy = tiny_policy()
    policy.action_norm.fit(torch.randn(100, 3) * 0.2)
    with torch.no_grad():  # pretend the run used a different schedule than the defaults would derive
        policy.schedule.alphas_cumprod.mul_(0.9)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": policy.state_dict()}, path)
    fresh = tiny_policy()
    fresh.load_state_dict(torch.load(path, weights_only=True)["model"])
    torch.testing.assert_close(fresh.schedule.alphas_cumprod, policy.schedule.alphas_cumprod)
    torch.testing.assert_close(fresh.action_norm.high, policy.action_norm.high)
    cond = torch.randn(2, 32)
    a = policy.sample(cond, generator=torch.Generator().manual_seed(1))
    b = fresh.sample(cond, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b)


@pytest.mark.quick
def test_normalizers_are_invertible():
    from diffpolicy_ros.models.normalizer import RangeNormalizer, StandardNormalizer

    data = torch.randn(200, 3) * torch.tensor([0.1, 0.2, 0.0]) + 0.05  # one constant feature
    rn = RangeNormalizer(3).fit(data)
    y = rn.normalize(data)
    assert y.min() >= -1 - 1e-5 and y.max() <= 1 + 1e-5 and torch.isfinite(y).all()
    torch.testing.assert_close(rn.unnormalize(y), data, rtol=1e-5, atol=1e-6)
    sn = StandardNormalizer(3).fit(data)
    torch.testing.assert_close(sn.unnormalize(sn.normalize(data)), data, rtol=1e-4, atol=1e-5)
