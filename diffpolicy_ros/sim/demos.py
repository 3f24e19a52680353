"""Run the scripted expert for N seeded episodes; summarize and optionally record them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from diffpolicy_ros.data.episodes import EpisodeDataset, EpisodeRecorder
from diffpolicy_ros.sim import make_env, make_expert


@dataclass
class DemoSummary:
    task: str
    episodes: int
    seed: int
    success_rate: float
    mean_return: float
    mean_length: float
    left_fraction: float
    wall_s: float
    out: str | None = None
    videos: list[dict] = dataclasses.field(default_factory=list)  # demo --video: path, frames, bytes, write_s

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if not d["videos"]:
            d.pop("videos")
        return d


def run_demos(
    task: str = "push",
    episodes: int = 20,
    seed: int = 0,
    obs_mode: str = "state",
    out: str | Path | None = None,
    progress: bool = True,
    env_overrides: dict | None = None,
    video_dir: str | Path | None = None,
    video_episodes: int = 3,
    on_episode: Callable[[int, int], None] | None = None,
    expert_limits: dict | None = None,
) -> tuple[DemoSummary, EpisodeDataset]:
    """Episode i uses env seed ``seed + i``; the expert's left/right choice is seeded from the same pair.
    ``video_dir``: an MP4 of each of the first ``video_episodes`` episodes; ``on_episode(done, total)`` after
    each episode (a host's progress line); ``expert_limits``: {max_speed, max_accel} of a deployment."""
    import time

    from diffpolicy_ros.sim.video import EpisodeVideo

    env = make_env(task, obs_mode=obs_mode, **(env_overrides or {}))
    expert = make_expert(task, env, **(expert_limits or {}))
    recorder = EpisodeRecorder(tuple(k for k in env.observation_space.spaces if k != "instruction"))
    successes, returns, lengths, sides = [], [], [], []
    videos: list[dict] = []
    start = time.perf_counter()
    bar = tqdm(range(episodes), desc=f"expert {task}", unit="ep", disable=not progress)
    for i in bar:
        obs, _ = env.reset(seed=seed + i)
        side = expert.reset(np.random.default_rng([seed, i]))
        instruction, ep_return = obs["instruction"], 0.0
        video = EpisodeVideo(env, Path(video_dir) / f"demo_{seed + i}.mp4", f"expert, seed {seed + i}") if (
            video_dir is not None and i < video_episodes
        ) else None  # fmt: skip
        if video is not None:
            video.add()
        while True:
            action = expert.act()
            next_obs, reward, terminated, truncated, info = env.step(action)
            if video is not None:
                video.add(reward)
            recorder.add_step(obs, action, reward)
            ep_return += reward
            obs = next_obs
            if terminated or truncated:
                break
        if video is not None:
            videos.append(video.write(bool(info["is_success"])))
        recorder.end_episode(
            instruction=instruction, success=info["is_success"], side=side, seed=seed + i, ep_return=ep_return
        )
        successes.append(info["is_success"])
        returns.append(ep_return)
        lengths.append(info["elapsed_steps"])
        sides.append(side == "left")
        bar.set_postfix(success=f"{np.mean(successes):.2f}", ret=f"{np.mean(returns):.2f}")
        if on_episode is not None:
            on_episode(i + 1, episodes)
    env.close()

    dataset = recorder.to_dataset(
        {"task": task, "obs_mode": obs_mode, "seed": seed, "env_config": _jsonable(dataclasses.asdict(env.cfg))}
    )
    if out is not None:
        dataset.save(out)
    summary = DemoSummary(
        videos=videos,
        task=task,
        episodes=episodes,
        seed=seed,
        success_rate=float(np.mean(successes)),
        mean_return=float(np.mean(returns)),
        mean_length=float(np.mean(lengths)),
        left_fraction=float(np.mean(sides)),
        wall_s=time.perf_counter() - start,
        out=str(out) if out is not None else None,
    )
    return summary, dataset


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
