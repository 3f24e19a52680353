"""Closed-loop evaluation of a policy in the push sim: success rate, return, and which way it went around.

Episodes run in waves of ``parallel`` in-process envs so inference is batched; episode i uses seed
``seed + i`` whatever the wave size, so results do not depend on ``parallel``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from diffpolicy_ros.contract import EXECUTE_HORIZON
from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.models.obs import obs_to_torch
from diffpolicy_ros.runs import EVAL_SEED
from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.video import EpisodeVideo


@dataclass
class EpisodeResult:
    seed: int
    success: bool
    ep_return: float
    length: int
    route: str  # 'left' | 'right' | 'none' (never went past the obstacle): the env's ``info['route']``


def evaluate_policy(
    policy: nn.Module,
    task: str = "push",
    episodes: int = 50,
    seed: int = EVAL_SEED,
    obs_mode: str = "state",
    device: str = "cpu",
    ddim_steps: int | None = None,
    execute_horizon: int = EXECUTE_HORIZON,
    parallel: int = 10,
    progress: bool = True,
    env_kwargs: dict | None = None,
    video_dir: str | Path | None = None,
    video_episodes: int = 3,
    stop: threading.Event | None = None,
) -> dict:
    """Run ``episodes`` closed-loop episodes; returns summary figures plus per-episode results.
    ``video_dir``: an MP4 of each of the first ``video_episodes`` episodes (``eval/video.py``); ``stop``: set by a
    host (the trainer node's shutdown) to end the evaluation within one decision (raises StopRequested)."""
    start = time.perf_counter()
    kwargs = {**(env_kwargs or {}), "obs_mode": obs_mode, "execute_horizon": execute_horizon}
    envs = [make_env(task, **kwargs) for _ in range(min(parallel, episodes))]
    results: list[EpisodeResult] = []
    written: list[dict] = []  # videos
    bar = tqdm(total=episodes, desc=f"eval {task}", unit="ep", disable=not progress)
    policy.eval()
    for wave_start in range(0, episodes, len(envs)):
        wave = envs[: min(len(envs), episodes - wave_start)]
        obs = [env.reset(seed=seed + wave_start + i)[0] for i, env in enumerate(wave)]
        returns = [0.0] * len(wave)
        videos = {
            i: EpisodeVideo(
                env, Path(video_dir) / f"episode_{seed + wave_start + i}.mp4", f"seed {seed + wave_start + i}"
            )
            for i, env in enumerate(wave)
            if video_dir is not None and wave_start + i < video_episodes
        }
        for video in videos.values():
            video.add()
        active = list(range(len(wave)))
        while active:
            if stop is not None and stop.is_set():
                for env in envs:
                    env.close()
                raise StopRequested
            batch = {k: np.stack([obs[i][k] for i in active]) for k in obs[0] if k != "instruction"}
            batch["instruction"] = [obs[i]["instruction"] for i in active]
            with torch.inference_mode():
                chunks = policy.predict_chunk(obs_to_torch(batch, device), ddim_steps).float().cpu().numpy()
            still = []
            for row, i in enumerate(active):
                env = wave[i]
                done = False
                video = videos.get(i)
                if video is None:  # the chunk in one call: the cameras render once, for the next decision
                    obs[i], rewards, terminated, truncated, info = env.step_chunk(chunks[row].astype(np.float64))
                    returns[i] += float(rewards.sum())
                    done = terminated or truncated
                else:  # step by step: a video frame for each
                    video.predicted(chunks[row], execute_horizon)
                    for action in chunks[row][:execute_horizon]:
                        obs[i], reward, terminated, truncated, info = env.step(action.astype(np.float64))
                        returns[i] += reward
                        video.add(reward)
                        if terminated or truncated:
                            done = True
                            break
                if done:
                    if video is not None:
                        written.append(video.write(bool(info["is_success"])))
                    results.append(
                        EpisodeResult(
                            seed + wave_start + i,
                            info["is_success"],
                            returns[i],
                            info["elapsed_steps"],
                            info["route"],
                        )
                    )
                    bar.update(1)
                else:
                    still.append(i)
            active = still
        bar.set_postfix(success=f"{np.mean([r.success for r in results]):.2f}")
    bar.close()
    for env in envs:
        env.close()
    results.sort(key=lambda r: r.seed)
    routes = [r.route for r in results]
    successes = sum(r.success for r in results)
    return {
        "task": task,
        "episodes": episodes,
        "seed": seed,
        "success_rate": successes / episodes,
        "success_ci95": wilson_interval(successes, episodes),
        "mean_return": float(np.mean([r.ep_return for r in results])),
        "mean_length": float(np.mean([r.length for r in results])),
        "left_fraction": routes.count("left") / episodes,
        "right_fraction": routes.count("right") / episodes,
        "no_pass_fraction": routes.count("none") / episodes,
        "wall_s": round(time.perf_counter() - start, 2),
        "per_episode": [r.__dict__ for r in results],
        **({"videos": written} if video_dir is not None else {}),
    }
