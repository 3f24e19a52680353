"""Behaviour cloning end to end on real demonstrations and the real sim, at a smoke-test budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.data.augmentation import random_shift
from diffpolicy_ros.data.episodes import EpisodeDataset
from diffpolicy_ros.models.checkpoint import CheckpointError, load_checkpoint, load_policy, save_checkpoint
from diffpolicy_ros.rl.bc import BCConfig, BCRun, chunk_targets, train_bc
from diffpolicy_ros.sim.demos import run_demos

TINY_POLICY = {
    "kind": "diffusion",
    "diffusion": {
        "fusion": {"dim": 32, "heads": 2, "use_images": False},
        "unet": {"down_dims": [16, 32], "timestep_embed_dim": 16},
    },
}


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("demos") / "demos.npz"
    run_demos("push", episodes=4, seed=0, out=path, progress=False)
    return path


@pytest.mark.quick
def test_chunk_targets_pad_with_zeros_past_episode_end():
    _, ds = run_demos("push", episodes=2, seed=0, progress=False)
    targets = chunk_targets(ds, 16)
    first = ds.episode_slice(0)
    np.testing.assert_array_equal(targets[0], ds.action[0:16])
    last = first.stop - 1
    np.testing.assert_array_equal(targets[last, 0], ds.action[last])
    assert np.all(targets[last, 1:] == 0)  # never the next episode's actions


@pytest.mark.quick
def test_random_shift_keeps_shape_and_moves_pixels():
    images = torch.randint(0, 255, (8, 128, 128, 3), dtype=torch.uint8)
    out = random_shift(images, 4, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert not torch.equal(out, images)
    assert torch.equal(random_shift(images, 0, torch.Generator()), images)


@pytest.mark.quick
def test_train_bc_writes_a_loadable_checkpoint_and_logs(demos, tmp_path):
    run = BCRun(
        policy=TINY_POLICY,
        train=BCConfig(iters=30, batch_size=16, eval_every=30, final_eval_episodes=2, log_every=10, device="cpu"),
    )
    result = train_bc(run, demos, tmp_path / "run", progress=False)
    assert result["final_eval"]["episodes"] == 2
    assert np.isfinite(result["final_loss"])
    ckpt = load_checkpoint(result["checkpoint"])
    assert ckpt["meta"]["task"] == "push" and ckpt["meta"]["obs_mode"] == "state"
    assert "schedule.alphas_cumprod" in ckpt["model"] and "action_norm.high" in ckpt["model"]
    policy, _ = load_policy(result["checkpoint"])
    ds = EpisodeDataset.load(demos)
    np.testing.assert_allclose(policy.action_norm.high.numpy(), ds.action.max(0), atol=1e-4)
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]
    assert [r.split(",")[0] for r in rows] == ["10", "20", "30"]  # a row at every log step, not only evaluations
    assert rows[0].split(",")[3] == "" and rows[-1].split(",")[3] != ""  # evaluation columns when evaluated
    assert any((tmp_path / "run" / "tb").iterdir())


@pytest.mark.quick
def test_bf16_training_learns_as_fp32_does_and_keeps_float32_weights(demos, tmp_path):
    """precision bf16: the forward runs in bfloat16 (the losses differ from fp32's), the loss falls as far, and
    the checkpoint a robot loads is float32."""
    results = {}
    for precision in ("fp32", "bf16"):
        train = BCConfig(iters=120, batch_size=16, warmup_iters=10, eval_every=120, final_eval_episodes=1, log_every=20,
                         precision=precision, device="cpu")  # fmt: skip
        results[precision] = train_bc(BCRun(policy=TINY_POLICY, train=train), demos, tmp_path / precision,
                                      progress=False)  # fmt: skip
    fp32, bf16 = results["fp32"]["final_loss"], results["bf16"]["final_loss"]
    assert bf16 != fp32  # the precision reached the step
    assert abs(bf16 - fp32) < 0.3 * fp32
    first_rows = {p: (tmp_path / p / "metrics.csv").read_text().splitlines()[1] for p in results}
    assert all(float(row.split(",")[1]) > 1.4 * results[p]["final_loss"] for p, row in first_rows.items())
    ckpt = load_checkpoint(results["bf16"]["checkpoint"])
    assert all(v.dtype == torch.float32 for v in ckpt["model"].values() if v.is_floating_point())
    with pytest.raises(ConfigError, match="precision"):
        BCConfig(precision="fp16")


@pytest.mark.quick
def test_an_early_checkpoint_is_announced_before_the_first_evaluation(demos, tmp_path):
    from diffpolicy_ros.rl.hooks import TrainHooks

    announced: list[tuple[int, dict]] = []
    hooks = TrainHooks()
    shown: list[float] = []  # the progress line's evaluation when each checkpoint is announced

    def on_checkpoint(path, metrics):
        announced.append((load_checkpoint(path).get("train_state"), metrics))
        shown.append(hooks.progress.get("success_rate", -1.0))

    hooks.on_checkpoint = on_checkpoint
    run = BCRun(
        policy=TINY_POLICY,
        train=BCConfig(
            iters=6, batch_size=8, eval_every=6, first_checkpoint_iter=2, final_eval_episodes=1, device="cpu"
        ),
    )
    train_bc(run, demos, tmp_path / "run", progress=False, hooks=hooks)
    assert shown[0] == -1.0 and shown[1] == announced[1][1]["success_rate"]  # the new evaluation, at once
    train_state, evaluation = announced[0]
    assert train_state["iter"] == 2 and evaluation == {}  # early and unevaluated: what a running graph loads first
    assert [state and state["iter"] for state, _ in announced[1:]] == [6, None]  # then last.pt, best.pt at 6
    assert announced[1][1] == announced[2][1] and announced[2][1]["episodes"] == 1  # both carry the evaluation
    assert BCRun(policy=TINY_POLICY).obs_mode() == "state"
    assert BCRun(policy={"kind": "diffusion"}).obs_mode() == "image"  # the default policy reads the cameras


@pytest.mark.quick
def test_eval_cli_reports_success_and_modes(demos, tmp_path, run_cli):
    run = BCRun(
        policy=TINY_POLICY,
        train=BCConfig(iters=5, batch_size=8, eval_every=5, final_eval_episodes=1, device="cpu"),
    )
    ckpt = train_bc(run, demos, tmp_path / "run", progress=False)["checkpoint"]
    result = run_cli("eval", "--checkpoint", ckpt, "--episodes", 2, "--device", "cpu")
    for key in ("success_rate", "mean_return", "left_fraction", "right_fraction", "episodes"):
        assert key in result
    assert result["episodes"] == 2
    assert load_checkpoint(ckpt)["meta"]["evaluation"]["episodes"] == 1  # last.pt: evaluated at the last iteration
    stamped = run_cli("eval", "--checkpoint", ckpt, "--episodes", 3, "--device", "cpu", "--write-evaluation")
    evaluation = load_checkpoint(ckpt)["meta"]["evaluation"]  # what the deploy gate reads
    assert evaluation["episodes"] == 3 and evaluation["success_rate"] == stamped["success_rate"]
    assert evaluation["task"] == "push" and evaluation["seed"] == 10_000


@pytest.mark.quick
def test_corrupt_and_foreign_checkpoints_raise_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="corrupt or not a checkpoint") as err:
        load_checkpoint(junk)
    assert "weights_only" not in str(err.value)  # never hint at unpickling arbitrary code
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="not a diffpolicy_ros checkpoint"):
        load_checkpoint(foreign)
    mismatched = tmp_path / "mismatched.pt"
    save_checkpoint(mismatched, {"policy_spec": TINY_POLICY, "model": {"unet.bogus": torch.zeros(1)}})
    with pytest.raises(CheckpointError, match="do not match"):
        load_policy(mismatched)


@pytest.mark.quick
def test_save_is_atomic_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, {"policy_spec": TINY_POLICY, "model": {"x": torch.ones(2)}})
    before = path.read_bytes()

    def crash(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"policy_spec": TINY_POLICY, "model": {"x": torch.zeros(2)}})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


@pytest.mark.quick
def test_train_bc_cli_end_to_end(demos, tmp_path, run_cli):
    import yaml

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"policy": TINY_POLICY, "train": {"batch_size": 8, "log_every": 5}}))
    result = run_cli(
        "train-bc",
        "--data",
        demos,
        "--config",
        config,
        "--iters",
        10,
        "--eval-every",
        10,
        "--final-eval-episodes",
        1,
        "--device",
        "cpu",
        "--run-dir",
        tmp_path / "runs",
    )
    assert result["iters"] == 10 and Path(result["checkpoint"]).is_file()
    assert load_checkpoint(result["checkpoint"])["meta"]["config"]["train"]["iters"] == 10


@pytest.mark.quick
@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[2] / "config" / "policy").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_shipped_policy_config_loads_and_builds(path):
    from diffpolicy_ros.models.factory import build_policy, policy_spec
    from diffpolicy_ros.rl.bc import load_bc_run

    spec = policy_spec(load_bc_run(path).policy)  # an unknown or misspelt option is an error naming it
    policy = build_policy(spec)  # a misfit of the head's parts fails here, before any demonstration is read
    assert policy.config.horizon == spec.active().horizon and any(p.requires_grad for p in policy.parameters())
