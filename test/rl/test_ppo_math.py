"""PPO maths on hand-computed cases (the groundwork of the PPO issue)."""

from __future__ import annotations

import pytest
import torch

from diffpolicy_ros.rl.ppo_math import (
    RewardCenterer,
    clipped_policy_loss,
    clipped_value_loss,
    denoising_clip_schedule,
    denoising_discounts,
    gae,
    normalize_advantages,
)

pytestmark = pytest.mark.quick


def test_gae_matches_a_hand_computed_rollout():
    # one env, 3 decisions, gamma 0.9, lambda 0.5; the episode terminates after decision 1 (index 1)
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[0.5], [1.0], [2.0]])
    last = torch.tensor([4.0])
    term = torch.tensor([[False], [True], [False]])
    trunc = torch.zeros_like(term)
    disc = torch.full((3, 1), 0.9)
    adv, ret = gae(r, v, last, term, trunc, disc, lam=0.5)
    d2 = 3.0 + 0.9 * 4.0 - 2.0  # 4.6
    d1 = 2.0 - 1.0  # terminal: no bootstrap, no carry
    d0 = 1.0 + 0.9 * 1.0 - 0.5  # 1.4
    expected = torch.tensor([[d0 + 0.9 * 0.5 * d1], [d1], [d2]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + v)


def test_gae_bootstraps_truncation_from_the_final_value_and_uses_per_chunk_discounts():
    r = torch.tensor([[1.0]])
    v = torch.tensor([[0.0]])
    adv, _ = gae(
        r,
        v,
        torch.tensor([100.0]),
        torch.tensor([[False]]),
        torch.tensor([[True]]),
        torch.tensor([[0.5]]),
        lam=0.95,
        final_values=torch.tensor([[2.0]]),
    )
    # bootstraps from the final observation's value (2.0), never from the next episode's first (100.0)
    torch.testing.assert_close(adv, torch.tensor([[1.0 + 0.5 * 2.0]]))


def test_ratio_is_one_and_policy_loss_zero_before_the_first_update():
    logp = torch.randn(64)
    adv = normalize_advantages(torch.randn(64))
    loss, stats = clipped_policy_loss(logp.clone(), logp, adv, clip=0.2)
    assert stats["ratio"].item() == pytest.approx(1.0)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    assert stats["clip_fraction"].item() == 0.0 and abs(stats["approx_kl"].item()) < 1e-7


def test_clipped_objective_caps_the_gain_and_stops_the_gradient():
    old = torch.zeros(2)
    new = torch.log(torch.tensor([1.5, 0.5])).requires_grad_()
    adv = torch.tensor([1.0, -1.0])
    loss, stats = clipped_policy_loss(new, old, adv, clip=0.2)
    # positive advantage: ratio 1.5 counts as 1.2; negative: ratio 0.5 counts as 0.8
    assert loss.item() == pytest.approx(-(1.2 * 1.0 + 0.8 * -1.0) / 2)
    loss.backward()
    assert torch.all(new.grad == 0)  # both outside the trust region in the direction of improvement
    assert stats["clip_fraction"].item() == 1.0


def test_clipped_value_loss():
    old, ret = torch.tensor([0.0]), torch.tensor([1.0])
    assert clipped_value_loss(torch.tensor([0.9]), old, ret, clip=0.2).item() == pytest.approx(0.5 * 0.8**2)
    assert clipped_value_loss(torch.tensor([0.1]), old, ret, clip=0.2).item() == pytest.approx(0.5 * 0.9**2)


def test_reward_centering_tracks_the_average_and_round_trips():
    centerer = RewardCenterer(step_size=0.5)
    for _ in range(30):
        out = centerer(torch.full((8,), 3.0))
    assert centerer.average == pytest.approx(3.0, abs=1e-6) and out.abs().max() < 1e-5
    other = RewardCenterer()
    other.load_state_dict(centerer.state_dict())
    assert other.average == centerer.average


@pytest.mark.quick
def test_denoising_clip_schedule_matches_dppo_by_hand():
    # K' = 5, clip 0.01 at the last step, 0.001 at the earliest, rate 3:
    # 0.001 + 0.009 * (e^{3 i/4} - 1) / (e^3 - 1), i = 0..4, worked out by hand
    expected = torch.tensor([0.001, 0.0015267, 0.0026418, 0.0050025, 0.01])
    torch.testing.assert_close(denoising_clip_schedule(5, 0.01, 0.001, 3.0), expected, rtol=0, atol=1e-7)
    torch.testing.assert_close(denoising_clip_schedule(3, 0.2, None), torch.full((3,), 0.2))  # no schedule
    torch.testing.assert_close(denoising_clip_schedule(1, 0.01, 0.001), torch.tensor([0.01]))  # one step: the last
    torch.testing.assert_close(denoising_clip_schedule(3, 0.01, 0.001, 0.0), torch.tensor([0.001, 0.0055, 0.01]))


@pytest.mark.quick
def test_denoising_discounts_weight_the_last_step_fully():
    expected = torch.tensor([0.96059601, 0.970299, 0.9801, 0.99, 1.0])  # 0.99 ** (4 - i)
    torch.testing.assert_close(denoising_discounts(5, 0.99), expected)
    torch.testing.assert_close(denoising_discounts(4, 1.0), torch.ones(4))


@pytest.mark.quick
def test_per_sample_clip_coefficients_clip_each_sample_at_its_own_range():
    new = torch.log(torch.tensor([1.5, 1.5, 0.5]))
    old = torch.zeros(3)
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, stats = clipped_policy_loss(new, old, adv, torch.tensor([0.1, 0.6, 0.2]))
    # min(1.5, 1.1) = 1.1; min(1.5, 1.5) = 1.5 (inside 1 +- 0.6); min(-0.5, -0.8) = -0.8
    assert torch.isclose(loss, -torch.tensor((1.1 + 1.5 - 0.8) / 3))
    assert torch.isclose(stats["clip_fraction"], torch.tensor(2 / 3))
