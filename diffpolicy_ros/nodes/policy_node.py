"""policy_node: the fusion + diffusion actor, a chunk every ``replan_steps`` control periods (2: 0.2 s), on a
10 Hz tick.

A tick that decides assembles the newest observation set (cameras, proprio, object/goal poses, instruction), refuses
it if any part is missing or older than ``max_obs_age_s``, and hands it to a worker thread that runs the
policy (:class:`ChunkPredictor`). If the worker is still busy the tick is dropped, never queued. The chunk
is published as a MultiDOFJointTrajectory stamped with the observation's stamp. A new checkpoint announced
on ``/trainer/checkpoint`` is loaded and warmed up off the control path and swapped in only if it loads.

The deploy gate (``min_success`` > 0, set by ``real_arm``): a checkpoint is loaded only if it carries a held-out
evaluation at or above ``min_success``; otherwise it is refused with the reason and the arm stays still.
``allow_unproven`` lifts the gate, and says so at every start and every load.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import MultiDOFJointTrajectory
from visualization_msgs.msg import MarkerArray

from diffpolicy_ros import contract as C
from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.messages.conversions import (
    MessageError,
    chunk_to_trajectory,
    sec_to_stamp,
    stamp_to_sec,
)
from diffpolicy_ros.messages.markers import chunk_path_markers
from diffpolicy_ros.messages.observation import (
    MissingInputs,
    ObservationCache,
    assemble_observation,
    example_observation,
)
from diffpolicy_ros.models.checkpoint import (
    CheckpointError,
    checkpoint_meta,
    deploy_refusal,
    describe_checkpoint,
    load_policy,
)
from diffpolicy_ros.models.inference import ChunkPredictor, uses_native_kernel
from diffpolicy_ros.models.native import native_kernel
from diffpolicy_ros.models.realtime_chunking import RealTimeChunking, next_tick
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    LATCHED_QOS,
    SENSOR_QOS,
    STATS_WINDOW,
    VIEWER_QOS,
    WARN_THROTTLE_S,
    Diagnostics,
    checked_device,
    flag,
    number,
    parameter,
    positive,
    quiet_on_stop,
    run_node,
    stopped,
)

WAITING_REPEAT_S = 30.0  # inputs that never arrived: said once, then at this period


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
        # a decision every this many control periods (contract.REPLAN_STEPS); the ticks in between are skipped
        replan_steps = parameter(self, "replan_steps", C.REPLAN_STEPS, positive, "must be >= 1")
        self.replan_s, self.tick_s = replan_steps * self.dt, 1.0 / rate_hz
        self.decided_at = -np.inf  # the tick that last started an inference (s)
        self.frame_id = parameter(self, "frame_id", C.WORLD_FRAME, bool, "must not be empty")
        # hil: each chunk published this much later (the node stays busy meanwhile, as a slower policy would)
        self.extra_latency = number(self, "extra_latency_s", 0.0, 0.0, 10.0, description="added latency (s)")
        # the deploy gate: 0 = off (the sim graph); real_arm sets it
        self.min_success = number(self, "min_success", 0.0, 0.0, 1.0,
                                  description="load only checkpoints with a held-out success >= this (0: no gate)")
        self.allow_unproven = flag(self, "allow_unproven", False, "lift the deploy gate (said loudly)")
        # real-time chunking: each chunk continues the one the arm plays (models/realtime_chunking.py); what is
        # frozen is what plays until the executor takes the chunk over: the observation's age, this node's recent
        # compute times, then the wait for the executor's next tick (its phase read from its commands' stamps)
        self.rtc = RealTimeChunking() if flag(self, "real_time_chunking", False, "continue the playing chunk") else None
        self.last_chunk: tuple[np.ndarray, float] | None = None  # the last chunk published, and its stamp
        self.compute_s: deque[float] = deque(maxlen=20)  # inference start -> publish, the last chunks (s)
        self.executor_ticks: deque[float] = deque(maxlen=20)  # stamps of the executor's last commands (s)
        if self.allow_unproven and self.min_success > 0:
            self.get_logger().warn(
                f"allow_unproven:=true — the deploy gate (min_success {self.min_success:g}) is OFF: a checkpoint "
                "without a held-out evaluation, or below it, will drive the arm"
            )
        # One intra-op thread: batch-1 inference gains nothing from more, and several torch processes each
        # spinning OpenMP threads on a small CPU slow everything down by an order of magnitude.
        threads = parameter(self, "torch_threads", 1, lambda v: v >= 0, "must be >= 0 (0: torch's default)")
        if threads > 0:
            import torch

            torch.set_num_threads(threads)

        self.lock = threading.Lock()
        self.cache = ObservationCache()  # the newest valid sample of each input
        self.predictor: ChunkPredictor | None = None
        self.need_images, self.need_task_state, self.need_calibration = False, True, False
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        # checkpoints load in a daemon thread: a first load can build the native kernel for a minute, and a stop
        # must not wait for it (a ThreadPoolExecutor's threads are joined at exit)
        self.to_load: queue.Queue[str | None] = queue.Queue()
        self.loader = threading.Thread(target=self.load_requested, name="checkpoint", daemon=True)
        self.loader.start()
        self.busy = threading.Event()
        self.closing = threading.Event()
        self.stats = {"chunks": 0, "dropped_busy": 0, "refused_obs": 0, "reloads": 0, "failed_reloads": 0}
        self.problem = "no checkpoint given (parameter checkpoint, or a path on /trainer/checkpoint)"
        self.waiting_for: tuple = ()  # what the node waits for, as last said on the console
        self.waiting_said = 0.0
        self.latencies: deque[float] = deque(maxlen=STATS_WINDOW)  # bounded: a node runs for days
        self.ages: deque[float] = deque(maxlen=STATS_WINDOW)

        self.pub = self.create_publisher(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, COMMAND_QOS)
        self.pub_markers = self.create_publisher(MarkerArray, C.MARKERS_TOPIC, VIEWER_QOS)
        self.pub_ready = self.create_publisher(String, C.POLICY_READY_TOPIC, LATCHED_QOS)  # a replay waits for it
        self.ee_position: np.ndarray | None = None  # for drawing the chunk from the tool (not a policy input)
        self.create_subscription(PoseStamped, C.EE_POSE_TOPIC, self.on_ee_pose, SENSOR_QOS)
        self.diag = Diagnostics(self)
        for cam in CAMERAS:
            topic = C.policy_camera_topic(cam)
            self.create_subscription(Image, topic, lambda m, c=cam: self.on_image(c, m), SENSOR_QOS)
            info, pose = C.policy_camera_info_topic(cam), C.camera_pose_topic(cam)  # a calibrated estimator's
            self.create_subscription(CameraInfo, info, lambda m, c=cam: self.on_calibration(c, m), SENSOR_QOS)
            self.create_subscription(PoseStamped, pose, lambda m, c=cam: self.on_calibration(c, m), LATCHED_QOS)
        self.create_subscription(JointState, C.POLICY_JOINT_STATES_TOPIC, self.on_joints, SENSOR_QOS)
        self.create_subscription(PoseStamped, C.OBJECT_POSE_TOPIC, lambda m: self.on_pose("object", m), SENSOR_QOS)
        self.create_subscription(PoseStamped, C.GOAL_POSE_TOPIC, lambda m: self.on_pose("goal", m), SENSOR_QOS)
        self.create_subscription(String, C.INSTRUCTION_TOPIC, self.on_instruction, LATCHED_QOS)
        self.create_subscription(String, C.CHECKPOINT_TOPIC, lambda m: self.request_reload(m.data), LATCHED_QOS)
        if self.rtc is not None:
            self.create_subscription(TwistStamped, C.CMD_TWIST_TOPIC, self.on_executor_command, COMMAND_QOS)
        self.create_timer(1.0 / rate_hz, self.tick)
        self.create_timer(1.0, self.report)
        self.add_on_set_parameters_callback(self.on_set_parameters)  # ros2 param set ... checkpoint FILE
        if self.get_parameter("checkpoint").value:
            self.request_reload(self.get_parameter("checkpoint").value)

    # ------------------------------------------------------------------ inputs (short callbacks)
    def log_dropped(self, reason: str) -> None:
        """Log why an input was dropped (the cache's answer); '' means it was taken."""
        if reason:
            self.get_logger().warn(reason, throttle_duration_sec=WARN_THROTTLE_S)

    def on_image(self, cam: str, msg: Image) -> None:
        with self.lock:
            reason = self.cache.on_image(cam, msg)
        self.log_dropped(reason)

    def on_calibration(self, cam: str, msg: CameraInfo | PoseStamped) -> None:
        with self.lock:
            if isinstance(msg, CameraInfo):
                reason = self.cache.on_camera_info(cam, msg)
            else:
                reason = self.cache.on_camera_pose(cam, msg)
        self.log_dropped(reason)

    def on_joints(self, msg: JointState) -> None:
        with self.lock:
            reason = self.cache.on_joints(msg)
        self.log_dropped(reason)

    def on_pose(self, key: str, msg: PoseStamped) -> None:
        with self.lock:
            reason = self.cache.on_pose(key, msg)
        self.log_dropped(reason)

    def on_instruction(self, msg: String) -> None:
        with self.lock:
            reason = self.cache.on_instruction(msg)
        self.log_dropped(reason)

    def on_ee_pose(self, msg: PoseStamped) -> None:
        p = msg.pose.position
        self.ee_position = np.array([p.x, p.y, p.z])

    def on_executor_command(self, msg: TwistStamped) -> None:
        self.executor_ticks.append(stamp_to_sec(msg.header.stamp))

    # ------------------------------------------------------------------ checkpoints
    def request_reload(self, path: str) -> None:
        if self.predictor is None:
            self.problem = f"loading {path}"
        self.to_load.put(path)

    def on_set_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            if p.name == "checkpoint" and p.value:
                self.request_reload(str(p.value))  # refused files are logged; the running policy stays
            elif p.name != "checkpoint":
                return SetParametersResult(successful=False, reason=f"{p.name} is read at start only")
        return SetParametersResult(successful=True)

    def load_requested(self) -> None:
        while (path := self.to_load.get()) is not None:
            if not self.closing.is_set():
                self.reload(path)

    def reload(self, path: str) -> None:
        try:
            policy, ckpt = load_policy(path, self.device)
            refusal = deploy_refusal(checkpoint_meta(ckpt), self.min_success) if self.min_success > 0 else None
            if refusal and not self.allow_unproven:
                raise CheckpointError(f"deploy gate: {refusal} (allow_unproven:=true overrides)")
            if refusal:
                self.get_logger().warn(f"allow_unproven:=true — loading {path} although {refusal}")
            if uses_native_kernel(policy, self.device):
                native_kernel()  # a new install's first load builds it here (tens of seconds); a stop ends the load
            if self.closing.is_set():
                return
            predictor = ChunkPredictor(policy, self.device, ddim_steps=self.ddim_steps or None)
            calibrated = bool(getattr(policy.encoder, "calibrated", False))
            predictor.warm_up(example_observation(bool(policy.config.fusion.use_images), calibrated))  # off the tick
        except (CheckpointError, ValueError, OSError, RuntimeError) as exc:
            self.stats["failed_reloads"] += 1
            kept = "keeping the running policy" if self.predictor is not None else "NO POLICY: the arm stays still"
            self.problem = f"refused {path}: {exc}; {kept}"
            self.get_logger().error(self.problem)
            return
        need_images = bool(policy.config.fusion.use_images)
        need_task_state = bool(policy.config.fusion.use_task_state)
        if self.closing.is_set():
            return
        with self.lock:
            self.predictor, self.need_images, self.need_task_state = predictor, need_images, need_task_state
            self.need_calibration = calibrated
        self.problem = ""
        self.stats["reloads"] += 1
        with quiet_on_stop(self):
            self.pub_ready.publish(String(data=path))
            loaded = f"{describe_checkpoint(ckpt)}; backend {predictor.backend}"
            self.get_logger().info(f"policy loaded from {path}: {loaded}")

    # ------------------------------------------------------------------ control tick
    def tick(self) -> None:
        with self.lock:
            predictor, latest = self.predictor, dict(self.cache.latest)
            needs = (self.need_images, self.need_task_state, self.need_calibration)
        if predictor is None:  # expected while loading or waiting for the trainer: said once, then every 30 s
            self.say_waiting(("no policy", self.problem), f"no policy yet: {self.problem}")
            return
        if self.busy.is_set():
            self.stats["dropped_busy"] += 1
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        if now - self.decided_at < self.replan_s - self.tick_s / 2:  # half a tick: the timer's jitter
            return
        try:
            obs, stamp = assemble_observation(latest, now, self.max_age, *needs)
        except MissingInputs as exc:  # not yet seen: said once (and when it changes), then every 30 s
            self.stats["refused_obs"] += 1
            self.say_waiting(exc.missing, f"no chunk yet: {exc}")
            return
        except MessageError as exc:
            self.stats["refused_obs"] += 1
            self.get_logger().warn(f"no chunk: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.waiting_for = ()
        self.ages.append(now - stamp)
        self.decided_at = now
        self.busy.set()
        self.worker.submit(self.infer, predictor, obs, stamp)

    def say_waiting(self, what: tuple, text: str) -> None:
        """An expected wait (no policy yet, an input never seen): INFO when it starts or changes, then a reminder
        every WAITING_REPEAT_S — not a WARN every tick."""
        now = time.monotonic()
        if what != self.waiting_for or now - self.waiting_said > WAITING_REPEAT_S:
            self.get_logger().info(text if what != self.waiting_for else f"still {text}")
            self.waiting_for, self.waiting_said = what, now

    def infer(self, predictor: ChunkPredictor, obs: dict, stamp: float) -> None:
        try:
            start = time.perf_counter()
            begun = self.get_clock().now().nanoseconds * 1e-9
            committed = None
            if self.rtc is not None and self.last_chunk is not None:
                # the observation's age is known now; only the time to compute and publish is not: the recent ones.
                # The executor takes the chunk over at its first tick after it lands.
                recent, ticks = self.compute_s or [self.dt], list(self.executor_ticks)
                self.rtc.switch_s = next_tick(ticks, begun + float(np.median(recent))) - stamp  # most likely
                self.rtc.frozen_s = next_tick(ticks, begun + max(recent)) - stamp  # what may run before then
                committed = self.rtc.committed(*self.last_chunk, stamp, self.dt)
            chunk = predictor(obs, committed=committed)[0]
            if self.extra_latency:
                time.sleep(self.extra_latency)
            self.latencies.append((time.perf_counter() - start) * 1e3)
            if self.closing.is_set():
                return
            if chunk.shape != (C.CHUNK_HORIZON, C.ACTION_DIM) or not np.all(np.isfinite(chunk)):
                self.get_logger().warn("policy produced an invalid chunk; not publishing")
                return
            self.pub.publish(chunk_to_trajectory(chunk, sec_to_stamp(stamp), self.dt, self.frame_id))
            self.stats["chunks"] += 1
            self.last_chunk = (chunk, stamp)
            self.compute_s.append(self.get_clock().now().nanoseconds * 1e-9 - begun)
            if self.ee_position is not None:
                self.pub_markers.publish(
                    chunk_path_markers(
                        self.ee_position, chunk, self.dt, C.EXECUTE_HORIZON, sec_to_stamp(stamp), self.frame_id
                    )
                )
        except Exception as exc:  # never let the worker die silently
            if not stopped(self):
                self.get_logger().error(f"inference failed: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
        finally:
            self.busy.clear()

    def report(self) -> None:
        from diagnostic_msgs.msg import DiagnosticStatus

        lat = np.array(self.latencies or [0.0])
        age = np.array(self.ages or [0.0]) * 1e3
        # no policy: ERROR (the arm cannot move); a refused reload with a policy still running: WARN
        level = DiagnosticStatus.ERROR if self.predictor is None else DiagnosticStatus.WARN
        level = level if self.problem else DiagnosticStatus.OK
        self.diag.publish(
            {
                **self.stats,
                "latency_p50_ms": float(np.percentile(lat, 50)),
                "latency_p99_ms": float(np.percentile(lat, 99)),
                "obs_age_p50_ms": float(np.percentile(age, 50)),
            },
            level=level,
            message=self.problem or "ok",
        )

    def close(self) -> None:
        """Before the node is destroyed: no new work, and the running inference finishes (< 0.1 s) so it never
        publishes through a destroyed publisher (the 'cannot use Destroyable' error on Ctrl-C)."""
        self.closing.set()
        self.to_load.put(None)  # a load in progress finishes in its daemon thread, or is cut short by the exit
        self.loader.join(timeout=2.0)  # one between its steps ends now (torch torn down mid-trace would abort)
        self.worker.shutdown(wait=True, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    return run_node(PolicyNode, args, threads=1)  # inference and reloads run in their own threads


if __name__ == "__main__":
    raise SystemExit(main())
