"""The real_arm graph end to end in hardware-in-the-loop mode (``hil:=true``): the sim as a driver-mode arm
behind a MoveIt Servo stand-in, cameras -> camera nodes -> policy (cameras + joint state, no block or goal
pose) -> executor -> safety filter -> Servo input. Real rclpy across processes on loopback.

The policy is a real vision diffusion policy whose action normalizer spans one velocity, so every chunk is
that velocity: the test checks the safety plumbing deterministically, not a policy's skill.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from diffpolicy_ros import contract as C
from diffpolicy_ros.bench.safety import constant_velocity_checkpoint
from diffpolicy_ros.nodes.runner import graph_node_pid, spawn_graph, stop_graph

REPO = Path(__file__).resolve().parents[2]
SERVO = "/servo_node/delta_twist_cmds"
MAX_SPEED = 0.1
VELOCITY = (0.03, 0.0, 0.0)  # slow enough that the run ends well before the tool reaches the box face


@pytest.mark.slow
def test_real_arm_hil_graph_is_safe_end_to_end(tmp_path, spin_until):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.node import Node
    from std_msgs.msg import Bool, String
    from std_srvs.srv import Trigger
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.messages.conversions import chunk_to_trajectory, sec_to_stamp
    from diffpolicy_ros.nodes.common import COMMAND_QOS, DIAGNOSTICS_QOS, LATCHED_QOS, SENSOR_QOS

    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", VELOCITY)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(ckpt.read_bytes()[:5000])  # a truncated file
    overrides = {
        "hil": "true",
        "checkpoint": str(ckpt),
        "box_low": str(list(C.WORKSPACE_LOW)),
        "box_high": str(list(C.WORKSPACE_HIGH)),
        "max_speed": str(MAX_SPEED),
        "dry_run": "false",
        "allow_unproven": "true",  # a constant-velocity stand-in policy (the gate has its own test)
    }
    log = open(tmp_path / "graph.log", "w")
    graph = spawn_graph("real_arm", overrides, {**os.environ, "PYTHONPATH": str(REPO)}, stdout=log)
    rclpy.init()
    node = Node("hil_probe")
    out, chunks, poses, states = [], [], [], []
    node.create_subscription(TwistStamped, SERVO, lambda m: out.append((time.monotonic(), m)), COMMAND_QOS)
    node.create_subscription(
        MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, lambda m: chunks.append(time.monotonic()), COMMAND_QOS
    )

    def on_pose(m):
        poses.append((m.pose.position.x, m.pose.position.y, m.pose.position.z))

    node.create_subscription(PoseStamped, C.EE_POSE_TOPIC, on_pose, SENSOR_QOS)
    node.create_subscription(String, "/safety_filter/state", lambda m: states.append(m.data), LATCHED_QOS)
    policy_status = []
    node.create_subscription(
        DiagnosticArray,
        C.DIAGNOSTICS_TOPIC,
        lambda m: policy_status.extend(s for s in m.status if s.name == "/policy_node"),
        DIAGNOSTICS_QOS,
    )
    estop = node.create_publisher(Bool, C.ESTOP_TOPIC, LATCHED_QOS)
    announce = node.create_publisher(String, C.CHECKPOINT_TOPIC, LATCHED_QOS)
    attacker = node.create_publisher(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, COMMAND_QOS)
    reset = node.create_client(Trigger, "/safety_filter/reset")

    def speed(m) -> float:
        return float(np.linalg.norm([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z]))

    def moving() -> bool:
        return bool(out) and speed(out[-1][1]) > 0.5 * VELOCITY[0]

    try:
        # 1. no motion before every input the policy uses has been seen: one camera is held frozen (SIGSTOP)
        #    from the start; with the policy loaded and every other input alive, nothing moves; once the
        #    camera runs, the arm does
        camera, deadline = None, time.monotonic() + 30
        while camera is None and time.monotonic() < deadline:
            try:
                camera = graph_node_pid(graph, "camera_side")
            except RuntimeError:  # not started yet
                time.sleep(0.1)
        os.kill(camera, signal.SIGSTOP)
        loaded = spin_until(node, lambda: bool(policy_status) and policy_status[-1].message == "ok", 90, 0.02)
        spin_until(node, lambda: False, 3.0, 0.02)
        os.kill(camera, signal.SIGCONT)
        assert loaded, "the policy never loaded: " + (tmp_path / "graph.log").read_text()[-3000:]
        assert out and all(speed(m) == 0 for _, m in out), "moved with a camera missing"
        assert not chunks, "a chunk without both cameras"
        graph_log = (tmp_path / "graph.log").read_text
        assert spin_until(node, moving, 60, 0.02), "the arm never moved: " + graph_log()[-3000:]
        spin_until(node, lambda: False, 2.0, 0.02)
        assert max(speed(m) for _, m in out) <= MAX_SPEED + 1e-6
        assert poses[-1][0] > poses[0][0] + 0.02, "the sim arm did not follow the commands"

        # 2. a corrupt checkpoint is refused while the old policy keeps running
        announce.publish(String(data=str(corrupt)))
        n = len(chunks)
        spin_until(node, lambda: False, 3.0, 0.02)
        assert len(chunks) >= n + 10 and moving(), "the policy stopped after a corrupt checkpoint"  # 5 Hz
        refused = policy_status[-1]  # the refusal is loud: WARN on /diagnostics, with the reason
        assert refused.level == DiagnosticStatus.WARN and f"refused {corrupt}" in refused.message

        # 3. an adversarial chunk stream (huge, NaN, reversed stamps) moves nothing outside the limits
        now = node.get_clock().now().nanoseconds * 1e-9
        for k in range(60):
            huge = np.full((C.CHUNK_HORIZON, C.ACTION_DIM), 50.0 * (-1) ** k)
            nan = huge.copy()
            nan[3, 1] = np.nan
            for chunk, stamp in ((huge, now + 0.01 * k), (nan, now), (huge, now - 5.0), (-huge, now + 10.0)):
                msg = chunk_to_trajectory(
                    np.nan_to_num(chunk, nan=1e9) if k % 7 == 0 else chunk, sec_to_stamp(stamp), 0.1, "world"
                )
                attacker.publish(msg)
            spin_until(node, lambda: False, 0.03, 0.02)
        spin_until(node, lambda: False, 1.0, 0.02)
        low, high = np.array(C.WORKSPACE_LOW), np.array(C.WORKSPACE_HIGH)
        for _, m in out:
            v = np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z])
            assert np.all(np.isfinite(v)) and np.linalg.norm(v) <= MAX_SPEED + 1e-6
        assert all(np.all(np.array(p) >= low - 0.01) and np.all(np.array(p) <= high + 0.01) for p in poses)

        # 4. e-stop stops it; reset (released) resumes
        estop.publish(Bool(data=True))
        assert spin_until(node, lambda: states and states[-1] == "estop", 3.0, 0.02)
        spin_until(node, lambda: False, 0.5, 0.02)
        assert all(speed(m) == 0 for _, m in out[-5:])
        estop.publish(Bool(data=False))
        spin_until(node, lambda: False, 0.3, 0.02)  # the release reaches the filter before the reset does
        future = reset.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, future, timeout_sec=10)
        assert future.result() is not None and future.result().success
        assert spin_until(node, lambda: states[-1] == "active" and moving(), 10.0, 0.02)

        # 5. killing a camera node stops the arm within the policy's input age plus the filter's chunk
        #    timeout (0.35 s + 0.3 s), and nothing moves after that
        assert spin_until(node, moving, 5.0, 0.02), "not moving before the camera kill"
        os.kill(graph_node_pid(graph, "camera_top"), signal.SIGKILL)
        killed = time.monotonic()
        spin_until(node, lambda: False, 3.0, 0.02)
        stopped_at = next(t for t, m in out if t > killed and speed(m) == 0)
        assert stopped_at - killed < 1.0, stopped_at - killed
        assert all(speed(m) == 0 for t, m in out if t > stopped_at)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph, timeout=30)
        log.close()


@pytest.mark.slow
def test_real_arm_hil_graph_with_real_time_chunking_drives_the_arm(tmp_path, spin_until):
    """``real_time_chunking:=true``: the policy node reads the executor's ticks and samples each chunk around the
    playing one's actions, across processes; chunks keep coming every re-plan interval (0.2 s), finite and the
    policy's."""
    import rclpy
    from geometry_msgs.msg import TwistStamped
    from rclpy.node import Node
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.messages.conversions import trajectory_to_chunk
    from diffpolicy_ros.nodes.common import COMMAND_QOS

    span = 1e-3  # a normaliser with a range: the committed actions are normalised like the sampler's
    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", VELOCITY, span=span)
    overrides = {
        "hil": "true",
        "checkpoint": str(ckpt),
        "box_low": str(list(C.WORKSPACE_LOW)),
        "box_high": str(list(C.WORKSPACE_HIGH)),
        "dry_run": "false",
        "allow_unproven": "true",
        "real_time_chunking": "true",
    }
    log = open(tmp_path / "graph.log", "w")
    graph = spawn_graph("real_arm", overrides, {**os.environ, "PYTHONPATH": str(REPO)}, stdout=log)
    rclpy.init()
    node = Node("hil_rtc_probe")
    out, chunks = [], []
    node.create_subscription(TwistStamped, SERVO, lambda m: out.append(m.twist.linear.x), COMMAND_QOS)
    node.create_subscription(
        MultiDOFJointTrajectory,
        C.ACTION_CHUNK_TOPIC,
        lambda m: chunks.append((time.monotonic(), trajectory_to_chunk(m, C.CHUNK_HORIZON, C.CONTROL_PERIOD_S))),
        COMMAND_QOS,
    )
    try:
        moving = spin_until(node, lambda: bool(out) and out[-1] > 0.5 * VELOCITY[0], 90, 0.02)
        assert moving, "the arm never moved: " + (tmp_path / "graph.log").read_text()[-3000:]
        start = len(chunks)
        spin_until(node, lambda: False, 3.0, 0.02)
        assert len(chunks) - start >= 10, f"{len(chunks) - start} chunks in 3 s"  # 5 Hz, with room for a slow host
        gaps = np.diff([t for t, _ in chunks[start:]])
        assert 0.15 < np.median(gaps) < 0.3, gaps  # a decision every replan_steps (2) periods, not at every tick
        recent = np.stack([c for _, c in chunks[start:]])
        assert np.all(np.isfinite(recent))
        np.testing.assert_allclose(recent, np.broadcast_to(VELOCITY, recent.shape), atol=span + 1e-5)
        assert out[-1] > 0.5 * VELOCITY[0]
        text = (tmp_path / "graph.log").read_text()
        assert "invalid chunk" not in text and "inference failed" not in text, text[-3000:]
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph, timeout=30)
        log.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["cell", "hil"])
def test_ctrl_c_stops_real_arm_cleanly(tmp_path, mode):
    """Ctrl-C on a cell's graph (no drivers here: the nodes wait for their inputs) and on the HIL graph with the arm
    moving: every node exits on its own (none killed), exit 0, no traceback and no ERROR line."""
    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", VELOCITY)
    overrides = {
        "hil": "true" if mode == "hil" else "false",
        "checkpoint": str(ckpt),
        "box_low": str(list(C.WORKSPACE_LOW)),
        "box_high": str(list(C.WORKSPACE_HIGH)),
        "dry_run": "false",
        "allow_unproven": "true",
    }
    begun = "the arm is moving" if mode == "hil" else "policy loaded from"
    log_path = tmp_path / "graph.log"
    with open(log_path, "w") as log:
        graph = spawn_graph("real_arm", overrides, {**os.environ, "PYTHONPATH": str(REPO)}, stdout=log)
        deadline = time.monotonic() + 180
        while begun not in log_path.read_text() and time.monotonic() < deadline and graph.poll() is None:
            time.sleep(0.2)
        assert begun in log_path.read_text(), log_path.read_text()[-3000:]
        time.sleep(1.0)
        code = stop_graph(graph, timeout=30)
    console = log_path.read_text()
    assert code == 0, console[-3000:]
    for bad in ("did not stop", "Traceback", "[ERROR]", "context is invalid"):
        assert bad not in console, (bad, console[-3000:])
