"""`diffpolicy bench hil`: episodes on the live real_arm graph in HIL mode, as a user runs it (real rclpy
across processes on loopback). The policy is a real vision diffusion policy whose chunks are one slow forward
velocity: it never reaches the block, so every episode must end at its time limit, on its own scene, with the
filter's caps respected — what the benchmark reports is what the graph did."""

from __future__ import annotations

import pytest

from diffpolicy_ros.bench.safety import constant_velocity_checkpoint


@pytest.mark.slow
def test_bench_hil_runs_episodes_on_new_scenes_and_reports_what_the_graph_did(run_cli, tmp_path):
    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", (0.02, 0.0, 0.0))
    out = run_cli(
        "bench", "hil", "--checkpoint", ckpt, "--episodes", "2", "--episode-timeout", "4", "--out", tmp_path / "out",
        "max_speed:=0.05",
        timeout=400,
    )  # fmt: skip
    assert out["episodes"] == 2 and out["success_rate"] == 0.0 and out["success_ci95"][0] == 0.0
    assert [e["scene_seed"] for e in out["per_episode"]] == [10000, 10001]  # eval's held-out seeds
    assert all(e["outcome"] == "time limit (4 s)" and not e["success"] for e in out["per_episode"])
    assert out["max_speed_cap"] == 0.05 and 0.0 < out["max_output_speed"] <= 0.05 + 1e-9
    assert "active" in out["filter_states_seen"] and out["filter"]["ticks"] > 0
    assert out["policy_latency_p50_ms"] > 0 and out["chunk_rate_hz"] > 1
    # a constant policy: chunk switches change nothing before the filter (the jump is measured, and zero)
    assert out["switches"] > 5 and out["switch_jump_mean"] in (0.0, None) and out["busy_neighbour"] is False
    png = tmp_path / "out" / "hil_episodes.png"  # each episode's tool and block paths over its scene
    assert out["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "hil.json").is_file()
