"""Closed-loop evaluation as deployed (``diffpolicy eval --deploy FILE``): the sim behind the same chunk
executor and safety-filter core the ``real_arm`` graph runs, with the cell's latency.

Per episode a latency L is drawn from the deployment's range. The policy takes an observation every control
period while it is free (the policy node drops ticks while busy), and its chunk arrives L later, stamped with
the observation's time. Between policy steps the arm is driven at the executor's rate: the executor plays the
point of the newest arrived chunk due at ``now - stamp`` (zero past its end), the filter core
(:mod:`diffpolicy_ros.safety.filter`: speed cap, acceleration cap per tick, workspace box) turns it into what
the arm obeys, held until the next executor tick, integrated at the sim's IK rate. So a chunk switch jumps from
the old chunk's point to the new one's, and the filter clips it, as on the arm (``switch_jump_mean``,
``switch_accel_clips``)."""

from __future__ import annotations

import time

import numpy as np
import torch
from tqdm import tqdm

from diffpolicy_ros import contract as C
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.realtime_chunking import RealTimeChunking
from diffpolicy_ros.runs import EVAL_SEED
from diffpolicy_ros.safety.chunk_player import ChunkPlayer
from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.safety.filter import SafetyFilter, SafetyLimits
from diffpolicy_ros.sim import make_env


def deployment_limits(deployment: Deployment) -> SafetyLimits:
    """The filter's limits as real_arm sets them; without a box in the file, the task's workspace (bench hil's)."""
    box_low = deployment.box_low or C.WORKSPACE_LOW
    box_high = deployment.box_high or C.WORKSPACE_HIGH
    return SafetyLimits(
        max_speed=deployment.max_speed, max_accel=deployment.max_accel, box_low=tuple(box_low),
        box_high=tuple(box_high), tick_period_s=1.0 / deployment.executor_rate_hz,
    )  # fmt: skip


def evaluate_deployed(
    policy: torch.nn.Module,
    deployment: Deployment,
    task: str = "push",
    episodes: int = 50,
    seed: int = EVAL_SEED,
    obs_mode: str = "state",
    device: str = "cpu",
    progress: bool = True,
) -> dict:
    start = time.perf_counter()
    env = make_env(task, obs_mode=obs_mode)
    predictor = ChunkPredictor(policy, device)
    limits = deployment_limits(deployment)
    period, tick_dt, exec_dt = env.cfg.control_dt, env.tick_dt, 1.0 / deployment.executor_rate_hz
    latency_rng = np.random.default_rng(seed)
    # real-time chunking freezes what runs during inference: up to the cell's longest latency
    rtc = RealTimeChunking(frozen_s=deployment.latency_s[1]) if deployment.real_time_chunking else None
    successes, lengths, latencies, jumps = [], [], [], []
    counts = {"speed_limited": 0, "accel_limited": 0, "box_limited": 0, "active_ticks": 0, "switch_accel_clips": 0}
    bar = tqdm(range(episodes), desc=f"eval {task} as deployed", unit="ep", disable=not progress)
    for i in bar:
        obs, _ = env.reset(seed=seed + i)
        latency = float(latency_rng.uniform(*deployment.latency_s))
        generator = torch.Generator().manual_seed(seed + i)
        flt, player = SafetyFilter(limits), ChunkPlayer(period, blend_s=deployment.blend_s)
        previous, previous_stamp = None, 0.0  # the policy's last chunk: what real-time chunking continues
        pending: list[tuple[float, float, np.ndarray]] = []  # (arrival, stamp, chunk in m/s) on their way
        t, busy_until, next_exec, held, last_command = 0.0, -1.0, 0.0, np.zeros(3), np.zeros(3)
        done, info = False, {}
        while not done:
            if t >= busy_until - 1e-9:  # the policy is free: it takes this observation
                committed = rtc.committed(previous, previous_stamp, t, period) if rtc else None
                previous, previous_stamp = predictor(obs, generator, committed)[0], t  # one observation: a batch of 1
                pending.append((t + latency, t, previous))
                busy_until = t + latency
            velocities = np.zeros((env.ik_ticks, 3))
            for k in range(env.ik_ticks):
                now = t + k * tick_dt
                if now >= next_exec - 1e-9:  # an executor (and filter) tick
                    next_exec += exec_dt
                    switched = False
                    while pending and pending[0][0] <= now + 1e-9:  # a chunk arrives
                        _, stamp, chunk = pending.pop(0)
                        switched |= player.chunk is not None
                        player.offer(chunk, stamp, now)
                    command, _ = player.command(now)
                    if switched:  # the pre-filter velocity change at the switch
                        jumps.append(float(np.linalg.norm(command - last_command)))
                    last_command = command
                    if player.chunk is not None:
                        flt.offer_command(command, now, limits.frame_id, now, now)
                    flt.offer_pose(env.pusher_position, now, limits.frame_id, now, now)
                    result = flt.tick(now)
                    held = result.command
                    counts["switch_accel_clips"] += int(switched and "accel" in result.limited)
                velocities[k] = held
            obs, _, terminated, truncated, info = env.step_ticks(velocities)
            t += period
            done = terminated or truncated
        successes.append(bool(info["is_success"]))
        lengths.append(int(info["elapsed_steps"]))
        latencies.append(latency)
        for key in ("speed_limited", "accel_limited", "box_limited", "active_ticks"):
            counts[key] += flt.counts[key]
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
                       "real_time_chunking": deployment.real_time_chunking,
                       "latency_ms": [round(x * 1e3) for x in deployment.latency_s]},  # fmt: skip
        "latency_ms_mean": round(float(np.mean(latencies)) * 1e3, 1),
        "switch_jump_mean": round(float(np.mean(jumps)), 4) if jumps else 0.0,
        **counts,
        "wall_s": round(time.perf_counter() - start, 1),
    }
