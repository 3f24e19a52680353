"""Staged BC of a vision policy: the task-state estimator trains alone on the cameras, then the actor on states
with the estimator's held-out error, and the result is one checkpoint that reads images when deployed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.models.checkpoint import load_checkpoint, load_policy
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.obs import is_camera_input
from diffpolicy_ros.rl import bc as bc_module
from diffpolicy_ros.rl.bc import BCConfig, BCRun, train_bc
from diffpolicy_ros.rl.estimator import estimate, held_out_steps, train_estimator, true_task_state
from diffpolicy_ros.sim.demos import run_demos

pytestmark = pytest.mark.quick

STAGED_POLICY = {
    "kind": "diffusion",
    "diffusion": {
        "fusion": {
            "dim": 32, "heads": 2, "use_text": False, "use_task_state": False, "aux_task_state_weight": 1.0,
            "estimate_task_state": True, "image_tokens_per_camera": 0,
        },
        "unet": {"down_dims": [16, 32], "timestep_embed_dim": 16},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def image_demos():
    return run_demos("push", episodes=5, seed=0, obs_mode="image", progress=False)[1]


def test_the_held_out_steps_are_whole_episodes_at_the_end(image_demos):
    train, held = held_out_steps(image_demos, 0.2)
    last = image_demos.episode_slice(image_demos.n_episodes - 1)
    assert held[0] == last.start and held[-1] == image_demos.n_steps - 1 and train[-1] == last.start - 1


def test_the_estimator_learns_to_place_the_block_and_goal_on_frames_it_never_saw(image_demos):
    torch.manual_seed(0)
    encoder = MultimodalEncoder(FusionConfig(**STAGED_POLICY["diffusion"]["fusion"]))
    frames = {cam: torch.from_numpy(image_demos.obs[f"image_{cam}"]) for cam in CAMERAS}
    _, held = held_out_steps(image_demos, 0.2)
    truth = true_task_state(image_demos.obs["proprio"])[held]
    before = np.median(np.abs(estimate(encoder, frames, None, held, "cpu") - truth))
    estimator_ids = {id(p) for p in encoder.estimator_parameters()}
    others = [p.detach().clone() for p in encoder.parameters() if id(p) not in estimator_ids]
    result = train_estimator(
        encoder, image_demos, iters=150, batch_size=32, lr=3e-3, holdout=0.2, image_shift=4,
        rng=np.random.default_rng(0), gen=torch.Generator().manual_seed(0), device="cpu", progress=False,
    )  # fmt: skip
    after = np.median(np.abs(result.residuals))
    assert result.residuals.shape == (len(held), 4)
    assert after < 0.6 * before, (before, after)  # 4 training episodes, 150 iterations: about half (0.51)
    assert result.summary["block_median_mm"] > 0 and result.summary["held_out_steps"] == len(held)
    still = [p for p in encoder.parameters() if id(p) not in estimator_ids]
    assert all(torch.equal(a, b) for a, b in zip(others, still))  # only the estimator was trained


CALIBRATED_FUSION = {**STAGED_POLICY["diffusion"]["fusion"], "task_state_estimator": "calibrated"}
CALIBRATED_POLICY = {"kind": "diffusion", "diffusion": {**STAGED_POLICY["diffusion"], "fusion": CALIBRATED_FUSION}}


def test_the_calibrated_estimator_learns_the_pixels_and_back_projects_them_onto_the_table(image_demos):
    """Its keypoints learn where the block and the goal are in each image; where that is on the table comes from
    the cameras' calibration, so 150 iterations on 4 episodes place them within a centimetre or two (the
    learned estimator, same budget: ~6 cm, above)."""
    torch.manual_seed(0)
    encoder = MultimodalEncoder(FusionConfig(**CALIBRATED_POLICY["diffusion"]["fusion"]))
    assert encoder.calibrated and set(encoder.estimator_modules()) == {"keypoints"}
    result = train_estimator(
        encoder, image_demos, iters=150, batch_size=32, lr=3e-3, holdout=0.2, image_shift=4,
        rng=np.random.default_rng(0), gen=torch.Generator().manual_seed(0), device="cpu", progress=False,
    )  # fmt: skip
    assert result.summary["block_median_mm"] < 20 and result.summary["goal_median_mm"] < 25, result.summary
    without = dataclasses.replace(image_demos, obs={k: v for k, v in image_demos.obs.items()
                                                            if k != "camera_projection"})  # fmt: skip
    with pytest.raises(ConfigError, match="no camera_projection"):
        train_estimator(encoder, without, iters=1, batch_size=4, lr=1e-3, holdout=0.2, image_shift=0,
                        rng=np.random.default_rng(0), gen=torch.Generator(), device="cpu", progress=False)  # fmt: skip


def test_a_calibrated_estimator_needs_the_staged_recipe():
    joint = {**CALIBRATED_POLICY["diffusion"]["fusion"], "image_tokens_per_camera": 4}
    with pytest.raises(ConfigError, match="staged recipe"):
        MultimodalEncoder(FusionConfig(**joint))
    with pytest.raises(ConfigError, match="task_state_estimator must be one of"):
        MultimodalEncoder(FusionConfig(**{**joint, "task_state_estimator": "magic"}))


@pytest.mark.parametrize("actor", ["ddim", "few_step", "calibrated"])
def test_staged_bc_trains_the_actor_on_states_and_keeps_the_estimator(image_demos, tmp_path, monkeypatch, actor):
    """Either actor: DDIM-10, or the few-step one (config/policy/vision_few_step.yaml: a one-step shortcut model);
    and DDIM-10 on the calibrated estimator, whose deployed graph reads the cameras' projections too."""
    policy_config = {"ddim": STAGED_POLICY, "calibrated": CALIBRATED_POLICY}.get(actor) or {
        "kind": "diffusion",
        "diffusion": {**STAGED_POLICY["diffusion"], "objective": "flow", "ddim_steps": 1, "flow": {"shortcut": True}},
    }  # fmt: skip
    stage_one = {}
    real_train_estimator, real_bc_step = bc_module.train_estimator, bc_module.bc_step

    def recording_train_estimator(encoder, *args, **kwargs):
        result = real_train_estimator(encoder, *args, **kwargs)
        stage_one["weights"] = [p.detach().clone() for p in encoder.estimator_parameters()]
        return result

    batches = []

    def recording_bc_step(policy, optimizer, obs, actions, grad_clip, dist, autocast=None):
        batches.append(set(obs))
        return real_bc_step(policy, optimizer, obs, actions, grad_clip, dist, autocast)

    monkeypatch.setattr(bc_module, "train_estimator", recording_train_estimator)
    monkeypatch.setattr(bc_module, "bc_step", recording_bc_step)
    train = BCConfig(
        iters=4, batch_size=8, estimator_iters=5, estimator_batch_size=4, eval_every=4, eval_episodes=1,
        final_eval_episodes=1, device="cpu",
    )  # fmt: skip
    result = train_bc(BCRun(policy=policy_config, train=train), image_demos, tmp_path, progress=False)
    assert set(result["estimator"]) >= {"block_median_mm", "goal_median_mm", "held_out_steps", "wall_s"}
    assert batches and all("task_state_estimate" in b and not any(map(is_camera_input, b)) for b in batches)
    ckpt = load_checkpoint(result["checkpoint"])
    assert ckpt["meta"]["metrics"]["estimator"] == result["estimator"]
    policy, _ = load_policy(result["checkpoint"], "cpu")
    saved = policy.encoder.estimator_parameters()
    assert all(torch.equal(a, b) for a, b in zip(stage_one["weights"], saved))  # stage two left it as trained
    obs = {k: v[0] for k, v in image_demos.obs.items()} | {"instruction": "push the block"}
    chunk = ChunkPredictor(policy, "cpu", backend="eager")(obs, torch.Generator().manual_seed(0))
    assert chunk.shape == (1, 16, 3) and np.isfinite(chunk).all()  # deployed, it reads the cameras
    if actor == "calibrated":  # and their projections, in the traced graph as in the eager one
        assert ChunkPredictor(policy, "cpu", backend="traced").max_abs_diff_vs_eager(obs) < 1e-4
        with pytest.raises(ConfigError, match="camera_projection"):
            ChunkPredictor(policy, "cpu", backend="eager")({k: v for k, v in obs.items() if k != "camera_projection"})


def test_staged_bc_from_an_estimator_already_trained_copies_it_and_measures_it_again(image_demos, tmp_path):
    """train.estimator_from: a new actor (here the few-step one) on another run's estimator, which is copied,
    frozen and measured on the same held-out episodes; a source without an estimator is refused."""
    train = BCConfig(iters=2, batch_size=8, estimator_iters=5, estimator_batch_size=4, eval_every=2, eval_episodes=1,
                     final_eval_episodes=1, device="cpu")  # fmt: skip
    source = train_bc(BCRun(policy=STAGED_POLICY, train=train), image_demos, tmp_path / "source", progress=False)
    few_step = {"kind": "diffusion", "diffusion": {**STAGED_POLICY["diffusion"], "objective": "flow",
                                                   "ddim_steps": 1, "flow": {"shortcut": True}}}  # fmt: skip
    reuse = BCConfig(**{**train.__dict__, "estimator_iters": 0, "estimator_from": source["checkpoint"]})
    result = train_bc(BCRun(policy=few_step, train=reuse), image_demos, tmp_path / "reuse", progress=False)

    assert result["estimator"]["from"] == source["checkpoint"] and result["estimator"]["iters"] == 0
    for key in ("block_median_mm", "goal_median_mm", "held_out_steps"):
        assert result["estimator"][key] == source["estimator"][key], key
    theirs, _ = load_policy(source["checkpoint"], "cpu")
    ours, _ = load_policy(result["checkpoint"], "cpu")
    assert all(torch.equal(a, b) for a, b in zip(theirs.encoder.estimator_parameters(),
                                                 ours.encoder.estimator_parameters()))  # fmt: skip

    state_policy = {"kind": "diffusion", "diffusion": {"fusion": {"dim": 32, "heads": 2, "use_images": False}}}
    plain = train_bc(BCRun(policy=state_policy, train=BCConfig(iters=1, final_eval_episodes=1, device="cpu")),
                     image_demos, tmp_path / "plain", progress=False)  # fmt: skip
    refused = BCConfig(**{**reuse.__dict__, "estimator_from": plain["checkpoint"]})
    with pytest.raises(ConfigError, match="estimate the task state"):
        train_bc(BCRun(policy=few_step, train=refused), image_demos, tmp_path / "refused", progress=False)


def test_staged_bc_needs_a_policy_whose_cameras_feed_only_the_estimator(image_demos, tmp_path):
    joint = {"kind": "diffusion", "diffusion": {"fusion": {**STAGED_POLICY["diffusion"]["fusion"],
                                                           "image_tokens_per_camera": 4}}}  # fmt: skip
    train = BCConfig(iters=1, estimator_iters=5, device="cpu")
    with pytest.raises(ConfigError, match="image_tokens_per_camera 0"):
        train_bc(BCRun(policy=joint, train=train), image_demos, tmp_path, progress=False)


def test_ppo_fine_tunes_a_staged_policys_actor_on_simulated_estimates_without_cameras(image_demos, tmp_path):
    """train.simulated_estimates: rollouts render nothing and hand the actor the true block and goal moved by the
    estimator's measured error; the evaluation still runs the cameras; PPO checkpoints keep the measured error."""
    from diffpolicy_ros.contract import TASK_STATE_SLICE
    from diffpolicy_ros.rl.ppo import PPOConfig, PPORun, PPOTrainer
    from diffpolicy_ros.sim.estimated_state import MEDIAN_RADIUS_PER_SIGMA

    train = BCConfig(iters=2, batch_size=8, estimator_iters=5, estimator_batch_size=4, eval_every=2, eval_episodes=1,
                     final_eval_episodes=1, device="cpu")  # fmt: skip
    bc = train_bc(BCRun(policy=STAGED_POLICY, train=train), image_demos, tmp_path / "bc", progress=False)
    ppo = PPOConfig(total_env_steps=2 * 3 * 4, n_envs=2, rollout_steps=3, asynchronous_envs=False, micro_batch=4,
                    grad_accum=1, update_epochs=1, eval_episodes=1, simulated_estimates=True, device="cpu")  # fmt: skip
    run = PPORun(task="push", env={"max_episode_steps": 12}, init=bc["checkpoint"], train=ppo)
    trainer = PPOTrainer(run, tmp_path / "ppo", progress=False)
    rollout = trainer.collect_rollout()
    assert "task_state_estimate" in rollout.obs and not any(k.startswith("image_") for k in rollout.obs)
    error = rollout.obs["task_state_estimate"] - rollout.obs["proprio"][..., TASK_STATE_SLICE]
    sigma = bc["estimator"]["block_median_mm"] / 1e3 / MEDIAN_RADIUS_PER_SIGMA
    assert 0.3 * sigma < np.std(error[..., :2]) < 3 * sigma
    result = trainer.train()
    assert result["final_eval"]["episodes"] == 1  # evaluated with the cameras (obs_mode image)
    assert trainer.obs_mode == "image"
    ckpt = load_checkpoint(sorted((tmp_path / "ppo" / "checkpoints").glob("iter_*.pt"))[-1])
    assert ckpt["meta"]["metrics"]["estimator"] == bc["estimator"]
    with pytest.raises(ConfigError, match="staged vision policy"):
        PPOTrainer(PPORun(task="push", policy={"kind": "diffusion"}, train=ppo), tmp_path / "plain", progress=False)


def test_across_cells_ppo_measures_its_estimators_error_per_factor_once_and_draws_each_episodes_from_its_cell(
    image_demos, tmp_path, monkeypatch
):
    """train.simulated_estimates with a cell file: the estimator is measured in each factor's edge cells (rendered,
    estimated), the model is stored in every PPO checkpoint, and a run resumed from one reuses it."""
    from diffpolicy_ros.rl import ppo as ppo_module
    from diffpolicy_ros.rl.ppo import PPOConfig, PPORun, PPOTrainer
    from diffpolicy_ros.sim.cell import CellRanges

    train = BCConfig(iters=2, batch_size=8, estimator_iters=5, estimator_batch_size=4, eval_every=2, eval_episodes=1,
                     final_eval_episodes=1, device="cpu")  # fmt: skip
    bc = train_bc(BCRun(policy=STAGED_POLICY, train=train), image_demos, tmp_path / "bc", progress=False)
    cells = CellRanges().with_factors({"lights.headlight": (0.6, 1.0), "physics.block_mass": (0.5, 2.0)})
    ppo = PPOConfig(total_env_steps=2 * 3 * 4, n_envs=2, rollout_steps=3, asynchronous_envs=False, micro_batch=4,
                    grad_accum=1, update_epochs=1, eval_episodes=1, simulated_estimates=True, checkpoint_every=1,
                    estimate_error_scenes=1, device="cpu")  # fmt: skip
    run = PPORun(task="push", env={"max_episode_steps": 12, "cells": cells}, init=bc["checkpoint"], train=ppo)
    trainer = PPOTrainer(run, tmp_path / "ppo", progress=False)
    model = trainer.envs.envs[0].error  # the wrapper every rollout env draws its estimates from
    assert [(e.factor, e.value) for e in model.edges] == [("lights.headlight", 0.6)]  # mass changes no frame
    assert model.block_mm > 0 and model.edges[0].block_mm > 0 and model.sampled["block_mm"] > 0
    trainer.train()
    ckpt = load_checkpoint(sorted((tmp_path / "ppo" / "checkpoints").glob("iter_*.pt"))[-1])
    stored = ckpt["meta"]["metrics"]["estimator"]
    assert stored["block_median_mm"] == bc["estimator"]["block_median_mm"]
    assert stored["cell_error"]["edges"][0]["factor"] == "lights.headlight"

    def not_again(*args, **kwargs):
        raise AssertionError("measured again on resume")

    monkeypatch.setattr(ppo_module, "measure_error_model", not_again)
    last = sorted((tmp_path / "ppo" / "checkpoints").glob("iter_*.pt"))[-1]
    resumed = PPOTrainer(run, tmp_path / "ppo", resume=str(last), progress=False)
    assert resumed.envs.envs[0].error == model
    resumed.envs.close()
