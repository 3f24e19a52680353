"""Calibrated cameras: a camera's intrinsics (a ``sensor_msgs/CameraInfo``'s K) and its pose (hand-eye
calibration), and the projection they give from the table to the model's 128 x 128 image.

Conventions are ROS's and OpenCV's: the optical frame has x right, y down, z forward (REP 103's ``_optical``
frames); pixel centres sit at integer coordinates, so an ideal camera's principal point is ((W - 1) / 2,
(H - 1) / 2); quaternions are (x, y, z, w) as in ``geometry_msgs/Quaternion``; the pose is the optical frame's
in the world frame (``contract.WORLD_FRAME``: the arm's base, the table at z = 0).

A calibrated task-state estimator (``FusionConfig.task_state_estimator: calibrated``) finds the block and the
goal in each image and back-projects the pixel through this projection onto the plane at their known height,
so a camera that moves, turns or zooms changes the projection it is given, not the mapping it learnt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from diffpolicy_ros.config import ConfigError, read_yaml_mapping
from diffpolicy_ros.contract import CAMERAS, WORLD_FRAME
from diffpolicy_ros.user_files import CAMERA_CALIBRATION

# Heights (world z, m) at which the estimator back-projects: the block's centre (the MJCF block is 4 cm tall,
# resting on the table at z = 0) and the goal marker's (on the table).
BLOCK_CENTRE_Z = 0.02
GOAL_Z = 0.0
# MuJoCo's camera frame (x right, y up, looking along -z) -> the optical frame (x right, y down, z forward).
_MUJOCO_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])


def quaternion_matrix(q_xyzw) -> np.ndarray:
    """A unit quaternion (x, y, z, w) -> its 3x3 rotation matrix (normalised first)."""
    x, y, z, w = np.asarray(q_xyzw, dtype=np.float64) / np.linalg.norm(q_xyzw)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def matrix_quaternion(r: np.ndarray) -> tuple[float, float, float, float]:
    """A 3x3 rotation matrix -> its unit quaternion (x, y, z, w), w >= 0 (Shepperd's method: the largest of w, x,
    y, z is found first, so half-turns, where w is 0, come out right)."""
    m = np.asarray(r, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2 * math.sqrt(trace + 1)
        q = ((m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4)
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2 * math.sqrt(1 + m[0, 0] - m[1, 1] - m[2, 2])
        q = (s / 4, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s)
    elif m[1, 1] > m[2, 2]:
        s = 2 * math.sqrt(1 + m[1, 1] - m[0, 0] - m[2, 2])
        q = ((m[0, 1] + m[1, 0]) / s, s / 4, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s)
    else:
        s = 2 * math.sqrt(1 + m[2, 2] - m[0, 0] - m[1, 1])
        q = ((m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, s / 4, (m[1, 0] - m[0, 1]) / s)
    q = np.array(q) * (1 if q[3] >= 0 else -1)
    return tuple(float(v) for v in q / np.linalg.norm(q))


def model_intrinsics(k, width: int, height: int, size: int, crop_square: bool) -> np.ndarray:
    """A camera's K (3x3, or CameraInfo's 9 numbers) -> the K of the model's ``size`` x ``size`` image, cropped
    and resized as ``messages.observation.prepare_image`` does (centre square crop, then resize)."""
    k = np.asarray(k, dtype=np.float64).reshape(3, 3)
    ox = oy = 0.0
    sx, sy = size / width, size / height
    if crop_square:
        side = min(width, height)
        ox, oy = (width - side) // 2, (height - side) // 2
        sx = sy = size / side
    # a resize maps pixel centre u to (u + 0.5) * s - 0.5
    return np.array([
        [k[0, 0] * sx, k[0, 1] * sx, (k[0, 2] - ox + 0.5) * sx - 0.5],
        [0.0, k[1, 1] * sy, (k[1, 2] - oy + 0.5) * sy - 0.5],
        [0.0, 0.0, 1.0],
    ])  # fmt: skip


@dataclass(frozen=True)
class CameraPose:
    """A camera's optical frame in ``frame_id``: what a hand-eye calibration gives."""

    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]  # x, y, z, w
    frame_id: str = WORLD_FRAME


@dataclass(frozen=True)
class CameraCalibration:
    """One camera: CameraInfo's K and image size, and the optical frame's pose (in the world frame)."""

    k: tuple[float, ...]  # 9 numbers, row-major (CameraInfo.k)
    width: int
    height: int
    pose: CameraPose

    def world_to_camera(self) -> np.ndarray:
        """[R^T | -R^T p]: world points -> optical-frame points (3x4)."""
        r = quaternion_matrix(self.pose.orientation)
        return np.hstack([r.T, -r.T @ np.asarray(self.pose.position, dtype=np.float64)[:, None]])

    def projection(self, size: int, crop_square: bool = True) -> np.ndarray:
        """The 3x4 matrix from world points (homogeneous) to pixels of the model's ``size`` x ``size`` image."""
        return model_intrinsics(self.k, self.width, self.height, size, crop_square) @ self.world_to_camera()


def mujoco_calibration(model, data, camera: str, width: int, height: int) -> CameraCalibration:
    """A MuJoCo camera's exact calibration for a ``width`` x ``height`` image (after ``mj_forward``): square
    pixels, the principal point at the centre."""
    cid = model.camera(camera).id
    f = 0.5 * height / math.tan(math.radians(float(model.cam_fovy[cid])) / 2)
    k = (f, 0.0, (width - 1) / 2, 0.0, f, (height - 1) / 2, 0.0, 0.0, 1.0)
    rotation = data.cam_xmat[cid].reshape(3, 3) @ _MUJOCO_TO_OPTICAL
    pose = CameraPose(tuple(float(v) for v in data.cam_xpos[cid]), matrix_quaternion(rotation))
    return CameraCalibration(k, width, height, pose)


def projections(calibrations, size: int) -> np.ndarray:
    """Cameras' projections onto the model's ``size`` x ``size`` image, stacked: float32 [cameras, 3, 4] (what
    an observation's ``camera_projection`` holds)."""
    return np.stack([c.projection(size) for c in calibrations]).astype(np.float32)


CAMERA_KEYS = {"position", "orientation", "camera_info"}  # of one camera in a camera calibration file


@dataclass(frozen=True)
class CameraEntry:
    """One camera of a camera calibration file: its pose, and its lens where the file gives one (else the
    driver's CameraInfo is used): (K, width, height)."""

    pose: CameraPose
    intrinsics: tuple[tuple[float, ...], int, int] | None = None


def _numbers(value, n: int, key: str) -> tuple[float, ...]:
    numbers = isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
    if not numbers or len(value) != n or not np.all(np.isfinite(value)):
        raise ConfigError(f"{key} = {value!r}: expected {n} finite numbers")
    return tuple(float(x) for x in value)


def _intrinsics(info, key: str) -> tuple[tuple[float, ...], int, int]:
    if not isinstance(info, dict) or set(info) != {"k", "width", "height"}:
        raise ConfigError(f"{key}: expected exactly k: [9 numbers, CameraInfo's K], width and height (px)")
    k = _numbers(info["k"], 9, f"{key}.k")
    size = [info[name] for name in ("width", "height")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size) or k[0] <= 0 or k[4] <= 0:
        raise ConfigError(f"{key}: width {size[0]!r}, height {size[1]!r}, fx {k[0]}, fy {k[4]}: expected all > 0")
    return k, size[0], size[1]


def load_camera_calibration(path: str | Path) -> dict[str, CameraEntry]:
    """A camera calibration file (``config/cells/sim_cameras.yaml``): ``frame_id`` (default the world frame) and,
    for every camera, ``position: [x, y, z]`` (m) and ``orientation: [x, y, z, w]`` of its optical frame, and
    optionally ``camera_info: {k, width, height}`` (for a camera whose driver publishes no CameraInfo). Every
    mistake is one line naming the file and the key."""
    label = f"{CAMERA_CALIBRATION.name} {path}"
    data = read_yaml_mapping(path, CAMERA_CALIBRATION)
    unknown = set(data) - {"frame_id", "cameras"}
    if unknown:
        raise ConfigError(f"{label}: unknown key(s) {sorted(unknown)}; valid: ['cameras', 'frame_id']")
    frame = data.get("frame_id", WORLD_FRAME)
    cameras = data.get("cameras")
    if not isinstance(frame, str) or not frame:
        raise ConfigError(f"{label}: frame_id = {frame!r}: expected a frame name ({WORLD_FRAME!r}: the arm's base)")
    if not isinstance(cameras, dict) or set(cameras) != set(CAMERAS):
        got = sorted(cameras) if isinstance(cameras, dict) else cameras
        raise ConfigError(f"{label}: cameras must map each of {list(CAMERAS)} to its calibration, got {got!r}")
    entries = {}
    for cam, entry in cameras.items():
        key = f"{label}: cameras.{cam}"
        if not isinstance(entry, dict) or not {"position", "orientation"} <= set(entry) <= CAMERA_KEYS:
            raise ConfigError(f"{key}: expected position: [x, y, z], orientation: [x, y, z, w] and optionally "
                              "camera_info: {k, width, height}")  # fmt: skip
        position = _numbers(entry["position"], 3, f"{key}.position")
        orientation = _numbers(entry["orientation"], 4, f"{key}.orientation")
        norm = float(np.linalg.norm(orientation))
        if abs(norm - 1) > 1e-3:
            raise ConfigError(f"{key}.orientation: a unit quaternion [x, y, z, w] (its norm is {norm:.4g})")
        info = _intrinsics(entry["camera_info"], f"{key}.camera_info") if "camera_info" in entry else None
        entries[cam] = CameraEntry(CameraPose(position, orientation, frame), info)
    return entries
