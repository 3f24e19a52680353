"""The diffusion policy: multimodal encoder -> global condition -> DDIM-sampled 16x3 action chunk.

Roles are split as in Diffusion Policy / LeRobot: :class:`MultimodalEncoder` (observations),
:class:`ConditionalUnet1D` (noise prediction), :class:`NoiseSchedule` (DDPM/DDIM maths and the chain
likelihood, see its module docstring) and this wrapper, which owns the action normalizer and exposes:

- ``bc_loss(obs, actions)``: the DDPM epsilon-prediction loss (behaviour cloning);
- ``sample(cond, ...)``: DDIM sampling, optionally returning the whole denoising chain (for PPO);
- ``chain_log_prob(cond, chain, ...)``: the log-probability of a recorded chain under the current weights;
- ``predict_chunk(obs)``: observation dict -> unnormalized chunk in m/s (inference mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder
from diffpolicy_ros.models.normalizer import RangeNormalizer
from diffpolicy_ros.models.scheduler import NoiseSchedule, NoiseScheduleConfig, gaussian_log_prob
from diffpolicy_ros.models.unet1d import ConditionalUnet1D, UNetConfig


@dataclass
class DiffusionPolicyConfig:
    horizon: int = 16
    action_dim: int = 3
    ddim_steps: int = 10
    eta: float = 0.0  # deployment DDIM eta: 0 = classic deterministic DDIM (BC); after PPO the fine-tuning eta
    min_std: float = 0.1  # DPPO: floor of the per-step sampling / likelihood std while fine-tuning
    # Deployment adds each step's noise (std max(sigma_eta, min_std)). PPO sets it: the fine-tuned policy is
    # the stochastic chain it was optimized as; its noise-free mean path is a different policy, and measured
    # on the point mass it did not improve when the stochastic policy did.
    stochastic: bool = False
    finetune_steps: int = 10  # K': the last K' denoising steps carry the PPO likelihood
    fusion: FusionConfig = field(default_factory=FusionConfig)
    unet: UNetConfig = field(default_factory=UNetConfig)
    schedule: NoiseScheduleConfig = field(default_factory=NoiseScheduleConfig)


class DiffusionPolicy(nn.Module):
    def __init__(self, config: DiffusionPolicyConfig | None = None):
        super().__init__()
        self.config = cfg = config or DiffusionPolicyConfig()
        cfg.unet.action_dim = cfg.action_dim
        self.encoder = MultimodalEncoder(cfg.fusion)
        self.unet = ConditionalUnet1D(cfg.fusion.dim, cfg.unet)
        self.schedule = NoiseSchedule(cfg.schedule)
        self.action_norm = RangeNormalizer(cfg.action_dim)

    # ---------------------------------------------------------------- training
    def bc_loss(self, obs: dict, actions: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """DDPM loss on normalized action chunks [B, H, A]."""
        cond = self.encoder(obs) if cond is None else cond
        x0 = self.action_norm.normalize(actions)
        noise = torch.randn_like(x0)
        t = torch.randint(0, self.schedule.num_train_timesteps, (x0.shape[0],), device=x0.device)
        return F.mse_loss(self.unet(self.schedule.q_sample(x0, t, noise), t, cond), noise)

    # ---------------------------------------------------------------- sampling and likelihood
    def sample(
        self,
        cond: torch.Tensor,
        ddim_steps: int | None = None,
        eta: float | None = None,
        min_std: float | None = None,
        return_chain: bool = False,
        generator: torch.Generator | None = None,
        noise: bool | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalized chunk [B, H, A]; with ``return_chain`` also the chain [B, K+1, H, A] (x_T first).

        ``min_std`` (PPO exploration) floors the per-step std so every recorded step has a density.
        ``noise``: add the per-step noise (default: when eta > 0 or min_std); False follows the means.
        The loop has no host synchronization: all constants are computed before it.
        """
        cfg = self.config
        steps = ddim_steps or cfg.ddim_steps
        eta = cfg.eta if eta is None else eta
        coefs = self.schedule.ddim_coefficients(steps, eta)
        stds = coefs[:, 4].clamp(min=min_std) if min_std else coefs[:, 4]
        films = self.unet.film_for_steps(self.schedule.ddim_timesteps(steps), cond)
        shape = (cond.shape[0], cfg.horizon, cfg.action_dim)
        add_noise = (eta > 0 or bool(min_std)) if noise is None else noise
        x = torch.randn(shape, device=cond.device, generator=generator)
        chain = [x] if return_chain else None
        for k in range(steps):
            mean = self.schedule.ddim_mean(x, self.unet.forward_with_film(x, films[k]), coefs[k])
            x = mean + stds[k] * torch.randn(shape, device=cond.device, generator=generator) if add_noise else mean
            if return_chain:
                chain.append(x)
        x = x.clamp(-1.0, 1.0)
        return (x, torch.stack(chain, dim=1)) if return_chain else x

    def chain_log_prob(
        self,
        cond: torch.Tensor,
        chain: torch.Tensor,
        ddim_steps: int | None = None,
        eta: float | None = None,
        min_std: float | None = None,
        last_k: int | None = None,
        per_step: bool = False,
        actions: int | None = None,
    ) -> torch.Tensor:
        """log pi_theta(chain) [B]: sum of the Gaussian step log-densities of the last K' steps
        (``per_step``: the K' terms themselves, [B, K']). ``actions``: only the chunk's first ``actions``
        actions enter the densities (the executed ones; default all)."""
        cfg = self.config
        steps = ddim_steps or cfg.ddim_steps
        eta = cfg.eta if eta is None else eta
        min_std = cfg.min_std if min_std is None else min_std
        last_k = min(last_k or cfg.finetune_steps, steps)
        coefs = self.schedule.ddim_coefficients(steps, eta)
        stds = coefs[:, 4].clamp(min=min_std)
        timesteps = self.schedule.ddim_timesteps(steps)
        batch = cond.shape[0]
        ks = list(range(steps - last_k, steps))
        # all fine-tuned steps in one batched U-Net call
        x_t = torch.cat([chain[:, k] for k in ks])
        t = torch.tensor([timesteps[k] for k in ks], device=cond.device).repeat_interleave(batch)
        eps = self.unet(x_t, t, cond.repeat(len(ks), 1))
        h = actions or cfg.horizon
        terms = []
        for i, k in enumerate(ks):
            rows = slice(i * batch, (i + 1) * batch)
            mean = self.schedule.ddim_mean(x_t[rows], eps[rows], coefs[k])[:, :h]
            terms.append(gaussian_log_prob(chain[:, k + 1, :h].float(), mean.float(), stds[k]))  # fp32 under AMP
        logp = torch.stack(terms, dim=1)
        return logp if per_step else logp.sum(1)

    @torch.inference_mode()
    def predict_chunk(self, obs: dict, ddim_steps: int | None = None) -> torch.Tensor:
        """Observation batch -> unnormalized action chunk [B, H, A] in m/s (the deployment call)."""
        cfg = self.config
        cond = self.encoder(obs)
        x = self.sample(cond, ddim_steps, min_std=cfg.min_std if cfg.stochastic else None, noise=cfg.stochastic)
        return self.action_norm.unnormalize(x)
