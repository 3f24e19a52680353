"""Baseline: a Gaussian policy head on the same encoder. Mean chunk 16x3 (normalized actions), a
state-independent log-std. Unimodal by construction: on a two-route task its mean goes between the routes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal

from diffpolicy_ros.contract import ACTION_DIM, CHUNK_HORIZON
from diffpolicy_ros.models.encoders import mlp
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder
from diffpolicy_ros.models.normalizer import RangeNormalizer


@dataclass
class GaussianPolicyConfig:
    horizon: int = CHUNK_HORIZON
    action_dim: int = ACTION_DIM
    hidden: int = 256
    init_log_std: float = -1.0
    min_std: float = 0.1  # floor of the exploration / likelihood std while fine-tuning with PPO
    fusion: FusionConfig = field(default_factory=FusionConfig)


class GaussianPolicy(nn.Module):
    def __init__(self, config: GaussianPolicyConfig | None = None):
        super().__init__()
        self.config = cfg = config or GaussianPolicyConfig()
        self.encoder = MultimodalEncoder(cfg.fusion)
        self.mean_head = mlp([cfg.fusion.dim, cfg.hidden, cfg.hidden, cfg.horizon * cfg.action_dim])
        self.log_std = nn.Parameter(torch.full((cfg.horizon, cfg.action_dim), cfg.init_log_std))
        self.action_norm = RangeNormalizer(cfg.action_dim)

    def mean(self, cond: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean_head(cond)).view(-1, self.config.horizon, self.config.action_dim)

    def distribution(self, cond: torch.Tensor) -> Normal:
        return Normal(self.mean(cond), self.log_std.exp())

    def bc_loss(self, obs: dict, actions: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        cond = self.encoder(obs) if cond is None else cond
        return F.mse_loss(self.mean(cond), self.action_norm.normalize(actions))

    @torch.inference_mode()
    def predict_chunk(
        self, obs: dict, ddim_steps: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The mean chunk in m/s (``ddim_steps`` and ``generator`` are the diffusion head's; unused here)."""
        return self.action_norm.unnormalize(self.mean(self.encoder(obs)))

    # ---------------------------------------------------------------- the PPO head interface (models/heads.py)
    def std(self) -> torch.Tensor:
        return self.log_std.exp().clamp(min=self.config.min_std)

    def likelihood_terms(self) -> int:
        return 1  # one Gaussian step

    def explore(
        self, cond: torch.Tensor, generator: torch.Generator | None = None, fast: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(normalized chunk in [-1, 1], record = the pre-clamp sample [B, H, A], its log-densities [B, 1, H]).
        ``fast`` changes nothing: one mean has no faster path."""
        mean = self.mean(cond).float()
        sample = mean + self.std() * torch.randn(mean.shape, device=mean.device, generator=generator)
        return sample.clamp(-1.0, 1.0), sample, Normal(mean, self.std()).log_prob(sample).sum(-1)[:, None]

    def record_shape(self) -> tuple[int, ...]:
        return (self.config.horizon, self.config.action_dim)

    def record_action(self, record: torch.Tensor) -> torch.Tensor:
        return record.clamp(-1.0, 1.0)

    def record_log_prob(
        self, cond: torch.Tensor, record: torch.Tensor, steps: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log N(record; mean, std) per chunk action (summed over its dimensions): [B, 1, H]. ``steps`` is the
        diffusion head's (one term per denoising step); a one-step head has the one term."""
        dist = Normal(self.mean(cond).float(), self.std())
        return dist.log_prob(record.float()).sum(-1)[:, None]
