"""Image augmentation shared by the BC stages (the actor's and the estimator's)."""

from __future__ import annotations

import torch


def random_shift(images: torch.Tensor, pad: int, gen: torch.Generator) -> torch.Tensor:
    """Pad by replication and crop back at a random offset per sample: uint8 [B, H, W, C] in and out."""
    return random_shift_with_offsets(images, pad, gen)[0]


def random_shift_with_offsets(
    images: torch.Tensor, pad: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``random_shift``, and how far each sample's content moved in pixels [B, 2] (u, v): what a label given in
    pixels (a calibrated estimator's) must move by too."""
    b, h, w, _ = images.shape
    if pad <= 0:
        return images, torch.zeros(b, 2)
    padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=gen)
    rows = (dy[:, None] + torch.arange(h)[None]).to(images.device)
    cols = (dx[:, None] + torch.arange(w)[None]).to(images.device)
    out = padded[torch.arange(b)[:, None, None], :, rows[:, :, None], cols[:, None, :]]  # [B, H, W, C]
    return out.to(torch.uint8), torch.stack([pad - dx, pad - dy], dim=1).float()


def shifted_projection(projection: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Projections [B, 3, 4] of images whose content moved by ``offsets`` [B, 2] pixels: u' = u + du."""
    shift = torch.eye(3, dtype=projection.dtype).repeat(projection.shape[0], 1, 1)
    shift[:, :2, 2] = offsets.to(projection.dtype)
    return shift @ projection
