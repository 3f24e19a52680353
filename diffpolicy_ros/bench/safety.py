"""``diffpolicy bench safety``: the safety filter against adversarial streams, offline and live.

Offline, the pure-Python core is driven by ``streams`` random adversarial streams (huge, NaN/inf, wrong-frame
and future-stamped commands and poses, random tick jitter, silences, e-stop presses and resets) while an ideal
arm integrates its output. Live (``hil_*`` keys), the ``real_arm`` graph runs in hardware-in-the-loop mode
with a policy that always asks for one velocity, an attacker publishes adversarial action chunks, and the
chunk executor is frozen (SIGSTOP) several times to time the deadman on the real processes.

What is measured (the same for both):
- ``max_speed``: the largest output norm (m/s); the cap is ``max_speed_cap``.
- ``max_accel``: the largest change between consecutive non-zero outputs divided by the tick period (m/s^2).
  A stop (any output to zero) is excluded: stopping is what the filter is for. Braking at a box face may
  exceed the cap (counted in ``box_brakes``, not hidden): offline the filter says when it braked; live, the
  axes on which the tool is within one lookahead of a face are left out of the figure (the pusher works
  3 mm above the box's floor, so live ``max_accel`` is the horizontal one).
- ``box_violations``: ticks at which the tool was outside the box and the output did not point back in.
- ``nonfinite_out``: outputs with a NaN or inf.
- ``deadman_stop_ms_p99``: from the moment the deadman expires (the newest valid command is
  ``command_timeout_s`` old) to the first zero output. ``last_command_to_zero_ms_p99`` adds the timeout.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from diffpolicy_ros import contract as C
from diffpolicy_ros.safety.filter import SafetyFilter, SafetyLimits

TICK_S = 1.0 / 30.0  # the filter node's default rate
PROBE_QOS_DEPTH = 100


def _p99_ms(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 99)) * 1000, 2) if values else None


class _Tally:
    """Output checks shared by the offline and the live runs."""

    def __init__(self, limits: SafetyLimits):
        self.limits = limits
        self.max_speed = self.max_accel = 0.0
        self.box_violations = self.box_brakes = self.nonfinite = self.outputs = 0
        self.prev: np.ndarray | None = None

    def add(self, out: np.ndarray, pose: np.ndarray | None, dt: float, braking=False) -> None:
        """``braking``: True, or per axis, where the box may have braked (the cap is checked on the others)."""
        self.outputs += 1
        if not np.all(np.isfinite(out)):
            self.nonfinite += 1
            return
        self.max_speed = max(self.max_speed, float(np.linalg.norm(out)))
        if self.prev is not None and np.any(out) and np.any(self.prev) and dt > 0:
            free = ~np.broadcast_to(np.asarray(braking, bool), out.shape)
            accel = float(np.linalg.norm((out - self.prev)[free])) / dt
            self.max_accel = max(self.max_accel, accel)
            if float(np.linalg.norm(out - self.prev)) / dt > self.limits.max_accel + 1e-9 and not free.all():
                self.box_brakes += 1
        self.prev = out
        if pose is not None and np.any(out):
            low, high = np.asarray(self.limits.box_low), np.asarray(self.limits.box_high)
            outward = ((pose > high) & (out > 0)) | ((pose < low) & (out < 0))
            self.box_violations += int(np.any(outward))

    def summary(self, prefix: str = "") -> dict:
        return {
            f"{prefix}max_speed": round(self.max_speed, 6),
            f"{prefix}max_accel": round(self.max_accel, 4),
            f"{prefix}box_violations": self.box_violations,
            f"{prefix}box_brakes": self.box_brakes,
            f"{prefix}nonfinite_out": self.nonfinite,
            f"{prefix}outputs": self.outputs,
        }


def _adversarial_value(rng: np.random.Generator, scale: float) -> np.ndarray:
    kind = rng.integers(10)
    if kind == 0:
        return np.array([np.nan, 0.0, 0.0])[rng.permutation(3)]
    if kind == 1:
        return np.array([np.inf, -np.inf, 0.0])[rng.permutation(3)]
    if kind == 2:
        return rng.normal(0, 1e6, 3)
    return rng.normal(0, scale, 3)


def offline(streams: int, ticks: int, limits: SafetyLimits, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    tally = _Tally(limits)
    stops, stops_total = [], []
    low, high = np.asarray(limits.box_low), np.asarray(limits.box_high)
    for _ in range(streams):
        f = SafetyFilter(limits)
        tally.prev = None  # a new arm
        now = 1000.0
        pose = rng.uniform(low, high)
        silence_until = -1.0
        timed = None  # the command sample whose deadman expiry was timed
        out = np.zeros(3)
        for _ in range(ticks):
            dt = float(rng.choice([TICK_S, TICK_S, rng.uniform(0.001, 0.1)]))
            pose = pose + out * dt  # an ideal arm follows the last output until the next tick
            now += dt
            if now >= silence_until and rng.random() < 0.01:  # the command stream dies for a while
                silence_until = now + rng.uniform(0.0, 1.5)
            if rng.random() < 0.004:
                f.set_estop(True)
            elif rng.random() < 0.01:  # a human releases and resets on a later tick than the press
                f.set_estop(False)
                f.reset()
            if now >= silence_until:
                frame = limits.frame_id if rng.random() > 0.05 else "base_link"
                stamp = now + (rng.choice([0.0, 1.0, -1.0, math.nan]) if rng.random() < 0.05 else 0.0)
                f.offer_command(_adversarial_value(rng, 0.6), stamp, frame, now, now)
            if rng.random() < 0.9:  # the arm's pose: some lost, the odd one corrupt
                bad = rng.random() < 0.02
                f.offer_pose(_adversarial_value(rng, 1.0) if bad else pose, now, limits.frame_id, now, now)
            result = f.tick(now)
            out = result.command
            tally.add(out, pose, TICK_S, "box" in result.limited)
            sample = f.command
            if sample is not None and sample is not timed and now > sample.received + limits.command_timeout_s:
                timed = sample  # the first tick after this command's deadman expiry
                if not np.any(out):
                    stops.append(now - sample.received - limits.command_timeout_s)
                    stops_total.append(now - sample.received)
                else:
                    stops.append(math.inf)  # a miss: reported, not hidden
    return {
        **tally.summary(),
        "deadman_stops": len(stops),
        "deadman_stop_ms_p99": _p99_ms(stops),
        "last_command_to_zero_ms_p99": _p99_ms(stops_total),
        "streams": streams,
        "ticks_per_stream": ticks,
    }


def constant_velocity_checkpoint(path: Path, velocity, use_task_state: bool = False, span: float = 0.0) -> Path:
    """A real (untrained) camera + joint-state (+ block/goal pose with ``use_task_state``) diffusion policy
    whose action range is one velocity (± ``span``): every chunk it predicts is that velocity. For checking the
    plumbing, not a policy's skill. A span > 0 lets actions be normalised, as real-time chunking's committed
    actions are."""
    import torch

    from diffpolicy_ros.models.checkpoint import CheckpointMeta, make_payload, save_checkpoint
    from diffpolicy_ros.models.factory import build_policy, policy_spec

    spec = policy_spec(
        {
            "kind": "diffusion",
            "diffusion": {"fusion": {"use_task_state": use_task_state}, "unet": {"down_dims": [32, 64, 128]}},
        }
    )
    policy = build_policy(spec)
    v = torch.tensor(velocity, dtype=torch.float32)
    policy.action_norm.low.copy_(v - span)
    policy.action_norm.high.copy_(v + span)
    return save_checkpoint(path, make_payload(spec, policy, CheckpointMeta(source="test", obs_mode="image")))


def live(duration_s: float, freezes: int, limits: SafetyLimits) -> dict:
    """The real_arm graph in HIL mode; the attacker and the probe run in this process."""
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.nodes.common import COMMAND_QOS, SENSOR_QOS

    PROBE_QOS = QoSProfile(depth=PROBE_QOS_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
    from diffpolicy_ros.bench.ros import init_rclpy, loopback_env
    from diffpolicy_ros.messages.conversions import chunk_to_trajectory, sec_to_stamp
    from diffpolicy_ros.nodes.runner import graph_node_pid, spawn_graph, stop_graph

    env = loopback_env()
    tmp = Path(tempfile.mkdtemp(prefix="diffpolicy_bench_safety_"))
    servo = "/servo_node/delta_twist_cmds"
    overrides = {
        "hil": "true",
        "checkpoint": str(constant_velocity_checkpoint(tmp / "policy.pt", (0.01, 0.0, 0.0))),
        "box_low": str(list(limits.box_low)),
        "box_high": str(list(limits.box_high)),
        "max_speed": str(limits.max_speed),
        "max_accel": str(limits.max_accel),
        "dry_run": "false",
        "max_run_time_s": "0",
        "allow_unproven": "true",  # a constant-velocity stand-in policy, never evaluated
    }
    log = open(tmp / "graph.log", "w")
    graph = spawn_graph("real_arm", overrides, env, stdout=log)
    init_rclpy(env)
    node = Node("bench_safety")
    outs: list[tuple[float, float, np.ndarray]] = []  # (receipt, header stamp, velocity)
    commands: list[float] = []
    pose: list[np.ndarray] = []

    def on_out(m: TwistStamped) -> None:
        v = np.array([m.twist.linear.x, m.twist.linear.y, m.twist.linear.z])
        outs.append((time.monotonic(), m.header.stamp.sec + m.header.stamp.nanosec * 1e-9, v))

    node.create_subscription(TwistStamped, servo, on_out, PROBE_QOS)  # every output, not only the newest
    node.create_subscription(TwistStamped, C.CMD_TWIST_TOPIC, lambda m: commands.append(time.monotonic()), COMMAND_QOS)
    pose_t: list[float] = []

    def on_pose(m: PoseStamped) -> None:
        pose.append(np.array([m.pose.position.x, m.pose.position.y, m.pose.position.z]))
        pose_t.append(time.monotonic())

    node.create_subscription(PoseStamped, C.EE_POSE_TOPIC, on_pose, SENSOR_QOS)
    attacker = node.create_publisher(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, COMMAND_QOS)
    rng = np.random.default_rng(0)

    def spin(seconds: float, attack: bool = True, until=None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if attack and rng.random() < 0.3:
                scale = rng.normal(1, 1, (C.CHUNK_HORIZON, 1))
                chunk = _adversarial_value(rng, 5.0)[None].repeat(C.CHUNK_HORIZON, 0) * scale
                stamp = node.get_clock().now().nanoseconds * 1e-9 + float(rng.choice([0.0, -5.0, 10.0]))
                attacker.publish(chunk_to_trajectory(chunk, sec_to_stamp(stamp), C.CONTROL_PERIOD_S, C.WORLD_FRAME))
            rclpy.spin_once(node, timeout_sec=0.01)
            if until is not None and until():
                return True
        return False

    def moving() -> bool:
        return bool(outs) and bool(np.any(outs[-1][2]))

    stops, stops_total = [], []
    try:
        if not spin(120.0, attack=False, until=moving):
            raise RuntimeError(f"the HIL graph never moved the arm; see {tmp / 'graph.log'}")
        spin(duration_s)
        executor = graph_node_pid(graph, "chunk_executor")  # a node of the graph started above, by its PID
        for _ in range(freezes):  # a hung executor: the deadman must stop the arm
            spin(3.0, attack=False, until=moving)
            os.kill(executor, signal.SIGSTOP)
            spin(0.05, attack=False)
            last_command = commands[-1]
            spin(limits.command_timeout_s + 0.5, attack=False)
            first_zero = next((t for t, _, v in outs if t > last_command and not np.any(v)), None)
            os.kill(executor, signal.SIGCONT)
            if first_zero is not None:
                stops.append(first_zero - (last_command + limits.command_timeout_s))
                stops_total.append(first_zero - last_command)
        tally = _Tally(limits)
        low, high = np.asarray(limits.box_low), np.asarray(limits.box_high)
        reach = limits.max_speed * limits.box_lookahead_s  # closer to a face than this, the box may brake
        previous = None
        for received, stamp, v in outs:  # the filter's tick times (its stamps): a late tick earns no more
            k = np.searchsorted(pose_t, received) - 1
            near = ((pose[k] - low < reach) | (high - pose[k] < reach)) if k >= 0 else np.ones(3, bool)
            tally.add(v, None, TICK_S if previous is None else max(stamp - previous, TICK_S), near)
            previous = stamp
        outside = sum(bool(np.any(p < low - 1e-3) or np.any(p > high + 1e-3)) for p in pose)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph, timeout=30)
        log.close()
    result = tally.summary("hil_")
    result.update(
        {
            "hil_box_violations": outside,  # live: ee poses outside the box (the sim arm really moved)
            "hil_deadman_stop_ms_p99": _p99_ms(stops),
            "hil_last_command_to_zero_ms_p99": _p99_ms(stops_total),
            "hil_deadman_trials": len(stops),
            "hil_poses": len(pose),
        }
    )
    return result


def bench_safety(streams: int = 200, ticks: int = 600, hil: bool = True, hil_duration_s: float = 20.0) -> dict:
    limits = SafetyLimits(
        max_speed=C.MAX_SPEED,
        max_accel=0.5,
        box_low=C.WORKSPACE_LOW,
        box_high=C.WORKSPACE_HIGH,
        tick_period_s=TICK_S,
    )
    t0 = time.perf_counter()
    result = {
        "max_speed_cap": limits.max_speed,
        "max_accel_cap": limits.max_accel,
        "command_timeout_ms": limits.command_timeout_s * 1000,
        "tick_ms": round(TICK_S * 1000, 2),
        **offline(streams, ticks, limits),
    }
    if hil:
        result.update(live(hil_duration_s, freezes=10, limits=limits))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result
