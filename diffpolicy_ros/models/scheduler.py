r"""DDPM training schedule, DDIM sampling, and the denoising-chain likelihood PPO needs (DPPO).

Schedule (cosine, Nichol & Dhariwal 2021), T training steps:
    \bar\alpha(t) = cos^2(((t/T + s)/(1 + s)) * pi/2),   beta_t = min(1 - \bar\alpha_{t+1}/\bar\alpha_t, 0.999)
Training (epsilon prediction): x_t = sqrt(\bar\alpha_t) x_0 + sqrt(1 - \bar\alpha_t) eps,  loss = |eps_theta - eps|^2.

DDIM (Song et al. 2021) with K inference steps t_K > ... > t_1 (spacing T/K, "leading" as in diffusers)
and eta in [0, 1]: from x_t to x_{t'} (t' = previous timestep, \bar\alpha_{t'} = 1 past the end):
    x0_hat = clip((x_t - sqrt(1 - \bar\alpha_t) eps_theta) / sqrt(\bar\alpha_t), -1, 1)
    sigma  = eta * sqrt((1 - \bar\alpha_{t'}) / (1 - \bar\alpha_t)) * sqrt(1 - \bar\alpha_t / \bar\alpha_{t'})
    mu     = sqrt(\bar\alpha_{t'}) x0_hat + sqrt(1 - \bar\alpha_{t'} - sigma^2) eps_theta
    x_{t'} = mu + sigma z,  z ~ N(0, I)

Likelihood of a chain (DPPO, Ren et al. 2024): treat every denoising step as a Gaussian policy step,
    pi_theta(x_{t'} | x_t, s) = N(mu_theta(x_t, t, s), std_k^2 I),  std_k = max(sigma_k, min_std),
so the log-probability of a recorded chain x_{t_K} -> ... -> x_{t_0} under the *current* weights is the sum
of diagonal-Gaussian log densities over the last K' steps (the steps being fine-tuned; earlier steps are
treated as fixed). The sampler must draw with the same std_k (``min_std`` on) so the recorded chain has
positive density; gradients reach the noise-prediction net through mu_theta.

The schedule tensors are registered buffers: they travel with ``state_dict`` into every checkpoint and a
loaded model samples with the saved schedule, never a re-derived one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from diffpolicy_ros.config import ConfigError


@dataclass
class NoiseScheduleConfig:
    num_train_timesteps: int = 100
    beta_schedule: str = "cosine"  # 'cosine' | 'linear'
    clip_sample: bool = True  # clip x0_hat to the normalized action range [-1, 1]


def cosine_betas(num_steps: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    def alpha_bar(t: float) -> float:
        return math.cos((t + s) / (1 + s) * math.pi / 2) ** 2

    betas = [min(1 - alpha_bar((i + 1) / num_steps) / alpha_bar(i / num_steps), max_beta) for i in range(num_steps)]
    return torch.tensor(betas, dtype=torch.float64)


class NoiseSchedule(nn.Module):
    """Holds betas / alphas_cumprod as buffers and implements q_sample, DDIM steps and step log-probs."""

    def __init__(self, config: NoiseScheduleConfig | None = None):
        super().__init__()
        self.config = cfg = config or NoiseScheduleConfig()
        if cfg.beta_schedule == "cosine":
            betas = cosine_betas(cfg.num_train_timesteps)
        elif cfg.beta_schedule == "linear":
            betas = torch.linspace(1e-4, 0.02, cfg.num_train_timesteps, dtype=torch.float64)
        else:
            raise ConfigError(f"unknown beta_schedule {cfg.beta_schedule!r}")
        # computed in float64 on the host once, stored float32 (NPUs have no fast float64)
        self.register_buffer("betas", betas.float())
        self.register_buffer("alphas_cumprod", torch.cumprod(1 - betas, 0).float())

    @property
    def num_train_timesteps(self) -> int:
        return self.alphas_cumprod.shape[0]

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        ab = self.alphas_cumprod[t].view(-1, *([1] * (x0.dim() - 1)))
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def ddim_timesteps(self, num_inference_steps: int) -> list[int]:
        """Descending timesteps, "leading" spacing (diffusers' default for DDIM)."""
        if not 1 <= num_inference_steps <= self.num_train_timesteps:
            raise ConfigError(f"num_inference_steps must be in [1, {self.num_train_timesteps}]")
        ratio = self.num_train_timesteps // num_inference_steps
        return [i * ratio for i in reversed(range(num_inference_steps))]

    def ddim_coefficients(self, num_inference_steps: int, eta: float) -> DDIMCoefficients:
        """Per-step constants (each [K]), computed once per (K, eta) so the denoising loop does no schedule
        arithmetic."""
        ts = self.ddim_timesteps(num_inference_steps)
        ratio = self.num_train_timesteps // num_inference_steps
        ab = self.alphas_cumprod
        one = torch.ones((), dtype=ab.dtype, device=ab.device)
        rows = []
        for t in ts:
            ab_t = ab[t]
            ab_prev = ab[t - ratio] if t - ratio >= 0 else one
            var = (1 - ab_prev) / (1 - ab_t) * (1 - ab_t / ab_prev)
            sigma = eta * var.clamp(min=0).sqrt()
            direction = (1 - ab_prev - sigma**2).clamp(min=0).sqrt()
            rows.append(torch.stack([ab_t.sqrt(), (1 - ab_t).sqrt(), ab_prev.sqrt(), direction, sigma]))
        return DDIMCoefficients(*torch.stack(rows).unbind(1))

    def ddim_mean(
        self, x_t: torch.Tensor, eps: torch.Tensor, coefs: DDIMCoefficients, k: int | torch.Tensor
    ) -> torch.Tensor:
        """Mean of x_{t'} given x_t and the predicted noise at DDIM step ``k`` (an int, or one step per row of
        a [B, H, A] batch as a [B] index tensor)."""

        def c(values: torch.Tensor) -> torch.Tensor:
            return values[k] if isinstance(k, int) else values[k].view(-1, 1, 1)

        x0 = (x_t - c(coefs.sqrt_one_minus_alpha_bar) * eps) / c(coefs.sqrt_alpha_bar)
        if self.config.clip_sample:
            x0 = x0.clamp(-1.0, 1.0)
        return c(coefs.sqrt_alpha_bar_prev) * x0 + c(coefs.direction) * eps


class DDIMCoefficients(NamedTuple):
    """The DDIM step constants, each [K] (step k goes from timestep t to the previous one t'):
    sqrt(ab_t), sqrt(1 - ab_t), sqrt(ab_t'), the coefficient of eps in the mean, and sigma (eta's noise)."""

    sqrt_alpha_bar: torch.Tensor
    sqrt_one_minus_alpha_bar: torch.Tensor
    sqrt_alpha_bar_prev: torch.Tensor
    direction: torch.Tensor
    sigma: torch.Tensor

    def stds(self, min_std: float | None) -> torch.Tensor:
        """Per-step sampling / likelihood std: sigma floored at ``min_std`` (DPPO), or sigma itself."""
        return self.sigma.clamp(min=min_std) if min_std else self.sigma

    def packed(self) -> torch.Tensor:
        """[K, 5] float32 in field order: the native kernel's layout (its ``Coef`` enum follows ``_fields``)."""
        return torch.stack(list(self), dim=1).float().contiguous()


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, std^2) (std broadcastable)."""
    return -((x - mean) ** 2) / (2 * std**2) - torch.log(std) - 0.5 * math.log(2 * math.pi)
