"""``diffpolicy bench threads``: seconds per BC gradient step for each torch thread count, on a quiet machine
and beside one busy process (a robot PC's normal state) — the measurement behind ``--threads``' default.

Each count runs in a fresh process, so torch's own default (no ``set_num_threads`` call) is measured as a new
user gets it. The step is the BC loop's (``rl.bc.bc_step``) with the policy config's model and batch size,
on a batch built from a real ``push`` observation."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import time
from pathlib import Path

import numpy as np


def _busy_loop() -> None:
    while True:
        pass


def _seconds_per_step(config: str, threads: int, steps: int, queue: mp.Queue) -> None:
    """Child process: time ``steps`` BC steps with ``threads`` intra-op threads (0: torch's default)."""
    import torch

    from diffpolicy_ros.device import training_autocast
    from diffpolicy_ros.models.factory import build_policy, policy_spec
    from diffpolicy_ros.models.obs import obs_to_torch
    from diffpolicy_ros.rl.bc import bc_step, load_bc_run
    from diffpolicy_ros.sim import make_env

    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    run = load_bc_run(config)
    spec = policy_spec(run.policy)
    env = make_env("push", obs_mode=run.obs_mode())
    obs, _ = env.reset(seed=0)
    action_dim = env.action_space.shape[0]
    env.close()
    fusion = spec.active().fusion
    fusion.proprio_dim = obs["proprio"].shape[0]
    spec.active().action_dim = action_dim
    policy = build_policy(spec).train()
    batch = run.train.batch_size
    stacked = {k: np.stack([v] * batch) for k, v in obs.items() if k != "instruction"}
    obs_batch = obs_to_torch({**stacked, "instruction": [obs["instruction"]] * batch}, "cpu")
    actions = torch.randn(batch, spec.active().horizon, action_dim)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=run.train.lr)

    autocast = training_autocast(run.train.precision, "cpu")

    def step() -> None:
        bc_step(policy, optimizer, obs_batch, actions, run.train.grad_clip, autocast=autocast)

    for _ in range(2):  # warm-up: allocator, OpenMP pool
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    queue.put((torch.get_num_threads(), float(np.median(times))))


def _measure(ctx, config: Path, threads: int, steps: int) -> tuple[int, float]:
    queue = ctx.Queue()
    child = ctx.Process(target=_seconds_per_step, args=(str(config), threads, steps, queue))
    child.start()
    try:
        while True:
            try:
                return queue.get(timeout=1.0)
            except queue_module.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"bench threads: the measuring process exited with {child.exitcode}") from None
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()


def bench_threads(config: Path | None = None, steps: int = 20, counts: tuple[int, ...] = (1, 2, 0)) -> dict:
    """Median s/step per thread count (0 = torch's default), quiet and beside one busy process."""
    from diffpolicy_ros.assets import config_file
    from diffpolicy_ros.device import default_threads
    from diffpolicy_ros.rl.bc import load_bc_run

    config = config or config_file("policy/diffusion_state.yaml")
    load_bc_run(config)  # a bad config ends here, in one line, not in each measuring process
    ctx = mp.get_context("spawn")  # a fresh torch per measurement: thread pools do not shrink in-process
    result: dict = {"cpu_count": os.cpu_count(), "cli_default_threads": default_threads(), "steps": steps}
    for load in ("quiet", "busy"):
        busy = ctx.Process(target=_busy_loop, daemon=True) if load == "busy" else None
        if busy is not None:
            busy.start()
        try:
            for count in counts:
                used, seconds = _measure(ctx, config, count, steps)
                name = f"torch_default{used}" if count == 0 else f"threads{count}"
                result[f"{load}_{name}_s_per_step"] = round(seconds, 3)
        finally:
            if busy is not None:
                busy.kill()
                busy.join()
    chosen = result.get(f"busy_threads{default_threads()}_s_per_step")
    torch_default = [v for k, v in result.items() if k.startswith("busy_torch_default")]
    if chosen and torch_default:
        result["busy_speedup_cli_default_vs_torch_default"] = round(torch_default[0] / chosen, 2)
    return result
