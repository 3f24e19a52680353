"""`diffpolicy bench cells`: a policy measured on the sim's own world, on each factor of a cell file alone at each
edge of its range, and on sampled cells with all factors at once — the same held-out scenes in every condition."""

from __future__ import annotations

import pytest

from diffpolicy_ros.bench.cells import RECALIBRATED, edge_conditions
from diffpolicy_ros.bench.safety import constant_velocity_checkpoint
from diffpolicy_ros.sim.cell import load_cell_ranges


@pytest.mark.quick
def test_the_edges_are_every_bound_that_differs_from_the_sims_world_and_that_the_policy_can_see():
    ranges = load_cell_ranges("config/cells/train.yaml")
    edges = edge_conditions(ranges, "image")
    assert ("cameras.top.shift_m", 0.025) in edges and ("cameras.top.shift_m", 0.0) not in edges  # 0: nominal
    assert ("physics.block_mass", 0.5) in edges and ("physics.block_mass", 2.0) in edges  # both sides of 1
    assert ("cameras.side.fovy_deg", -2.0) in edges and ("cameras.side.fovy_deg", 2.0) in edges
    assert ("image.jpeg_quality", 60.0) in edges and len(edges) == len(set(edges))
    state = edge_conditions(ranges, "state")  # a state policy sees no camera, light, colour or pixel
    assert {name.split(".")[0] for name, _ in state} == {"physics"} and len(state) == 6


@pytest.mark.quick
def test_bench_cells_measures_each_condition_on_the_same_held_out_scenes(run_cli, tmp_path):
    cells = tmp_path / "cell.yaml"
    cells.write_text("cameras: {top: {shift_m: [0.0, 0.02]}}\nphysics: {block_mass: [0.5, 2.0]}\n")
    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", (0.05, 0.0, 0.0))
    out = run_cli("bench", "cells", "--checkpoint", ckpt, "--cells", cells, "--episodes", "2", "--sampled-episodes",
                  "3", "--out", tmp_path / "out", timeout=600)  # fmt: skip
    conditions = [row["condition"] for row in out["conditions"]]
    assert conditions == ["nominal", "cameras.top.shift_m = 0.02", "physics.block_mass = 0.5",
                          "physics.block_mass = 2", RECALIBRATED[0], "sampled cells (all factors)"]  # fmt: skip
    assert [row["episodes"] for row in out["conditions"]] == [2, 2, 2, 2, 2, 3]
    for row in out["conditions"]:
        assert row["success_ci95"][0] <= row["success_rate"] <= row["success_ci95"][1]
    assert out["seed"] == 10000 and out["obs_mode"] == "image" and out["cells_file"] == str(cells)
    png = tmp_path / "out" / "cells.png"
    assert out["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "cells.json").is_file()
