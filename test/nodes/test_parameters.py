"""Node parameters are validated at start: a value the node cannot run with stops it with one line naming
the parameter and exit status 2 (real rclpy processes, as a launch file would start them)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def start_node(module: str, *params: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", f"diffpolicy_ros.nodes.{module}", "--ros-args"]
    for param in params:
        args += ["-p", param]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.mark.quick
@pytest.mark.parametrize(
    ("module", "param", "name"),
    [
        ("chunk_executor", "rate_hz:=0.0", "rate_hz"),
        ("chunk_executor", "horizon:=-1", "horizon"),
        ("proprio_node", "max_age_s:=-0.5", "max_age_s"),
        ("policy_node", "device:=tpu", "device"),
        ("policy_node", "rate_hz:=-10.0", "rate_hz"),
    ],
)
def test_a_bad_parameter_stops_the_node_with_one_line_naming_it(module, param, name):
    out = start_node(module, param)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"parameter '{name}'" in out.stderr
    assert "Traceback" not in out.stderr
