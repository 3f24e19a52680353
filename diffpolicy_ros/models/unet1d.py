"""1-D temporal U-Net noise-prediction network with FiLM conditioning (the Diffusion Policy architecture).

Input: a noisy action chunk [B, H, A] (H = 16 steps, A = 3), the diffusion timestep, and a global
conditioning vector (the fused observation). Every residual block is modulated channel-wise by FiLM:
scale and shift computed from [timestep embedding || global conditioning].

FiLM parameters are a linear function of that concatenation, so they split into a timestep part and an
observation part. :meth:`ConditionalUnet1D.film_for_steps` computes both once per chunk (the timesteps of
a DDIM schedule are fixed), so the denoising loop runs only convolutions — the conditioning projections are
not recomputed at every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from diffpolicy_ros.contract import ACTION_DIM


@dataclass
class UNetConfig:
    action_dim: int = ACTION_DIM  # set from the policy config
    down_dims: list[int] = field(default_factory=lambda: [64, 128, 256])
    kernel_size: int = 5
    n_groups: int = 8
    timestep_embed_dim: int = 128
    step_size_embedding: bool = False  # set by the policy for a shortcut model (``models/flow.py``)


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * (-math.log(10000.0) / (half - 1)))
        args = t.float()[:, None] * freqs[None]
        return torch.cat([args.sin(), args.cos()], dim=-1)


class Conv1dBlock(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int, groups: int):
        super().__init__(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), nn.Mish())


class FiLMResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel: int, groups: int):
        super().__init__()
        self.c_out = c_out
        self.block1 = Conv1dBlock(c_in, c_out, kernel, groups)
        self.block2 = Conv1dBlock(c_out, c_out, kernel, groups)
        self.film = nn.Linear(cond_dim, 2 * c_out)  # applied after a Mish on the conditioning
        self.residual = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, film: torch.Tensor) -> torch.Tensor:
        """``film`` is this block's [B, 2*C] (scale, shift)."""
        scale, shift = film[:, : self.c_out, None], film[:, self.c_out :, None]
        h = torch.addcmul(shift, self.block1(x), scale)  # FiLM in one op
        return self.block2(h) + self.residual(x)


class ConditionalUnet1D(nn.Module):
    def __init__(self, global_cond_dim: int, config: UNetConfig | None = None):
        super().__init__()
        self.config = cfg = config or UNetConfig()
        tdim = cfg.timestep_embed_dim
        self.time_mlp = nn.Sequential(
            SinusoidalPosEmb(tdim), nn.Linear(tdim, 4 * tdim), nn.Mish(), nn.Linear(4 * tdim, tdim)
        )
        # a shortcut model's step size, embedded like the time and added to it (Frans et al. 2024)
        self.step_mlp = (
            nn.Sequential(SinusoidalPosEmb(tdim), nn.Linear(tdim, 4 * tdim), nn.Mish(), nn.Linear(4 * tdim, tdim))
            if cfg.step_size_embedding
            else None
        )
        cond_dim = tdim + global_cond_dim
        dims = [cfg.action_dim, *cfg.down_dims]
        k, g = cfg.kernel_size, cfg.n_groups

        def block(c_in: int, c_out: int) -> FiLMResBlock:
            return FiLMResBlock(c_in, c_out, cond_dim, k, g)

        self.down = nn.ModuleList()
        for i, (c_in, c_out) in enumerate(zip(dims[:-1], dims[1:])):
            last = i == len(dims) - 2
            sample = nn.Identity() if last else nn.Conv1d(c_out, c_out, 3, stride=2, padding=1)
            self.down.append(nn.ModuleList([block(c_in, c_out), block(c_out, c_out), sample]))
        mid = dims[-1]
        self.mid = nn.ModuleList([block(mid, mid), block(mid, mid)])
        self.up = nn.ModuleList()
        for c_out, c_in in reversed(list(zip(dims[1:-1], dims[2:]))):
            upsample = nn.ConvTranspose1d(c_out, c_out, 4, 2, 1)
            self.up.append(nn.ModuleList([block(2 * c_in, c_out), block(c_out, c_out), upsample]))
        self.final = nn.Sequential(Conv1dBlock(dims[1], dims[1], k, g), nn.Conv1d(dims[1], cfg.action_dim, 1))
        self.blocks = [m for m in self.modules() if isinstance(m, FiLMResBlock)]  # FiLM order = call order

    # -- conditioning -------------------------------------------------------------------------------
    def film_params(
        self, timesteps: torch.Tensor, global_cond: torch.Tensor, step_sizes: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """Per-block FiLM parameters for a batch of timesteps [B] and conditioning [B, D] (and, for a net with a
        step-size embedding, step sizes [B])."""
        if (step_sizes is None) != (self.step_mlp is None):
            raise ValueError("step sizes are given exactly to a net with a step-size embedding (a shortcut model)")
        with torch.autocast(global_cond.device.type, enabled=False):  # timestep embedding stays fp32 under AMP
            temb = self.time_mlp(timesteps)
            if self.step_mlp is not None:
                temb = temb + self.step_mlp(step_sizes)
        cond = F.mish(torch.cat([temb, global_cond.to(temb.dtype)], dim=-1))
        return [b.film(cond) for b in self.blocks]

    def film_for_steps(
        self, timesteps: list[float], global_cond: torch.Tensor, step_sizes: list[float] | None = None
    ) -> list[list[torch.Tensor]]:
        """FiLM parameters for every step of a fixed timestep schedule, computed in one batched pass."""
        batch, steps = global_cond.shape[0], len(timesteps)
        device = global_cond.device
        t = torch.tensor(timesteps, device=device).repeat_interleave(batch)
        d = None if step_sizes is None else torch.tensor(step_sizes, device=device).repeat_interleave(batch)
        films = self.film_params(t, global_cond.repeat(steps, 1), d)
        return [[f[k * batch : (k + 1) * batch] for f in films] for k in range(steps)]

    # -- network ------------------------------------------------------------------------------------
    def forward_with_film(self, x: torch.Tensor, films: list[torch.Tensor]) -> torch.Tensor:
        """Noise prediction for x [B, H, A] given precomputed FiLM parameters."""
        it = iter(films)
        h = x.transpose(1, 2)
        skips = []
        for res1, res2, down in self.down:
            h = res2(res1(h, next(it)), next(it))
            skips.append(h)
            h = down(h)
        for res in self.mid:
            h = res(h, next(it))
        for res1, res2, up in self.up:
            h = torch.cat([h, skips.pop()], dim=1)
            h = up(res2(res1(h, next(it)), next(it)))
        return self.final(h).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        timesteps: torch.Tensor,
        global_cond: torch.Tensor,
        step_sizes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if timesteps.dim() == 0:
            timesteps = timesteps.expand(x.shape[0])
        return self.forward_with_film(x, self.film_params(timesteps, global_cond, step_sizes))
