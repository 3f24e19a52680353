"""Bags as demonstrations: ``train-bc --data BAG_OR_DIR``.

Each recorded command becomes one (observation, action) step, the observation assembled from the raw topics
through the live graph's preprocessing (``RawInputs``: camera_node's crop/resize, proprio_node's joint mapping
and velocity estimate, policy_node's freshness rule). Episodes come from ``/diffpolicy/episode`` markers, or
— in a bag without them — from gaps of more than ``EPISODE_GAP_S`` between commands. Commands without a
complete, fresh observation are skipped and counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from diffpolicy_ros import contract as C
from diffpolicy_ros.bags.replay import Command, Episode, walk_bag
from diffpolicy_ros.data.bag_io import BagError, bag_info
from diffpolicy_ros.data.episodes import EpisodeDataset, EpisodeRecorder
from diffpolicy_ros.messages.observation import RawInputs
from diffpolicy_ros.messages.topic_map import CALIBRATION_ROLES, TopicMap

EPISODE_GAP_S = 0.5


def bag_paths(path: str | Path) -> list[Path]:
    """A bag folder (metadata.yaml), a single .mcap/.db3 file, or a folder of bag folders."""
    path = Path(path)
    if (path / "metadata.yaml").exists() or path.suffix in (".mcap", ".db3"):
        return [path]
    if path.is_dir():
        found = sorted(p.parent for p in path.glob("*/metadata.yaml"))
        if found:
            return found
    raise BagError(f"{path}: no rosbag2 bag here (a folder with metadata.yaml, or a folder of them)")


def is_bag(path: str | Path) -> bool:
    try:
        return bool(bag_paths(path))
    except BagError:
        return False


def dataset_from_bags(
    path: str | Path,
    topic_map: TopicMap | None = None,
    task_state: bool = True,
    max_age: float = 0.35,
    warn=print,
    calibration: bool | None = None,
) -> tuple[EpisodeDataset, dict]:
    """The dataset and a summary (bags, steps, skipped commands). ``calibration``: each step's
    ``camera_projection`` (what a calibrated policy trains on, as ``demo --images`` records it) from every
    camera's CameraInfo and optical-frame pose in the bags; True requires them (a bag without them is refused
    naming the topics), None takes them where every bag holds them."""
    bags = bag_paths(path)
    held = [bag_info(bag).topics for bag in bags]
    maps = [(topic_map or TopicMap()).for_bag(topics) for topics in held]
    calibrated = calibration
    if calibrated is None:
        calibrated = all(m.topics[r] in topics for m, topics in zip(maps, held) for r in CALIBRATION_ROLES)
    keys = ("proprio", *(f"image_{c}" for c in C.CAMERAS), *(("camera_projection",) if calibrated else ()))
    recorder = EpisodeRecorder(keys)
    skipped, steps_in_episode = 0, 0
    episode: dict = {}

    def close_episode() -> None:
        nonlocal steps_in_episode
        if steps_in_episode:
            recorder.end_episode(
                instruction=episode.get("instruction", C.DEFAULT_INSTRUCTION),
                success=bool(episode.get("success", True)),
                seed=int(episode.get("seed", -1)),
                ep_return=float(episode.get("return", 0.0)),
                cell=json.dumps(episode.get("cell", {})),  # the cell it ran in ({}: the bag does not say)
            )
        steps_in_episode = 0

    for bag, topics in zip(bags, maps):
        last_t = None
        inputs = RawInputs(topics.inputs())
        walk = walk_bag(bag, inputs, True, task_state, topics.command, None, max_age, warn, need_calibration=calibrated)
        for event in walk:
            if isinstance(event, Episode):
                if event.mark.get("event") == "start":
                    close_episode()
                    episode = dict(event.mark)
                else:
                    episode.update(event.mark)
                    close_episode()
                continue
            assert isinstance(event, Command)
            if isinstance(event.obs, str):
                skipped += 1
                continue
            if last_t is not None and event.t - last_t > EPISODE_GAP_S and not episode:
                close_episode()  # an unmarked bag: a pause in the commands ends an episode
            last_t = event.t
            obs, _ = event.obs
            episode.setdefault("instruction", obs["instruction"])
            recorder.add_step(obs, np.asarray(event.velocity, np.float32), 0.0)
            steps_in_episode += 1
        close_episode()
        episode = {}
    try:
        dataset = recorder.to_dataset({"task": "push", "obs_mode": "image", "source": [str(b) for b in bags]})
    except ValueError as exc:
        raise BagError(f"{path}: no usable steps (every command lacked a fresh observation: {skipped})") from exc
    summary = {"bags": len(bags), "steps": dataset.n_steps, "episodes": dataset.n_episodes, "skipped": skipped}
    return dataset, {**summary, "calibrated": calibrated}
