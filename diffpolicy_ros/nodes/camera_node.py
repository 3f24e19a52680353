"""camera_node: one camera -> ``/policy/camera/<name>``, rgb8 at the model's size.

Input is an image topic (sim_bridge or any ROS camera driver) or an OpenCV capture device. ``transport``:
``raw`` (sensor_msgs/Image, any 8-bit encoding), ``compressed`` (sensor_msgs/CompressedImage, JPEG or PNG, as
image_transport offers on ``<topic>/compressed``), or ``auto`` (compressed when the topic ends in
``/compressed``). Frames are converted to rgb8, centre-cropped to the configured aspect (optional) and resized.
Malformed or corrupt frames are counted and dropped with a throttled warning; the node keeps running.
"""

from __future__ import annotations

import cv2
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image

from diffpolicy_ros.contract import IMAGE_SIZE, policy_camera_topic, raw_camera_topic
from diffpolicy_ros.messages.conversions import MessageError, image_to_rgb, is_compressed_topic, numpy_to_image
from diffpolicy_ros.messages.observation import prepare_image
from diffpolicy_ros.nodes.common import (
    SENSOR_QOS,
    WARN_THROTTLE_S,
    ParameterError,
    flag,
    parameter,
    positive,
    run_node,
)

TRANSPORTS = ("auto", "raw", "compressed")


class CameraNode(Node):
    def __init__(self):
        super().__init__("camera_node")
        self.declare_parameter("camera_name", "top")
        self.declare_parameter("input_topic", "")  # default /cameras/<name>/image_raw
        self.declare_parameter("device", "")  # OpenCV device index or URL; overrides input_topic
        device_rate_hz = parameter(self, "device_rate_hz", 30.0, positive, "must be > 0")
        self.size = parameter(self, "image_size", IMAGE_SIZE, positive, "must be > 0 (px)")
        name = self.get_parameter("camera_name").value
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
        self.dropped = 0

    def on_image(self, msg: Image) -> None:
        try:
            rgb = image_to_rgb(msg)
        except MessageError as exc:
            self.dropped += 1
            log = self.get_logger()
            log.warn(f"dropping frame ({self.dropped} so far): {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.pub.publish(numpy_to_image(prepare_image(rgb, self.size, self.crop), msg.header.stamp, self.frame_id))

    def on_capture(self) -> None:
        ok, bgr = self.capture.read()
        if not ok or bgr is None or bgr.size == 0:
            self.get_logger().warn("capture device returned no frame", throttle_duration_sec=WARN_THROTTLE_S)
            return
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        stamp = self.get_clock().now().to_msg()
        self.pub.publish(numpy_to_image(prepare_image(rgb, self.size, self.crop), stamp, self.frame_id))

    def close(self) -> None:
        if self.capture is not None:
            self.capture.release()


def main(args: list[str] | None = None) -> int:
    return run_node(CameraNode, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
