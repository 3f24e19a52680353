"""The PPO pieces that are pure maths, kept explicit (CleanRL style) and tested on hand-computed cases.

A decision is one action chunk: its reward is the (discounted) sum of the env-step rewards it executed and
its discount is gamma ** steps_executed, so GAE takes a per-transition discount. Episode ends are split as
Gymnasium does: ``terminated`` (no bootstrap) and ``truncated`` (bootstrap from the value of the final
observation, passed in ``final_values``).
"""

from __future__ import annotations

import math

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    discounts: torch.Tensor,
    lam: float,
    final_values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over a rollout [T, N]; returns (advantages, returns).

    ``values[t]`` is V(s_t); ``last_values`` is V(s_T) for the observation after the rollout; ``discounts``
    is gamma ** (env steps in decision t). At a truncation the bootstrap target is ``final_values[t]``.
    """
    steps = rewards.shape[0]
    done = (terminated | truncated).float()
    rewards = rewards.float()
    if final_values is not None:
        rewards = rewards + discounts * final_values * truncated.float()
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values, dtype=rewards.dtype)
    for t in reversed(range(steps)):
        next_value = last_values if t == steps - 1 else values[t + 1]
        not_done = 1.0 - done[t]
        delta = rewards[t] + discounts[t] * next_value * not_done - values[t]
        running = delta + discounts[t] * lam * not_done * running
        advantages[t] = running
    return advantages, advantages + values


def normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    return (adv - adv.mean()) / (adv.std() + eps)


def denoising_clip_schedule(steps: int, clip_last: float, clip_first: float | None, rate: float = 3.0) -> torch.Tensor:
    """Per fine-tuned denoising step clip coefficients [steps], earliest step first (DPPO).

    The last step (the one that makes the action) gets ``clip_last``; earlier steps get exponentially less,
    down to ``clip_first`` at the earliest: clip_i = first + (last - first) * (e^{rate t_i} - 1) / (e^rate - 1),
    t_i = i / (steps - 1). Early steps move the chain's noise, whose effect on the action is amplified by every
    later step, so they get the tighter trust region. ``clip_first`` None: ``clip_last`` for every step.
    """
    if clip_first is None or steps == 1:
        return torch.full((steps,), float(clip_last))
    t = torch.arange(steps, dtype=torch.float64) / (steps - 1)
    ramp = (torch.exp(rate * t) - 1) / (math.exp(rate) - 1) if rate else t
    return (clip_first + (clip_last - clip_first) * ramp).float()


def denoising_discounts(steps: int, gamma_denoising: float) -> torch.Tensor:
    """Advantage weights per fine-tuned denoising step [steps], earliest first: gamma_denoising ** (steps - 1 - i)
    (DPPO's discount over the denoising MDP: the last step, which makes the action, keeps the full advantage)."""
    return gamma_denoising ** torch.arange(steps - 1, -1, -1, dtype=torch.float64).float()


def clipped_policy_loss(
    new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate (to minimize) and diagnostics: ratio mean, clip fraction, approx KL. ``clip``: one
    coefficient, or one per sample (broadcast like ``new_logp``)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    with torch.no_grad():
        stats = {
            "ratio": ratio.mean(),
            "clip_fraction": ((ratio - 1.0).abs() > clip).float().mean(),
            "approx_kl": ((ratio - 1.0) - log_ratio).mean(),  # Schulman's low-variance estimator
        }
    return loss, stats


def clipped_value_loss(
    new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float
) -> torch.Tensor:
    """0.5 * max((V - R)^2, (V_old + clip(V - V_old) - R)^2), averaged."""
    clipped = old_values + (new_values - old_values).clamp(-clip, clip)
    return 0.5 * torch.max((new_values - returns) ** 2, (clipped - returns) ** 2).mean()


class RewardCenterer:
    """Reward centering (Naik & Sutton 2024): subtract a running estimate of the average reward.

    The estimate is an exponential moving average with step size ``step_size``; it is part of the trainer
    state and must be checkpointed with it.
    """

    def __init__(self, step_size: float = 1e-3, initial: float = 0.0):
        self.step_size = step_size
        self.average = initial

    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        centered = rewards - self.average
        self.average += self.step_size * float(centered.mean())
        return centered

    def state_dict(self) -> dict[str, float]:
        return {"step_size": self.step_size, "average": self.average}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.step_size, self.average = float(state["step_size"]), float(state["average"])
