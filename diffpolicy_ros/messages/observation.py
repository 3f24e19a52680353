"""From ROS messages to the policy's observation: the preprocessing the live graph does, as library code.

The live graph runs it across three nodes (camera_node: any image -> rgb8 at the model size; proprio_node:
joint names mapped, velocities estimated when missing; policy_node: the newest of each input, refused when
any part is missing or stale). ``ObservationCache`` is the policy node's half; ``RawInputs`` chains the
camera and proprio halves in front of it for tools that read raw topics without a graph (``eval-bag``,
``train-bc --data BAG``), so a policy evaluated or trained from a bag sees what it sees when deployed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String

from diffpolicy_ros import contract as C
from diffpolicy_ros.calibration import CameraCalibration, CameraPose, model_intrinsics, projections
from diffpolicy_ros.messages.conversions import (
    MessageError,
    image_to_rgb,
    info_intrinsics,
    joint_state_vectors,
    pose_from_message,
    pose_xy,
    stamp_to_sec,
)
from diffpolicy_ros.messages.topic_map import CALIBRATION_ROLES
from diffpolicy_ros.messages.topic_map import ROLES as TOPIC_ROLES


def prepare_image(rgb: np.ndarray, size: int, crop_square: bool) -> np.ndarray:
    """Centre-crop to square (optional) and resize to size x size (area filter when shrinking)."""
    import cv2

    if crop_square:
        h, w = rgb.shape[:2]
        s = min(h, w)
        rgb = rgb[(h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]
    if rgb.shape[:2] != (size, size):
        shrinking = rgb.shape[0] > size
        rgb = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)
    return np.ascontiguousarray(rgb)


def joint_velocities(
    pos: np.ndarray, vel: np.ndarray | None, t: float, previous: tuple[float, np.ndarray] | None
) -> np.ndarray:
    """The driver's velocities, or a finite difference with the previous valid sample (zero for the first)."""
    if vel is not None:
        return vel
    if previous is not None and t > previous[0]:
        return (pos - previous[1]) / (t - previous[0])
    return np.zeros_like(pos)


# Where each input of the policy comes from, and what supplies it when it never arrives.
INPUT_SOURCES = {
    "joints": (C.POLICY_JOINT_STATES_TOPIC, "proprio_node, from the arm driver's joint states (joint_states_topic)"),
    "instruction": (C.INSTRUCTION_TOPIC, "instruction_node (argument instruction)"),
    "object": (C.OBJECT_POSE_TOPIC, "perception"),
    "goal": (C.GOAL_POSE_TOPIC, "perception"),
    **{f"image_{c}": (C.policy_camera_topic(c), f"camera_node from the {c} camera ({c}_topic or {c}_device)")
       for c in C.CAMERAS},
    **{f"camera_info_{c}": (C.policy_camera_info_topic(c), f"camera_node, from the {c} driver's CameraInfo")
       for c in C.CAMERAS},
    **{f"camera_pose_{c}": (C.camera_pose_topic(c), "the sim bridge, or on a cell camera_node's camera_calibration "
       "(a hand-eye calibration: real_arm camera_calibration:=FILE)") for c in C.CAMERAS},
}  # fmt: skip
TASK_STATE_FIX = (
    "this policy reads the block and goal poses: in HIL add hil_task_state:=true; on a cell, publish them from "
    "a perception source; or deploy the vision policy (make vision-policy), which reads the cameras instead"
)


class MissingInputs(MessageError):
    """Inputs the policy reads that have never arrived; the message names their topics and what supplies them."""

    def __init__(self, missing: Sequence[str]):
        self.missing = tuple(missing)
        topics = ", ".join(f"{INPUT_SOURCES[p][0]} ({INPUT_SOURCES[p][1]})" for p in self.missing if p in INPUT_SOURCES)
        fix = f"; {TASK_STATE_FIX}" if {"object", "goal"} & set(self.missing) else ""
        super().__init__(f"waiting for {list(self.missing)}: nothing yet on {topics}{fix}")


def assemble_observation(
    latest: dict,
    now: float,
    max_age: float,
    need_images: bool,
    need_task_state: bool = True,
    need_calibration: bool = False,
) -> tuple[dict, float]:
    """Newest samples -> (env-style observation, its stamp = the oldest part's). Raises MessageError.

    A policy without task state (``fusion.use_task_state: false``) needs no object or goal pose: their proprio
    slots are left zero, and the model does not read them. A calibrated estimator's policy needs each camera's
    CameraInfo (of the model-size image) and optical-frame pose: ``camera_projection``; they are a mount's
    state, not samples, so they have no age."""
    parts = ["joints", "instruction"] + (["object", "goal"] if need_task_state else [])
    parts += [f"image_{c}" for c in C.CAMERAS] if need_images else []
    parts += list(CALIBRATION_ROLES) if need_calibration else []
    missing = [p for p in parts if p not in latest]
    if missing:
        raise MissingInputs(missing)
    stamps = {p: latest[p][0] for p in parts if p != "instruction" and p not in CALIBRATION_ROLES}
    stale = {p: round(now - t, 3) for p, t in stamps.items() if now - t > max_age}
    if stale:
        raise MessageError(f"stale inputs (age s): {stale}")
    pos, vel = latest["joints"][1]
    proprio = np.zeros(C.PROPRIO_DIM, np.float32)
    proprio[C.PROPRIO_SLICES["joint_positions"]] = pos
    proprio[C.PROPRIO_SLICES["joint_velocities"]] = vel
    if need_task_state:
        proprio[C.PROPRIO_SLICES["object_xy"]] = latest["object"][1]
        proprio[C.PROPRIO_SLICES["goal_xy"]] = latest["goal"][1]
    obs = {"proprio": proprio, "instruction": latest["instruction"][1]}
    if need_images:
        for cam in C.CAMERAS:
            obs[f"image_{cam}"] = latest[f"image_{cam}"][1]
    if need_calibration:
        cams = [CameraCalibration(*latest[f"camera_info_{c}"][1], latest[f"camera_pose_{c}"][1]) for c in C.CAMERAS]
        obs["camera_projection"] = projections(cams, C.IMAGE_SIZE)  # each a model-size image's calibration
    return obs, min(stamps.values())


# A camera looking straight down from 1 m above the table's middle: a well-posed stand-in for warm-up traces.
EXAMPLE_CAMERA = CameraCalibration(
    (150.0, 0.0, 63.5, 0.0, 150.0, 63.5, 0.0, 0.0, 1.0), C.IMAGE_SIZE, C.IMAGE_SIZE,
    CameraPose((0.5, 0.0, 1.0), (1.0, 0.0, 0.0, 0.0)),
)  # fmt: skip


def example_observation(images: bool, calibrated: bool = False) -> dict:
    obs = {"proprio": np.zeros(C.PROPRIO_DIM, np.float32), "instruction": C.DEFAULT_INSTRUCTION}
    if images:
        obs.update({f"image_{c}": np.zeros(C.IMAGE_SHAPE, np.uint8) for c in C.CAMERAS})
    if calibrated:
        obs["camera_projection"] = projections([EXAMPLE_CAMERA] * len(C.CAMERAS), C.IMAGE_SIZE)
    return obs


class ObservationCache:
    """The newest valid sample of each policy input (the policy node's side). Each ``on_*`` returns the
    reason a message was dropped, or '' when it was taken; out-of-order samples are dropped."""

    def __init__(self):
        self.latest: dict[str, tuple[float, object]] = {}

    def store(self, key: str, stamp: float, value) -> str:
        old = self.latest.get(key)
        if old is not None and stamp < old[0]:
            return f"out-of-order {key} dropped"
        self.latest[key] = (stamp, value)
        return ""

    def on_image(self, cam: str, msg: Image) -> str:
        try:
            rgb = image_to_rgb(msg)
        except MessageError as exc:
            return f"camera {cam}: {exc}"
        if rgb.shape != C.IMAGE_SHAPE:
            return f"camera {cam}: image {rgb.shape[:2]} is not the model size {C.IMAGE_SHAPE[:2]} (run camera_node)"
        return self.store(f"image_{cam}", stamp_to_sec(msg.header.stamp), rgb)

    def on_joints(self, msg: JointState) -> str:
        try:
            pos, vel = joint_state_vectors(msg, C.ARM_JOINTS)
        except MessageError as exc:
            return f"joints: {exc}"
        if vel is None:
            return "joints: no joint velocities (proprio_node provides them)"
        return self.store("joints", stamp_to_sec(msg.header.stamp), (pos, vel))

    def on_pose(self, key: str, msg: PoseStamped) -> str:
        try:
            return self.store(key, stamp_to_sec(msg.header.stamp), pose_xy(msg))
        except MessageError as exc:
            return f"{key} pose: {exc}"

    def on_camera_info(self, cam: str, msg: CameraInfo) -> str:
        try:
            return self.store(f"camera_info_{cam}", -np.inf, info_intrinsics(msg))  # a lens: no age
        except MessageError as exc:
            return f"camera {cam}: {exc}"

    def on_camera_pose(self, cam: str, msg: PoseStamped) -> str:
        try:
            return self.store(f"camera_pose_{cam}", -np.inf, pose_from_message(msg))  # a mount: no age
        except MessageError as exc:
            return f"camera {cam}: {exc}"

    def on_instruction(self, msg: String) -> str:
        reason = C.check_instruction(msg.data)
        if reason:
            return f"ignoring instruction: {reason}"
        return self.store("instruction", -np.inf, msg.data)  # latched state, no age


class RawInputs:
    """camera_node + proprio_node + the policy node's cache, for raw topics read without a graph. ``offer``
    takes (topic, message); topics are the contract's unless mapped (``topics``: role -> topic)."""

    ROLES = {role: topic for role, topic in TOPIC_ROLES.items() if role != "command"}

    def __init__(
        self,
        topics: dict[str, str] | None = None,
        joint_names: Sequence[str] = C.ARM_JOINTS,
        crop_square: bool = True,
    ):
        self.topic_role = {t: r for r, t in {**self.ROLES, **(topics or {})}.items()}
        self.joint_names, self.crop = list(joint_names), crop_square
        self.cache = ObservationCache()
        self.previous_joints: tuple[float, np.ndarray] | None = None
        self.dropped: dict[str, int] = {}

    @property
    def topics(self) -> list[str]:
        return list(self.topic_role)

    def offer(self, topic: str, msg) -> str:
        role = self.topic_role.get(topic)
        reason = self._offer(role, msg) if role else ""
        if reason:
            self.dropped[role] = self.dropped.get(role, 0) + 1
        return reason

    def _offer(self, role: str, msg) -> str:
        if role.startswith("image_"):
            try:
                rgb = prepare_image(image_to_rgb(msg), C.IMAGE_SIZE, self.crop)
            except MessageError as exc:
                return f"{role}: {exc}"
            return self.cache.store(role, stamp_to_sec(msg.header.stamp), rgb)
        if role == "joint_states":
            try:
                pos, vel = joint_state_vectors(msg, self.joint_names)
            except MessageError as exc:
                return f"joints: {exc}"
            t = stamp_to_sec(msg.header.stamp)
            vel = joint_velocities(pos, vel, t, self.previous_joints)
            reason = self.cache.store("joints", t, (pos, vel))
            if not reason:
                self.previous_joints = (t, pos)
            return reason
        if role in ("object_pose", "goal_pose"):
            return self.cache.on_pose(role.removesuffix("_pose"), msg)
        if role.startswith("camera_info_"):  # the driver's lens -> the model image's, as camera_node does
            try:
                k, width, height = info_intrinsics(msg)
            except MessageError as exc:
                return f"{role}: {exc}"
            k = model_intrinsics(k, width, height, C.IMAGE_SIZE, self.crop)
            return self.cache.store(role, -np.inf, (tuple(k.ravel().tolist()), C.IMAGE_SIZE, C.IMAGE_SIZE))
        if role.startswith("camera_pose_"):
            return self.cache.on_camera_pose(role.removeprefix("camera_pose_"), msg)
        return self.cache.on_instruction(msg)

    def observe(
        self, now: float, max_age: float, need_images: bool, need_task_state: bool, need_calibration: bool = False
    ) -> tuple[dict, float]:
        return assemble_observation(self.cache.latest, now, max_age, need_images, need_task_state, need_calibration)
