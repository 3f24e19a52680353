"""``diffpolicy bench policy`` says where a chunk's time goes, for a config or a checkpoint, against the default
DDIM-10 policy measured in the same run."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.quick
def test_bench_policy_splits_the_call_and_measures_the_reference_in_the_same_run(run_cli):
    out = run_cli("bench", "policy", "--config", REPO / "config/policy/diffusion_state_small.yaml", "--iters", 5)
    for key in ("p50_ms", "p99_ms", "encode_p50_ms", "encode_p99_ms", "denoise_p50_ms", "denoise_p99_ms",
                "reference_p99_ms", "p99_to_reference"):  # fmt: skip
        assert out[key] > 0, key
    assert out["encode_p50_ms"] < out["p50_ms"] and out["denoise_p50_ms"] <= out["p50_ms"]
    assert out["images"] is False and out["ddim_steps"] == 10  # the config's own sampler
    assert out["max_abs_diff_vs_eager"] < 1e-4  # the fast path is the reference sampler
