"""The few-step actor (models/flow.py): the Euler step in the DDIM columns, one-step sampling that keeps both modes
of the data (shortcut model) where a plain flow averages them, its PPO chain likelihood, and its checkpoint."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.models.checkpoint import CheckpointMeta, load_policy, make_payload, save_checkpoint
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.factory import PolicySpec
from diffpolicy_ros.models.flow import FlowConfig, FlowSchedule
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.unet1d import UNetConfig


def small_flow_policy(shortcut: bool, steps: int = 1, action_dim: int = 3) -> DiffusionPolicy:
    return DiffusionPolicy(
        DiffusionPolicyConfig(
            objective="flow",
            ddim_steps=steps,
            horizon=8,
            action_dim=action_dim,
            flow=FlowConfig(shortcut=shortcut),
            fusion=FusionConfig(dim=32, heads=2, layers=1, use_images=False, use_text=False, proprio_dim=4),
            unet=UNetConfig(down_dims=[32, 64], kernel_size=3, n_groups=8, timestep_embed_dim=32),
        )
    )


@pytest.mark.quick
@settings(max_examples=60, deadline=None)
@given(
    steps=st.sampled_from([1, 2, 4, 8]),
    k_frac=st.floats(0, 0.999),
    scale=st.floats(0.01, 0.1),
    seed=st.integers(0, 2**16),
)
def test_euler_step_in_the_ddim_columns_is_x_minus_d_v(steps, k_frac, scale, seed):
    """step_mean with the flow's columns is the Euler step x - d v (while x0_hat stays inside [-1, 1])."""
    schedule = FlowSchedule(FlowConfig())
    k = int(k_frac * steps)
    gen = torch.Generator().manual_seed(seed)
    x, v = scale * torch.randn(2, 8, 3, generator=gen), scale * torch.randn(2, 8, 3, generator=gen)
    coefs = schedule.step_coefficients(steps)
    assume(bool((x - coefs.sqrt_one_minus_alpha_bar[k] * v).abs().max() < 1))  # x0_hat not clipped
    torch.testing.assert_close(schedule.step_mean(x, v, coefs, k), x - v / steps, rtol=1e-5, atol=1e-6)
    assert schedule.sampling_timesteps(steps)[k] == pytest.approx(100.0 * (1 - k / steps))


@pytest.mark.quick
def test_a_shortcut_model_samples_only_with_trained_step_sizes():
    with pytest.raises(ConfigError, match="1, 2, 4"):
        DiffusionPolicyConfig(objective="flow", ddim_steps=3)
    DiffusionPolicyConfig(objective="flow", ddim_steps=3, flow=FlowConfig(shortcut=False))  # a plain flow: any K
    with pytest.raises(ConfigError, match="objective"):
        DiffusionPolicyConfig(objective="consistency")


def one_step_chunks_after_training_on_two_modes(shortcut: bool, iters: int) -> torch.Tensor:
    """Train on chunks that are all +0.6 or all -0.6 (one action dimension), half and half — the two routes of a
    scene — then sample 400 chunks in one step; returns each chunk's mean."""
    torch.manual_seed(0)
    policy = small_flow_policy(shortcut, steps=1, action_dim=1)
    policy.action_norm.fit(torch.tensor([[-1.0], [1.0]]))
    optimizer = torch.optim.Adam(policy.parameters(), lr=2e-3)
    obs = {"proprio": torch.zeros(64, 4)}
    for _ in range(iters):
        side = torch.where(torch.rand(64, 1, 1) < 0.5, 0.6, -0.6)
        loss = policy.bc_loss(obs, side.expand(64, 8, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    with torch.no_grad():
        cond = policy.encoder({"proprio": torch.zeros(400, 4)})
        return policy.sample(cond, generator=torch.Generator().manual_seed(1)).mean(dim=(1, 2))


@pytest.mark.slow  # ~35 s of training on this machine (twice in `make test`: pytest and colcon test)
def test_one_shortcut_step_keeps_both_modes_where_one_flow_step_averages_them():
    """Why the few-step actor is a shortcut model: from one step a plain flow returns the mean of the
    demonstrations (a chunk between the two routes), the shortcut model returns one route or the other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny net: one thread is the fast choice, and immune to a busy neighbour
    try:
        shortcut = one_step_chunks_after_training_on_two_modes(shortcut=True, iters=600)
        flow = one_step_chunks_after_training_on_two_modes(shortcut=False, iters=400)
    finally:
        torch.set_num_threads(threads)
    assert (shortcut > 0.3).float().mean() >= 0.2 and (shortcut < -0.3).float().mean() >= 0.2  # both routes
    assert (shortcut.abs() > 0.3).float().mean() >= 0.75  # and on a route, not between them
    assert (flow.abs() < 0.3).float().mean() >= 0.8  # the plain flow's one step: the average, no route


@pytest.mark.quick
def test_ppo_chain_likelihood_of_the_few_step_actor():
    """DPPO's per-step Gaussian over the K Euler steps (std min_std, ReinFlow's noise-injected chain): the
    densities recorded while acting equal those recomputed from the chain, and they carry gradients."""
    torch.manual_seed(0)
    policy = small_flow_policy(shortcut=True, steps=4)
    cond = torch.randn(5, 32)
    _, record, explored = policy.explore(cond, generator=torch.Generator().manual_seed(2))
    assert record.shape == (5, 5, 8, 3) and explored.shape == (5, 4, 8)
    recomputed = policy.record_log_prob(cond, record)
    torch.testing.assert_close(recomputed, explored, rtol=1e-4, atol=1e-4)
    one = policy.record_log_prob(cond, record, steps=torch.tensor([0, 1, 2, 3, 3]))
    torch.testing.assert_close(one[:, 0], explored[torch.arange(5), torch.tensor([0, 1, 2, 3, 3])], rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    recomputed.sum().backward()
    assert sum(p.grad.abs().sum() for p in policy.unet.parameters() if p.grad is not None) > 0


@pytest.mark.quick
def test_a_flow_checkpoint_restores_the_same_sampler(tmp_path):
    torch.manual_seed(0)
    policy = small_flow_policy(shortcut=True, steps=2)
    policy.action_norm.fit(torch.randn(50, 3) * 0.2)
    path = save_checkpoint(tmp_path / "flow.pt", make_payload(PolicySpec(diffusion=policy.config), policy,
                                                               CheckpointMeta(source="test")))  # fmt: skip
    fresh, _ = load_policy(path)
    assert fresh.config.objective == "flow" and fresh.unet.step_mlp is not None
    cond = torch.randn(3, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            fresh.sample(cond, generator=torch.Generator().manual_seed(4)),
            policy.eval().sample(cond, generator=torch.Generator().manual_seed(4)),
        )
