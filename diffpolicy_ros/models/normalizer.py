"""Per-modality normalizers. Statistics are buffers: they live on the model's device, are applied inside
``forward`` (never recomputed on the host per batch), and are saved in every checkpoint."""

from __future__ import annotations

import torch
from torch import nn


class RangeNormalizer(nn.Module):
    """Affine map of each feature from its data range [min, max] to [-1, 1] (actions, for diffusion)."""

    def __init__(self, dim: int, eps: float = 1e-4):
        super().__init__()
        self.eps = eps
        self.register_buffer("low", -torch.ones(dim))
        self.register_buffer("high", torch.ones(dim))

    @torch.no_grad()
    def fit(self, data: torch.Tensor) -> RangeNormalizer:
        flat = data.reshape(-1, data.shape[-1]).float()
        low, high = flat.min(0).values, flat.max(0).values
        span = (high - low).clamp(min=self.eps)  # a constant feature maps to 0, not to NaN
        mid = (high + low) / 2
        self.low.copy_(mid - span / 2)
        self.high.copy_(mid + span / 2)
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.low) / (self.high - self.low) * 2 - 1

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        return (y + 1) / 2 * (self.high - self.low) + self.low


class StandardNormalizer(nn.Module):
    """Zero mean, unit variance per feature (proprio); clipped to +-clip to bound outliers."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-3):
        super().__init__()
        self.clip, self.eps = clip, eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    @torch.no_grad()
    def fit(self, data: torch.Tensor) -> StandardNormalizer:
        flat = data.reshape(-1, data.shape[-1]).float()
        self.mean.copy_(flat.mean(0))
        self.std.copy_(flat.std(0).clamp(min=self.eps))
        return self

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / self.std).clamp(-self.clip, self.clip)

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.std + self.mean
