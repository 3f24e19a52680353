"""The safety filter's core: what velocity the arm may be sent at this tick. Pure Python (numpy), no ROS.

The ``safety_filter`` node feeds it commands, end-effector poses, the e-stop and speed-scaling inputs and
the freshness of the policy's inputs, and publishes what :meth:`SafetyFilter.tick` returns. Everything a
learned policy commands passes through here; the arm (or the sim) listens to nothing else.

Rules, in the order a tick applies them:

1. **Latches**: an e-stop press or a speed scaling of 0 latches ``estop``; the run-time limit latches
   ``timeout``. Only :meth:`reset` clears a latch, and only while the e-stop input is released and the
   speed scaling is above 0. A latched filter sends zero.
2. **Waiting**: zero until a valid command and a valid pose have arrived, and while the tool is outside the
   box before the filter was first active (it refuses to start outside the box).
3. **Deadman** (on the steady clock, not ROS time): zero when the newest valid command or the newest valid
   pose is older than its limit, or while the policy's inputs are stale.
4. **Speed cap** on the vector norm (the direction is kept).
5. **Acceleration cap**: the change from the previous output is at most ``max_accel * dt`` (vector norm), dt
   the time since the previous tick but never more than the nominal tick period.
6. **Workspace box**: per axis, the command may not carry the tool past a face within ``box_lookahead_s``;
   outside the box only motion back toward it is kept. Applied last, so it may brake harder than rule 5.
7. **Dry run**: the result is reported as ``would_send`` and zero goes out.

Rejected at the input (and counted): NaN/inf values, a wrong ``frame_id``, a stamp from the future. Nothing
non-finite ever leaves :meth:`tick`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from diffpolicy_ros.contract import CONTROL_PERIOD_S, MAX_SPEED, WORLD_FRAME
from diffpolicy_ros.errors import UserError

STATES = ("waiting", "active", "dry_run", "estop", "timeout")


@dataclass
class SafetyLimits:
    max_speed: float = MAX_SPEED  # m/s, on the norm of the commanded linear velocity
    max_accel: float = 1.0  # m/s^2: at most max_accel * dt change per tick
    box_low: tuple[float, float, float] | None = None  # workspace box of the tool in frame_id (m)
    box_high: tuple[float, float, float] | None = None
    box_lookahead_s: float = CONTROL_PERIOD_S  # how far ahead a command is assumed to carry the tool
    tick_period_s: float = CONTROL_PERIOD_S  # the node's tick; the acceleration cap never allows more per tick
    command_timeout_s: float = 0.25  # deadman: the newest valid command is at most this old (steady clock)
    pose_timeout_s: float = 0.25  # deadman: the newest valid ee pose is at most this old
    future_tolerance_s: float = 0.05  # a stamp further ahead of now than this is rejected
    # a pose that implies the tool moved faster than this (plus the tolerance) is a glitch, not a motion;
    # once the newest valid pose is older than pose_timeout_s, the next one is taken as it is
    max_tool_speed: float = 1.0  # m/s
    pose_jump_tolerance_m: float = 0.01
    frame_id: str = WORLD_FRAME
    max_run_time_s: float = 0.0  # from the first active tick; 0: no limit
    dry_run: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_speed",
            "max_accel",
            "box_lookahead_s",
            "tick_period_s",
            "command_timeout_s",
            "pose_timeout_s",
            "max_tool_speed",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"safety limit {name} must be a finite number > 0, got {value!r}")
        if (self.box_low is None) != (self.box_high is None):
            raise UserError("safety box: give both box_low and box_high, or neither")
        if self.box_low is not None:
            low, high = np.asarray(self.box_low, float), np.asarray(self.box_high, float)
            if low.shape != (3,) or high.shape != (3,) or not np.all(np.isfinite(low) & np.isfinite(high)):
                raise UserError("safety box: box_low and box_high must be 3 finite numbers each")
            if np.any(low >= high):
                raise UserError(f"safety box: box_low {low.tolist()} must be below box_high {high.tolist()}")
        if self.max_run_time_s < 0 or self.future_tolerance_s < 0 or self.pose_jump_tolerance_m < 0:
            raise UserError("max_run_time_s, future_tolerance_s and pose_jump_tolerance_m must be >= 0")

    @property
    def has_box(self) -> bool:
        return self.box_low is not None


@dataclass
class TickResult:
    command: np.ndarray  # what goes to the arm (zero unless active)
    would_send: np.ndarray  # what would go out without dry run (zero when stopped)
    state: str
    reason: str  # why the output is what it is ('' when active and unmodified)
    limited: tuple[str, ...] = ()  # which caps changed the command this tick: speed, accel, box


@dataclass
class _Sample:
    value: np.ndarray
    received: float  # steady clock


@dataclass
class SafetyFilter:
    limits: SafetyLimits = field(default_factory=SafetyLimits)

    def __post_init__(self) -> None:
        self.command: _Sample | None = None
        self.pose: _Sample | None = None
        self.inputs_fresh = True
        self.estop_pressed = False
        self.speed_scaling = 1.0
        self.latched: str | None = None  # 'estop' | 'timeout'
        self.latch_reason = ""
        self.started: float | None = None  # steady time of the first active tick
        self.last_output = np.zeros(3)
        self.last_sent = np.zeros(3)  # what reached the arm last tick (zero in dry run)
        self.travel = np.zeros(3)  # dead reckoning: where the sent commands carried the tool since the last pose
        self.last_tick: float | None = None
        self.counts = {
            "rejected_nonfinite": 0,
            "rejected_frame": 0,
            "rejected_future": 0,
            "rejected_jump": 0,
            "rejected_shape": 0,
            "speed_limited": 0,
            "accel_limited": 0,
            "box_limited": 0,
            "deadman_stops": 0,
            "stale_input_stops": 0,
            "estops": 0,
            "timeouts": 0,
            "resets": 0,
            "ticks": 0,
            "active_ticks": 0,
        }
        self._stopped_by_deadman = False

    # ------------------------------------------------------------------ inputs
    def _check(self, value, stamp: float, frame_id: str, ros_now: float) -> tuple[np.ndarray | None, str]:
        try:
            v = np.asarray(value, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            self.counts["rejected_shape"] += 1
            return None, "not a 3-vector"
        if v.shape != (3,):
            self.counts["rejected_shape"] += 1
            return None, f"expected 3 values, got {v.size}"
        if not (np.all(np.isfinite(v)) and math.isfinite(stamp)):
            self.counts["rejected_nonfinite"] += 1
            return None, "non-finite value or stamp"
        if frame_id != self.limits.frame_id:
            self.counts["rejected_frame"] += 1
            return None, f"frame_id {frame_id!r} is not {self.limits.frame_id!r}"
        if stamp > ros_now + self.limits.future_tolerance_s:
            self.counts["rejected_future"] += 1
            return None, f"stamped {stamp - ros_now:.3f} s in the future"
        return v, ""

    def offer_command(self, velocity, stamp: float, frame_id: str, ros_now: float, steady_now: float) -> str:
        """Take a commanded linear velocity (m/s); returns the reason it was rejected ('' when taken)."""
        v, reason = self._check(velocity, stamp, frame_id, ros_now)
        if v is not None:
            self.command = _Sample(v, steady_now)
        return reason

    def offer_pose(self, position, stamp: float, frame_id: str, ros_now: float, steady_now: float) -> str:
        """Take the tool position (m); returns the reason it was rejected ('' when taken)."""
        p, reason = self._check(position, stamp, frame_id, ros_now)
        if p is not None and self.pose is not None:
            lim, age = self.limits, steady_now - self.pose.received
            jump = float(np.linalg.norm(p - self.position))
            if age <= lim.pose_timeout_s and jump > lim.max_tool_speed * age + lim.pose_jump_tolerance_m:
                self.counts["rejected_jump"] += 1
                return f"pose jumped {jump:.3f} m in {age:.3f} s"
        if p is not None:
            self.pose = _Sample(p, steady_now)
            self.travel = np.zeros(3)
        return reason

    def set_inputs_fresh(self, fresh: bool) -> None:
        """Whether every input the policy uses is fresh (from the policy side: cameras, joints, ...)."""
        self.inputs_fresh = bool(fresh)

    def set_estop(self, pressed: bool) -> None:
        self.estop_pressed = bool(pressed)
        if self.estop_pressed:
            self._latch("estop", "e-stop pressed")

    def set_speed_scaling(self, value: float) -> None:
        """The driver's speed scaling (0 on a pause or protective stop): 0 latches like the e-stop."""
        self.speed_scaling = float(value) if math.isfinite(value) else 0.0
        if self.speed_scaling <= 0.0:
            self._latch("estop", "speed scaling 0 (robot paused or stopped)")

    def _latch(self, kind: str, reason: str) -> None:
        if self.latched != kind:
            self.counts["estops" if kind == "estop" else "timeouts"] += 1
        if self.latched != "estop":  # an e-stop outranks a timeout
            self.latched, self.latch_reason = kind, reason

    def reset(self) -> tuple[bool, str]:
        """Clear a latch; refused while the e-stop is pressed or the speed scaling is 0."""
        if self.estop_pressed:
            return False, "e-stop is still pressed: release it first"
        if self.speed_scaling <= 0.0:
            return False, "speed scaling is 0: resume the robot first"
        if self.latched is None:
            return True, "nothing to reset: not latched"
        self.latched, self.latch_reason, self.started = None, "", None
        self.last_output = np.zeros(3)
        self.counts["resets"] += 1
        return True, "reset: waiting for fresh commands"

    # ------------------------------------------------------------------ the tick
    def tick(self, steady_now: float) -> TickResult:
        lim = self.limits
        # a late tick does not earn a bigger step: the change per tick is capped at the nominal period's
        dt = lim.tick_period_s if self.last_tick is None else min(steady_now - self.last_tick, lim.tick_period_s)
        if self.last_tick is not None and self.pose is not None:
            # a pose a few ticks old is not where the tool is now: add what was sent since (a pose received
            # after the last tick already holds the motion before it)
            since = max(self.last_tick, self.pose.received)
            self.travel += self.last_sent * max(steady_now - since, 0.0)
        self.last_tick = steady_now
        self.counts["ticks"] += 1
        if self.latched is None and lim.max_run_time_s and self.started is not None:
            if steady_now - self.started > lim.max_run_time_s:
                self._latch("timeout", f"maximum run time {lim.max_run_time_s:.0f} s reached")
        if self.latched is not None:
            return self._stop(self.latched, self.latch_reason)
        if self.command is None or self.pose is None:
            missing = [n for n, s in (("command", self.command), ("ee pose", self.pose)) if s is None]
            return self._stop("waiting", f"no valid {' or '.join(missing)} yet")
        if self.started is None and lim.has_box and not self._inside(self.pose.value):
            return self._stop("waiting", "the tool is outside the workspace box: move it in by hand first")
        cmd_age, pose_age = steady_now - self.command.received, steady_now - self.pose.received
        if cmd_age > lim.command_timeout_s or pose_age > lim.pose_timeout_s:
            if not self._stopped_by_deadman:
                self.counts["deadman_stops"] += 1
                self._stopped_by_deadman = True
            return self._stop("waiting", f"deadman: command {cmd_age:.3f} s / pose {pose_age:.3f} s old")
        if not self.inputs_fresh:
            self.counts["stale_input_stops"] += 1
            return self._stop("waiting", "a policy input is stale")
        self._stopped_by_deadman = False

        v, limited = self.command.value.copy(), []
        speed = float(np.linalg.norm(v))
        if speed > lim.max_speed:
            v *= lim.max_speed / speed
            limited.append("speed")
        step = v - self.last_output
        max_step = lim.max_accel * dt
        step_norm = float(np.linalg.norm(step))
        if step_norm > max_step:
            v = self.last_output + step * (max_step / step_norm)
            limited.append("accel")
        if lim.has_box:
            boxed = self._box_clip(v, self.position)
            if not np.array_equal(boxed, v):
                v = boxed
                limited.append("box")
        for name in limited:
            self.counts[f"{name}_limited"] += 1
        if self.started is None:
            self.started = steady_now
        self.counts["active_ticks"] += 1
        self.last_output = v
        state = "dry_run" if lim.dry_run else "active"
        out = np.zeros(3) if lim.dry_run else v.copy()
        self.last_sent = out
        return TickResult(out, v.copy(), state, "limited: " + ", ".join(limited) if limited else "", tuple(limited))

    @property
    def position(self) -> np.ndarray:
        """The tool position the box is checked against: the newest pose plus the commands sent since."""
        return self.pose.value + self.travel

    def _stop(self, state: str, reason: str) -> TickResult:
        self.last_output = np.zeros(3)
        self.last_sent = np.zeros(3)
        return TickResult(np.zeros(3), np.zeros(3), state, reason)

    def _inside(self, p: np.ndarray) -> bool:
        return bool(np.all(p >= np.asarray(self.limits.box_low)) and np.all(p <= np.asarray(self.limits.box_high)))

    def _box_clip(self, v: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Per axis: inside, v may not carry the tool past a face within the lookahead; outside, only motion
        back toward the box is kept."""
        t = self.limits.box_lookahead_s
        low, high = np.asarray(self.limits.box_low), np.asarray(self.limits.box_high)
        upper = np.maximum(0.0, (high - p) / t)
        lower = np.minimum(0.0, (low - p) / t)
        return np.clip(v, lower, upper)

    @property
    def state(self) -> str:
        return self.latched or ("active" if self.started is not None else "waiting")
