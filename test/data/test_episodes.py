"""Demonstration datasets: recorded by `diffpolicy demo`, read back exactly, corrupt files rejected clearly."""

from __future__ import annotations

import numpy as np
import pytest

from diffpolicy_ros.data.episodes import DatasetError, EpisodeDataset
from diffpolicy_ros.sim.demos import run_demos


@pytest.mark.quick
def test_recorded_dataset_round_trips(tmp_path):
    path = tmp_path / "demos.npz"
    summary, recorded = run_demos("push", episodes=3, seed=5, obs_mode="image", out=path, progress=False)
    loaded = EpisodeDataset.load(path)
    assert loaded.n_episodes == 3 and loaded.n_steps == recorded.n_steps
    assert set(loaded.obs) == {"proprio", "image_top", "image_side", "camera_projection"}
    assert loaded.obs["image_top"].dtype == np.uint8 and loaded.obs["image_top"].shape[1:] == (128, 128, 3)
    np.testing.assert_array_equal(loaded.action, recorded.action)
    np.testing.assert_array_equal(loaded.obs["proprio"], recorded.obs["proprio"])
    assert list(loaded.episode["seed"]) == [5, 6, 7]
    assert loaded.meta["task"] == "push" and loaded.meta["format_version"] == 1
    # per-episode return equals the sum of its recorded step rewards
    for i in range(3):
        assert loaded.reward[loaded.episode_slice(i)].sum() == pytest.approx(loaded.episode["ep_return"][i], rel=1e-5)
    assert summary.out == str(path)


@pytest.mark.quick
def test_corrupt_or_inconsistent_files_raise_dataset_error(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(DatasetError):
        EpisodeDataset.load(bad)

    _, ds = run_demos("push", episodes=2, seed=0, progress=False)
    truncated = tmp_path / "truncated.npz"
    ds.save(truncated)
    truncated.write_bytes(truncated.read_bytes()[:200])
    with pytest.raises(DatasetError):
        EpisodeDataset.load(truncated)

    ds.episode_ends = ds.episode_ends[::-1].copy()
    with pytest.raises(DatasetError, match="episode_ends"):
        ds.validate()


@pytest.mark.quick
def test_failed_save_leaves_previous_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "demos.npz"
    _, ds = run_demos("push", episodes=1, seed=0, progress=False, out=path)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", crash)
    with pytest.raises(OSError):
        ds.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["demos.npz"]  # no temp file left behind


@pytest.mark.quick
def test_demo_cli_prints_json_and_writes_dataset(tmp_path, run_cli):
    out = tmp_path / "d.npz"
    summary = run_cli("demo", "--episodes", 4, "--seed", 3, "--task", "push_two_goals", "--out", out, timeout=120)
    for key in ("success_rate", "mean_return", "left_fraction", "episodes"):
        assert key in summary
    assert summary["episodes"] == 4 and summary["success_rate"] >= 0.75
    assert EpisodeDataset.load(out).meta["task"] == "push_two_goals"


@pytest.mark.quick
def test_bench_sim_cli_reports_every_figure(run_cli):
    figures = run_cli("bench", "sim", "--steps", 20, "--workers", 2)
    for key in (
        "mj_steps_per_s",
        "env_steps_per_s_state",
        "env_steps_per_s_image",
        "render_fps_per_camera",
        "vec_env_steps_per_s_state",
        "vec_env_steps_per_s_image",
        "n_workers",
    ):
        assert figures[key] > 0, key


@pytest.mark.quick
def test_demos_recorded_by_two_workers_equal_one_process(capsys):
    """Episodes are recorded in blocks by a process pool and joined in order: the same dataset, byte for byte —
    with blocks small enough that a few episodes keep every worker busy, and a word when some must idle."""
    kwargs = dict(task="push", episodes=4, seed=4, progress=False, expert_limits={"max_speed": 0.1, "max_accel": 0.5})
    one_summary, one = run_demos(**kwargs, workers=1)
    two_summary, two = run_demos(**kwargs, workers=2)
    assert two_summary.workers == 2 and two.n_episodes == 4
    np.testing.assert_array_equal(two.episode_ends, one.episode_ends)
    np.testing.assert_array_equal(two.action, one.action)
    np.testing.assert_array_equal(two.obs["proprio"], one.obs["proprio"])
    for key in one.episode:
        np.testing.assert_array_equal(two.episode[key], one.episode[key])
    assert list(two.episode["seed"]) == list(range(4, 8))
    assert two_summary.success_rate == one_summary.success_rate
    assert two_summary.left_fraction == one_summary.left_fraction
    assert "using" not in capsys.readouterr().err
    few, _ = run_demos(**{**kwargs, "episodes": 2}, workers=3)
    assert few.workers == 2 and "demo: 2 episodes keep 2 of 3 workers busy: using 2" in capsys.readouterr().err
