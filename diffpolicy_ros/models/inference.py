"""The one deployment inference call (policy node, benchmarks): observation -> 16x3 chunk. Batch evaluation
in the sim (``eval/rollout.py``) runs the eager reference, ``policy.predict_chunk``.

Backends behind the same call (``backend``: auto | eager | fast | traced | native):
- ``eager``: the policy's own modules step by step — the reference.
- ``traced`` (CPU): the whole call — encoders, fusion, FiLM projections for every DDIM step, and the unrolled
  denoising loop — traced once per batch size into a frozen TorchScript graph with
  ``torch.jit.optimize_for_inference``. On a small CPU most of eager's time is per-operator Python and
  dispatch overhead (the U-Net's compute is ~0.04 GFLOP per step); one graph call removes the Python part,
  the conditioning projections are computed once per chunk, and constant folding removes the schedule
  arithmetic.
- ``native`` (CPU, the default there; ``fast`` picks it): the conditioning part traced as above, then the
  whole denoising loop in one C++ call (:mod:`diffpolicy_ros.models.native`): token-major activations, every
  conv one im2col + GEMM, GroupNorm/Mish/FiLM/residual fused. What is left is close to the cost of streaming
  the U-Net's weights once per step. Falls back to ``traced`` where no C++ compiler can build it.
- on CUDA / NPU: eager under the device's autocast (bf16), with no host sync inside the loop.

The noise is an input to every backend, so each is numerically the eager model on the same noise.
Text is encoded on the CPU once per distinct instruction (the text encoder caches it) and enters the graphs as
tensors (token ids, or the pretrained sentence embedding), so one graph per batch size serves every
instruction.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from torch import nn

from diffpolicy_ros.device import AutocastSettings, autocast_settings, device_type
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy
from diffpolicy_ros.models.native import NativeLoop, native_kernel
from diffpolicy_ros.models.obs import obs_to_torch
from diffpolicy_ros.models.scheduler import Committed


class _Conv1dAsMatmul(nn.Module):
    """Conv1d (stride 1) as pad + unfold + one GEMM. Same maths; at batch 1 and sequence length <= 16,
    torch's native conv path costs ~140 us for a 256-channel layer, the GEMM ~55 us."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        self.kernel, self.padding = conv.kernel_size[0], conv.padding[0]
        # [C_out, C_in, K] -> [C_out, C_in * K] matching unfold's (C_in, K) order
        self.weight = nn.Parameter(conv.weight.detach().reshape(conv.out_channels, -1), requires_grad=False)
        self.bias = nn.Parameter(conv.bias.detach().clone(), requires_grad=False) if conv.bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding:
            x = torch.nn.functional.pad(x, (self.padding, self.padding))
        cols = x.unfold(2, self.kernel, 1)  # [B, C_in, L, K]
        cols = cols.permute(0, 2, 1, 3).reshape(x.shape[0], cols.shape[2], -1)  # [B, L, C_in * K]
        return torch.nn.functional.linear(cols, self.weight, self.bias).transpose(1, 2)


def _with_matmul_convs(module: nn.Module, min_fan_in: int) -> nn.Module:
    """A copy of ``module`` whose wide stride-1 Conv1d layers run as GEMMs (narrow ones stay native)."""
    module = copy.deepcopy(module)
    for name, child in list(module.named_modules()):
        if (
            isinstance(child, nn.Conv1d)
            and child.stride == (1,)
            and child.dilation == (1,)
            and child.groups == 1
            and child.padding_mode == "zeros"
            and child.in_channels * child.kernel_size[0] >= min_fan_in
        ):
            parent_name, _, attr = name.rpartition(".")
            setattr(module.get_submodule(parent_name) if parent_name else module, attr, _Conv1dAsMatmul(child))
    return module


class _TracedSampler(nn.Module):
    """Pure-tensor signature for tracing: (observation tensors incl. the encoded instruction, noise) -> chunk in
    m/s. The loop is the policy's own :meth:`DiffusionPolicy.denoise`."""

    def __init__(self, policy: DiffusionPolicy, ddim_steps: int):
        super().__init__()
        self.policy = policy
        self.steps = ddim_steps

    def forward(
        self,
        obs_tensors: dict[str, torch.Tensor],
        noise: torch.Tensor,
        step_noise: torch.Tensor,
        committed: torch.Tensor,
        committed_weights: torch.Tensor,
    ):
        """``noise`` [B, H, A] is x_T; ``step_noise`` [K, B, H, A] the per-step noise of a stochastic policy
        (ignored, and zeros, for a deterministic one); ``committed`` [B, H, A] (normalized) and its weights [H]
        real-time chunking's target (zero weights: none)."""
        p, cfg = self.policy, self.policy.config
        films = p.step_films(self.steps, p.encoder(obs_tensors))
        coefs = p.schedule.step_coefficients(self.steps, cfg.eta)
        stds = coefs.stds(cfg.min_std if cfg.stochastic else None)
        target = Committed(committed, committed_weights)
        x, _ = p.denoise(noise, films, coefs, stds, step_noise if cfg.stochastic else None, committed=target)
        return p.action_norm.unnormalize(x)


class _Conditioner(nn.Module):
    """The native backend's traced part: observation tensors -> every DDIM step's FiLM parameters [K, B, F]."""

    def __init__(self, policy: DiffusionPolicy, ddim_steps: int):
        super().__init__()
        self.policy = policy
        self.steps = ddim_steps

    def forward(self, obs_tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.policy.packed_step_films(self.steps, self.policy.encoder(obs_tensors))


def _trace(module: nn.Module, inputs: tuple) -> torch.jit.ScriptModule:
    with torch.no_grad(), warnings.catch_warnings():
        # expected: the trace bakes in the batch size and the DDIM timesteps
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(module.eval(), inputs, check_trace=False, strict=False)
        return torch.jit.optimize_for_inference(torch.jit.freeze(traced))


def uses_native_kernel(policy: nn.Module, device: str) -> bool:
    """Whether ``ChunkPredictor(policy, device)`` (backend auto) runs the native kernel: a denoising head on a CPU.
    A caller may build it first (``native_kernel()``, tens of seconds in a new install) as a step of its own."""
    return isinstance(policy, DiffusionPolicy) and device_type(device) == "cpu"


class ChunkPredictor:
    """``predictor(obs) -> np.ndarray [B, H, A]`` (m/s). ``obs``: one env observation or a batch.

    The traced and native backends capture the weights when first built: after changing them, build a new
    predictor (the policy node does on every checkpoint it loads)."""

    def __init__(
        self, policy: nn.Module, device: str = "cpu", ddim_steps: int | None = None, backend: str = "auto",
        precision: str = "auto",
    ):  # fmt: skip
        """``precision``: auto (the device's: bf16 autocast on CUDA and NPU, fp32 on the CPU), fp32 or bf16
        (autocast on any device; on the CPU the eager loop, the fast paths being fp32)."""
        self.policy = policy.to(device).eval()
        self.device = device
        # the traced / native backends compile the DDIM loop; a head without one (Gaussian) runs eagerly
        denoises = isinstance(policy, DiffusionPolicy)
        self.ddim_steps = ddim_steps or getattr(policy.config, "ddim_steps", None)
        if backend not in ("auto", "eager", "fast", "traced", "native"):
            raise ValueError(f"backend must be auto|eager|fast|traced|native, got {backend!r}")
        if precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision must be auto|fp32|bf16, got {precision!r}")
        if not denoises or (backend == "auto" and (precision == "bf16" or not uses_native_kernel(policy, device))):
            backend = "eager"
        elif backend in ("auto", "fast", "native"):
            if device_type(device) != "cpu":
                raise ValueError(f"backend {backend!r} is the CPU fast path; use eager on {device}")
            backend = "native" if native_kernel() is not None else "traced"
        self.backend = backend
        self._autocast = autocast_settings(device, enabled=precision != "fp32")
        if precision == "bf16":
            self._autocast = AutocastSettings(device_type(device), torch.bfloat16, True, False)
        self._graphs: dict[tuple, torch.jit.ScriptModule] = {}
        self._native = NativeLoop.for_deployment(self.policy, self.ddim_steps) if backend == "native" else None
        self._eager = self._eager_denoising if denoises else self._eager_one_shot
        self.matmul_conv_min_fan_in = 640  # traced backend: C_in * K from which a conv runs faster as a GEMM

    # ------------------------------------------------------------------------------------------
    def __call__(
        self,
        obs: dict,
        generator: torch.Generator | None = None,
        committed: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """``committed`` (real-time chunking, ``models/realtime_chunking.py``): actions in m/s [H, A] (or
        [B, H, A]) that the chunk should continue, and each chunk step's weight [H] in [0, 1]."""
        batch = obs_to_torch(obs, self.device)
        with torch.inference_mode():
            inputs = self._sampler_inputs(batch, generator, committed)
            if self.backend == "eager":
                with torch.autocast(**self._autocast.kwargs()):
                    out = self._eager(batch, *inputs)
            elif self.backend == "native":
                out = self._native_call(batch, *inputs)
            else:
                out = self._traced_call(batch, *inputs)
        return out.float().cpu().numpy()

    def _sampler_inputs(
        self, batch: dict, generator: torch.Generator | None, committed: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[torch.Tensor, ...]:
        """x_T, the per-step noise of a stochastic policy (zeros otherwise), drawn on the host in the policy's own
        order (:meth:`DiffusionPolicy.draw_noise`: the same generator state gives the chunk
        ``DiffusionPolicy.sample`` gives), and the committed actions, normalized, and their weights (zeros: none)."""
        cfg = self.policy.config
        n = batch["proprio"].shape[0]
        shape = (n, cfg.horizon, cfg.action_dim)
        if isinstance(self.policy, DiffusionPolicy):
            x_t, steps = self.policy.draw_noise(n, self.ddim_steps, cfg.stochastic, generator, "cpu")
            steps = torch.zeros((self.ddim_steps, *shape)) if steps is None else steps
        else:
            x_t, steps = torch.zeros(shape), torch.zeros((1, *shape))  # a one-shot head draws its own
        if committed is None:
            actions, weights = torch.zeros(shape), torch.zeros(cfg.horizon)
        else:
            actions = torch.as_tensor(np.asarray(committed[0], np.float32)).expand(shape)
            actions = self.policy.action_norm.normalize(actions.to(self.device)).clamp(-1.0, 1.0)
            weights = torch.as_tensor(np.asarray(committed[1], np.float32))
            if weights.shape != (cfg.horizon,) or not torch.all((weights >= 0) & (weights <= 1)):
                raise ValueError(f"committed weights must be [{cfg.horizon}] in [0, 1], got {tuple(weights.shape)}")
        return tuple(t.to(self.device).contiguous() for t in (x_t, steps, actions, weights))

    def _eager_one_shot(self, batch: dict, x_t, steps, actions: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """A head without a denoising loop (Gaussian): its own sample, pulled towards the committed actions."""
        chunk = self.policy.action_norm.normalize(self.policy.predict_chunk(batch))
        return self.policy.action_norm.unnormalize(chunk + weights.view(1, -1, 1) * (actions - chunk))

    def _tensors(self, batch: dict) -> dict[str, torch.Tensor]:
        """Observation tensors with the instruction encoded as tensors: the same graph serves every instruction."""
        tensors = {k: v for k, v in batch.items() if k != "instruction"}
        if self.policy.config.fusion.use_text:
            tensors.update(self.policy.encoder.text.inputs(batch["instruction"], self.device))
        return tensors

    def _eager_denoising(self, batch: dict, *inputs: torch.Tensor) -> torch.Tensor:
        """The reference: the same sampler module the traced backend compiles, run step by step."""
        return _TracedSampler(self.policy, self.ddim_steps)(self._tensors(batch), *inputs)

    def _graph(self, batch_size: int, tensors: dict, build) -> torch.jit.ScriptModule:
        key = (batch_size, tuple(sorted(tensors)))  # a graph bakes in the batch size
        if key not in self._graphs:
            self._graphs[key] = build()
        return self._graphs[key]

    def _traced_call(self, batch: dict, *inputs: torch.Tensor) -> torch.Tensor:
        tensors = self._tensors(batch)

        def build() -> torch.jit.ScriptModule:
            policy = _with_matmul_convs(self.policy, self.matmul_conv_min_fan_in)
            return _trace(_TracedSampler(policy, self.ddim_steps), (tensors, *inputs))

        return self._graph(inputs[0].shape[0], tensors, build)(tensors, *inputs)

    def _native_call(
        self, batch: dict, noise: torch.Tensor, step_noise: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        tensors = self._tensors(batch)
        conditioner = self._graph(
            noise.shape[0], tensors, lambda: _trace(_Conditioner(self.policy, self.ddim_steps), (tensors,))
        )
        x = self._native(conditioner(tensors), noise, step_noise, Committed(actions, weights))
        return self.policy.action_norm.unnormalize(x.clamp(-1.0, 1.0))

    def encode_call(self, obs: dict) -> None:
        """Only the conditioning part of a call — images, keypoints, text, proprio, fusion and every step's FiLM
        projections — as the fast backends run it (``bench policy`` times it apart from the denoising loop)."""
        batch = obs_to_torch(obs, self.device)
        with torch.inference_mode():
            tensors = self._tensors(batch)
            if self.backend == "eager":
                with torch.autocast(**self._autocast.kwargs()):
                    self.policy.encoder(batch)
                return
            n = batch["proprio"].shape[0]
            # the native backend's own conditioner graph; the traced one bakes encoder and loop into one graph
            key = n if self.backend == "native" else ("encode", n)
            self._graph(key, tensors, lambda: _trace(_Conditioner(self.policy, self.ddim_steps), (tensors,)))(tensors)

    def warm_up(self, example_obs: dict, calls: int = 3) -> None:
        """Build (trace) and run the graph once off the control path, e.g. right after loading weights."""
        for _ in range(calls):
            self(example_obs)

    def max_abs_diff_vs_eager(self, obs: dict, seed: int = 0) -> float:
        """Largest difference between this backend and the eager reference on the same noise (m/s)."""
        fast = self(obs, torch.Generator().manual_seed(seed))
        batch = obs_to_torch(obs, self.device)
        with torch.inference_mode():
            ref = self._eager(batch, *self._sampler_inputs(batch, torch.Generator().manual_seed(seed), None))
        return float(np.abs(fast - ref.float().cpu().numpy()).max())
