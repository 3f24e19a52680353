"""Walking a bag in time order through the live graph's preprocessing (``messages/observation.py``).

``walk_bag`` yields, in bag time:
- ``Command(t, velocity, obs)``: each recorded command, with the observation the graph would have had at t
  (for training from bags),
- ``Tick(t, obs)``: every ``1 / tick_hz`` s, the observation a policy tick would see (for evaluation),
- ``Episode(t, mark)``: the episode markers written by ``demo --to-bag``.
``obs`` is ``(observation, stamp)``, or the reason there is none (an input missing or stale). Messages that
share a time with an event are taken first, as a live subscriber would have them by then.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from diffpolicy_ros import contract as C
from diffpolicy_ros.data.bag_io import EPISODE_TOPIC, BagError, bag_info, read_messages, require_topics
from diffpolicy_ros.messages.conversions import MessageError, stamp_to_sec, twist_vector
from diffpolicy_ros.messages.observation import RawInputs
from diffpolicy_ros.messages.topic_map import CALIBRATION_ROLES

NS = 1_000_000_000


@dataclass
class Command:
    t: float
    velocity: object  # np.ndarray [3]
    obs: tuple[dict, float] | str


@dataclass
class Tick:
    t: float
    obs: tuple[dict, float] | str


@dataclass
class Episode:
    t: float
    mark: dict


def needed_topics(
    inputs: RawInputs, need_images: bool, need_task_state: bool, need_calibration: bool = False
) -> list[str]:
    roles = ["joint_states", "instruction"] + (["object_pose", "goal_pose"] if need_task_state else [])
    roles += ["image_top", "image_side"] if need_images else []
    roles += list(CALIBRATION_ROLES) if need_calibration else []
    role_topic = {r: t for t, r in inputs.topic_role.items()}
    return [role_topic[r] for r in roles]


def walk_bag(
    path: str | Path,
    inputs: RawInputs,
    need_images: bool,
    need_task_state: bool,
    command_topic: str = C.CMD_TWIST_TOPIC,
    tick_hz: float | None = None,
    max_age: float = 0.35,
    warn=print,
    need_calibration: bool = False,
) -> Iterator[Command | Tick | Episode]:
    """``need_calibration``: observations carry ``camera_projection``, from each camera's CameraInfo and
    optical-frame pose in the bag (a calibrated policy's input)."""
    info = bag_info(path)
    require_topics(info, [*needed_topics(inputs, need_images, need_task_state, need_calibration), command_topic])

    def observe(t: float) -> tuple[dict, float] | str:
        try:
            return inputs.observe(t, max_age, need_images, need_task_state, need_calibration)
        except MessageError as exc:
            return str(exc)

    period_ns = round(NS / tick_hz) if tick_hz else None
    next_tick = info.start_ns + period_ns if period_ns else None
    pending: list[Command] = []  # commands wait until every message stamped at their time is in
    topics = [*inputs.topics, command_topic, EPISODE_TOPIC]
    for topic, t_ns, msg in read_messages(path, topics, warn=warn):
        while next_tick is not None and next_tick < t_ns:
            yield Tick(next_tick / NS, observe(next_tick / NS))
            next_tick += period_ns
        if pending and t_ns > pending[0].t * NS + 0.5:
            for cmd in pending:
                yield Command(cmd.t, cmd.velocity, observe(cmd.t))
            pending.clear()
        if topic == command_topic:
            try:
                pending.append(Command(stamp_to_sec(msg.header.stamp) if msg.header.stamp.sec else t_ns / NS,
                                       twist_vector(msg), ""))  # fmt: skip
            except MessageError as exc:
                warn(f"{path}: command dropped: {exc}")
        elif topic == EPISODE_TOPIC:
            try:
                yield Episode(t_ns / NS, json.loads(msg.data))
            except json.JSONDecodeError as exc:
                raise BagError(f"{path}: unreadable episode marker {msg.data!r}") from exc
        else:
            inputs.offer(topic, msg)
    for cmd in pending:
        yield Command(cmd.t, cmd.velocity, observe(cmd.t))
