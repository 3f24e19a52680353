"""The CPU fast path's denoising loop as one C++ call (``csrc/unet1d_ddim.cpp``), built on first use.

The extension is compiled with torch's own toolchain helper (``torch.utils.cpp_extension.load``: a C++
compiler and ninja) into ``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``) once per source
version; ``make setup`` builds it, so nodes and tests find it ready. Where it cannot be built (no compiler),
:func:`native_kernel` returns None and the caller keeps the traced TorchScript path.

:func:`unet_weights` lays out a :class:`ConditionalUnet1D`'s weights in the order the C++ side reads them,
each conv pre-transposed to ``[K * C_in, C_out]`` (rows ordered (tap, input channel)) so a convolution is
one im2col copy and one GEMM on token-major activations.
"""

from __future__ import annotations

import functools
import shutil
import warnings
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from diffpolicy_ros.models.unet1d import ConditionalUnet1D, Conv1dBlock, FiLMResBlock

SOURCE = Path(__file__).parent / "csrc" / "unet1d_ddim.cpp"


def has_cxx_compiler() -> bool:
    """Whether a C++ compiler is on PATH (without one the kernel cannot be built, and that is not an error)."""
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@functools.lru_cache(maxsize=1)
def native_kernel(verbose: bool = False) -> ModuleType | None:
    """The compiled extension, or None (with a warning) where no C++ toolchain can build it."""
    if not has_cxx_compiler():
        warnings.warn("no C++ compiler: the CPU fast path uses the traced TorchScript loop", stacklevel=2)
        return None
    from torch.utils.cpp_extension import load

    try:
        # -march=native is safe: the extension is built on the machine that runs it (JIT, per-host cache)
        return load(
            "diffpolicy_unet1d_ddim",
            [str(SOURCE)],
            extra_cflags=["-O3", "-march=native"],
            verbose=verbose,
        )
    except (RuntimeError, OSError, ImportError) as exc:
        warnings.warn(f"could not build the native U-Net kernel ({exc}); using the traced loop", stacklevel=2)
        return None


def _conv(conv: nn.Module) -> list[torch.Tensor]:
    w = conv.weight.detach().float()
    if isinstance(conv, nn.ConvTranspose1d):  # [C_in, C_out, K]
        wt = w.permute(2, 0, 1).reshape(-1, w.shape[1])
    else:  # [C_out, C_in, K]
        wt = w.permute(2, 1, 0).reshape(-1, w.shape[0])
    return [wt.contiguous(), conv.bias.detach().float().contiguous()]


def _norm(norm: nn.GroupNorm) -> list[torch.Tensor]:
    if norm.eps != 1e-5:
        raise ValueError("the native kernel assumes GroupNorm eps 1e-5")
    return [norm.weight.detach().float().contiguous(), norm.bias.detach().float().contiguous()]


def _conv_block(block: Conv1dBlock) -> list[torch.Tensor]:
    return _conv(block[0]) + _norm(block[1])


def _res_block(block: FiLMResBlock) -> list[torch.Tensor]:
    out = _conv_block(block.block1) + _conv_block(block.block2)
    return out + (_conv(block.residual) if isinstance(block.residual, nn.Conv1d) else [])


def unet_weights(unet: ConditionalUnet1D) -> list[torch.Tensor]:
    """Flat weight list in the C++ reader's order: down levels (2 blocks, downsample), mid, up levels
    (2 blocks, upsample), final block and output conv."""
    out: list[torch.Tensor] = []
    for res1, res2, down in unet.down:
        out += _res_block(res1) + _res_block(res2) + (_conv(down) if isinstance(down, nn.Conv1d) else [])
    for res in unet.mid:
        out += _res_block(res)
    for res1, res2, up in unet.up:
        out += _res_block(res1) + _res_block(res2) + _conv(up)
    return out + _conv_block(unet.final[0]) + _conv(unet.final[1])
