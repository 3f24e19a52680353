"""ROS message <-> numpy conversions with validation. No rclpy node code here, so it is testable alone.

Every ``*_to_*`` that reads a message raises :class:`MessageError` with a one-line reason on bad input;
nodes catch it, log a throttled warning and publish nothing unsafe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import PoseStamped, Transform, Twist, TwistStamped, Vector3
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, JointState
from trajectory_msgs.msg import MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint

from diffpolicy_ros.calibration import CameraPose

try:  # cv_bridge on a ROS 2 distro machine; plain numpy otherwise (PyPI's cv-bridge is a broken ROS 1 copy)
    from cv_bridge import CvBridge

    _BRIDGE: CvBridge | None = CvBridge()
except Exception:  # ImportError, or a cv_bridge built against another numpy
    _BRIDGE = None

CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1, "8UC1": 1, "8UC3": 3}
CHUNK_JOINT_NAME = "pusher_tip"


class MessageError(ValueError):
    """A message that cannot be used; the text says why."""


def stamp_to_sec(stamp: Time) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def sec_to_stamp(t: float) -> Time:
    sec = math.floor(t)
    return Time(sec=int(sec), nanosec=min(int(round((t - sec) * 1e9)), 999_999_999))


# ------------------------------------------------------------------------------------------- images
def numpy_to_image(rgb: np.ndarray, stamp: Time, frame_id: str) -> Image:
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise MessageError(f"expected uint8 [H, W, 3], got {rgb.dtype} {rgb.shape}")
    msg = Image()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.height, msg.width = rgb.shape[:2]
    msg.encoding, msg.is_bigendian, msg.step = "rgb8", 0, rgb.shape[1] * 3
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg


COMPRESSED_SUFFIX = "/compressed"  # image_transport's topic for sensor_msgs/CompressedImage
COMPRESSED_FORMATS = ("jpeg", "png")


def is_compressed_topic(topic: str) -> bool:
    return topic.rstrip("/").endswith(COMPRESSED_SUFFIX)


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """A JPEG or PNG sensor_msgs/CompressedImage (what image_transport offers and cells record) -> uint8
    [H, W, 3] RGB, decoded with OpenCV; a corrupt or truncated frame is a MessageError (counted, skipped)."""
    import cv2

    fmt = msg.format.lower()
    if not any(f in fmt for f in COMPRESSED_FORMATS) and fmt not in ("", "rgb8", "bgr8"):
        raise MessageError(f"unsupported compressed format {msg.format!r} (supported: jpeg, png)")
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if data.size == 0:
        raise MessageError("empty compressed image")
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise MessageError(f"corrupt compressed image ({data.size} bytes of {msg.format or 'unknown format'})")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def rgb_to_compressed(rgb: np.ndarray, stamp: Time, frame_id: str, fmt: str = "jpeg", quality: int = 90):
    """uint8 [H, W, 3] RGB -> sensor_msgs/CompressedImage as image_transport's compressed plugin writes it."""
    import cv2

    ext, params = (".png", []) if fmt == "png" else (".jpg", [cv2.IMWRITE_JPEG_QUALITY, quality])
    ok, buf = cv2.imencode(ext, cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise MessageError(f"could not encode a {rgb.shape} image as {fmt}")
    msg = CompressedImage(format=f"rgb8; {fmt} compressed bgr8", data=buf.tobytes())
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    return msg


def image_to_rgb(msg: Image | CompressedImage) -> np.ndarray:
    """Any supported 8-bit encoding, or a JPEG/PNG CompressedImage -> uint8 [H, W, 3] RGB."""
    if isinstance(msg, CompressedImage) or type(msg).__name__ == "CompressedImage":
        return compressed_to_rgb(msg)
    enc = msg.encoding
    if enc not in CHANNELS:
        raise MessageError(f"unsupported image encoding {enc!r} (supported: {sorted(CHANNELS)})")
    if msg.height == 0 or msg.width == 0:
        raise MessageError("empty image")
    ch = CHANNELS[enc]
    if msg.step < msg.width * ch or len(msg.data) < msg.step * msg.height:
        raise MessageError(f"image data too short: step {msg.step}, {len(msg.data)} bytes for {msg.height} rows")
    if _BRIDGE is not None:
        return _BRIDGE.imgmsg_to_cv2(msg, desired_encoding="rgb8")
    rows = np.frombuffer(bytes(msg.data), dtype=np.uint8)[: msg.step * msg.height].reshape(msg.height, msg.step)
    img = rows[:, : msg.width * ch].reshape(msg.height, msg.width, ch)
    if enc in ("mono8", "8UC1"):
        return np.repeat(img, 3, axis=2)
    if enc in ("bgr8", "bgra8"):
        return np.ascontiguousarray(img[:, :, 2::-1])
    return np.ascontiguousarray(img[:, :, :3])


def camera_info(k, width: int, height: int, stamp: Time, frame_id: str) -> CameraInfo:
    """A pinhole camera's CameraInfo from its K (9 numbers; no distortion: the images are rectified or ideal)."""
    k = [float(v) for v in np.asarray(k, dtype=np.float64).flatten()]
    msg = CameraInfo()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.width, msg.height = int(width), int(height)
    msg.distortion_model = "plumb_bob"
    msg.d = [0.0] * 5
    msg.k = k
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [k[0], k[1], k[2], 0.0, k[3], k[4], k[5], 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


def info_intrinsics(msg: CameraInfo) -> tuple[tuple[float, ...], int, int]:
    """(K, width, height) of a CameraInfo; raises MessageError on one that calibrates nothing (all zeros, as an
    uncalibrated driver sends, or not finite)."""
    k = np.asarray(msg.k, dtype=np.float64)
    if k.shape != (9,) or not np.all(np.isfinite(k)) or k[0] <= 0 or k[4] <= 0 or msg.width <= 0 or msg.height <= 0:
        raise MessageError(f"camera_info: K {k.tolist()} for {msg.width}x{msg.height} is not a calibration")
    return tuple(k.tolist()), int(msg.width), int(msg.height)


def camera_pose(pose: CameraPose, stamp: Time) -> PoseStamped:
    """A camera's optical frame (x right, y down, z forward) in its frame: its hand-eye calibration."""
    msg = PoseStamped()
    msg.header.stamp, msg.header.frame_id = stamp, pose.frame_id
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in pose.position)
    o = msg.pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in pose.orientation)
    return msg


def pose_from_message(msg: PoseStamped) -> CameraPose:
    """A camera's optical-frame pose; raises MessageError on a non-finite position or a zero quaternion."""
    p, o = msg.pose.position, msg.pose.orientation
    position, orientation = (p.x, p.y, p.z), (o.x, o.y, o.z, o.w)
    if not np.all(np.isfinite(position + orientation)) or np.linalg.norm(orientation) < 1e-6:
        raise MessageError(f"camera pose: position {position}, orientation {orientation} is not a pose")
    return CameraPose(position, orientation, msg.header.frame_id)


# ------------------------------------------------------------------------------------------- joints
def joint_state_vectors(msg: JointState, joint_order: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
    """Positions (and velocities when the driver gives them) in ``joint_order``; raises on missing/NaN."""
    index = {name: i for i, name in enumerate(msg.name)}
    missing = [j for j in joint_order if j not in index]
    if missing:
        raise MessageError(f"joint_states lacks {missing}")
    if len(msg.position) != len(msg.name):
        raise MessageError(f"joint_states has {len(msg.name)} names but {len(msg.position)} positions")
    order = [index[j] for j in joint_order]
    pos = np.asarray(msg.position, dtype=np.float64)[order]
    if not np.all(np.isfinite(pos)):
        raise MessageError("joint_states has non-finite positions")
    vel = None
    if len(msg.velocity) == len(msg.name):
        vel = np.asarray(msg.velocity, dtype=np.float64)[order]
        if not np.all(np.isfinite(vel)):
            raise MessageError("joint_states has non-finite velocities")
    return pos, vel


def make_joint_state(names: Sequence[str], pos: np.ndarray, vel: np.ndarray, stamp: Time) -> JointState:
    msg = JointState()
    msg.header.stamp = stamp
    msg.name = list(names)
    msg.position = [float(x) for x in pos]
    msg.velocity = [float(x) for x in vel]
    return msg


# ------------------------------------------------------------------------------------------- poses
def make_pose(xyz: Sequence[float], stamp: Time, frame_id: str, yaw: float = 0.0) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in xyz)
    msg.pose.orientation.z, msg.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return msg


def pose_xy(msg: PoseStamped) -> np.ndarray:
    xy = np.array([msg.pose.position.x, msg.pose.position.y])
    if not np.all(np.isfinite(xy)):
        raise MessageError("pose has non-finite position")
    return xy


# ------------------------------------------------------------------------------------------- chunks / twists
def chunk_to_trajectory(chunk: np.ndarray, stamp: Time, dt: float, frame_id: str) -> MultiDOFJointTrajectory:
    """[H, 3] velocities -> MultiDOFJointTrajectory: H points ``dt`` apart, velocities[0].linear = v."""
    msg = MultiDOFJointTrajectory()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.joint_names = [CHUNK_JOINT_NAME]
    for k, v in enumerate(np.asarray(chunk, dtype=np.float64)):
        point = MultiDOFJointTrajectoryPoint()
        point.transforms = [Transform()]
        point.velocities = [Twist(linear=Vector3(x=float(v[0]), y=float(v[1]), z=float(v[2])))]
        t = k * dt
        point.time_from_start = Duration(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))
        msg.points.append(point)
    return msg


def trajectory_to_chunk(msg: MultiDOFJointTrajectory, horizon: int, dt: float) -> np.ndarray:
    """Validated [H, 3] velocities; raises on the wrong length, spacing, or non-finite values."""
    if len(msg.points) != horizon:
        raise MessageError(f"chunk has {len(msg.points)} points, expected {horizon}")
    chunk = np.empty((horizon, 3))
    for k, point in enumerate(msg.points):
        if not point.velocities:
            raise MessageError(f"chunk point {k} has no velocity")
        lin = point.velocities[0].linear
        chunk[k] = (lin.x, lin.y, lin.z)
        t = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
        if abs(t - k * dt) > 1e-3:
            raise MessageError(f"chunk point {k} at {t:.3f} s, expected {k * dt:.3f} s")
    if not np.all(np.isfinite(chunk)):
        raise MessageError("chunk has non-finite velocities")
    return chunk


def make_twist(v: Sequence[float], stamp: Time, frame_id: str) -> TwistStamped:
    msg = TwistStamped()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v)
    return msg


def twist_vector(msg: TwistStamped) -> np.ndarray:
    v = np.array([msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z])
    if not np.all(np.isfinite(v)):
        raise MessageError("twist has non-finite values")
    return v
