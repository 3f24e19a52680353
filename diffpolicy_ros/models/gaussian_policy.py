"""Baseline: a Gaussian policy head on the same encoder. Mean chunk 16x3 (normalized actions), a
state-independent log-std. Unimodal by construction: on a two-route task its mean goes between the routes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal

from diffpolicy_ros.models.encoders import mlp
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder
from diffpolicy_ros.models.normalizer import RangeNormalizer


@dataclass
class GaussianPolicyConfig:
    horizon: int = 16
    action_dim: int = 3
    hidden: int = 256
    init_log_std: float = -1.0
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
    def predict_chunk(self, obs: dict, ddim_steps: int | None = None) -> torch.Tensor:
        return self.action_norm.unnormalize(self.mean(self.encoder(obs)))
