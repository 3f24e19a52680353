"""``diffpolicy bench policy``: the whole observation -> chunk call (both images, cached text, proprio,
DDIM-10 / DDIM-20) at batch 1, plus batch 32, against the 100 ms control period.

Measured with the policy node's intra-op thread count (``torch_threads``, default 1): that is what deploys.
On this 2-core machine one thread also has the tighter tail — with two, every operator waits for the slower
core, and a neighbour's burst on either core shows in the p99."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

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


def bench_policy(
    checkpoint: Path | None = None, device: str = "auto", iters: int = 200, backend: str = "auto", threads: int = 1
) -> dict:
    device = resolve_device(device)
    if threads > 0:
        torch.set_num_threads(threads)
    if checkpoint is not None:
        policy, _ = load_policy(checkpoint, device)
    else:
        policy = DiffusionPolicy().to(device).eval()
    if not isinstance(policy, DiffusionPolicy):
        raise UserError("bench policy measures the diffusion policy; the checkpoint holds another kind")
    fusion = policy.config.fusion
    env = make_env("push", obs_mode=fusion.obs_mode())
    obs, _ = env.reset(seed=0)
    batch32 = {k: np.stack([v] * 32) for k, v in obs.items() if k != "instruction"}
    batch32["instruction"] = [obs["instruction"]] * 32
    env.close()

    result: dict = {"device": device, "backend": None, "torch_threads": torch.get_num_threads()}
    for steps in (10, 20):
        predictor = ChunkPredictor(policy, device, ddim_steps=steps, backend=backend)
        result["backend"] = predictor.backend
        lat = _latencies(lambda p=predictor: p(obs), iters)
        result[f"ddim{steps}_p50_ms"] = round(float(np.percentile(lat, 50)), 2)
        result[f"ddim{steps}_p99_ms"] = round(float(np.percentile(lat, 99)), 2)
        if steps == 10:
            # numerical agreement of the fast path with the eager reference on the same noise
            result["max_abs_diff_vs_eager"] = predictor.max_abs_diff_vs_eager(obs)
            lat32 = _latencies(lambda p=predictor: p(batch32), max(10, iters // 10), warmup=3)
            result["batch32_ms"] = round(float(np.percentile(lat32, 50)), 2)
    result["p50_ms"] = result["ddim10_p50_ms"]
    result["p99_ms"] = result["ddim10_p99_ms"]
    # The host's state, for comparing runs: at batch 1 each denoising step streams the U-Net's weights once,
    # so how fast this machine reads them right now bounds the loop (it moves with the neighbours' load).
    weights = [w.detach().float() for w in policy.unet.parameters()]
    with torch.inference_mode():
        read_ms = float(np.percentile(_latencies(lambda: [w.sum() for w in weights], 50), 50))
    result["weights_read_gb_per_s"] = round(sum(w.numel() * 4 for w in weights) / read_ms / 1e6, 1)
    result["params_m"] = round(sum(p.numel() for p in policy.parameters()) / 1e6, 3)
    result["unet_params_m"] = round(sum(p.numel() for p in policy.unet.parameters()) / 1e6, 3)
    result["ratio_p99_to_period"] = round(result["p99_ms"] / CONTROL_PERIOD_MS, 3)
    result["images"] = fusion.use_images
    return result
