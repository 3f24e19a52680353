"""``diffpolicy bench ros``: run the sim_train graph (without the trainer) and measure, from a separate
process on loopback, camera stamp -> chunk publish latency, the chunk rate and the executor's jitter.
``diffpolicy bench startup``: ``make sim-train`` as a new user starts it (the trainer at its defaults, a fresh
run folder) and the seconds until the first checkpoint is announced and the arm first moves."""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def untrained_image_checkpoint(path: Path) -> Path:
    """A default (images + text + proprio) diffusion policy with the task's action range: latency only."""
    from diffpolicy_ros.models.checkpoint import CheckpointMeta, make_payload, save_checkpoint
    from diffpolicy_ros.models.factory import build_policy, policy_spec

    spec = policy_spec({"kind": "diffusion"})
    policy = build_policy(spec)
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.25], [0.25, 0.25, 0.25]]))
    return save_checkpoint(path, make_payload(spec, policy, CheckpointMeta(source="bench", obs_mode="image")))


LOOPBACK_KEYS = ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")


def loopback_env() -> dict[str, str]:
    """The environment of a benchmark's graph: this process's, with ROS traffic kept on this machine and a
    fresh domain unless the caller chose them. Passed to the graph's processes; ``os.environ`` is not changed."""
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    return env


def init_rclpy(env: dict[str, str]) -> None:
    """rclpy for the benchmark's own probe nodes, on the graph's domain and discovery range from ``env``. The
    middleware reads both once, while the context starts, so ``os.environ`` carries them only for that call."""
    import rclpy

    saved = {k: os.environ.get(k) for k in LOOPBACK_KEYS}
    os.environ.update({k: env[k] for k in LOOPBACK_KEYS})
    try:
        rclpy.init(args=[])  # not sys.argv: graph arguments there are not ROS remappings
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def bench_startup(overrides: dict[str, str] | None = None, timeout_s: float = 600.0) -> dict:
    """Seconds from launching ``sim_train`` (the trainer recording demonstrations and behaviour-cloning from
    nothing) to the first announced checkpoint and to the first non-zero twist out of the safety filter."""
    import rclpy
    from geometry_msgs.msg import TwistStamped
    from rclpy.node import Node
    from std_msgs.msg import String

    from diffpolicy_ros.contract import CHECKPOINT_TOPIC
    from diffpolicy_ros.nodes.common import COMMAND_QOS, LATCHED_QOS
    from diffpolicy_ros.nodes.runner import spawn_graph, stop_graph

    env = loopback_env()
    tmp = Path(tempfile.mkdtemp(prefix="diffpolicy_bench_startup_"))
    overrides = {"run_dir": str(tmp / "run"), **(overrides or {})}
    log = open(tmp / "graph.log", "w")
    began = time.monotonic()
    graph = spawn_graph("sim_train", overrides, env, stdout=log)
    init_rclpy(env)
    node = Node("bench_startup")
    first: dict[str, float] = {}
    node.create_subscription(
        String, CHECKPOINT_TOPIC, lambda m: first.setdefault("checkpoint", time.monotonic() - began), LATCHED_QOS
    )

    def on_twist(msg: TwistStamped) -> None:
        v = msg.twist.linear
        if abs(v.x) + abs(v.y) + abs(v.z) > 1e-4:
            first.setdefault("motion", time.monotonic() - began)

    node.create_subscription(TwistStamped, "/arm/cmd_twist_safe", on_twist, COMMAND_QOS)
    try:
        while "motion" not in first and time.monotonic() - began < timeout_s:
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph)
        log.close()
    return {
        "graph_arguments": overrides,
        "graph_log": log.name,
        "first_checkpoint_s": round(first["checkpoint"], 1) if "checkpoint" in first else None,
        "first_motion_s": round(first["motion"], 1) if "motion" in first else None,
        "timeout_s": timeout_s,
    }


def bench_ros(
    duration_s: float = 30.0, checkpoint: Path | None = None, warmup_s: float = 15.0, busy: bool = False
) -> dict:
    """The figures over ``duration_s`` on a quiet machine; ``busy``: then as long again beside one busy process
    (``busy``: the same figures), in the same warm graph, so the two read side by side."""
    import rclpy
    from geometry_msgs.msg import TwistStamped
    from rclpy.node import Node
    from sensor_msgs.msg import Image
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.bench.load import busy_neighbour
    from diffpolicy_ros.messages.conversions import stamp_to_sec
    from diffpolicy_ros.models.checkpoint import load_checkpoint
    from diffpolicy_ros.nodes.common import COMMAND_QOS, SENSOR_QOS
    from diffpolicy_ros.nodes.runner import spawn_graph, stop_graph

    if checkpoint is not None:
        load_checkpoint(checkpoint)  # a file that is not one ends here, in one line, before any node starts
    env = loopback_env()
    tmp = Path(tempfile.mkdtemp(prefix="diffpolicy_bench_ros_"))
    ckpt = checkpoint or untrained_image_checkpoint(tmp / "policy.pt")
    graph = spawn_graph("sim_train", {"checkpoint": str(ckpt), "trainer": "false", "run_dir": str(tmp)}, env)
    init_rclpy(env)
    node = Node("bench_ros")
    image_wall: dict[float, float] = {}
    chunks: list[tuple[float, float]] = []  # (wall time, stamp)
    twists: list[float] = []

    def on_image(msg: Image) -> None:
        image_wall.setdefault(stamp_to_sec(msg.header.stamp), time.monotonic())

    node.create_subscription(Image, "/cameras/top/image_raw", on_image, SENSOR_QOS)
    node.create_subscription(
        MultiDOFJointTrajectory,
        "/policy/action_chunk",
        lambda m: chunks.append((time.monotonic(), stamp_to_sec(m.header.stamp))),
        COMMAND_QOS,
    )
    node.create_subscription(TwistStamped, "/arm/cmd_twist", lambda m: twists.append(time.monotonic()), COMMAND_QOS)

    def window() -> dict:
        """Latency, rates and jitter over ``duration_s`` from now."""
        chunks.clear()
        twists.clear()
        start = time.monotonic()
        while time.monotonic() - start < duration_s:
            rclpy.spin_once(node, timeout_sec=0.05)
        elapsed = time.monotonic() - start
        lat = np.array([(w - image_wall[s]) * 1e3 for w, s in chunks if s in image_wall])
        gaps = np.diff(np.array(twists)) * 1e3 if len(twists) > 1 else np.zeros(1)
        return {
            "duration_s": round(elapsed, 1),
            "chunks": len(chunks),
            "chunk_rate_hz": round(len(chunks) / elapsed, 2),
            "camera_to_chunk_p50_ms": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
            "camera_to_chunk_p99_ms": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
            "executor_rate_hz": round(len(twists) / elapsed, 2),
            "executor_jitter_p50_ms": round(float(np.percentile(np.abs(gaps - 100.0), 50)), 1),
            "executor_jitter_p99_ms": round(float(np.percentile(np.abs(gaps - 100.0), 99)), 1),
        }

    try:
        deadline = time.monotonic() + warmup_s + 60.0
        while not chunks and time.monotonic() < deadline:  # graph start-up, policy load and warm-up
            rclpy.spin_once(node, timeout_sec=0.1)
        if not chunks:
            raise RuntimeError("no action chunk arrived: the graph did not come up")
        end_warmup = time.monotonic() + 2.0
        while time.monotonic() < end_warmup:
            rclpy.spin_once(node, timeout_sec=0.05)
        result = window()
        if busy:
            with busy_neighbour():
                result["busy"] = window()
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph)
    return {**result, "policy": "checkpoint" if checkpoint else "untrained default (images + text + proprio)"}
