"""The safety_filter node across processes (real rclpy on loopback): it passes a valid command under its caps,
stops on a deadman expiry, latches the e-stop until ~/reset, refuses a reset while the e-stop is pressed, and
refuses to start without a box where the graph demands one."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

BOX = ["-p", "box_low:=[0.2, -0.3, 0.03]", "-p", "box_high:=[0.8, 0.3, 0.3]"]


def start_filter(*extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "diffpolicy_ros.nodes.safety_filter", "--ros-args", *BOX, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.quick
def test_filter_refuses_to_start_without_a_box_when_required():
    cmd = [sys.executable, "-m", "diffpolicy_ros.nodes.safety_filter", "--ros-args", "-p", "require_box:=true"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "box" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.quick
def test_filter_node_caps_stops_latches_and_resets(spin_until):
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.node import Node
    from std_msgs.msg import Bool, String
    from std_srvs.srv import Trigger

    from diffpolicy_ros.messages.conversions import make_pose, make_twist
    from diffpolicy_ros.nodes.common import COMMAND_QOS, LATCHED_QOS

    proc = start_filter("-p", "watch_policy_chunks:=false", "-p", "max_speed:=0.2")
    rclpy.init()
    node = Node("filter_probe")
    out, states = [], []
    node.create_subscription(TwistStamped, "/arm/cmd_twist_safe", lambda m: out.append(m), COMMAND_QOS)
    node.create_subscription(String, "/safety_filter/state", lambda m: states.append(m.data), LATCHED_QOS)
    cmd = node.create_publisher(TwistStamped, "/arm/cmd_twist", COMMAND_QOS)
    pose = node.create_publisher(PoseStamped, "/arm/ee_pose", 10)
    estop = node.create_publisher(Bool, "/safety/estop", LATCHED_QOS)
    reset = node.create_client(Trigger, "/safety_filter/reset")

    def stream(velocity, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            stamp = node.get_clock().now().to_msg()
            cmd.publish(make_twist(velocity, stamp, "world"))
            pose.publish(make_pose((0.5, 0.0, 0.1), stamp, "world"))
            rclpy.spin_once(node, timeout_sec=0.03)

    def speeds(msgs) -> list[float]:
        return [(m.twist.linear.x**2 + m.twist.linear.y**2 + m.twist.linear.z**2) ** 0.5 for m in msgs]

    try:
        assert reset.wait_for_service(timeout_sec=30), proc.stdout.read() if proc.poll() is not None else "no service"
        stream((0.6, 0.0, 0.0), 3.0)  # over the cap: passed at the cap, direction kept
        assert max(speeds(out)) == pytest.approx(0.2, abs=1e-6) and out[-1].twist.linear.x == pytest.approx(0.2)
        assert "active" in states

        out.clear()  # silence: the deadman stops the output within its limit (0.25 s) plus a tick
        spin_until(node, lambda: False, 1.0, 0.03)
        assert out and out[-1].twist.linear.x == 0.0

        estop.publish(Bool(data=True))
        stream((0.1, 0.0, 0.0), 1.0)
        assert states[-1] == "estop" and out[-1].twist.linear.x == 0.0
        future = reset.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=10)
        assert future.result() is not None, proc.stdout.read() if proc.poll() is not None else "no answer"
        assert not future.result().success and "e-stop" in future.result().message  # still pressed

        estop.publish(Bool(data=False))
        stream((0.1, 0.0, 0.0), 1.0)
        assert states[-1] == "estop" and out[-1].twist.linear.x == 0.0  # released, still latched
        future = reset.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=10)
        assert future.result().success
        stream((0.1, 0.0, 0.0), 1.5)
        assert states[-1] == "active" and out[-1].twist.linear.x == pytest.approx(0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        proc.terminate()
        proc.wait(timeout=10)
