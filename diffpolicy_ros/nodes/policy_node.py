"""policy_node: the fusion + diffusion actor at 10 Hz.

Each tick assembles the newest observation set (cameras, proprio, object/goal poses, instruction), refuses
it if any part is missing or older than ``max_obs_age_s``, and hands it to a worker thread that runs the
policy (:class:`ChunkPredictor`). If the worker is still busy the tick is dropped, never queued. The chunk
is published as a MultiDOFJointTrajectory stamped with the observation's stamp. A new checkpoint announced
on ``/trainer/checkpoint`` is loaded and warmed up off the control path and swapped in only if it loads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import MultiDOFJointTrajectory

from diffpolicy_ros import contract as C
from diffpolicy_ros.contract import ARM_JOINTS, CAMERAS, check_instruction
from diffpolicy_ros.models.checkpoint import CheckpointError, load_policy
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    LATCHED_QOS,
    SENSOR_QOS,
    STATS_WINDOW,
    WARN_THROTTLE_S,
    Diagnostics,
    checked_device,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.nodes.conversions import (
    MessageError,
    chunk_to_trajectory,
    image_to_rgb,
    joint_state_vectors,
    pose_xy,
    sec_to_stamp,
    stamp_to_sec,
)


def assemble_observation(latest: dict, now: float, max_age: float, need_images: bool) -> tuple[dict, float]:
    """Newest samples -> (env-style observation, its stamp = the oldest part's). Raises MessageError."""
    parts = ["joints", "object", "goal", "instruction"] + ([f"image_{c}" for c in CAMERAS] if need_images else [])
    missing = [p for p in parts if p not in latest]
    if missing:
        raise MessageError(f"waiting for {missing}")
    stamps = {p: latest[p][0] for p in parts if p != "instruction"}
    stale = {p: round(now - t, 3) for p, t in stamps.items() if now - t > max_age}
    if stale:
        raise MessageError(f"stale inputs (age s): {stale}")
    pos, vel = latest["joints"][1]
    proprio = np.empty(C.PROPRIO_DIM, np.float32)
    for slot, value in zip(C.PROPRIO_SLICES, (pos, vel, latest["object"][1], latest["goal"][1])):
        proprio[C.PROPRIO_SLICES[slot]] = value
    obs = {"proprio": proprio, "instruction": latest["instruction"][1]}
    if need_images:
        for cam in CAMERAS:
            obs[f"image_{cam}"] = latest[f"image_{cam}"][1]
    return obs, min(stamps.values())


def example_observation(images: bool) -> dict:
    obs = {"proprio": np.zeros(C.PROPRIO_DIM, np.float32), "instruction": C.DEFAULT_INSTRUCTION}
    if images:
        obs.update({f"image_{c}": np.zeros(C.IMAGE_SHAPE, np.uint8) for c in CAMERAS})
    return obs


class PolicyNode(Node):
    def __init__(self):
        super().__init__("policy_node")
        self.declare_parameter("checkpoint", "")
        self.device = checked_device(self)
        # 0: the checkpoint's own DDIM step count
        self.ddim_steps = parameter(self, "ddim_steps", 0, lambda v: v >= 0, "must be >= 0 (0: the checkpoint's)")
        rate_hz = parameter(self, "rate_hz", 1.0 / C.CONTROL_PERIOD_S, positive, "must be > 0")
        self.max_age = parameter(self, "max_obs_age_s", 0.35, positive, "must be > 0")
        self.dt = parameter(self, "chunk_dt", C.CONTROL_PERIOD_S, positive, "must be > 0")
        self.frame_id = parameter(self, "frame_id", C.WORLD_FRAME, bool, "must not be empty")
        # One intra-op thread: batch-1 inference gains nothing from more, and several torch processes each
        # spinning OpenMP threads on a small CPU slow everything down by an order of magnitude.
        threads = parameter(self, "torch_threads", 1, lambda v: v >= 0, "must be >= 0 (0: torch's default)")
        if threads > 0:
            import torch

            torch.set_num_threads(threads)

        self.lock = threading.Lock()
        self.latest: dict[str, tuple[float, object]] = {}
        self.predictor: ChunkPredictor | None = None
        self.need_images = False
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self.busy = threading.Event()
        self.closing = threading.Event()
        self.stats = {"chunks": 0, "dropped_busy": 0, "refused_obs": 0, "reloads": 0, "failed_reloads": 0}
        self.latencies: deque[float] = deque(maxlen=STATS_WINDOW)  # bounded: a node runs for days
        self.ages: deque[float] = deque(maxlen=STATS_WINDOW)

        self.pub = self.create_publisher(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, COMMAND_QOS)
        self.diag = Diagnostics(self)
        for cam in CAMERAS:
            topic = C.policy_camera_topic(cam)
            self.create_subscription(Image, topic, lambda m, c=cam: self.on_image(c, m), SENSOR_QOS)
        self.create_subscription(JointState, C.POLICY_JOINT_STATES_TOPIC, self.on_joints, SENSOR_QOS)
        self.create_subscription(PoseStamped, C.OBJECT_POSE_TOPIC, lambda m: self.on_pose("object", m), SENSOR_QOS)
        self.create_subscription(PoseStamped, C.GOAL_POSE_TOPIC, lambda m: self.on_pose("goal", m), SENSOR_QOS)
        self.create_subscription(String, C.INSTRUCTION_TOPIC, self.on_instruction, LATCHED_QOS)
        self.create_subscription(String, C.CHECKPOINT_TOPIC, lambda m: self.request_reload(m.data), LATCHED_QOS)
        self.create_timer(1.0 / rate_hz, self.tick)
        self.create_timer(1.0, self.report)
        if self.get_parameter("checkpoint").value:
            self.request_reload(self.get_parameter("checkpoint").value)

    # ------------------------------------------------------------------ inputs (short callbacks)
    def store(self, key: str, stamp: float, value) -> None:
        with self.lock:
            old = self.latest.get(key)
            if old is not None and stamp < old[0]:
                self.get_logger().warn(f"out-of-order {key} dropped", throttle_duration_sec=WARN_THROTTLE_S)
                return
            self.latest[key] = (stamp, value)

    def on_image(self, cam: str, msg: Image) -> None:
        try:
            rgb = image_to_rgb(msg)
            if rgb.shape != C.IMAGE_SHAPE:
                raise MessageError(f"image {rgb.shape[:2]} is not the model size {C.IMAGE_SHAPE[:2]} (run camera_node)")
        except MessageError as exc:
            self.get_logger().warn(f"camera {cam}: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.store(f"image_{cam}", stamp_to_sec(msg.header.stamp), rgb)

    def on_joints(self, msg: JointState) -> None:
        try:
            pos, vel = joint_state_vectors(msg, ARM_JOINTS)
            if vel is None:
                raise MessageError("no joint velocities (proprio_node provides them)")
        except MessageError as exc:
            self.get_logger().warn(f"joints: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.store("joints", stamp_to_sec(msg.header.stamp), (pos, vel))

    def on_pose(self, key: str, msg: PoseStamped) -> None:
        try:
            self.store(key, stamp_to_sec(msg.header.stamp), pose_xy(msg))
        except MessageError as exc:
            self.get_logger().warn(f"{key} pose: {exc}", throttle_duration_sec=WARN_THROTTLE_S)

    def on_instruction(self, msg: String) -> None:
        reason = check_instruction(msg.data)
        if reason:
            self.get_logger().warn(f"ignoring instruction: {reason}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.store("instruction", -np.inf, msg.data)  # latched state, no age

    # ------------------------------------------------------------------ checkpoints
    def request_reload(self, path: str) -> None:
        self.loader.submit(self.reload, path)

    def reload(self, path: str) -> None:
        try:
            policy, _ = load_policy(path, self.device)
            predictor = ChunkPredictor(policy, self.device, ddim_steps=self.ddim_steps or None)
            predictor.warm_up(example_observation(bool(policy.config.fusion.use_images)))  # trace off the control path
        except (CheckpointError, ValueError, OSError, RuntimeError) as exc:
            self.stats["failed_reloads"] += 1
            self.get_logger().warn(f"keeping the current policy: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        need_images = bool(policy.config.fusion.use_images)
        if self.closing.is_set():
            return
        with self.lock:
            self.predictor, self.need_images = predictor, need_images
        self.stats["reloads"] += 1
        self.get_logger().info(f"policy loaded from {path} (images: {need_images}, backend {predictor.backend})")

    # ------------------------------------------------------------------ control tick
    def tick(self) -> None:
        with self.lock:
            predictor, need_images, latest = self.predictor, self.need_images, dict(self.latest)
        if predictor is None:
            self.get_logger().warn("no policy loaded yet", throttle_duration_sec=WARN_THROTTLE_S * 5)
            return
        if self.busy.is_set():
            self.stats["dropped_busy"] += 1
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        try:
            obs, stamp = assemble_observation(latest, now, self.max_age, need_images)
        except MessageError as exc:
            self.stats["refused_obs"] += 1
            self.get_logger().warn(f"no chunk: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.ages.append(now - stamp)
        self.busy.set()
        self.worker.submit(self.infer, predictor, obs, stamp)

    def infer(self, predictor: ChunkPredictor, obs: dict, stamp: float) -> None:
        try:
            start = time.perf_counter()
            chunk = predictor(obs)[0]
            self.latencies.append((time.perf_counter() - start) * 1e3)
            if self.closing.is_set():
                return
            if chunk.shape != (C.CHUNK_HORIZON, C.ACTION_DIM) or not np.all(np.isfinite(chunk)):
                self.get_logger().warn("policy produced an invalid chunk; not publishing")
                return
            self.pub.publish(chunk_to_trajectory(chunk, sec_to_stamp(stamp), self.dt, self.frame_id))
            self.stats["chunks"] += 1
        except Exception as exc:  # never let the worker die silently
            self.get_logger().error(f"inference failed: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
        finally:
            self.busy.clear()

    def report(self) -> None:
        lat = np.array(self.latencies or [0.0])
        age = np.array(self.ages or [0.0]) * 1e3
        self.diag.publish(
            {
                **self.stats,
                "latency_p50_ms": float(np.percentile(lat, 50)),
                "latency_p99_ms": float(np.percentile(lat, 99)),
                "obs_age_p50_ms": float(np.percentile(age, 50)),
            }
        )

    def close(self) -> None:
        """Before the node is destroyed: no new work, and the running inference finishes (< 0.1 s) so it never
        publishes through a destroyed publisher (the 'cannot use Destroyable' error on Ctrl-C)."""
        self.closing.set()
        self.loader.shutdown(wait=False, cancel_futures=True)  # a load in progress only logs; it checks closing
        self.worker.shutdown(wait=True, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    return run_node(PolicyNode, args, threads=1)  # inference and reloads run in their own threads


if __name__ == "__main__":
    raise SystemExit(main())
