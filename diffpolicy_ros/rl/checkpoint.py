"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``.

A checkpoint is a plain dict of tensors and Python primitives:
    format, version, policy_spec (config dict), model (the weights to deploy: EMA when training used EMA),
    plus whatever training needs to resume (optimizer, ema, lr scheduler, step, RNG states) and ``meta``.
The model's state_dict includes the noise schedule and every normalizer (they are buffers), so a loaded
policy samples exactly as the saved one did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from diffpolicy_ros.atomic_file import atomic_write
from diffpolicy_ros.models.factory import build_policy, policy_spec

FORMAT = "diffpolicy_ros/checkpoint"
VERSION = 1


class CheckpointError(RuntimeError):
    """The file is missing, truncated, not ours, or does not match its policy config."""


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically: a crash leaves the previous checkpoint loadable, never a partial file."""
    return atomic_write(path, lambda f: torch.save({"format": FORMAT, "version": VERSION, **payload}, f))


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, pickle with foreign objects, ...
        raise CheckpointError(f"{path}: not a loadable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a diffpolicy_ros checkpoint")
    if ckpt.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: written by a newer diffpolicy_ros (version {ckpt['version']})")
    for key in ("policy_spec", "model"):
        if key not in ckpt:
            raise CheckpointError(f"{path}: missing {key!r}")
    return ckpt


def policy_from_checkpoint(ckpt: dict[str, Any], name: str = "checkpoint") -> nn.Module:
    """Rebuild the policy from a loaded checkpoint's stored config and load its weights (strict, finite)."""
    try:
        policy = build_policy(policy_spec(ckpt["policy_spec"]))
        policy.load_state_dict(ckpt["model"], strict=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{name}: weights do not match the stored policy config ({exc})") from exc
    for key, tensor in policy.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{name}: non-finite values in {key}")
    return policy


def load_policy(path: str | Path, device: str = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Load a checkpoint and its policy; eval mode on ``device``."""
    ckpt = load_checkpoint(path)
    return policy_from_checkpoint(ckpt, str(path)).to(device).eval(), ckpt
