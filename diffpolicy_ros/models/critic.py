"""The critic: an MLP value head on the shared global representation."""

from __future__ import annotations

import torch
from torch import nn

from diffpolicy_ros.models.encoders import mlp


class Critic(nn.Module):
    def __init__(self, dim: int, hidden: int = 256):
        super().__init__()
        self.net = mlp([dim, hidden, hidden, 1])

    def forward(self, cond: torch.Tensor) -> torch.Tensor:
        return self.net(cond).squeeze(-1)
