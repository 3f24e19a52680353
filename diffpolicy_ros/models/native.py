"""The CPU fast path's denoising loop as one C++ call (``csrc/unet1d_ddim.cpp``), built on first use.

The extension is compiled with torch's own toolchain helper (``torch.utils.cpp_extension.load``: a C++
compiler and ninja) into ``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``) once per install
(:func:`extension_name`); ``make setup`` builds it, so nodes and tests find it ready. Where it cannot be built
(no compiler), :func:`native_kernel` returns None and the caller keeps the traced TorchScript path.

:func:`unet_layout` lays out a :class:`ConditionalUnet1D`'s weights in the order the C++ side reads them,
each conv pre-transposed to ``[K * C_in, C_out]`` (rows ordered (tap, input channel)) so a convolution is
one im2col copy and one GEMM on token-major activations, together with every layer's geometry.

Two callers: the deployment's :class:`~diffpolicy_ros.models.inference.ChunkPredictor` (batch 1, the chunk), and
PPO's rollouts on the CPU (``DiffusionPolicy.explore(fast=True)``: a batch of envs, the whole chain recorded),
where at 32 envs it takes ~0.9 of the eager loop's time (the GEMMs, not the per-operator overhead, dominate there).
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from diffpolicy_ros.models.scheduler import Committed
from diffpolicy_ros.models.unet1d import ConditionalUnet1D, Conv1dBlock, FiLMResBlock

SOURCE = Path(__file__).parent / "csrc" / "unet1d_ddim.cpp"


def has_cxx_compiler() -> bool:
    """Whether a C++ compiler is on PATH (without one the kernel cannot be built, and that is not an error)."""
    return shutil.which("c++") is not None or shutil.which("g++") is not None


def extension_name() -> str:
    """One build folder per install: the source's location, the Python environment and torch's version. Under a
    shared name, a venv checkout and a colcon install of the package invalidated each other's build, and the
    first policy load after a switch spent ~40 s compiling (seen as the arm's first motion at 154 s instead of
    82 s in ``bench startup``)."""
    key = f"{SOURCE.resolve()}|{sys.prefix}|{torch.__version__}"
    return f"diffpolicy_unet1d_ddim_{hashlib.sha1(key.encode()).hexdigest()[:10]}"


@functools.lru_cache(maxsize=1)
def native_kernel(verbose: bool = False) -> ModuleType | None:
    """The compiled extension, or None (with a warning) where no C++ toolchain can build it."""
    if not has_cxx_compiler():
        warnings.warn("no C++ compiler: the CPU fast path uses the traced TorchScript loop", stacklevel=2)
        return None
    from torch.utils.cpp_extension import load

    name = extension_name()
    start = time.monotonic()
    if not is_built(name):  # said once, where it happens: a first load in a new install waits for this
        print(f"diffpolicy_ros: building the native CPU kernel {name} for this install (once; ~40-80 s on 2 cores)",
              file=sys.stderr, flush=True)  # fmt: skip
    try:
        # -march=native is safe: the extension is built on the machine that runs it (JIT, per-host cache)
        module = load(name, [str(SOURCE)], extra_cflags=["-O3", "-march=native"], verbose=verbose)
    except (RuntimeError, OSError, ImportError) as exc:
        warnings.warn(f"could not build the native U-Net kernel ({exc}); using the traced loop", stacklevel=2)
        return None
    if time.monotonic() - start > 5.0:
        print(f"diffpolicy_ros: native CPU kernel ready after {time.monotonic() - start:.0f} s", file=sys.stderr)
    return module


def is_built(name: str) -> bool:
    """Whether torch's extension cache already holds this build (then loading it takes well under a second)."""
    from torch.utils.cpp_extension import _get_build_directory

    try:
        return any(Path(_get_build_directory(name, verbose=False)).glob(f"{name}*.so"))
    except Exception:  # a private torch helper: if it moves, say nothing rather than fail
        return True


@dataclass
class UNetLayout:
    """What the C++ reader walks: the weights in its order, and each layer's shape as the Python modules
    define it (kernel / stride / padding / transposed per conv, groups per GroupNorm), so the kernel hard-codes
    no layer geometry."""

    weights: list[torch.Tensor] = field(default_factory=list)
    convs: list[int] = field(default_factory=list)  # 4 per conv
    norms: list[int] = field(default_factory=list)  # 1 per GroupNorm

    def conv(self, conv: nn.Module) -> None:
        if conv.dilation != (1,) or conv.groups != 1 or conv.padding_mode != "zeros":
            raise ValueError(f"the native kernel supports plain convolutions only, not {conv}")
        w = conv.weight.detach().float()
        if isinstance(conv, nn.ConvTranspose1d):  # [C_in, C_out, K]
            wt = w.permute(2, 0, 1).reshape(-1, w.shape[1])
            if conv.output_padding != (0,):
                raise ValueError("the native kernel assumes output_padding 0")
        else:  # [C_out, C_in, K]
            wt = w.permute(2, 1, 0).reshape(-1, w.shape[0])
        self.weights += [wt.contiguous(), conv.bias.detach().float().contiguous()]
        self.convs += [conv.kernel_size[0], conv.stride[0], conv.padding[0], int(isinstance(conv, nn.ConvTranspose1d))]

    def norm(self, norm: nn.GroupNorm) -> None:
        if norm.eps != 1e-5:
            raise ValueError("the native kernel assumes GroupNorm eps 1e-5")
        self.weights += [norm.weight.detach().float().contiguous(), norm.bias.detach().float().contiguous()]
        self.norms.append(norm.num_groups)

    def conv_block(self, block: Conv1dBlock) -> None:
        self.conv(block[0])
        self.norm(block[1])

    def res_block(self, block: FiLMResBlock) -> None:
        self.conv_block(block.block1)
        self.conv_block(block.block2)
        if isinstance(block.residual, nn.Conv1d):
            self.conv(block.residual)


def unet_layout(unet: ConditionalUnet1D) -> UNetLayout:
    """Weights and layer geometry in the C++ reader's order: down levels (2 blocks, downsample), mid, up
    levels (2 blocks, upsample), final block and output conv."""
    out = UNetLayout()
    for res1, res2, down in unet.down:
        out.res_block(res1)
        out.res_block(res2)
        if isinstance(down, nn.Conv1d):
            out.conv(down)
    for res in unet.mid:
        out.res_block(res)
    for res1, res2, up in unet.up:
        out.res_block(res1)
        out.res_block(res2)
        out.conv(up)
    out.conv_block(unet.final[0])
    out.conv(unet.final[1])
    return out


def weights_version(module: nn.Module) -> tuple:
    """Changes whenever a parameter of ``module`` is replaced or written in place (an optimizer step, a load)."""
    return tuple((p.data_ptr(), p._version) for p in module.parameters())


class NativeLoop:
    """The denoising loop as one C++ call, with the schedule constants and a snapshot of the U-Net's weights in the
    kernel's layout, taken when built: ``key`` tells a caller whose weights change (PPO) when to build a new one."""

    def __init__(self, policy: nn.Module, ddim_steps: int, eta: float, min_std: float | None, stochastic: bool):
        cfg = policy.config
        if self.kernel is None:
            raise RuntimeError("the native U-Net kernel is not available here (no C++ toolchain)")
        self.layout = unet_layout(policy.unet)
        self.dims = [cfg.action_dim, *cfg.unet.down_dims]
        coefs = policy.schedule.step_coefficients(ddim_steps, eta)
        self.coefs = coefs.packed()
        self.stds = coefs.stds(min_std).float().contiguous()
        self.stochastic = stochastic
        self.clip_sample = policy.schedule.config.clip_sample
        self.key = (ddim_steps, eta, min_std, stochastic, weights_version(policy.unet))

    @property
    def kernel(self) -> ModuleType | None:
        return native_kernel()  # not held: a policy holding a loop stays deep-copyable

    @classmethod
    def for_deployment(cls, policy: nn.Module, ddim_steps: int) -> NativeLoop:
        """The deployment sampler of ``policy``'s config: deterministic DDIM, or after PPO its stochastic chain."""
        cfg = policy.config
        return cls(policy, ddim_steps, cfg.eta, cfg.min_std if cfg.stochastic else None, cfg.stochastic)

    def __call__(
        self,
        films: torch.Tensor,
        noise: torch.Tensor,
        step_noise: torch.Tensor,
        committed: Committed | None = None,
        return_chain: bool = False,
    ) -> torch.Tensor:
        """``films`` [K, B, F], x_T ``noise`` [B, H, A], ``step_noise`` [K, B, H, A] (read by a stochastic loop)
        -> x_0 [B, H, A] (not clipped), or with ``return_chain`` the chain [K + 1, B, H, A] from x_T to x_0."""
        if committed is None:
            committed = Committed(torch.zeros_like(noise), torch.zeros(noise.shape[1]))
        lay = self.layout
        return self.kernel.unet_ddim(
            noise.contiguous(), films.contiguous(), self.coefs, self.stds, step_noise.contiguous(),
            committed.actions, committed.weights, lay.weights, self.dims, lay.convs, lay.norms, self.clip_sample,
            self.stochastic, return_chain,
        )  # fmt: skip
