"""A cell's topic names in one place: a small YAML file mapping each role of the topic contract to the topic
the cell uses, shared by ``eval-bag``, ``train-bc --data``, ``record`` (``--topic-map FILE``) and the
``replay_eval`` graph (``topic_map:=FILE``: remaps). Roles not in the file keep the contract's topic.

    # config/topic_maps/ur_cell.yaml
    image_top: /camera/color/image_raw/compressed   # sensor_msgs/Image, or CompressedImage on .../compressed
    image_side: /side_camera/image_raw
    joint_states: /ur/joint_states
    command: /servo_node/delta_twist_cmds            # the recorded commands a policy is scored against

A camera whose raw topic a bag lacks is read from ``<topic>/compressed`` when the bag holds that instead. A
camera's CameraInfo (``camera_info_<cam>``) defaults to the topic image_transport pairs with its image
(``/ns/image_raw[/compressed]`` -> ``/ns/camera_info``); its optical-frame pose (``camera_pose_<cam>``,
geometry_msgs/PoseStamped, the hand-eye calibration) to the contract's ``/cameras/<cam>/optical_pose``. Both are
read only for a calibrated policy (docs/cells.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from diffpolicy_ros import contract as C
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.messages.conversions import COMPRESSED_SUFFIX

# role -> the contract's topic
ROLES: dict[str, str] = {
    **{f"image_{cam}": C.raw_camera_topic(cam) for cam in C.CAMERAS},
    "joint_states": C.JOINT_STATES_TOPIC,
    "object_pose": C.OBJECT_POSE_TOPIC,
    "goal_pose": C.GOAL_POSE_TOPIC,
    "instruction": C.INSTRUCTION_TOPIC,
    "command": C.CMD_TWIST_TOPIC,
    **{f"camera_info_{cam}": C.camera_info_topic(cam) for cam in C.CAMERAS},
    **{f"camera_pose_{cam}": C.camera_pose_topic(cam) for cam in C.CAMERAS},
}
CALIBRATION_ROLES = tuple(f"camera_{part}_{cam}" for cam in C.CAMERAS for part in ("info", "pose"))


@dataclass(frozen=True)
class TopicMap:
    """Role -> topic for every role (the contract's where the file says nothing)."""

    topics: dict[str, str] = field(default_factory=lambda: dict(ROLES))

    @classmethod
    def load(cls, path: str | Path | None) -> TopicMap:
        """The map in ``path`` (None or '': the contract's names); an unknown role is an error naming the roles."""
        if not path:
            return cls()
        from diffpolicy_ros.config import read_yaml_mapping
        from diffpolicy_ros.user_files import TOPIC_MAP

        data = read_yaml_mapping(path, TOPIC_MAP)
        unknown = sorted(set(data) - set(ROLES))
        if unknown:
            raise UserError(f"topic map {path}: unknown role(s) {unknown}; roles: {sorted(ROLES)}")
        bad = {k: v for k, v in data.items() if not isinstance(v, str) or not v.startswith("/")}
        if bad:
            raise UserError(f"topic map {path}: topics must be absolute names (/...), got {bad}")
        paired = {  # a camera mapped elsewhere: its CameraInfo beside it, unless the file says where
            f"camera_info_{cam}": C.paired_camera_info_topic(data[f"image_{cam}"])
            for cam in C.CAMERAS
            if f"image_{cam}" in data and f"camera_info_{cam}" not in data
        }
        return cls({**ROLES, **paired, **data})

    @property
    def command(self) -> str:
        return self.topics["command"]

    def inputs(self) -> dict[str, str]:
        """The policy's input roles (what ``RawInputs`` reads)."""
        return {role: topic for role, topic in self.topics.items() if role != "command"}

    def for_bag(self, held: Mapping[str, str]) -> TopicMap:
        """Cameras the bag holds only compressed (``<topic>/compressed``) are read from there."""
        topics = dict(self.topics)
        for role, topic in self.topics.items():
            compressed = topic.rstrip("/") + COMPRESSED_SUFFIX
            if role.startswith("image_") and topic not in held and compressed in held:
                topics[role] = compressed
        return TopicMap(topics)

    def with_command(self, topic: str | None) -> TopicMap:
        """An explicit command topic (``--command-topic``) over the map's."""
        return self if not topic else TopicMap({**self.topics, "command": topic})
