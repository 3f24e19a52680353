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
        ("policy_node", "replan_steps:=0", "replan_steps"),
    ],
)
def test_a_bad_parameter_stops_the_node_with_one_line_naming_it(module, param, name):
    out = start_node(module, param)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"parameter '{name}'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.quick
@pytest.mark.parametrize(
    ("module", "param", "name"),
    [
        ("safety_filter", "dry_run:=ture", "dry_run"),
        ("safety_filter", "dry_run:=maybe", "dry_run"),
        ("sim_bridge", "driver_mode:=2", "driver_mode"),
        ("camera_node", "crop_square:=sometimes", "crop_square"),
        ("trainer_node", "eval_every:=0", "eval_every"),
        ("trainer_node", "ppo_envs:=-4", "ppo_envs"),
        ("trainer_node", "deploy:=/no/such/real_arm.yaml", "deploy"),
    ],
)
def test_a_malformed_boolean_or_out_of_range_number_stops_the_node(module, param, name):
    out = start_node(module, param)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"parameter {name}" in out.stderr or f"parameter '{name}'" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


@pytest.mark.quick
def test_the_usual_boolean_forms_are_accepted_by_a_node():
    # dry_run:=1 and :=yes reach the filter as true; it then stops only for its missing box (require_box)
    for value in ("1", "yes", "true"):
        out = start_node("safety_filter", f"dry_run:={value}", "require_box:=true")
        assert out.returncode == 2 and "box" in out.stderr and "dry_run" not in out.stderr, out.stderr[-2000:]
