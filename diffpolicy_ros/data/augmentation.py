"""Image augmentation shared by the BC stages (the actor's and the estimator's)."""

from __future__ import annotations

import torch


def random_shift(images: torch.Tensor, pad: int, gen: torch.Generator) -> torch.Tensor:
    """Pad by replication and crop back at a random offset per sample: uint8 [B, H, W, C] in and out."""
    if pad <= 0:
        return images
    b, h, w, _ = images.shape
    padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    rows = (dy[:, None] + torch.arange(h)[None]).to(images.device)
    cols = (dx[:, None] + torch.arange(w)[None]).to(images.device)
    out = padded[torch.arange(b)[:, None, None], :, rows[:, :, None], cols[:, None, :]]  # [B, H, W, C]
    return out.to(torch.uint8)
