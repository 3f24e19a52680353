"""Shared node plumbing: named QoS profiles, diagnostics, and a clean ``main`` for every node."""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions

from diffpolicy_ros.arguments import ArgumentError, parse_bool, parse_number
from diffpolicy_ros.contract import DIAGNOSTICS_TOPIC
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.user_files import check_input

# Sensor streams: newest sample wins, a lost frame is better than a late one.
SENSOR_QOS = QoSProfile(depth=2, reliability=ReliabilityPolicy.BEST_EFFORT, history=HistoryPolicy.KEEP_LAST)
# Commands (chunks, twists): reliable, but only the newest matters.
COMMAND_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
# State that late joiners must get (instruction, latest checkpoint): latched.
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    history=HistoryPolicy.KEEP_LAST,
)
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# Viewers (Foxglove, rviz): reliable like rviz's default subscription, shallow — only the newest scene matters.
VIEWER_QOS = QoSProfile(depth=2, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
WARN_THROTTLE_S = 2.0
STOP_POLL_S = 0.25  # run_node sees a stop (the context shut down by Ctrl-C or SIGTERM) within this
STATS_WINDOW = 100  # samples behind each rate / latency / jitter statistic on /diagnostics


class ParameterError(UserError):
    """A node parameter the node cannot run with; the message names the parameter and why."""


def _declare(node: Node, name: str, default, descriptor: ParameterDescriptor | None = None):
    """Declare ``name`` (once) and return its value; an override of the wrong type or outside a declared range
    is a ParameterError naming it (rclpy raises its own exceptions, which would print as a crash)."""
    try:
        if not node.has_parameter(name):
            node.declare_parameter(name, default, descriptor or ParameterDescriptor())
        return node.get_parameter(name).value
    except (InvalidParameterTypeException, InvalidParameterValueException) as exc:
        raise ParameterError(f"{node.get_name()}: parameter '{name}': {exc}") from None


def parameter(node: Node, name: str, default, check: Callable | None = None, why: str = ""):
    """Declare ``name`` and return its value, validated at start: a bad value stops the node with one line
    naming the parameter, instead of a crash (or a silent wrong behaviour) later."""
    value = _declare(node, name, default, ParameterDescriptor(description=why))
    if check is not None and not check(value):
        raise ParameterError(f"{node.get_name()}: parameter '{name}' = {value!r}: {why}")
    return value


def file_parameter(node: Node, name: str, why: str, read: Callable[[str], Any] | None = None) -> tuple[str, Any]:
    """A path parameter ('' : not given) of a kind of user file the node's class names in ``FILE_PARAMETERS``:
    checked at start (the file exists, has its form, is not empty) and read by ``read`` when given, so a bad
    file stops the node with one line naming the parameter and what is wrong with the file. Returns (the path,
    what ``read`` returned)."""
    kind = type(node).FILE_PARAMETERS[name]
    value = parameter(node, name, "", lambda v: isinstance(v, str), f"{why} (a path)")
    if not value:
        return "", None
    try:
        check_input(value, kind)
        return value, read(value) if read is not None else None
    except UserError as exc:
        raise ParameterError(f"{node.get_name()}: parameter '{name}' = {value!r}: {exc}") from None


def number(
    node: Node, name: str, default: float | int, low: float | None = None, high: float | None = None,
    low_open: bool = False, description: str = "",
) -> float | int:
    """A numeric parameter with its domain declared (a ``ParameterDescriptor`` range, as MoveIt Servo declares
    its parameters, so ``ros2 param describe`` shows it) and checked: ``low_open`` excludes ``low`` itself."""
    integer = isinstance(default, int) and not isinstance(default, bool)
    descriptor = ParameterDescriptor(description=description)
    if low is not None and high is not None:  # rclpy ranges need both ends
        if integer:
            descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=1)]
        else:
            descriptor.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high))]
    value = _declare(node, name, default, descriptor)
    try:
        return parse_number(value, name, integer=integer, low=low, high=high, low_open=low_open)
    except ArgumentError as exc:
        raise ParameterError(f"{node.get_name()}: parameter {str(exc).removeprefix('argument ')}") from None


def flag(node: Node, name: str, default: bool, description: str = "") -> bool:
    """A boolean parameter: true/false (also 1/0, yes/no, as a bool, an integer or a string) and nothing else —
    ``dry_run:=ture`` stops the node with one line instead of meaning ``false``."""
    descriptor = ParameterDescriptor(description=description, dynamic_typing=True)  # strings reach parse_bool
    value = _declare(node, name, default, descriptor)
    try:
        return parse_bool(value, name)
    except ArgumentError as exc:
        raise ParameterError(f"{node.get_name()}: parameter {str(exc).removeprefix('argument ')}") from None


def positive(value) -> bool:
    return isinstance(value, (int, float)) and value > 0


def checked_device(node: Node, name: str = "device", default: str = "auto") -> str:
    """The ``device`` parameter resolved to an available device string (an unknown one is a ParameterError)."""
    from diffpolicy_ros.device import resolve_device  # torch: only the nodes that run a model ask for it

    value = parameter(node, name, default, lambda v: isinstance(v, str), "must be a string (auto|npu|cuda|cpu)")
    try:
        return resolve_device(value)
    except (ValueError, RuntimeError) as exc:
        raise ParameterError(f"{node.get_name()}: parameter '{name}' = {value!r}: {exc}") from exc


class Diagnostics:
    """Publishes one DiagnosticStatus per call on /diagnostics, named after the node."""

    def __init__(self, node: Node):
        self.node = node
        self.pub = node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, DIAGNOSTICS_QOS)

    def publish(self, values: dict, level: int = DiagnosticStatus.OK, message: str = "ok") -> None:
        status = DiagnosticStatus(
            level=bytes([level]) if isinstance(level, int) else level,
            name=self.node.get_fully_qualified_name(),
            message=message,
            hardware_id="diffpolicy_ros",
            values=[KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()],
        )
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pub.publish(msg)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def stopped(node: Node) -> bool:
    """Whether a stop (Ctrl-C, SIGTERM) has shut the node's context down. rclpy's signal handler does that at
    once, before ``run_node`` can close the node: a worker thread's publish that fails then ("publisher's
    context is invalid") has met the stop, not an error to print."""
    return not node.context.ok()


def say(node: Node, text: str) -> None:
    """INFO on the console; after a stop (the node's context gone, rosout with it) straight to stderr, so the last
    word of a stopped node (the trainer's, the replay's report) neither disappears nor becomes an error."""
    if stopped(node):
        print(f"[{node.get_logger().name}] {text}", file=sys.stderr, flush=True)  # the node may be destroyed
    else:
        node.get_logger().info(text)


@contextmanager
def quiet_on_stop(node: Node):
    """Around a worker thread's publishing: a failure because a stop shut the context down ends the block
    quietly; any other failure is raised as it is."""
    try:
        yield
    except Exception:
        if not stopped(node):
            raise


def run_node(factory: Callable[[], Node], args: list[str] | None = None, threads: int = 1) -> int:
    """Init rclpy, spin the node, shut down cleanly on SIGINT/SIGTERM.

    Single-threaded by default: the callbacks are short, and rclpy's MultiThreadedExecutor busy-polls in
    Python, holding the GIL that a node's worker thread (inference, training) needs — measured: 70% CPU
    and 290 ms inference spikes in the policy node. ``threads=1`` also spins on the constructing thread,
    which nodes owning a GL context (sim_bridge) need.

    The stop is this loop's own: a Python handler marks it and the spin (which returns every ``STOP_POLL_S``)
    sees it, then the context is shut down (worker threads see ``stopped``), the node closed and destroyed.
    rclpy's own handler shuts the context down from its signal thread, a wake-up seen lost on a busy machine
    (a node waiting until launch killed it). A node that hangs anyway prints every thread's stack on SIGUSR1
    (``diffpolicy launch`` sends it before it kills one).
    """
    stop = threading.Event()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    rclpy.init(args=sys.argv if args is None else args, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    try:
        node = factory()
        executor = SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        while node.context.ok() and not stop.is_set():
            executor.spin_once(timeout_sec=STOP_POLL_S)
    except (ParameterError, InvalidParameterTypeException, InvalidParameterValueException) as exc:
        # a parameter the node cannot run with (rclpy's own type/range errors too): one line, no traceback
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok() and not stop.is_set():
            raise
        # a stop came while a callback was publishing ("publisher's context is invalid"): not a crash to print
    except SystemExit as exc:  # a node that has finished its job (a recorder's duration)
        return int(exc.code or 0)
    finally:
        # a terminal's Ctrl-C under `ros2 launch` arrives twice (the terminal's, then launch's forward): the second
        # must change nothing, also once Python's exit has put the default handlers back (exit by SIGINT, not 0)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        rclpy.try_shutdown()  # first: a worker thread's publish now fails as ``stopped``, not into a destroyed node
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
    return 0
