r"""The few-step actor's objective: rectified flow, and the shortcut model that makes one step work.

Rectified flow (Liu et al. 2023, "Flow Straight and Fast"; flow matching, Lipman et al. 2023), with time tau in
[0, 1] running from the data (0) to the noise (1) so that sampling, like DDIM, goes from tau = 1 down to 0:
    x_tau = (1 - tau) x0 + tau eps,   the net predicts the velocity  v = eps - x0,   loss = |v_theta - v|^2.
An Euler step from tau to tau' = tau - d is x_tau' = x_tau - d v. Written as the DDIM update of
:func:`~diffpolicy_ros.models.scheduler.step_mean`,
    x0_hat = clip((x_tau - tau v) / 1),   x_tau' = 1 * x0_hat + tau' v,
so a flow's sampler is the DDIM sampler with the columns (1, tau, 1, tau', 0): the eager loop, the traced graph
and the native kernel run it unchanged, and so does DPPO's chain likelihood (every step a Gaussian of std
``min_std`` around that mean: the noise-injected few-step chain of ReinFlow, Zhang et al. 2025).

With one or two Euler steps a plain flow returns (nearly) the average of the demonstrations' modes: the first
step from pure noise predicts E[x0 | obs]. The shortcut model (Frans et al. 2024, "One Step Diffusion via
Shortcut Models") also conditions the net on the step size d and trains it to be self-consistent: two steps of
size d equal one of size 2d,
    s(x_tau, tau, 2d) <- ( s(x_tau, tau, d) + s(x_tau - d s(x_tau, tau, d), tau - d, d) ) / 2   (no gradient),
for d = 1/2^m, on a ``shortcut_fraction`` of each batch; the rest is the flow loss at d = 0. Then a K-step
sampler (d = 1/K) jumps along the flow's own curved path instead of its tangent.

Times and step sizes enter the U-Net's sinusoidal embeddings multiplied by ``time_scale`` (100: the range of
DDPM's integer timesteps the embedding was laid out for).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.models.scheduler import Committed, StepCoefficients, step_mean


@dataclass
class FlowConfig:
    shortcut: bool = True  # condition on the step size and train self-consistency (one-step sampling)
    shortcut_fraction: float = 0.25  # share of each batch trained on self-consistency targets (Frans et al.)
    min_step_log2: int = 7  # the smallest self-consistency step is 1 / 2^7: 128 steps span the flow
    time_scale: float = 100.0
    clip_sample: bool = True  # clip x0_hat to the normalized action range [-1, 1], as DDIM does

    def __post_init__(self) -> None:
        if not 0.0 <= self.shortcut_fraction < 1.0:
            raise ConfigError(f"flow.shortcut_fraction must be in [0, 1), got {self.shortcut_fraction}")
        if not 1 <= self.min_step_log2 <= 10:
            raise ConfigError(f"flow.min_step_log2 must be in [1, 10], got {self.min_step_log2}")

    def check_steps(self, steps: int) -> None:
        """A shortcut model samples with the step sizes it was trained on: 1 / 2^m."""
        if self.shortcut and (steps & (steps - 1) or steps > 2**self.min_step_log2):
            raise ConfigError(
                f"a shortcut model samples with 1, 2, 4, ... up to {2**self.min_step_log2} steps, got {steps} "
                "(PPO: its config's sampler.ddim_steps applies too; train-ppo --ddim-steps sets it)"
            )


class FlowSchedule(nn.Module):
    """The flow's sampler constants and training loss, with :class:`NoiseSchedule`'s interface (the policy
    calls either the same way). It has no buffers: the config in the checkpoint defines it completely."""

    def __init__(self, config: FlowConfig | None = None):
        super().__init__()
        self.config = config or FlowConfig()

    def _times(self, steps: int) -> list[float]:
        return [1.0 - k / steps for k in range(steps + 1)]  # tau_0 = 1 (noise) ... tau_K = 0 (data)

    def sampling_timesteps(self, num_inference_steps: int) -> list[float]:
        """What the net's time embedding reads at each step: tau_k * time_scale."""
        return [tau * self.config.time_scale for tau in self._times(num_inference_steps)[:-1]]

    def sampling_step_sizes(self, num_inference_steps: int) -> list[float] | None:
        """The step size each step's embedding reads (shortcut model), or None (plain flow)."""
        if not self.config.shortcut:
            return None
        return [self.config.time_scale / num_inference_steps] * num_inference_steps

    def step_coefficients(self, num_inference_steps: int, eta: float = 0.0) -> StepCoefficients:
        """Euler steps as :func:`step_mean` columns (1, tau, 1, tau', sigma 0). ``eta`` has no meaning for a flow:
        its only step noise is PPO's ``min_std``."""
        taus = torch.tensor(self._times(num_inference_steps), dtype=torch.float32)
        ones, zeros = torch.ones(num_inference_steps), torch.zeros(num_inference_steps)
        return StepCoefficients(ones, taus[:-1], ones, taus[1:], zeros)

    def step_mean(
        self,
        x_t: torch.Tensor,
        velocity: torch.Tensor,
        coefs: StepCoefficients,
        k: int | torch.Tensor,
        committed: Committed | None = None,
    ) -> torch.Tensor:
        return step_mean(x_t, velocity, coefs, k, self.config.clip_sample, committed)

    def training_loss(self, unet: nn.Module, x0: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Flow matching on the batch, and (shortcut model) self-consistency on its first ``shortcut_fraction``."""
        cfg, scale = self.config, self.config.time_scale
        batch = x0.shape[0]
        noise = torch.randn_like(x0)
        n_sc = int(batch * cfg.shortcut_fraction) if cfg.shortcut else 0
        # flow-matching part: tau ~ U(0, 1), step size 0 (the instantaneous velocity)
        tau = torch.rand(batch - n_sc, device=x0.device)
        x_tau = self._interpolate(x0[n_sc:], noise[n_sc:], tau)
        steps = torch.zeros_like(tau) if cfg.shortcut else None
        prediction = unet(x_tau, tau * scale, cond[n_sc:], steps)
        loss = ((prediction - (noise[n_sc:] - x0[n_sc:])) ** 2).mean(dim=(1, 2))
        if n_sc:
            loss = torch.cat([self._self_consistency(unet, x0[:n_sc], noise[:n_sc], cond[:n_sc]), loss])
        return loss.mean()

    def _self_consistency(
        self, unet: nn.Module, x0: torch.Tensor, noise: torch.Tensor, cond: torch.Tensor
    ) -> torch.Tensor:
        """Per-sample loss of s(x_tau, tau, 2d) against two steps of size d (Frans et al., Algorithm 1)."""
        scale, m = self.config.time_scale, self.config.min_step_log2
        n = x0.shape[0]
        # d = 1 / 2^j, j in [1, m]; the doubled step 2d is then at most 1
        d = 0.5 ** torch.randint(1, m + 1, (n,), device=x0.device).float()
        # tau on the grid of the doubled step, tau in {2d, 4d, ..., 1}: both half steps stay inside [0, 1]
        tau = 2 * d * torch.floor(torch.rand(n, device=x0.device) / (2 * d) + 1).clamp(max=1 / (2 * d))
        x_tau = self._interpolate(x0, noise, tau)
        with torch.no_grad():
            first = unet(x_tau, tau * scale, cond, d * scale)
            x_mid = x_tau - d.view(-1, 1, 1) * first
            second = unet(x_mid, (tau - d) * scale, cond, d * scale)
            target = (first + second) / 2
        prediction = unet(x_tau, tau * scale, cond, 2 * d * scale)
        return ((prediction - target) ** 2).mean(dim=(1, 2))

    @staticmethod
    def _interpolate(x0: torch.Tensor, noise: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        tau = tau.view(-1, 1, 1)
        return (1 - tau) * x0 + tau * noise
