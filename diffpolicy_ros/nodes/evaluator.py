"""evaluator: the end of the ``replay_eval`` graph. Pairs each action chunk the policy published (stamped with
its observation's bag time) with the recorded commands that followed it, and when the bag player says the
bag has ended writes ``report.json`` and the PNGs — the same metrics as ``diffpolicy eval-bag`` — then exits,
which ends the graph. ``report.json`` always says how it went in ``status`` (``ok``, ``interrupted`` when the
graph was stopped before the bag ended — the figures then cover what was played —, or ``failed: <why>``, also
when the player failed or no chunk came): ``ros2 launch`` exits 0 whatever a node did, so a script checks
``status``; ``diffpolicy launch`` exits with the evaluator's code (1 on failure, 0 on a stop).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool, String
from trajectory_msgs.msg import MultiDOFJointTrajectory

from diffpolicy_ros import contract as C
from diffpolicy_ros.eval.chunk_scores import score, write_report
from diffpolicy_ros.messages.conversions import MessageError, stamp_to_sec, trajectory_to_chunk, twist_vector
from diffpolicy_ros.nodes.common import LATCHED_QOS, parameter, run_node, say

# every chunk and every recorded command counts: keep what arrives in a burst instead of only the newest
KEEP_ALL = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)


class Evaluator(Node):
    def __init__(self):
        super().__init__("evaluator")
        self.out = parameter(self, "out", "replay_eval", bool, "must name the report folder")
        command_topic = parameter(self, "command_topic", C.CMD_TWIST_TOPIC, bool, "must not be empty")
        self.execute = parameter(self, "execute_horizon", C.EXECUTE_HORIZON, lambda v: v > 0, "must be > 0")
        done_topic = parameter(self, "done_topic", "/bag_player/done", bool, "must not be empty")
        status_topic = parameter(self, "status_topic", "/bag_player/status", bool, "must not be empty")
        self.labels = {"bag": parameter(self, "bag", ""), "checkpoint": parameter(self, "checkpoint", "")}
        self.reported = False  # report.json written (ok or failed): a stop after it keeps it
        self.stamps: list[float] = []
        self.chunks: list[np.ndarray] = []
        self.cmd_t: list[float] = []
        self.cmd_v: list[np.ndarray] = []
        self.create_subscription(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, self.on_chunk, KEEP_ALL)
        self.create_subscription(TwistStamped, command_topic, self.on_command, KEEP_ALL)
        self.create_subscription(Bool, done_topic, self.on_done, LATCHED_QOS)
        self.create_subscription(String, status_topic, self.on_player_status, LATCHED_QOS)

    def fail(self, why: str) -> None:
        """No report to make: report.json says why (a script checks it), and the graph ends with exit 1."""
        self.report_counts(f"failed: {why}")
        self.get_logger().error(f"{why}; {self.out}/report.json says so")
        raise SystemExit(1)

    def report_counts(self, status: str) -> None:
        """report.json with nothing to score: the status and what arrived."""
        out = Path(self.out)
        out.mkdir(parents=True, exist_ok=True)
        report = {"status": status, "source": "replay_eval", **self.labels,
                  "chunks": len(self.chunks), "commands": len(self.cmd_t)}  # fmt: skip
        (out / "report.json").write_text(json.dumps(report, indent=2))
        self.reported = True

    def on_player_status(self, msg: String) -> None:
        if msg.data.startswith("failed"):
            self.fail(f"the bag player {msg.data}")

    def on_chunk(self, msg: MultiDOFJointTrajectory) -> None:
        try:
            self.chunks.append(trajectory_to_chunk(msg, C.CHUNK_HORIZON, C.CONTROL_PERIOD_S))
        except MessageError as exc:
            self.get_logger().warn(f"chunk dropped: {exc}")
            return
        self.stamps.append(stamp_to_sec(msg.header.stamp))

    def on_command(self, msg: TwistStamped) -> None:
        try:
            self.cmd_v.append(twist_vector(msg))
        except MessageError:
            return
        self.cmd_t.append(stamp_to_sec(msg.header.stamp))

    def on_done(self, msg: Bool) -> None:
        if not msg.data:
            return
        if not self.chunks or not self.cmd_t:
            self.fail(f"the bag ended with {len(self.chunks)} chunks and {len(self.cmd_t)} commands")
        self.report("ok")
        raise SystemExit(0)

    def report(self, status: str) -> None:
        """report.json and the plots over every chunk and command received so far."""
        order = np.argsort(self.cmd_t)
        cmd_t, cmd_v = np.asarray(self.cmd_t)[order], np.asarray(self.cmd_v)[order]
        stamps, chunks = np.asarray(self.stamps), np.asarray(self.chunks)
        scores = score(stamps, chunks[None], cmd_t, cmd_v, self.execute)
        report = {"status": status, "source": "replay_eval", **self.labels, **scores}
        write_report(self.out, report, stamps, chunks, cmd_t, cmd_v, self.execute)
        self.reported = True
        say(
            self,
            f"report ({status}): {report['chunks']} chunks, mae_by_step[0] {report['mae_by_step'][0]}, "
            f"coverage {report['coverage']:.2f} -> {self.out}/report.json",
        )

    def close(self) -> None:
        """A stop before the bag ended: report what was played, ``status: interrupted``."""
        if self.reported:
            return
        if self.chunks and self.cmd_t:
            self.report("interrupted")
            return
        self.report_counts("interrupted")
        say(self, f"stopped before any chunk was scored; {self.out}/report.json says so")


def main(args: list[str] | None = None) -> int:
    return run_node(Evaluator, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
