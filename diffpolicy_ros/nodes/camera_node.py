"""camera_node: one camera -> ``/policy/camera/<name>``, rgb8 at the model's size.

Input is an image topic (sim_bridge or any ROS camera driver) or an OpenCV capture device. ``transport``:
``raw`` (sensor_msgs/Image, any 8-bit encoding), ``compressed`` (sensor_msgs/CompressedImage, JPEG or PNG, as
image_transport offers on ``<topic>/compressed``), or ``auto`` (compressed when the topic ends in
``/compressed``). Frames are converted to rgb8, centre-cropped to the configured aspect (optional) and resized.
Malformed or corrupt frames are counted and dropped with a throttled warning; the node keeps running.

Calibration: the driver's CameraInfo (``camera_info_topic``, default beside the image topic as image_transport
pairs them) is republished for the model-size image on ``/policy/camera/<name>/camera_info``, K cropped and
resized with the frames (what a calibrated estimator back-projects through). ``camera_calibration`` (a camera
calibration file) publishes this camera's optical-frame pose, its hand-eye calibration, latched on
``/cameras/<name>/optical_pose`` (the sim bridge publishes the sim's own there), and, where the file gives the
lens too, that CameraInfo with every frame instead of the driver's.
"""

from __future__ import annotations

import cv2
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from diffpolicy_ros.calibration import load_camera_calibration, model_intrinsics
from diffpolicy_ros.contract import (
    IMAGE_SIZE,
    camera_pose_topic,
    paired_camera_info_topic,
    policy_camera_info_topic,
    policy_camera_topic,
    raw_camera_topic,
)
from diffpolicy_ros.messages.conversions import (
    MessageError,
    camera_info,
    camera_pose,
    image_to_rgb,
    info_intrinsics,
    is_compressed_topic,
    numpy_to_image,
)
from diffpolicy_ros.messages.observation import prepare_image
from diffpolicy_ros.nodes.common import (
    LATCHED_QOS,
    SENSOR_QOS,
    WARN_THROTTLE_S,
    ParameterError,
    file_parameter,
    flag,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.user_files import CAMERA_CALIBRATION

TRANSPORTS = ("auto", "raw", "compressed")


class CameraNode(Node):
    FILE_PARAMETERS = {"camera_calibration": CAMERA_CALIBRATION}

    def __init__(self):
        super().__init__("camera_node")
        self.declare_parameter("camera_name", "top")
        self.declare_parameter("input_topic", "")  # default /cameras/<name>/image_raw
        self.declare_parameter("camera_info_topic", "")  # default: beside input_topic (image_transport's pairing)
        self.declare_parameter("device", "")  # OpenCV device index or URL; overrides input_topic
        device_rate_hz = parameter(self, "device_rate_hz", 30.0, positive, "must be > 0")
        self.size = parameter(self, "image_size", IMAGE_SIZE, positive, "must be > 0 (px)")
        name = self.get_parameter("camera_name").value
        why = "the cameras' calibration (hand-eye pose; the lens where the driver publishes no CameraInfo)"
        _, cameras = file_parameter(self, "camera_calibration", why, load_camera_calibration)
        entry = cameras[name] if cameras else None
        self.lens = entry.intrinsics if entry else None  # given by the file: sent with every frame
        self.crop = flag(self, "crop_square", True)
        self.frame_id = f"{name}_camera"
        self.pub = self.create_publisher(Image, policy_camera_topic(name), 5)
        device = str(self.get_parameter("device").value)
        self.capture = None
        if device:
            self.capture = cv2.VideoCapture(int(device) if device.isdigit() else device)
            if not self.capture.isOpened():
                name = self.get_name()
                raise ParameterError(f"{name}: parameter 'device' = {device!r}: cannot open this capture device")
            self.create_timer(1.0 / device_rate_hz, self.on_capture)
        else:
            topic = self.get_parameter("input_topic").value or raw_camera_topic(name)
            transport = parameter(self, "transport", "auto", lambda v: v in TRANSPORTS, f"one of {TRANSPORTS}")
            compressed = transport == "compressed" or (transport == "auto" and is_compressed_topic(topic))
            self.create_subscription(CompressedImage if compressed else Image, topic, self.on_image, SENSOR_QOS)
            if self.lens is None:
                info_topic = self.get_parameter("camera_info_topic").value or paired_camera_info_topic(topic)
                self.create_subscription(CameraInfo, info_topic, self.on_camera_info, SENSOR_QOS)
        self.pub_info = self.create_publisher(CameraInfo, policy_camera_info_topic(name), SENSOR_QOS)
        if entry is not None:
            self.pub_pose = self.create_publisher(PoseStamped, camera_pose_topic(name), LATCHED_QOS)
            self.pub_pose.publish(camera_pose(entry.pose, self.get_clock().now().to_msg()))
        self.dropped = 0

    def on_image(self, msg: Image) -> None:
        try:
            rgb = image_to_rgb(msg)
        except MessageError as exc:
            self.dropped += 1
            log = self.get_logger()
            log.warn(f"dropping frame ({self.dropped} so far): {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.publish_frame(rgb, msg.header.stamp)

    def publish_frame(self, rgb, stamp) -> None:
        """A frame at the model's size, and with it the file's lens where the file gives one."""
        self.pub.publish(numpy_to_image(prepare_image(rgb, self.size, self.crop), stamp, self.frame_id))
        if self.lens is not None:
            self.publish_info(*self.lens, stamp)

    def on_camera_info(self, msg: CameraInfo) -> None:
        try:
            self.publish_info(*info_intrinsics(msg), msg.header.stamp)
        except MessageError as exc:
            self.get_logger().warn(f"dropping camera_info: {exc}", throttle_duration_sec=WARN_THROTTLE_S)

    def publish_info(self, k, width: int, height: int, stamp) -> None:
        """A calibration of the driver's image -> the model image's (K cropped and resized as the frames are)."""
        k = model_intrinsics(k, width, height, self.size, self.crop)
        self.pub_info.publish(camera_info(k, self.size, self.size, stamp, self.frame_id))

    def on_capture(self) -> None:
        ok, bgr = self.capture.read()
        if not ok or bgr is None or bgr.size == 0:
            self.get_logger().warn("capture device returned no frame", throttle_duration_sec=WARN_THROTTLE_S)
            return
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        self.publish_frame(rgb, self.get_clock().now().to_msg())

    def close(self) -> None:
        if self.capture is not None:
            self.capture.release()


def main(args: list[str] | None = None) -> int:
    return run_node(CameraNode, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
