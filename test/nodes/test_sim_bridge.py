"""sim_bridge in driver mode (the HIL arm) across processes: ``~/reset`` lays out the next scene (seed +
episode), as ``diffpolicy bench hil`` and an operator rely on, and the block and goal poses are published only
when asked (``publish_task_state``, the graph's ``hil_task_state``): a real cell has no such topic."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest


def start_bridge(*extra: str) -> subprocess.Popen:
    params = ["-p", "driver_mode:=true", "-p", "publish_images:=false", "-p", "seed:=7", *extra]
    cmd = [sys.executable, "-m", "diffpolicy_ros.nodes.sim_bridge", "--ros-args", *params]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=20)


@pytest.mark.quick
def test_driver_mode_reset_lays_out_the_next_scene_and_poses_only_when_asked(spin_until):
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.nodes.common import SENSOR_QOS
    from diffpolicy_ros.sim import make_env

    env = make_env("push")
    scenes = [env.reset(seed=7 + k)[0]["proprio"][C.PROPRIO_SLICES["object_xy"]] for k in range(2)]
    env.close()
    bridge = start_bridge("-p", "publish_task_state:=true")
    rclpy.init()
    node = Node("bridge_probe")
    blocks: list[np.ndarray] = []
    joints: list[float] = []
    node.create_subscription(
        PoseStamped,
        C.OBJECT_POSE_TOPIC,
        lambda m: blocks.append(np.array([m.pose.position.x, m.pose.position.y])),
        SENSOR_QOS,
    )
    node.create_subscription(JointState, C.JOINT_STATES_TOPIC, lambda m: joints.append(time.monotonic()), SENSOR_QOS)
    reset = node.create_client(Trigger, "/sim_bridge/reset")

    try:
        came_up = spin_until(node, lambda: bool(blocks) and reset.service_is_ready(), 60)
        assert came_up, "no block pose from the driver-mode sim"
        np.testing.assert_allclose(blocks[-1], scenes[0], atol=1e-3)  # the first scene: seed 7
        future = reset.call_async(Trigger.Request())
        assert spin_until(node, future.done, 10) and future.result().success
        n = len(blocks)
        assert spin_until(node, lambda: len(blocks) > n + 2, 5)
        np.testing.assert_allclose(blocks[-1], scenes[1], atol=1e-3)  # reset: the next scene, seed 8
        stop(bridge)

        bridge = start_bridge()  # the default: what a cell's drivers publish, no block or goal pose
        spin_until(node, lambda: False, 1.0)
        blocks.clear()
        joints.clear()
        assert spin_until(node, lambda: len(joints) > 20, 60), "no joint states from the driver-mode sim"
        assert not blocks, "a driver-mode sim published the block pose without publish_task_state"
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        if bridge.poll() is None:
            stop(bridge)


@pytest.mark.quick
def test_the_bridge_lays_out_a_cell_from_its_cell_file(spin_until, tmp_path):
    """``cells:=FILE`` (the graphs' argument): the bridge's episodes are in cells sampled from the file — here a
    block half again as large, resting on the table at its larger half-height — on the seed's own scene."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.node import Node

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.nodes.common import SENSOR_QOS
    from diffpolicy_ros.sim import make_env

    env = make_env("push")
    scene = env.reset(seed=7)[0]["proprio"][C.PROPRIO_SLICES["object_xy"]]
    env.close()
    cells = tmp_path / "big_block.yaml"
    cells.write_text("physics: {block_size: [1.5, 1.5]}\n")
    bridge = start_bridge("-p", "publish_task_state:=true", "-p", f"cells:={cells}")
    rclpy.init()
    node = Node("bridge_cell_probe")
    blocks: list[np.ndarray] = []
    node.create_subscription(
        PoseStamped, C.OBJECT_POSE_TOPIC,
        lambda m: blocks.append(np.array([m.pose.position.x, m.pose.position.y, m.pose.position.z])), SENSOR_QOS,
    )  # fmt: skip
    try:
        assert spin_until(node, lambda: len(blocks) > 10, 60), "no block pose from the driver-mode sim"
        np.testing.assert_allclose(blocks[-1][:2], scene, atol=1e-3)  # the seed's scene
        assert blocks[-1][2] == pytest.approx(0.03, abs=2e-3)  # 1.5 x the 2 cm half-height
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop(bridge)
