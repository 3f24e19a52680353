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

    def sampling_timesteps(self, num_inference_steps: int) -> list[int]:
        """Descending timesteps, "leading" spacing (diffusers' default for DDIM)."""
        if not 1 <= num_inference_steps <= self.num_train_timesteps:
            raise ConfigError(f"num_inference_steps must be in [1, {self.num_train_timesteps}]")
        ratio = self.num_train_timesteps // num_inference_steps
        return [i * ratio for i in reversed(range(num_inference_steps))]

    def step_coefficients(self, num_inference_steps: int, eta: float) -> StepCoefficients:
        """Per-step constants (each [K]), computed once per (K, eta) so the denoising loop does no schedule
        arithmetic."""
        ts = self.sampling_timesteps(num_inference_steps)
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
        return StepCoefficients(*torch.stack(rows).unbind(1))

    def step_mean(
        self,
        x_t: torch.Tensor,
        eps: torch.Tensor,
        coefs: StepCoefficients,
        k: int | torch.Tensor,
        committed: Committed | None = None,
    ) -> torch.Tensor:
        return step_mean(x_t, eps, coefs, k, self.config.clip_sample, committed)

    def training_loss(self, unet: nn.Module, x0: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The DDPM epsilon-prediction loss on normalized chunks x0 [B, H, A]."""
        noise = torch.randn_like(x0)
        t = torch.randint(0, self.num_train_timesteps, (x0.shape[0],), device=x0.device)
        return torch.nn.functional.mse_loss(unet(self.q_sample(x0, t, noise), t, cond), noise)

    def sampling_step_sizes(self, num_inference_steps: int) -> None:
        """A DDPM-trained net is not conditioned on the step size (a shortcut model is: ``models/flow.py``)."""
        return None


class Committed(NamedTuple):
    """Real-time chunking's inpainting target (``models/realtime_chunking.py``): the actions already committed to,
    normalized [B, H, A], and how strongly each chunk step is pinned to them, [H] in [0, 1]."""

    actions: torch.Tensor
    weights: torch.Tensor


def step_mean(
    x_t: torch.Tensor,
    out: torch.Tensor,
    coefs: StepCoefficients,
    k: int | torch.Tensor,
    clip_sample: bool,
    committed: Committed | None = None,
) -> torch.Tensor:
    """Mean of the next sample given x_t and the net's output at step ``k`` (an int, or one step per row of a
    [B, H, A] batch as a [B] index tensor): x0_hat = clip((x_t - a out) / b), mean = c x0_hat + d out. DDIM and
    a flow's Euler step (``models/flow.py``) are both this update with their own columns.

    ``committed`` (real-time chunking, inference only): x0_hat moves towards the committed actions by each chunk
    step's weight before the update — RePaint-style replacement of the known part, at every step, so the rest of
    the chunk is sampled to continue it."""

    def c(values: torch.Tensor) -> torch.Tensor:
        return values[k] if isinstance(k, int) else values[k].view(-1, 1, 1)

    x0 = (x_t - c(coefs.sqrt_one_minus_alpha_bar) * out) / c(coefs.sqrt_alpha_bar)
    if clip_sample:
        x0 = x0.clamp(-1.0, 1.0)
    if committed is not None:
        x0 = x0 + committed.weights.view(1, -1, 1) * (committed.actions - x0)
    return c(coefs.sqrt_alpha_bar_prev) * x0 + c(coefs.direction) * out


class StepCoefficients(NamedTuple):
    """One sampler step's constants, each [K] (step k goes from timestep t to the next one t'), the columns of
    :func:`step_mean`. DDIM: sqrt(ab_t), sqrt(1 - ab_t), sqrt(ab_t'), the coefficient of eps in the mean, and
    sigma (eta's noise). A flow's Euler step from time tau to tau' (``models/flow.py``): 1, tau, 1, tau', 0.
    The names are DDIM's because the native kernel reads the columns by them."""

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
