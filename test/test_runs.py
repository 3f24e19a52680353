"""The run layout shared by BC and PPO: run folders, the latest link, one metrics logger, the checkpoint
payload and its schema version."""

from __future__ import annotations

import csv

import pytest
import torch

from diffpolicy_ros.models.checkpoint import (
    VERSION,
    CheckpointMeta,
    checkpoint_meta,
    load_checkpoint,
    load_policy,
    make_payload,
    save_checkpoint,
)
from diffpolicy_ros.models.factory import build_policy, policy_spec
from diffpolicy_ros.runs import (
    DEMO_SEED,
    EVAL_SEED,
    ROLLOUT_SEED,
    MetricsLogger,
    RunDir,
    as_run_dir,
    link_checkpoint,
    new_run_dir,
)


@pytest.mark.quick
def test_run_dirs_are_named_by_kind_and_latest_points_at_the_newest_one_with_a_checkpoint(tmp_path):
    first = new_run_dir("bc", tmp_path)
    assert first.path.name.startswith("bc-") and not first.path.exists()  # nothing yet: no folder, no link
    assert not (tmp_path / "latest").exists()
    first.start()
    assert not (tmp_path / "latest").exists()  # started, nothing to load yet
    first.wrote_checkpoint()
    assert (tmp_path / "latest").resolve() == first.path.resolve()
    stopped = RunDir(tmp_path / "ppo-stopped")
    stopped.start()  # a run stopped (or failed) before its first checkpoint does not move latest
    assert (tmp_path / "latest").resolve() == first.path.resolve()
    second = RunDir(tmp_path / "ppo-x")
    second.start()
    second.wrote_checkpoint()
    assert (tmp_path / "latest").resolve() == second.path.resolve()
    first.wrote_checkpoint()  # an older run's later checkpoint leaves the newer run as latest
    assert (tmp_path / "latest").resolve() == second.path.resolve()
    phase = RunDir(tmp_path / "ppo-x" / "phase", latest=False)  # a phase inside a run links nothing
    phase.start()
    phase.wrote_checkpoint()
    assert not (tmp_path / "ppo-x" / "latest").exists()
    assert (tmp_path / "latest").resolve() == second.path.resolve()
    assert as_run_dir(tmp_path / "mine", "bc") == RunDir(tmp_path / "mine", latest=False)
    assert as_run_dir(None, "bc").path.name.startswith("bc-")


@pytest.mark.quick
def test_link_checkpoint_follows_the_phase_that_wrote_the_best(tmp_path):
    for phase in ("bc", "ppo"):
        (tmp_path / phase / "checkpoints").mkdir(parents=True)
        (tmp_path / phase / "checkpoints" / "best.pt").write_text(phase)
    link = tmp_path / "checkpoints" / "best.pt"
    link_checkpoint(link, tmp_path / "bc" / "checkpoints" / "best.pt")
    assert link.read_text() == "bc"
    link_checkpoint(link, tmp_path / "ppo" / "checkpoints" / "best.pt")
    assert link.read_text() == "ppo" and not list((tmp_path / "checkpoints").glob(".*"))


@pytest.mark.quick
def test_episode_seed_ranges_are_disjoint():
    assert DEMO_SEED < EVAL_SEED < ROLLOUT_SEED and ROLLOUT_SEED - EVAL_SEED >= 100_000


@pytest.mark.quick
def test_metrics_logger_writes_csv_and_tensorboard_and_resumes_one_curve(tmp_path):
    logger = MetricsLogger(tmp_path, ("iteration", "env_steps", "loss"), "ppo", "iteration", "env_steps")
    for i in range(1, 5):
        logger.row({"iteration": i, "env_steps": 100 * i, "loss": 1.0 / i})
    logger.close()
    assert any((tmp_path / "tb").iterdir())
    resumed = MetricsLogger(tmp_path, ("iteration", "env_steps", "loss"), "ppo", "iteration", "env_steps", 2, 200)
    resumed.row({"iteration": 3, "env_steps": 300, "loss": 0.3})
    resumed.close()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]  # rows past the checkpoint were dropped


@pytest.mark.quick
def test_checkpoint_payload_is_typed_and_versioned(tmp_path):
    spec = policy_spec({"kind": "gaussian", "gaussian": {"hidden": 16, "fusion": {"use_images": False}}})
    policy = build_policy(spec)
    meta = CheckpointMeta(source="test", task="push", obs_mode="state", execute_horizon=4, metrics={"x": 1.0})
    path = save_checkpoint(tmp_path / "c.pt", make_payload(spec, policy, meta))
    ckpt = load_checkpoint(path)
    assert ckpt["version"] == VERSION and "train_state" not in ckpt  # deployable: no optimizer state
    assert checkpoint_meta(ckpt) == meta
    loaded, _ = load_policy(path)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), policy.state_dict().values()))


@pytest.mark.quick
def test_a_version_one_checkpoint_still_loads_with_default_meta(tmp_path):
    spec = policy_spec({"kind": "gaussian", "gaussian": {"hidden": 16, "fusion": {"use_images": False}}})
    policy = build_policy(spec)
    old = make_payload(spec, policy, CheckpointMeta())
    old["meta"] = {"task": "push_two_goals", "obs_mode": "image", "bc_config": {"iters": 3}}  # version 1 keys
    torch.save({"format": "diffpolicy_ros/checkpoint", "version": 1, **old}, tmp_path / "v1.pt")
    meta = checkpoint_meta(load_checkpoint(tmp_path / "v1.pt"))
    assert (meta.task, meta.obs_mode, meta.execute_horizon) == ("push_two_goals", "image", 4)
