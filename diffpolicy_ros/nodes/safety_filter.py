"""safety_filter: the only thing the arm (or the sim) listens to.

``/arm/cmd_twist`` (the policy's intent, from chunk_executor) -> :class:`~diffpolicy_ros.safety.filter.SafetyFilter`
-> ``/arm/cmd_twist_safe`` (remapped to the arm's input, e.g. MoveIt Servo's ``/servo_node/delta_twist_cmds``).
A thin node: the rules live in the pure-Python core (speed and acceleration caps, the workspace box against
``/arm/ee_pose``, a steady-clock deadman, the e-stop and speed-scaling latches, a maximum run time, dry run).

Inputs also watched: ``/safety/estop`` (std_msgs/Bool, latching; only ``~/reset`` clears it, and only while
released), the driver's speed scaling (std_msgs/Float64, 0 latches like the e-stop) and ``/policy/action_chunk``
(the policy publishes only while every input it uses is fresh: no chunk for ``chunk_timeout_s`` means a stale
input, and the output is zero). The output is published every tick (``rate_hz``), zero whenever the filter
says stop, so downstream timeouts (Servo's) never see a held command. ``~/state`` (latched String) and
``/diagnostics`` report the state and every intervention.
"""

from __future__ import annotations

import threading
import time

from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import MultiDOFJointTrajectory

from diffpolicy_ros import contract as C
from diffpolicy_ros.messages.conversions import make_twist, stamp_to_sec
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    LATCHED_QOS,
    SENSOR_QOS,
    WARN_THROTTLE_S,
    Diagnostics,
    ParameterError,
    flag,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.safety.filter import SafetyFilter, SafetyLimits


def optional_point(node: Node, name: str) -> tuple[float, float, float] | None:
    """A 3-number parameter that may be left unset (no default: a box must be stated, not assumed)."""
    node.declare_parameter(name, Parameter.Type.DOUBLE_ARRAY)
    value = node.get_parameter_or(name, Parameter(name, value=None)).value
    if value is None:
        return None
    if len(value) != 3:
        raise ParameterError(f"{node.get_name()}: parameter '{name}' = {list(value)}: must be 3 numbers (x, y, z) in m")
    return tuple(float(v) for v in value)


class SafetyFilterNode(Node):
    def __init__(self):
        super().__init__("safety_filter")
        rate_hz = parameter(self, "rate_hz", 30.0, positive, "must be > 0")
        nonneg = lambda v: isinstance(v, (int, float)) and v >= 0  # noqa: E731
        box_low, box_high = optional_point(self, "box_low"), optional_point(self, "box_high")
        require_box = flag(self, "require_box", False)
        if require_box and box_low is None:
            raise ParameterError(
                "safety_filter: parameter 'box_low'/'box_high' not set: this graph refuses to run without an "
                "explicit workspace box (three numbers each, metres, in frame_id)"
            )
        try:
            self.limits = SafetyLimits(
                max_speed=parameter(self, "max_speed", C.MAX_SPEED, positive, "must be > 0 (m/s)"),
                max_accel=parameter(self, "max_accel", 2.0, positive, "must be > 0 (m/s^2)"),
                box_low=box_low,
                box_high=box_high,
                box_lookahead_s=parameter(self, "box_lookahead_s", C.CONTROL_PERIOD_S, positive, "must be > 0"),
                tick_period_s=1.0 / rate_hz,
                command_timeout_s=parameter(self, "command_timeout_s", 0.25, positive, "must be > 0"),
                pose_timeout_s=parameter(self, "pose_timeout_s", 0.25, positive, "must be > 0"),
                future_tolerance_s=parameter(self, "future_tolerance_s", 0.05, nonneg, "must be >= 0"),
                frame_id=parameter(self, "frame_id", C.WORLD_FRAME, bool, "must not be empty"),
                max_run_time_s=parameter(self, "max_run_time_s", 0.0, nonneg, "must be >= 0 (0: no limit)"),
                dry_run=flag(self, "dry_run", False),
            )
        except ValueError as exc:
            raise ParameterError(f"safety_filter: {exc}") from exc
        # the policy publishes a chunk per decision while its inputs are fresh: no chunk for its decision interval
        # and two ticks more means a stale input (the graphs set it from their replan_steps)
        self.chunk_timeout = parameter(self, "chunk_timeout_s", C.chunk_timeout_s(), positive, "must be > 0")
        self.watch_chunks = flag(self, "watch_policy_chunks", True)
        scaling_topic = parameter(self, "speed_scaling_topic", C.SPEED_SCALING_TOPIC)
        servo_node = parameter(self, "servo_node", "")  # e.g. /servo_node: select TWIST input and unpause it
        # a sim's episode resets teleport the tool: there a pose jump is expected (INFO, counted), on an arm a WARN
        self.expect_pose_jumps = flag(self, "expect_pose_jumps", False)
        self.pose_jumps = 0
        self.moved = False  # said once on the console: the first non-zero command the filter passed

        self.filter = SafetyFilter(self.limits)
        self.lock = threading.Lock()
        self.last_chunk = time.monotonic()  # the grace period starts now
        self.last_state = ""
        self.pub = self.create_publisher(TwistStamped, C.CMD_TWIST_SAFE_TOPIC, COMMAND_QOS)
        self.pub_would = self.create_publisher(TwistStamped, "~/would_send", COMMAND_QOS)
        self.pub_state = self.create_publisher(String, "~/state", LATCHED_QOS)
        self.diag = Diagnostics(self)
        self.create_subscription(TwistStamped, C.CMD_TWIST_TOPIC, self.on_command, COMMAND_QOS)
        self.create_subscription(PoseStamped, C.EE_POSE_TOPIC, self.on_pose, SENSOR_QOS)
        self.create_subscription(Bool, C.ESTOP_TOPIC, self.on_estop, LATCHED_QOS)
        self.create_subscription(Float64, scaling_topic, self.on_speed_scaling, SENSOR_QOS)
        if self.watch_chunks:
            self.create_subscription(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, self.on_chunk, COMMAND_QOS)
        self.create_service(Trigger, "~/reset", self.on_reset)
        self.create_timer(1.0 / rate_hz, self.tick)
        self.create_timer(1.0, self.report)
        if servo_node and not self.limits.dry_run:
            self.start_servo(servo_node.rstrip("/"))
        box = f"box {box_low}..{box_high}" if box_low else "NO workspace box"
        dry = " DRY RUN (zero goes out)" if self.limits.dry_run else ""
        self.get_logger().info(f"safety filter: max {self.limits.max_speed} m/s, {box}{dry}")

    def start_servo(self, servo: str) -> None:
        """MoveIt Servo moves only after ``~/switch_command_type`` (TWIST) and ``~/pause_servo`` (false).
        moveit_msgs has no PyPI wheel: without it the first call is a manual step (README, bring-up)."""
        from std_srvs.srv import SetBool

        try:
            from moveit_msgs.srv import ServoCommandType
        except ImportError:
            self.get_logger().warn(
                f"moveit_msgs not importable: call {servo}/switch_command_type (command_type: 1, TWIST) yourself"
            )
        else:
            client = self.create_client(ServoCommandType, f"{servo}/switch_command_type")
            request = ServoCommandType.Request(command_type=ServoCommandType.Request.TWIST)
            self.call_when_ready(client, request, "switch_command_type TWIST")
        self.call_when_ready(
            self.create_client(SetBool, f"{servo}/pause_servo"), SetBool.Request(data=False), "unpause"
        )

    def call_when_ready(self, client, request, what: str) -> None:
        """Call once the service appears (Servo may start after us); log the answer."""

        def attempt():
            if not client.service_is_ready():
                return
            timer.cancel()
            future = client.call_async(request)
            future.add_done_callback(lambda f: self.get_logger().info(f"servo {what}: {f.result()}"))

        timer = self.create_timer(1.0, attempt)

    # ------------------------------------------------------------------ inputs (short callbacks)
    def ros_now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def on_command(self, msg: TwistStamped) -> None:
        v = (msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z)
        with self.lock:
            reason = self.filter.offer_command(
                v, stamp_to_sec(msg.header.stamp), msg.header.frame_id, self.ros_now(), time.monotonic()
            )
        if reason:
            self.get_logger().warn(f"command rejected: {reason}", throttle_duration_sec=WARN_THROTTLE_S)

    def on_pose(self, msg: PoseStamped) -> None:
        p = msg.pose.position
        with self.lock:
            reason = self.filter.offer_pose(
                (p.x, p.y, p.z), stamp_to_sec(msg.header.stamp), msg.header.frame_id, self.ros_now(), time.monotonic()
            )
        if reason and self.expect_pose_jumps and reason.startswith("pose jumped"):
            self.pose_jumps += 1  # an episode reset in the sim: counted on /diagnostics, said once
            if self.pose_jumps == 1:
                self.get_logger().info(f"ee pose jumped ({reason}): a sim reset; further jumps are counted")
        elif reason:
            self.get_logger().warn(f"ee pose rejected: {reason}", throttle_duration_sec=WARN_THROTTLE_S)

    def on_chunk(self, _msg: MultiDOFJointTrajectory) -> None:
        self.last_chunk = time.monotonic()

    def on_estop(self, msg: Bool) -> None:
        with self.lock:
            self.filter.set_estop(msg.data)
        if msg.data:
            self.get_logger().error("E-STOP pressed: output latched to zero until ~/reset")

    def on_speed_scaling(self, msg: Float64) -> None:
        with self.lock:
            self.filter.set_speed_scaling(msg.data)

    def on_reset(self, request, response):
        with self.lock:
            response.success, response.message = self.filter.reset()
        self.get_logger().info(f"reset: {response.message}")
        return response

    # ------------------------------------------------------------------ the tick
    def tick(self) -> None:
        now = time.monotonic()
        stamp = self.get_clock().now().to_msg()
        try:
            with self.lock:
                if self.watch_chunks:
                    self.filter.set_inputs_fresh(now - self.last_chunk <= self.chunk_timeout)
                result = self.filter.tick(now)
        except Exception as exc:  # never die holding a command: send zero and say why
            self.pub.publish(make_twist((0.0, 0.0, 0.0), stamp, self.limits.frame_id))
            self.get_logger().error(f"filter failed, sending zero: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.pub.publish(make_twist(result.command, stamp, self.limits.frame_id))
        self.pub_would.publish(make_twist(result.would_send, stamp, self.limits.frame_id))
        if not self.moved and any(result.would_send):
            self.moved = True
            what = "would move (dry run: zero goes out)" if self.limits.dry_run else "is moving"
            self.get_logger().info(f"the arm {what}: the first non-zero command passed the filter")
        if result.state != self.last_state:
            self.last_state = result.state
            self.pub_state.publish(String(data=result.state))
            text = f"state: {result.state}" + (f" ({result.reason})" if result.reason else "")
            if result.state in ("estop", "timeout"):  # one call site per severity (rclpy requires it)
                self.get_logger().warn(text)
            else:
                self.get_logger().info(text)

    def report(self) -> None:
        from diagnostic_msgs.msg import DiagnosticStatus

        with self.lock:
            counts, state, reason = dict(self.filter.counts), self.filter.state, self.filter.latch_reason
        level = DiagnosticStatus.ERROR if state in ("estop", "timeout") else DiagnosticStatus.OK
        values = {"state": state, **counts, "pose_jumps": self.pose_jumps}
        self.diag.publish(values, level=level, message=reason or state)


def main(args: list[str] | None = None) -> int:
    return run_node(SafetyFilterNode, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
