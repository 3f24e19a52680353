"""`diffpolicy bench threads`: the measurement behind `--threads`' default, as a user runs it."""

from __future__ import annotations

import os

import pytest

from diffpolicy_ros.device import default_threads


@pytest.mark.slow
def test_bench_threads_measures_each_count_quiet_and_beside_a_busy_process(run_cli):
    out = run_cli(
        "bench", "threads", "--config", "config/policy/diffusion_state_small.yaml", "--steps", "2", "--counts", "1", "0"
    )
    assert out["cpu_count"] == os.cpu_count() and out["cli_default_threads"] == default_threads()
    for load in ("quiet", "busy"):
        assert out[f"{load}_threads1_s_per_step"] > 0
        # torch's default is named by the count a fresh process really got
        (name,) = [k for k in out if k.startswith(f"{load}_torch_default")]
        assert 1 <= int(name.removeprefix(f"{load}_torch_default").removesuffix("_s_per_step")) <= os.cpu_count()
        assert out[name] > 0
    if default_threads() == 1:  # the CLI's default was among the counts: the comparison a user reads
        ratio = out[name] / out["busy_threads1_s_per_step"]
        assert abs(out["busy_speedup_cli_default_vs_torch_default"] - ratio) < 0.01
