"""Accelerator selection: Ascend NPU > CUDA GPU > CPU, always as device strings.

Never ``.to(0)``: an integer index means CUDA to torch and silently breaks on an NPU. Callers pass the
string this module returns (``'npu:0'``, ``'cuda:0'``, ``'cpu'``) everywhere.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diffpolicy_ros.errors import UserError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "npu", "cuda", "cpu")


def default_threads() -> int:
    """torch intra-op threads: half the cores (1 on this 2-core machine). torch's default (all cores) collapses
    by an order of magnitude as soon as another process holds a core — the normal state of a robot PC — because
    its OpenMP threads wait on each other; half the cores leaves room for ROS nodes and the simulator."""
    return max(1, (os.cpu_count() or 2) // 2)


def npu_available() -> bool:
    """True when ``torch_npu`` imports and reports at least one device."""
    import torch

    try:
        importlib.import_module("torch_npu")
    except Exception:  # not installed, or CANN missing: either way no NPU
        return False
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available() and npu.device_count() > 0)


def resolve_device(requested: str = "auto", index: int = 0) -> str:
    """Map ``auto|npu|cuda|cpu`` (or an explicit ``'cuda:1'``) to an available device string.

    ``auto`` picks npu, then cuda, then cpu. Asking for a backend that is not available is an error, not a
    silent fallback: a training run that thinks it is on a GPU but is on the CPU wastes hours.
    """
    import torch  # here, not at import: `diffpolicy --help` stays instant

    req = requested.strip().lower()
    if ":" in req:
        req, index_text = req.split(":", 1)
        if not index_text.isdigit():
            raise UserError(f"device {requested!r}: the index after ':' must be a number, e.g. 'cuda:0'")
        index = int(index_text)
    if req not in DEVICE_CHOICES:
        raise UserError(f"device must be one of {DEVICE_CHOICES} (optionally with ':index'), got {requested!r}")
    if req == "auto":
        if npu_available():
            return f"npu:{index}"
        req = "cuda" if torch.cuda.is_available() else "cpu"
    if req == "npu" and not npu_available():
        raise UserError("device 'npu' requested but torch_npu is not installed or reports no device")
    if req == "cuda" and not torch.cuda.is_available():
        raise UserError("device 'cuda' requested but torch reports no CUDA device")
    if req == "cuda" and index >= torch.cuda.device_count():  # torchrun's LOCAL_RANK, or the device's index
        raise UserError(f"device cuda:{index} requested but torch sees {torch.cuda.device_count()} CUDA devices "
                        "(more ranks per node than GPUs? --nproc_per_node is one per GPU)")  # fmt: skip
    return "cpu" if req == "cpu" else f"{req}:{index}"


def device_type(device: str) -> str:
    return device.split(":", 1)[0]


@dataclass(frozen=True)
class AutocastSettings:
    """How to run mixed precision on a device: pass to ``torch.autocast(**settings.kwargs())``."""

    device_type: str
    dtype: torch.dtype
    enabled: bool
    use_grad_scaler: bool  # fp16 needs loss scaling; bf16 does not

    def kwargs(self) -> dict:
        return {"device_type": self.device_type, "dtype": self.dtype, "enabled": self.enabled}


def autocast_settings(device: str, enabled: bool = True) -> AutocastSettings:
    """Per-device defaults: bf16 on CUDA (when supported) and NPU, fp16+GradScaler on older CUDA, off on CPU.

    On the CPU autocast is off by default: fp32 is the reference path and bf16 on a small CPU is slower.
    """
    import torch

    kind = device_type(device)
    if not enabled or kind == "cpu":
        return AutocastSettings("cpu", torch.bfloat16, False, False)
    if kind == "cuda":
        if torch.cuda.is_bf16_supported():
            return AutocastSettings("cuda", torch.bfloat16, True, False)
        return AutocastSettings("cuda", torch.float16, True, True)
    if kind == "npu":  # Ascend 910B runs bf16 natively; fp16 would need a GradScaler
        return AutocastSettings("npu", torch.bfloat16, True, False)
    raise UserError(f"unknown device {device!r}")


TRAINING_PRECISIONS = ("fp32", "bf16", "auto")


def cpu_computes_bf16() -> bool:
    """True on a CPU with bfloat16 arithmetic in hardware (AVX512-BF16 or AMX; Linux's /proc/cpuinfo flags).
    Elsewhere oneDNN emulates bf16, and a bf16 step can be slower than fp32."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def training_autocast(precision: str, device: str) -> AutocastSettings:
    """A gradient step's mixed precision: ``fp32`` off; ``bf16`` bfloat16 autocast on any device; ``auto``
    bfloat16 where the device computes it natively (an NPU, a CUDA GPU that supports it, a CPU with AVX512-BF16
    or AMX), fp32 elsewhere. The weights, their gradients, the optimizer and the EMA stay float32, and bf16 needs
    no loss scaling."""
    import torch

    if precision not in TRAINING_PRECISIONS:
        raise UserError(f"precision must be one of {TRAINING_PRECISIONS}, got {precision!r}")
    kind = device_type(device)
    native = {"cpu": cpu_computes_bf16, "cuda": torch.cuda.is_bf16_supported, "npu": lambda: True}
    enabled = precision == "bf16" or (precision == "auto" and native.get(kind, lambda: False)())
    return AutocastSettings(kind, torch.bfloat16, enabled, False)
