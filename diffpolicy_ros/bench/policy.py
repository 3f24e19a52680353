"""``diffpolicy bench policy``: where a chunk's time goes — the whole observation -> chunk call with the policy's
own sampler, its conditioning part (images, keypoints, text, proprio, fusion, every step's FiLM projections)
and the denoising loop (the rest) — at batch 1, plus batch 32, against the 100 ms control period. The default
multimodal DDIM-10 policy is measured in the same run (``reference_*``), so a ratio holds on a noisy host.

The policy is a checkpoint (``--checkpoint``), a randomly initialised policy of a config (``--config``: enough
for latency), or the default multimodal one. Measured with the policy node's intra-op thread count
(``torch_threads``, default 1): that is what deploys. On this 2-core machine one thread also has the tighter
tail — with two, every operator waits for the slower core, and a neighbour's burst on either core shows in the
p99."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from diffpolicy_ros.bench.load import busy_neighbour
from diffpolicy_ros.device import resolve_device
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.models.checkpoint import load_policy
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.sim import make_env

CONTROL_PERIOD_MS = 100.0


def _latencies(fn, iters: int, warmup: int = 10) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(iters)
    for i in range(iters):
        start = time.perf_counter()
        fn()
        out[i] = (time.perf_counter() - start) * 1e3
    return out


def _percentiles(name: str, lat: np.ndarray) -> dict:
    prefix = f"{name}_" if name else ""
    return {f"{prefix}p50_ms": round(float(np.percentile(lat, 50)), 2),
            f"{prefix}p99_ms": round(float(np.percentile(lat, 99)), 2)}  # fmt: skip


def policy_from_config(path: Path) -> DiffusionPolicy:
    """A randomly initialised policy of a policy config, shaped for the push task (latency needs no training)."""
    from diffpolicy_ros.models.factory import build_policy, policy_spec
    from diffpolicy_ros.rl.bc import load_bc_run

    spec = policy_spec(load_bc_run(path).policy)
    spec.fit_task(16, 0, 3)  # push: proprio 16, one goal, (vx, vy, vz)
    return build_policy(spec)


def example_observation(policy: DiffusionPolicy) -> dict:
    env = make_env("push", obs_mode=policy.config.fusion.obs_mode())
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


def measure(policy: DiffusionPolicy, device: str, iters: int, backend: str, ddim_steps: int | None = None) -> dict:
    """The whole call, its conditioning part and the loop (whole minus conditioning, per call) at batch 1."""
    obs = example_observation(policy)
    predictor = ChunkPredictor(policy, device, ddim_steps=ddim_steps, backend=backend)
    whole = _latencies(lambda: predictor(obs), iters)
    encode = _latencies(lambda: predictor.encode_call(obs), iters)
    denoise = np.clip(whole - np.median(encode), 0.0, None)  # the loop's share of each whole call
    return {"backend": predictor.backend, "ddim_steps": predictor.ddim_steps, **_percentiles("", whole),
            **_percentiles("encode", encode), **_percentiles("denoise", denoise), "predictor": predictor,
            "obs": obs}  # fmt: skip


def bench_policy(
    checkpoint: Path | None = None,
    device: str = "auto",
    iters: int = 200,
    backend: str = "auto",
    threads: int = 1,
    config: Path | None = None,
    busy: bool = False,
) -> dict:
    """``busy``: the policy's own figures measured again beside one busy process (key ``busy``)."""
    if checkpoint is not None and config is not None:
        raise UserError("bench policy: give --checkpoint or --config, not both")
    device = resolve_device(device)
    if threads > 0:
        torch.set_num_threads(threads)
    if checkpoint is not None:
        policy, _ = load_policy(checkpoint, device)
    elif config is not None:
        policy = policy_from_config(config).to(device).eval()
    else:
        policy = DiffusionPolicy().to(device).eval()
    if not isinstance(policy, DiffusionPolicy):
        raise UserError("bench policy measures a diffusion policy; this one is of another kind")

    own = measure(policy, device, iters, backend)  # the policy's own sampler
    predictor, obs = own.pop("predictor"), own.pop("obs")
    result: dict = {"device": device, "torch_threads": torch.get_num_threads(), **own}
    result["max_abs_diff_vs_eager"] = predictor.max_abs_diff_vs_eager(obs)  # the fast path vs the reference
    batch32 = {k: np.stack([v] * 32) for k, v in obs.items() if k != "instruction"}
    batch32["instruction"] = [obs["instruction"]] * 32
    result["batch32_ms"] = round(float(np.percentile(_latencies(lambda: predictor(batch32), max(10, iters // 10), 3),
                                                     50)), 2)  # fmt: skip
    # the reference, in the same run: the default multimodal policy with DDIM-10
    reference = measure(DiffusionPolicy().to(device).eval(), device, iters, backend, ddim_steps=10)
    result.update({f"reference_{k}": v for k, v in reference.items() if k.endswith("_ms")})
    result["p99_to_reference"] = round(result["p99_ms"] / result["reference_p99_ms"], 3)
    # The host's state, for comparing runs: at batch 1 each denoising step streams the U-Net's weights once,
    # so how fast this machine reads them right now bounds the loop (it moves with the neighbours' load).
    weights = [w.detach().float() for w in policy.unet.parameters()]
    with torch.inference_mode():
        read_ms = float(np.percentile(_latencies(lambda: [w.sum() for w in weights], 50), 50))
    result["weights_read_gb_per_s"] = round(sum(w.numel() * 4 for w in weights) / read_ms / 1e6, 1)
    result["params_m"] = round(sum(p.numel() for p in policy.parameters()) / 1e6, 3)
    result["unet_params_m"] = round(sum(p.numel() for p in policy.unet.parameters()) / 1e6, 3)
    result["ratio_p99_to_period"] = round(result["p99_ms"] / CONTROL_PERIOD_MS, 3)
    result["images"] = policy.config.fusion.use_images
    if busy:  # a robot PC always has a neighbour: the same call, one core taken
        with busy_neighbour():
            loaded = measure(policy, device, iters, backend)
        result["busy"] = {k: v for k, v in loaded.items() if k.endswith("_ms")}
    return result
