"""The policy node across processes (real rclpy on loopback): without a usable policy — no checkpoint given, a
missing file, a corrupt one, one the deploy gate refuses — it says so at ERROR on /diagnostics (never OK beside
an idle arm) and publishes no chunk; ``allow_unproven`` lifts the gate and says so."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_policy_node_without_a_usable_checkpoint_is_an_error_on_diagnostics(tmp_path, spin_until):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from rclpy.node import Node
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.bench.safety import constant_velocity_checkpoint
    from diffpolicy_ros.contract import ACTION_CHUNK_TOPIC
    from diffpolicy_ros.models.checkpoint import load_checkpoint, save_checkpoint
    from diffpolicy_ros.nodes.common import COMMAND_QOS, DIAGNOSTICS_QOS

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    unproven = constant_velocity_checkpoint(tmp_path / "unproven.pt", (0.01, 0.0, 0.0))  # no evaluation stored
    weak = load_checkpoint(unproven)
    weak["meta"]["evaluation"] = {"task": "push", "episodes": 50, "seed": 10_000, "success_rate": 0.3}
    weak = save_checkpoint(tmp_path / "weak.pt", {k: v for k, v in weak.items() if k not in ("format", "version")})
    gate = "min_success:=0.5"
    error, ok = DiagnosticStatus.ERROR, DiagnosticStatus.OK
    cases = {  # node name: (parameters, what its diagnostics must say, their level)
        "policy_none": ([], "no checkpoint given", error),
        "policy_missing": ([f"checkpoint:={tmp_path / 'missing.pt'}"], "NO POLICY", error),
        "policy_corrupt": ([f"checkpoint:={corrupt}"], "NO POLICY", error),
        "policy_unproven": ([f"checkpoint:={unproven}", gate], "carries no held-out evaluation", error),
        "policy_weak": ([f"checkpoint:={weak}", gate], "below min_success 0.5", error),
        "policy_override": ([f"checkpoint:={unproven}", gate, "allow_unproven:=true"], "ok", ok),
        "policy_sim": ([f"checkpoint:={unproven}"], "ok", ok),  # no gate: the sim graph's default
    }
    procs = []
    for name, (params, _, _) in cases.items():
        args = ["--ros-args", "-r", f"__node:={name}", *(a for p in params for a in ("-p", p))]
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
        said = {name: statuses[f"/{name}"].message for name in cases if f"/{name}" in statuses}
        return all(name in said and fragment in said[name] for name, (_, fragment, _) in cases.items())

    logs: dict[str, str] = {}
    try:
        if not spin_until(node, settled, 90, 0.1):
            for proc in procs:
                proc.terminate()
            tails = [proc.communicate(timeout=15)[0][-1500:] for proc in procs]
            pytest.fail(f"diagnostics: { {k: s.message for k, s in statuses.items()} }; logs: {tails}")
        for name, (_, _, level) in cases.items():
            assert statuses[f"/{name}"].level == level, statuses[f"/{name}"].message
        assert not chunks  # no node had its inputs; the refused ones never will
    finally:
        node.destroy_node()
        rclpy.shutdown()
        for proc in procs:
            proc.terminate()
        for name, proc in zip(cases, procs):
            try:
                logs[name] = proc.communicate(timeout=15)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"policy node did not stop: {proc.communicate()[0][-2000:]}")
    # the refusal says why and how to override it; the override is loud; a load says what was loaded
    assert "deploy gate" in logs["policy_unproven"] and "allow_unproven:=true overrides" in logs["policy_unproven"]
    assert logs["policy_override"].count("allow_unproven:=true") >= 2, logs["policy_override"]  # start and load
    assert "diffusion policy from test on push" in logs["policy_sim"] and "not evaluated" in logs["policy_sim"]
