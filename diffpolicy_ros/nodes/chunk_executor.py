"""chunk_executor: plays the newest action chunk as TwistStamped on ``/arm/cmd_twist``.

At each tick (10 Hz default; >= 30 Hz for servo interfaces) it sends the chunk point due at
``now - chunk stamp`` (steps already elapsed are skipped); a newer chunk replaces the rest of the old one,
cross-faded over ``blend_s``. When no valid, fresh chunk covers ``now`` it sends zero twist: a robot without
commands stops. The logic is :class:`diffpolicy_ros.safety.chunk_player.ChunkPlayer`, which the
deployment-faithful sim runs too.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from trajectory_msgs.msg import MultiDOFJointTrajectory

from diffpolicy_ros.contract import ACTION_CHUNK_TOPIC, CHUNK_HORIZON, CMD_TWIST_TOPIC, CONTROL_PERIOD_S, WORLD_FRAME
from diffpolicy_ros.messages.conversions import MessageError, make_twist, stamp_to_sec, trajectory_to_chunk
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    STATS_WINDOW,
    WARN_THROTTLE_S,
    Diagnostics,
    number,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.safety.chunk_player import ChunkPlayer


class ChunkExecutor(Node):
    def __init__(self):
        super().__init__("chunk_executor")
        rate_hz = parameter(self, "rate_hz", 1.0 / CONTROL_PERIOD_S, positive, "must be > 0")
        self.horizon = parameter(self, "horizon", CHUNK_HORIZON, positive, "must be > 0 (points per chunk)")
        dt = parameter(self, "dt", CONTROL_PERIOD_S, positive, "must be > 0")
        self.frame_id = parameter(self, "frame_id", WORLD_FRAME, bool, "must not be empty")
        # cross-fade from the old chunk to a new one over this long (0: switch at once; safety/chunk_player.py)
        blend = number(self, "blend_s", 0.0, 0.0, 1.0, description="cross-fade time at a chunk switch (s)")
        future = number(self, "future_tolerance_s", 0.05, 0.0, 3600.0,
                        description="a chunk stamped further ahead of this node's clock is refused (s)")
        self.player = ChunkPlayer(dt, future_tolerance=future, blend_s=blend)
        self.lock = threading.Lock()
        self.pub = self.create_publisher(TwistStamped, CMD_TWIST_TOPIC, COMMAND_QOS)
        self.diag = Diagnostics(self)
        self.create_subscription(MultiDOFJointTrajectory, ACTION_CHUNK_TOPIC, self.on_chunk, COMMAND_QOS)
        period = 1.0 / rate_hz
        self.create_timer(period, self.tick)
        self.create_timer(1.0, self.report)
        self.ticks, self.zero_ticks, self.last_tick = 0, 0, None
        self.jitter: deque[float] = deque(maxlen=STATS_WINDOW)
        self.period = period

    def now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def on_chunk(self, msg: MultiDOFJointTrajectory) -> None:
        try:
            chunk = trajectory_to_chunk(msg, self.horizon, self.player.dt)
        except MessageError as exc:
            self.get_logger().warn(f"rejecting chunk: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        with self.lock:
            reason = self.player.offer(chunk, stamp_to_sec(msg.header.stamp), self.now())
        if reason:
            self.get_logger().warn(f"rejecting chunk: {reason}", throttle_duration_sec=WARN_THROTTLE_S)

    def tick(self) -> None:
        now = self.now()
        with self.lock:
            v, k = self.player.command(now)
        self.pub.publish(make_twist(v, self.get_clock().now().to_msg(), self.frame_id))
        self.ticks += 1
        self.zero_ticks += k is None
        if self.last_tick is not None:
            self.jitter.append(abs(now - self.last_tick - self.period))
        self.last_tick = now

    def report(self) -> None:
        jitter = np.array(self.jitter or [0.0]) * 1e3
        self.diag.publish(
            {
                "ticks": self.ticks,
                "zero_ticks": self.zero_ticks,
                "jitter_p50_ms": float(np.percentile(jitter, 50)),
                "jitter_p99_ms": float(np.percentile(jitter, 99)),
            }
        )


def main(args: list[str] | None = None) -> int:
    return run_node(ChunkExecutor, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
