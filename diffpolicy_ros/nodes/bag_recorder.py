"""bag_recorder: live topics -> a rosbag2 bag (``diffpolicy record OUT``, ``sim_train record:=OUT``).

Like ``ros2 bag record``: topics are discovered as they appear (all of them, or the listed ones); each is
subscribed with a QoS compatible with its publishers (reliable only if every publisher is, transient local
if every publisher is, so latched state is caught), messages are written as received (raw CDR, receive
time), and the publishers' QoS goes into metadata.yaml so ``ros2 bag play`` offers it again.
``compress_images``: raw sensor_msgs/Image topics are written as JPEG CompressedImage on ``<topic>/compressed``,
as image_transport would offer them (two raw 640x480 cameras are ~55 MB/s).
"""

from __future__ import annotations

import time

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from diffpolicy_ros.data.bag_io import message_class, open_writer, qos_profile
from diffpolicy_ros.messages.conversions import COMPRESSED_SUFFIX, MessageError, image_to_rgb, rgb_to_compressed
from diffpolicy_ros.nodes.common import ParameterError, flag, parameter, positive, run_node

IMAGE_TYPE = "sensor_msgs/msg/Image"
SKIP = ("/rosout", "/parameter_events")  # per-node infrastructure, as ros2 bag record -a skips


class BagRecorder(Node):
    def __init__(self):
        super().__init__("bag_recorder")
        out = parameter(self, "out", "", bool, "must name the bag folder to create")
        self.declare_parameter("topics", [""])  # empty: every topic
        storage = parameter(self, "storage", "mcap", lambda v: v in ("mcap", "sqlite3"), "must be mcap or sqlite3")
        version = parameter(self, "metadata_version", 9, lambda v: v in (8, 9), "must be 8 (Humble) or 9 (Jazzy)")
        self.duration = parameter(self, "duration_s", 0.0, lambda v: v >= 0, "must be >= 0 (0: until stopped)")
        discovery = parameter(self, "discovery_period_s", 0.2, positive, "must be > 0")
        self.compress = flag(self, "compress_images", False)
        self.wanted = {t for t in self.get_parameter("topics").value if t}
        try:
            self._writer_cm = open_writer(out, storage, version)
            self.bag = self._writer_cm.__enter__()
        except ValueError as exc:
            raise ParameterError(f"bag_recorder: {exc}") from exc
        self.out, self.started = out, time.monotonic()
        self.subscribed: dict[str, object] = {}
        self.count = 0
        self.create_timer(discovery, self.discover)
        self.get_logger().info(f"recording {sorted(self.wanted) or 'every topic'} to {out} ({storage})")

    def discover(self) -> None:
        if self.duration and time.monotonic() - self.started > self.duration:
            self.get_logger().info(f"recorded {self.count} messages in {self.duration:.0f} s to {self.out}")
            raise SystemExit(0)  # run_node closes the node, and with it the bag
        for topic, types in self.get_topic_names_and_types():
            if topic in self.subscribed or topic in SKIP or (self.wanted and topic not in self.wanted):
                continue
            cls = message_class(types[0])
            publishers = self.get_publishers_info_by_topic(topic)
            if cls is None or not publishers:
                continue
            profiles = [p.qos_profile for p in publishers]
            reliable = all(q.reliability == ReliabilityPolicy.RELIABLE for q in profiles)
            latched = all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in profiles)
            qos = QoSProfile(
                depth=100,  # a recorder keeps up with bursts rather than dropping
                reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
            )
            depth = max(q.depth for q in profiles) or 10  # DDS may not report the publisher's depth
            self.bag.offer_qos(topic, qos_profile(reliable, latched, depth))
            type_name = types[0]
            if self.compress and type_name == IMAGE_TYPE:
                self.bag.offer_qos(topic + COMPRESSED_SUFFIX, qos_profile(reliable, latched, depth))
                self.subscribed[topic] = self.create_subscription(
                    cls, topic, lambda msg, t=topic: self.write_compressed(t, msg), qos
                )
                continue
            self.subscribed[topic] = self.create_subscription(
                cls, topic, lambda raw, t=topic, n=type_name: self.write(t, n, raw), qos, raw=True
            )

    def write(self, topic: str, type_name: str, raw: bytes) -> None:
        self.bag.write_raw(topic, type_name, time.time_ns(), raw)  # receive time, as rosbag2 writes it
        self.count += 1

    def write_compressed(self, topic: str, msg) -> None:
        try:
            compressed = rgb_to_compressed(image_to_rgb(msg), msg.header.stamp, msg.header.frame_id)
        except MessageError as exc:
            self.get_logger().warn(f"{topic}: frame not recorded: {exc}", throttle_duration_sec=2.0)
            return
        self.bag.write(topic + COMPRESSED_SUFFIX, time.time_ns(), compressed)
        self.count += 1

    def close(self) -> None:
        self._writer_cm.__exit__(None, None, None)  # metadata.yaml is written here


def main(args: list[str] | None = None) -> int:
    return run_node(BagRecorder, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
