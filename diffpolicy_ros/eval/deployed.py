"""Closed-loop evaluation as deployed (``diffpolicy eval --deploy FILE``): the policy decides in the sim as
deployed (:mod:`diffpolicy_ros.sim.deployed`: the executor and the safety-filter core of the ``real_arm``
graph, with the cell's latency), one chunk every re-plan interval (the deployment's ``replan_steps``), continuing
the chunk that plays when the deployment asks for real-time chunking."""

from __future__ import annotations

import threading
import time

import numpy as np
import torch
from tqdm import tqdm

from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.realtime_chunking import RealTimeChunking
from diffpolicy_ros.runs import EVAL_SEED
from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.deployed import FILTER_COUNTS, DeployedChunkEnv


def evaluate_deployed(
    policy: torch.nn.Module,
    deployment: Deployment,
    task: str = "push",
    episodes: int = 50,
    seed: int = EVAL_SEED,
    obs_mode: str = "state",
    device: str = "cpu",
    progress: bool = True,
    env_kwargs: dict | None = None,
    stop: threading.Event | None = None,
) -> dict:
    """Episode i: env seed ``seed + i``, its latency drawn from the same seed, the sampler seeded with it.
    ``stop``: as :func:`~diffpolicy_ros.eval.rollout.evaluate_policy`'s."""
    start = time.perf_counter()
    predictor = ChunkPredictor(policy, device)
    env = DeployedChunkEnv(make_env(task, obs_mode=obs_mode, **(env_kwargs or {})), deployment, policy.config.horizon)
    rtc = RealTimeChunking() if deployment.real_time_chunking else None
    successes, lengths, latencies, jumps = [], [], [], []
    counts = dict.fromkeys((*FILTER_COUNTS, "switch_accel_clips"), 0)
    bar = tqdm(range(episodes), desc=f"eval {task} as deployed", unit="ep", disable=not progress)
    for i in bar:
        obs, _ = env.reset(seed=seed + i)
        generator = torch.Generator().manual_seed(seed + i)
        previous, previous_stamp = None, 0.0  # the policy's last chunk: what real-time chunking continues
        if rtc:  # it freezes what runs during inference: the latency the policy node measures, the episode's
            rtc.frozen_s = env.latency
        done, info = False, {}
        while not done:
            if stop is not None and stop.is_set():
                env.close()
                raise StopRequested
            committed = rtc.committed(previous, previous_stamp, env.now, env.period) if rtc else None
            previous, previous_stamp = predictor(obs, generator, committed)[0], env.now  # a batch of one
            obs, _, terminated, truncated, info = env.step(previous)
            done = terminated or truncated
        stats = env.episode_stats()
        successes.append(bool(info["is_success"]))
        lengths.append(int(info["elapsed_steps"]))
        latencies.append(stats.pop("latency_s"))
        jumps += stats.pop("jumps")
        for key, value in stats.items():
            counts[key] += value
        bar.set_postfix(success=f"{np.mean(successes):.2f}")
    env.close()
    n = int(np.sum(successes))
    return {
        "task": task,
        "episodes": episodes,
        "seed": seed,
        "success_rate": n / episodes,
        "success_ci95": wilson_interval(n, episodes),
        "mean_length": float(np.mean(lengths)),
        "deployment": {"max_speed": deployment.max_speed, "max_accel": deployment.max_accel,
                       "executor_rate_hz": deployment.executor_rate_hz, "blend_s": deployment.blend_s,
                       "real_time_chunking": deployment.real_time_chunking, "replan_steps": deployment.replan_steps,
                       "latency_ms": [round(x * 1e3) for x in deployment.latency_s]},  # fmt: skip
        "latency_ms_mean": round(float(np.mean(latencies)) * 1e3, 1),
        "switch_jump_mean": round(float(np.mean(jumps)), 4) if jumps else 0.0,
        **counts,
        "per_episode": [{"seed": seed + i, "success": s, "latency_ms": round(lat * 1e3, 1)}
                        for i, (s, lat) in enumerate(zip(successes, latencies, strict=True))],  # fmt: skip
        "wall_s": round(time.perf_counter() - start, 1),
    }
