"""scripts/device_check.sh, the check prepared for a lent accelerator machine, run on its CPU path: one JSON with
every figure the accelerator is judged by (here the CPU's own, since no accelerator is present)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_device_check_prints_every_figure_as_one_json(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "QUICK": "1"}
    out = subprocess.run(
        ["bash", str(REPO / "scripts/device_check.sh")], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["device"] == "cpu"  # no accelerator here: the CPU's figures, no speedups
    figures = result["cpu"]
    assert set(figures["chunk_latency_ms"]) == {"ddim10_fp32", "ddim10_bf16", "one_step_fp32", "one_step_bf16"}
    assert all(0 < lat["p50_ms"] <= lat["p99_ms"] for lat in figures["chunk_latency_ms"].values())
    assert figures["bc_vision_recipe"]["estimator_it_per_s"] > 0 and figures["bc_vision_recipe"]["actor_it_per_s"] > 0
    assert figures["ppo"]["env_steps_per_s"] > 0 and figures["ppo"]["env_steps"] == 2 * 4 * 4
