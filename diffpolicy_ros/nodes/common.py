"""Shared node plumbing: named QoS profiles, diagnostics, and a clean ``main`` for every node."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from diffpolicy_ros.contract import DIAGNOSTICS_TOPIC

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
STATS_WINDOW = 100  # samples behind each rate / latency / jitter statistic on /diagnostics


class ParameterError(ValueError):
    """A node parameter the node cannot run with; the message names the parameter and why."""


def parameter(node: Node, name: str, default, check: Callable | None = None, why: str = ""):
    """Declare ``name`` and return its value, validated at start: a bad value stops the node with one line
    naming the parameter, instead of a crash (or a silent wrong behaviour) later."""
    if not node.has_parameter(name):
        node.declare_parameter(name, default)
    value = node.get_parameter(name).value
    if check is not None and not check(value):
        raise ParameterError(f"{node.get_name()}: parameter '{name}' = {value!r}: {why}")
    return value


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


def run_node(factory: Callable[[], Node], args: list[str] | None = None, threads: int = 1) -> int:
    """Init rclpy, spin the node, shut down cleanly on SIGINT/SIGTERM.

    Single-threaded by default: the callbacks are short, and rclpy's MultiThreadedExecutor busy-polls in
    Python, holding the GIL that a node's worker thread (inference, training) needs — measured: 70% CPU
    and 290 ms inference spikes in the policy node. ``threads=1`` also spins on the constructing thread,
    which nodes owning a GL context (sim_bridge) need.
    """
    rclpy.init(args=sys.argv if args is None else args)
    signal.signal(signal.SIGTERM, lambda *_: rclpy.try_shutdown())
    node = None
    try:
        node = factory()
        executor = SingleThreadedExecutor() if threads == 1 else MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except ParameterError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise
        # Ctrl-C / SIGTERM shut the context down while a callback was publishing ("publisher's context is
        # invalid"): a clean stop, not a crash to print
    except SystemExit as exc:  # a node that has finished its job (a recorder's duration)
        return int(exc.code or 0)
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if close is not None:
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return 0
