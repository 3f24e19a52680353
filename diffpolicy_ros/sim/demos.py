"""Run the scripted expert for N seeded episodes; summarize and optionally record them.

Episode i is a pure function of (task, seed + i): env seed ``seed + i``, expert side from ``[seed, i]``. So the
episodes can be recorded by several worker processes (``workers``), in blocks, and concatenated in order: the
dataset is the same as one process records. Rendering the cameras is most of an image demo's cost, and it is
per-process work that two cores share well.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from diffpolicy_ros.data.episodes import EpisodeDataset, EpisodeRecorder
from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.sim import make_env, make_expert

BLOCK_EPISODES = 10  # a worker's largest unit of work: the pool's progress granularity


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
    workers: int = 1

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if not d["videos"]:
            d.pop("videos")
        return d


@dataclass
class _Block:
    """Episodes [first, first + count) of one recording, as a worker hands them back."""

    recorder: EpisodeRecorder
    stats: list[tuple[bool, float, int, bool]]  # per episode: success, return, length, went left
    videos: list[dict]
    env_config: dict


def _record_block(
    task: str,
    obs_mode: str,
    env_overrides: dict,
    expert_limits: dict,
    seed: int,
    first: int,
    count: int,
    video_dir: str | Path | None,
    video_episodes: int,
    operator=None,
    on_episode: Callable[[], None] | None = None,
) -> _Block:
    from diffpolicy_ros.sim.video import EpisodeVideo

    env = make_env(task, obs_mode=obs_mode, **env_overrides)
    expert = make_expert(task, env, **expert_limits, operator=operator)
    recorder = EpisodeRecorder(tuple(k for k in env.observation_space.spaces if k != "instruction"))
    stats, videos = [], []
    for i in range(first, first + count):
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
        cell = {"cell": json.dumps(info["cell"])} if "cell" in info else {}  # the cell it was recorded in
        recorder.end_episode(
            instruction=instruction, success=info["is_success"], side=side, seed=seed + i, ep_return=ep_return, **cell
        )
        stats.append((bool(info["is_success"]), float(ep_return), int(info["elapsed_steps"]), side == "left"))
        if on_episode is not None:
            on_episode()
    env.close()
    return _Block(recorder, stats, videos, _jsonable(dataclasses.asdict(env.cfg)))


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
    workers: int = 1,
    stop: threading.Event | None = None,
    operator=None,
) -> tuple[DemoSummary, EpisodeDataset]:
    """Episode i uses env seed ``seed + i``; the expert's left/right choice is seeded from the same pair.
    ``video_dir``: an MP4 of each of the first ``video_episodes`` episodes; ``on_episode(done, total)`` as
    episodes finish (a host's progress line); ``expert_limits``: {max_speed, max_accel} of a deployment;
    ``workers`` > 1: that many processes record blocks of episodes (the same dataset, sooner); ``stop``: set by
    a host (the trainer node's shutdown) to end the recording after the episode (or block) in progress, with
    StopRequested; ``operator`` (an ``OperatorConfig``): the episodes as a teleoperator plays the expert's plan."""
    start = time.perf_counter()
    settings = dict(task=task, obs_mode=obs_mode, env_overrides=env_overrides or {}, expert_limits=expert_limits or {},
                    seed=seed, video_dir=video_dir, video_episodes=video_episodes, operator=operator)  # fmt: skip
    bar = tqdm(total=episodes, desc=f"expert {task}", unit="ep", disable=not progress)

    recorded = 0

    def finished(n: int) -> None:
        nonlocal recorded
        recorded += n
        bar.update(n)
        if on_episode is not None:
            on_episode(recorded, episodes)
        if stop is not None and stop.is_set():
            raise StopRequested

    # blocks of up to BLOCK_EPISODES, small enough that every worker gets one (4 episodes on 2 workers: 2 + 2)
    block_size = max(1, min(BLOCK_EPISODES, -(-episodes // max(workers, 1))))
    starts = range(0, episodes, block_size)
    used = max(1, min(workers, len(starts)))
    if used < workers:
        tqdm.write(f"demo: {episodes} episodes keep {used} of {workers} workers busy: using {used}", file=sys.stderr)
    if used == 1:
        blocks = [_record_block(**settings, first=0, count=episodes, on_episode=lambda: finished(1))]
    else:
        # forkserver: each worker builds its own MuJoCo model and GL context, nothing inherited (sim/vector.py)
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(used, mp_context=context) as pool:
            futures = {pool.submit(_record_block, **settings, first=s, count=min(block_size, episodes - s)): s
                       for s in starts}  # fmt: skip
            done = {}
            try:
                for future in as_completed(futures):
                    done[futures[future]] = block = future.result()
                    finished(len(block.stats))
            except StopRequested:
                pool.shutdown(wait=False, cancel_futures=True)  # blocks not started yet never start
                raise
        blocks = [done[s] for s in starts]
    bar.close()

    recorder = blocks[0].recorder
    for block in blocks[1:]:
        recorder.extend(block.recorder)
    stats = np.array([s for block in blocks for s in block.stats], dtype=float).reshape(-1, 4)
    meta = {"task": task, "obs_mode": obs_mode, "seed": seed, "env_config": blocks[0].env_config}
    if operator is not None:
        meta["operator"] = dataclasses.asdict(operator)
    dataset = recorder.to_dataset(meta)
    if out is not None:
        dataset.save(out)
    summary = DemoSummary(
        videos=[v for block in blocks for v in block.videos],
        task=task,
        episodes=episodes,
        seed=seed,
        success_rate=float(stats[:, 0].mean()),
        mean_return=float(stats[:, 1].mean()),
        mean_length=float(stats[:, 2].mean()),
        left_fraction=float(stats[:, 3].mean()),
        wall_s=time.perf_counter() - start,
        out=str(out) if out is not None else None,
        workers=used,
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
