"""bag_player: a rosbag2 bag back onto live topics, as ``ros2 bag play --clock`` does.

- messages at their recorded spacing, scaled by ``rate``, from ``start_offset_s`` into the bag;
- each topic re-offered with its recorded QoS (latched topics stay latched); ``topics`` filters; remap with
  the usual ``--ros-args -r /from:=/to``;
- ``delay_s`` before the first message (``ros2 bag play --delay``), the clock held at the start;
- ``/clock`` (``clock: true``): published at ``clock_hz`` from before the first message, at bag start +
  offset + ``rate`` x wall time, frozen while paused (``~/pause``, ``~/resume``), jumping back on ``loop``;
  a recorded ``/clock`` is then not replayed. Nodes with ``use_sim_time`` read the bag's time;
- at the end (without ``loop``) ``~/done`` (std_msgs/Bool, latched) turns true and the node exits.
"""

from __future__ import annotations

import threading
import time

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from diffpolicy_ros import contract as C
from diffpolicy_ros.data.bag_io import BagError, bag_info, message_class
from diffpolicy_ros.messages.conversions import sec_to_stamp
from diffpolicy_ros.nodes.common import (
    LATCHED_QOS,
    ParameterError,
    file_parameter,
    flag,
    parameter,
    positive,
    quiet_on_stop,
    run_node,
)
from diffpolicy_ros.user_files import BAG

NS = 1_000_000_000
CLOCK_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)  # rosbag2's clock publisher QoS


def rclpy_qos(recorded) -> QoSProfile:
    """A recorded (rosbags) QoS profile -> rclpy. None recorded (a bag from another tool): reliable, transient
    local, depth 10 — a latched subscriber (the instruction) still gets it, and volatile ones accept it too."""
    if recorded is None:
        return QoSProfile(depth=10, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    latched = recorded.durability.name == "TRANSIENT_LOCAL"
    best_effort = recorded.reliability.name == "BEST_EFFORT"
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=max(int(recorded.depth), 1),
        reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


class BagPlayer(Node):
    FILE_PARAMETERS = {"bag": BAG}

    def __init__(self):
        super().__init__("bag_player")
        from rosbags.rosbag2 import Reader

        self.path, self.info = file_parameter(self, "bag", "the bag to play", bag_info)
        if not self.path:
            raise ParameterError("bag_player: parameter 'bag' = '': must name a bag")
        self.rate = parameter(self, "rate", 1.0, positive, "must be > 0")
        self.offset = parameter(self, "start_offset_s", 0.0, lambda v: v >= 0, "must be >= 0")
        self.loop = flag(self, "loop", False)
        self.clock = flag(self, "clock", True)
        clock_hz = parameter(self, "clock_hz", 40.0, positive, "must be > 0")
        # like ros2 bag play --delay: time for subscribers (a recorder, the graph) to discover the topics
        self.delay = parameter(self, "delay_s", 0.0, lambda v: v >= 0, "must be >= 0")
        # a replay waits for its policy (the first load can build the native kernel for a minute): playing starts
        # when this latched topic says so, then after delay_s; past wait_timeout_s the player fails loudly
        self.wait_for = parameter(self, "wait_for_topic", "")
        self.wait_timeout = parameter(self, "wait_timeout_s", 600.0, positive, "must be > 0")
        self.declare_parameter("topics", [""])
        wanted = {t for t in self.get_parameter("topics").value if t}
        try:
            self.reader = Reader(self.path)
            self.reader.open()
        except (BagError, OSError) as exc:
            raise ParameterError(f"bag_player: {exc}") from exc
        self.connections, self.publishers_by_topic = [], {}
        for conn in self.reader.connections:
            if (wanted and conn.topic not in wanted) or (self.clock and conn.topic == C.CLOCK_TOPIC):
                continue
            cls = message_class(conn.msgtype)
            if cls is None:
                self.get_logger().warn(f"skipping {conn.topic}: {conn.msgtype} is not installed")
                continue
            if conn.topic not in self.publishers_by_topic:
                profiles = getattr(conn.ext, "offered_qos_profiles", None) or [None]
                self.publishers_by_topic[conn.topic] = self.create_publisher(cls, conn.topic, rclpy_qos(profiles[0]))
            self.connections.append(conn)

        self.lock = threading.Lock()
        self.paused = True  # the clock holds at the bag's start until play() starts (after the wait and the delay)
        self.bag_t0 = self.info.start_ns + round(self.offset * NS)
        self.anchor = (time.monotonic(), self.bag_t0)  # (wall, bag time) of the last (re)start
        self.pub_clock = self.create_publisher(Clock, C.CLOCK_TOPIC, CLOCK_QOS) if self.clock else None
        self.pub_done = self.create_publisher(Bool, "~/done", LATCHED_QOS)
        self.pub_done.publish(Bool(data=False))
        self.pub_status = self.create_publisher(String, "~/status", LATCHED_QOS)  # waiting | playing | failed: ...
        self.ready = threading.Event()
        if self.wait_for:
            self.paused = True  # the clock holds at the bag's start until the policy is ready
            self.create_subscription(String, self.wait_for, lambda _: self.ready.set(), LATCHED_QOS)
            self.set_status(f"waiting for {self.wait_for} (up to {self.wait_timeout:.0f} s)")
        else:
            self.ready.set()
        self.failure = ""
        self.create_service(Trigger, "~/pause", self.on_pause)
        self.create_service(Trigger, "~/resume", self.on_resume)
        if self.clock:
            self.publish_clock()  # before any data: sim-time nodes start at the bag's time
            self.create_timer(1.0 / clock_hz, self.publish_clock)
        self.finished = threading.Event()
        self.done_at: float | None = None
        self.thread = threading.Thread(target=self.play, name="player", daemon=True)
        self.thread.start()
        self.create_timer(0.1, self.check_done)
        topics, left_s = len(self.publishers_by_topic), max(self.info.duration_s - self.offset, 0.0) / self.rate
        took = f"{left_s / 60:.1f} min" if left_s >= 60 else f"{left_s:.0f} s"  # a long bag plays for a while
        self.get_logger().info(f"playing {self.path} ({self.info.duration_s:.1f} s, {topics} topics) at {self.rate}x: "
                               f"{took} to play" + (", looped" if self.loop else ""))  # fmt: skip

    def bag_now(self) -> int:
        with self.lock:
            wall, bag_t = self.anchor
            if self.paused:
                return bag_t
            return bag_t + round((time.monotonic() - wall) * self.rate * NS)

    def publish_clock(self) -> None:
        self.pub_clock.publish(Clock(clock=sec_to_stamp(self.bag_now() / NS)))

    def on_pause(self, request, response):
        with self.lock:
            if not self.paused:
                wall, bag_t = self.anchor
                self.anchor = (time.monotonic(), bag_t + round((time.monotonic() - wall) * self.rate * NS))
                self.paused = True
        response.success, response.message = True, "paused"
        return response

    def on_resume(self, request, response):
        with self.lock:
            if self.paused:
                self.anchor = (time.monotonic(), self.anchor[1])
                self.paused = False
        response.success, response.message = True, "playing"
        return response

    def set_status(self, status: str) -> None:
        self.pub_status.publish(String(data=status))
        self.get_logger().info(status) if not status.startswith("failed") else self.get_logger().error(status)

    def play(self) -> None:
        with quiet_on_stop(self):  # a stop mid-publish ends the replay, it is no failure
            self.replay()
        self.finished.set()

    def replay(self) -> None:
        if not self.ready.wait(self.wait_timeout):
            waited = f"{self.wait_timeout:.0f} s"
            self.failure = f"failed: nothing on {self.wait_for} within {waited} (the policy never became ready)"
            self.set_status(self.failure)
            return
        if self.wait_for:
            self.set_status(f"{self.wait_for} is ready: playing in {self.delay:.1f} s")
        if self.delay:
            time.sleep(self.delay)
        self.on_resume(None, Trigger.Response())
        while True:
            for conn, t_ns, raw in self.reader.messages(connections=self.connections, start=self.bag_t0):
                while self.bag_now() < t_ns:  # wait for the message's time (bag time runs at rate x wall)
                    if self.finished.is_set():
                        return
                    time.sleep(min(0.005, max((t_ns - self.bag_now()) / NS / self.rate, 0.0)))
                self.publishers_by_topic[conn.topic].publish(bytes(raw))
            if not self.loop:
                break
            with self.lock:  # the clock jumps back to the start, as ros2 bag play --loop does
                self.anchor = (time.monotonic(), self.bag_t0)

    def check_done(self) -> None:
        if not self.finished.is_set():
            return
        if self.done_at is None:
            self.done_at = time.monotonic()
            if not self.failure:
                self.pub_done.publish(Bool(data=True))
                self.set_status("finished")
        elif time.monotonic() - self.done_at > 1.0:  # let the latched 'done' reach its subscribers first
            raise SystemExit(1 if self.failure else 0)

    def close(self) -> None:
        self.finished.set()
        self.thread.join(timeout=2)
        self.reader.close()


def main(args: list[str] | None = None) -> int:
    return run_node(BagPlayer, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
