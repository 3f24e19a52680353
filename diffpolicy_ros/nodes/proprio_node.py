"""proprio_node: ``/joint_states`` -> ``/policy/joint_states`` in the model's joint order, validated.

Messages with missing joints or non-finite values are dropped (throttled warning). When the driver gives
no velocities they are estimated by finite differences. Output runs at a steady rate and only while the
newest valid sample is fresh, so downstream nodes see the stream stop instead of stale data.
"""

from __future__ import annotations

import threading

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState

from diffpolicy_ros.contract import ARM_JOINTS, JOINT_STATES_TOPIC, POLICY_JOINT_STATES_TOPIC
from diffpolicy_ros.messages.conversions import MessageError, joint_state_vectors, make_joint_state, stamp_to_sec
from diffpolicy_ros.messages.observation import joint_velocities
from diffpolicy_ros.nodes.common import SENSOR_QOS, WARN_THROTTLE_S, parameter, positive, run_node


class ProprioNode(Node):
    def __init__(self):
        super().__init__("proprio_node")
        self.declare_parameter("joint_names", list(ARM_JOINTS))
        rate_hz = parameter(self, "rate_hz", 20.0, positive, "must be > 0")
        self.max_age = parameter(self, "max_age_s", 0.25, positive, "must be > 0")
        self.joints = list(self.get_parameter("joint_names").value)
        self.lock = threading.Lock()
        self.latest: tuple[float, object, np.ndarray, np.ndarray] | None = None  # (t, stamp, pos, vel)
        self.pub = self.create_publisher(JointState, POLICY_JOINT_STATES_TOPIC, 10)
        self.create_subscription(JointState, JOINT_STATES_TOPIC, self.on_joint_state, SENSOR_QOS)
        self.create_timer(1.0 / rate_hz, self.publish)

    def on_joint_state(self, msg: JointState) -> None:
        try:
            pos, vel = joint_state_vectors(msg, self.joints)
        except MessageError as exc:
            self.get_logger().warn(f"dropping joint_states: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        t = stamp_to_sec(msg.header.stamp)
        with self.lock:
            prev = self.latest
            if prev is not None and t < prev[0]:
                self.get_logger().warn("dropping out-of-order joint_states", throttle_duration_sec=WARN_THROTTLE_S)
                return
            # estimated from the previous valid sample when the driver sends none (a repeated stamp replaces it)
            vel = joint_velocities(pos, vel, t, None if prev is None else (prev[0], prev[2]))
            self.latest = (t, msg.header.stamp, pos, vel)

    def publish(self) -> None:
        with self.lock:
            latest = self.latest
        if latest is None:
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        if now - latest[0] > self.max_age:
            self.get_logger().warn("joint_states stale: not publishing", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.pub.publish(make_joint_state(self.joints, latest[2], latest[3], latest[1]))


def main(args: list[str] | None = None) -> int:
    return run_node(ProprioNode, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
