"""The policy node across processes (real rclpy on loopback): without a usable policy — no checkpoint given, a
missing file, a corrupt one — it says so at ERROR on /diagnostics (never OK beside an idle arm) and publishes
no chunk."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


def test_policy_node_without_a_usable_checkpoint_is_an_error_on_diagnostics(tmp_path):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.node import Node
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.contract import ACTION_CHUNK_TOPIC
    from diffpolicy_ros.nodes.common import COMMAND_QOS, DIAGNOSTICS_QOS

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    cases = {  # node name: (checkpoint parameter, what its diagnostics must say)
        "policy_none": ("", "no checkpoint given"),
        "policy_missing": (str(tmp_path / "missing.pt"), "NO POLICY"),
        "policy_corrupt": (str(corrupt), "NO POLICY"),
    }
    procs = []
    for name, (checkpoint, _) in cases.items():
        args = ["--ros-args", "-r", f"__node:={name}", *(["-p", f"checkpoint:={checkpoint}"] if checkpoint else [])]
        cmd = [sys.executable, "-m", "diffpolicy_ros.nodes.policy_node", *args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    rclpy.init()
    node = Node("policy_probe")
    statuses: dict[str, DiagnosticStatus] = {}
    chunks = []
    node.create_subscription(
        DiagnosticArray, "/diagnostics", lambda m: statuses.update({s.name: s for s in m.status}), DIAGNOSTICS_QOS
    )
    node.create_subscription(MultiDOFJointTrajectory, ACTION_CHUNK_TOPIC, chunks.append, COMMAND_QOS)

    def settled() -> bool:
        return all(
            f"/{name}" in statuses and fragment in statuses[f"/{name}"].message for name, (_, fragment) in cases.items()
        )

    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not settled():
            rclpy.spin_once(node, timeout_sec=0.1)
        if not settled():
            for proc in procs:
                proc.terminate()
            logs = [proc.communicate(timeout=15)[0][-1500:] for proc in procs]
            pytest.fail(f"diagnostics: { {k: s.message for k, s in statuses.items()} }; logs: {logs}")
        for name in cases:
            assert statuses[f"/{name}"].level == DiagnosticStatus.ERROR, statuses[f"/{name}"].message
        assert not chunks
    finally:
        node.destroy_node()
        rclpy.shutdown()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"policy node did not stop: {proc.communicate()[0][-2000:]}")
