"""PPO on the real point-mass task with real torch: the objective at the first update, the gradient path
into the denoiser, exact resume, NaN recovery, checkpoint fallback, DDP with two CPU ranks, and learning."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from diffpolicy_ros.config import from_dict
from diffpolicy_ros.models.checkpoint import load_checkpoint, load_policy
from diffpolicy_ros.rl.ppo import PPORun, PPOTrainer, latest_checkpoint, load_ppo_run, train_ppo
from diffpolicy_ros.rl.ppo_math import denoising_clip_schedule, normalize_advantages
from diffpolicy_ros.runs import EVAL_SEED, FRESH_EVAL_SEED, ROLLOUT_SEED
from diffpolicy_ros.sim import TASKS

REPO = Path(__file__).resolve().parents[2]

TINY_RUN = {
    "task": "point_mass",
    "policy": {
        "kind": "diffusion",
        "diffusion": {
            "horizon": 8,
            "fusion": {"dim": 32, "heads": 2, "layers": 1, "use_images": False, "use_text": False},
            "unet": {"down_dims": [16, 32], "kernel_size": 3, "timestep_embed_dim": 16},
        },
        "gaussian": {
            "horizon": 8,
            "hidden": 32,
            "fusion": {"dim": 32, "heads": 2, "layers": 1, "use_images": False, "use_text": False},
        },
    },
    "train": {
        "total_env_steps": 4 * 4 * 10 * 4,  # 4 iterations of 4 envs x 10 decisions x 4 steps
        "n_envs": 4,
        "rollout_steps": 10,
        "asynchronous_envs": False,
        "sampler": {"ddim_steps": 5, "finetune_steps": 3},
        "micro_batch": 16,
        "grad_accum": 2,
        "update_epochs": 2,
        "critic_warmup_iters": 1,
        "critic_hidden": 32,
        "checkpoint_every": 1,
        "eval_episodes": 4,
        "device": "cpu",
    },
}


def tiny_run(**train_overrides) -> PPORun:
    data = copy.deepcopy(TINY_RUN)
    data["train"].update(train_overrides)
    return from_dict(PPORun, data)


def first_batch(tmp_path: Path, kind: str = "diffusion") -> tuple[PPOTrainer, dict]:
    """A tiny trainer for ``kind`` (``few_step``: the diffusion head as a shortcut model sampled in 2 Euler steps,
    both fine-tuned) and its first rollout's batch, before any update."""
    run = tiny_run(sampler={"ddim_steps": 2, "finetune_steps": 2}) if kind == "few_step" else tiny_run()
    if kind == "few_step":
        shortcut = {"objective": "flow", "ddim_steps": 2, "flow": {"shortcut": True}}
        run.policy["diffusion"] = {**run.policy["diffusion"], **shortcut}
        kind = "diffusion"
    run.policy["kind"] = kind
    trainer = PPOTrainer(run, tmp_path, progress=False)
    return trainer, trainer.prepare_batch(trainer.collect_rollout())


def all_params(trainer: PPOTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.agent.state_dict().items()}


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["diffusion", "few_step", "gaussian"])
def test_ratio_is_one_and_policy_loss_zero_before_the_first_update(tmp_path, kind):
    trainer, batch = first_batch(tmp_path, kind)
    everything = torch.arange(batch["old_logp"].numel())  # every (decision, denoising step) pair
    advantages = normalize_advantages(batch["advantages"])
    policy_loss, value_loss, stats = trainer.losses(batch, everything, advantages)
    new_logp, _ = trainer.agent(batch["obs"], batch["records"])
    assert torch.allclose(new_logp, batch["old_logp"], atol=1e-4)  # same weights: ratio exactly 1
    assert abs(float(stats["ratio"]) - 1.0) < 1e-5 and float(stats["clip_fraction"]) == 0.0
    assert abs(float(policy_loss.detach())) < 1e-5  # -mean(normalized advantages)
    assert torch.isfinite(value_loss)
    trainer.envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["diffusion", "few_step", "gaussian"])
def test_the_samplers_log_probs_are_the_update_s_and_pairs_score_one_step(tmp_path, kind):
    """The old log-probabilities PPO keeps come from the sampler's own noise (no second U-Net pass): they
    must be what the update computes on the same weights, or the first ratio is not 1. A (decision, step)
    pair scores only its own step."""
    trainer, batch = first_batch(tmp_path, kind)
    obs = {k: v[:12] for k, v in batch["obs"].items()}
    with torch.no_grad():
        _, records, sampled = trainer.agent.act(obs, torch.Generator().manual_seed(3))
        recomputed, _ = trainer.agent(obs, records)
        assert sampled.shape == recomputed.shape == (12, trainer.agent.ratio_terms())
        assert torch.allclose(sampled, recomputed, atol=1e-4)
        terms = torch.arange(12) % trainer.agent.ratio_terms()
        paired, _ = trainer.agent(obs, records, terms)
        assert torch.allclose(paired, recomputed[torch.arange(12), terms], atol=1e-5)
    trainer.envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["diffusion", "gaussian"])
def test_per_element_log_prob_is_the_exact_density_averaged_over_the_chunk(tmp_path, kind):
    trainer, batch = first_batch(tmp_path, kind)
    with torch.no_grad():
        exact, _ = trainer.agent(batch["obs"], batch["records"])
        trainer.agent.per_element_log_prob = True
        averaged, _ = trainer.agent(batch["obs"], batch["records"])
    assert torch.allclose(averaged, exact / (8 * 2), atol=1e-5)  # horizon 8 x 2-D point-mass actions
    trainer.envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["diffusion", "gaussian"])
def test_executed_only_likelihood_ignores_the_unexecuted_tail_of_the_chunk(tmp_path, kind):
    trainer, batch = first_batch(tmp_path, kind)
    trainer.agent.likelihood_actions = trainer.run.train.execute_horizon  # 4 of the 8 actions
    records = batch["records"]
    tail, head = records.clone(), records.clone()
    final = (slice(None), -1) if kind == "diffusion" else (slice(None),)  # the chunk (the chain's last step)
    tail[(*final, slice(4, None))] += 0.5
    head[(*final, slice(0, 4))] += 0.5
    with torch.no_grad():
        logp = trainer.agent(batch["obs"], records)[0]
        assert torch.equal(trainer.agent(batch["obs"], tail)[0], logp)  # the unexecuted actions earn no reward
        assert not torch.allclose(trainer.agent(batch["obs"], head)[0], logp, atol=1e-3)
        trainer.agent.likelihood_actions = 8
        assert not torch.allclose(trainer.agent(batch["obs"], tail)[0], logp, atol=1e-3)  # whole chunk: it counts
    trainer.envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["diffusion", "few_step"])
def test_policy_gradient_reaches_the_denoiser(tmp_path, kind):
    trainer, batch = first_batch(tmp_path, kind)
    idx = torch.arange(batch["old_logp"].numel())
    policy_loss, _, _ = trainer.losses(batch, idx, torch.randn(batch["advantages"].shape[0]))  # arbitrary advantages
    policy_loss.backward()
    unet_grads = [p.grad for p in trainer.agent.policy.unet.parameters() if p.grad is not None]
    assert unet_grads and sum(float(g.abs().sum()) for g in unet_grads) > 0
    assert all(p.grad is None for p in trainer.agent.critic.parameters())  # the value head is not in it
    trainer.envs.close()


@pytest.mark.quick
def test_each_epoch_draws_pair_fraction_of_the_pairs_with_per_step_clips_and_discounts(tmp_path):
    run = tiny_run(pair_fraction=0.25, clip_coef=0.01, clip_coef_first=0.001, gamma_denoising=0.9)
    trainer = PPOTrainer(run, tmp_path, progress=False)
    batch = trainer.prepare_batch(trainer.collect_rollout())
    pairs = batch["old_logp"].numel()
    assert pairs == 4 * 10 * 3  # 4 envs x 10 decisions x K' = 3 fine-tuned steps
    drawn: list[torch.Tensor] = []
    real_losses = trainer.losses

    def recording(batch, idx, advantages):
        drawn.append(idx.clone())
        return real_losses(batch, idx, advantages)

    trainer.losses = recording
    trainer.update(batch)
    # one minibatch (16 x 2 decisions' worth = 96 pairs) holds an epoch's 30 pairs: one call per epoch
    assert [len(idx) for idx in drawn] == [30] * run.train.update_epochs
    assert all(len(set(idx.tolist())) == 30 and int(idx.max()) < pairs for idx in drawn)  # distinct pairs
    assert len({tuple(sorted(idx.tolist())) for idx in drawn}) > 1  # a new draw every epoch
    torch.testing.assert_close(trainer.term_clip, denoising_clip_schedule(3, 0.01, 0.001))  # earliest step first
    torch.testing.assert_close(trainer.term_discount, torch.tensor([0.81, 0.9, 1.0]))
    trainer.envs.close()


@pytest.mark.quick
def test_target_kl_stops_the_update_before_the_step_that_would_pass_it(tmp_path):
    trainer, batch = first_batch(tmp_path)
    cfg = trainer.run.train
    trainer.iteration = cfg.critic_warmup_iters  # past the warm-up: the actor steps

    def actor_steps() -> set[int]:
        return {int(state["step"]) for state in trainer.actor_opt.state.values()}

    cfg.target_kl = 1e-12  # any movement of the policy passes it
    out = trainer.update(batch)
    assert out["kl_stopped"] == 1.0 and actor_steps() == {1}  # one step, then the next minibatch stopped it
    cfg.target_kl = None
    out = trainer.update(batch)
    per_update = cfg.update_epochs * math.ceil(batch["advantages"].shape[0] / (cfg.micro_batch * cfg.grad_accum))
    assert out["kl_stopped"] == 0.0 and actor_steps() == {1 + per_update}
    trainer.envs.close()


@pytest.mark.quick
def test_a_stop_mid_iteration_drops_the_rollout_or_update_instead_of_finishing_it(tmp_path):
    """The trainer node's shutdown: training returns within one env step / one minibatch, nothing counted."""
    trainer = PPOTrainer(tiny_run(), tmp_path / "rollout", progress=False)
    steps, env_step = [], trainer.envs.step

    def step_then_stop(actions):
        steps.append(1)
        trainer.hooks.stop.set()
        return env_step(actions)

    trainer.envs.step = step_then_stop
    out = trainer.train()
    assert len(steps) == 1 and out["iterations"] == 0 and out["env_steps"] == 0
    assert trainer.run.train.rollout_steps > 1  # there were more steps to take

    trainer = PPOTrainer(tiny_run(), tmp_path / "update", progress=False)
    minibatches, gradients = [], trainer.minibatch_gradients

    def gradients_then_stop(*args):
        minibatches.append(1)
        trainer.hooks.stop.set()
        return gradients(*args)

    trainer.minibatch_gradients = gradients_then_stop
    out = trainer.train()
    assert len(minibatches) == 1 and out["iterations"] == 0 and trainer.run.train.update_epochs > 1
    assert not list((tmp_path / "update").rglob("iter_*.pt"))  # a partial update is not saved as an iteration


@pytest.mark.quick
@pytest.mark.parametrize("anneal_lr", [False, True])
def test_resume_is_exact(tmp_path, anneal_lr):
    straight = PPOTrainer(tiny_run(anneal_lr=anneal_lr), tmp_path / "straight", progress=False)
    straight.train()
    assert straight.iteration == 4
    # annealed: the last of 4 updates steps at a quarter of the configured rate (CleanRL's linear decay)
    cfg = straight.run.train
    assert straight.actor_opt.param_groups[0]["lr"] == pytest.approx(cfg.actor_lr * (0.25 if anneal_lr else 1.0))
    assert straight.critic_opt.param_groups[0]["lr"] == pytest.approx(cfg.critic_lr * (0.25 if anneal_lr else 1.0))

    first = PPOTrainer(tiny_run(anneal_lr=anneal_lr), tmp_path / "split", progress=False)
    first.train(until_iteration=2)
    resume = latest_checkpoint(tmp_path / "split")
    resumed = PPOTrainer(tiny_run(anneal_lr=anneal_lr), tmp_path / "split", resume=resume, progress=False)
    assert resumed.iteration == 2
    resumed.train()

    a, b = all_params(straight), all_params(resumed)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert straight.env_steps == resumed.env_steps
    # the checkpoint alone deploys: schedule and normalizers come with it
    policy, ckpt = load_policy(latest_checkpoint(tmp_path / "split"))
    assert torch.equal(policy.schedule.alphas_cumprod, straight.policy.schedule.alphas_cumprod)
    assert ckpt["meta"]["source"] == "ppo" and len(ckpt["train_state"]["rng"]) == 1


@pytest.mark.quick
def test_non_finite_update_is_skipped_and_state_restored(tmp_path):
    trainer = PPOTrainer(tiny_run(critic_warmup_iters=0), tmp_path, progress=False)
    batch = trainer.prepare_batch(trainer.collect_rollout())
    before = all_params(trainer)
    real_forward = trainer.agent.forward

    def poisoned(obs, record, terms=None):
        logp, value = real_forward(obs, record, terms)
        return logp * float("nan"), value

    trainer.agent.forward = poisoned
    stats = trainer.update(batch)
    assert stats["skipped_updates"] == 1 and trainer.nonfinite_updates == 1
    after = all_params(trainer)
    assert all(torch.equal(before[k], after[k]) for k in before)

    trainer.agent.forward = real_forward  # the next update goes through
    stats = trainer.update(batch)
    assert stats["skipped_updates"] == 0
    changed = all_params(trainer)
    assert any(not torch.equal(before[k], changed[k]) for k in before)
    assert all(torch.isfinite(v).all() for v in changed.values() if v.is_floating_point())
    trainer.envs.close()


@pytest.mark.quick
def test_resume_auto_skips_a_damaged_newest_checkpoint(tmp_path):
    result = train_ppo(tiny_run(total_env_steps=2 * 160), tmp_path, progress=False)
    assert result["iterations"] == 2
    newest = tmp_path / "checkpoints" / "iter_000003.pt"
    newest.write_bytes(b"truncated by a crash")
    found = latest_checkpoint(tmp_path)
    assert found is not None and found.name == "iter_000002.pt"
    assert load_checkpoint(found)["train_state"]["iteration"] == 2


@pytest.mark.quick
def test_ddp_with_two_cpu_ranks(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "train": {**TINY_RUN["train"], "total_env_steps": 640}}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command = ["-m", "diffpolicy_ros.cli", "train-ppo", "--config", str(config), "--run-dir", str(tmp_path / "run")]
    out = subprocess.run([*torchrun, *command, "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1  # rank 0 reports
    result = json.loads(lines[0])
    assert result["world_size"] == 2 and result["ranks_in_sync"]  # DDP kept both ranks' weights identical
    assert result["env_steps"] == 640  # both ranks' env workers counted
    ckpt = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert len(ckpt["train_state"]["rng"]) == 2  # both ranks' RNG streams saved
    assert ckpt["train_state"]["iteration"] == 2  # 640 steps / (2 ranks x 160 per iteration)


@pytest.mark.quick
def test_train_ppo_command_and_plot(tmp_path, run_cli):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "train": {**TINY_RUN["train"], "total_env_steps": 320}}))
    result = run_cli("train-ppo", "--config", config, "--run-dir", tmp_path / "run")
    assert result["iterations"] == 2 and result["env_steps"] == 320
    assert result["final_eval"]["episodes"] == 4 and result["best_success_rate"] == result["final_eval"]["success_rate"]
    policy, ckpt = load_policy(tmp_path / "run" / "checkpoints" / "best.pt")  # deployable as saved
    assert ckpt["policy_spec"]["diffusion"]["stochastic"] is True
    assert ckpt["meta"]["evaluation"]["success_rate"] == result["final_eval"]["success_rate"]
    again = run_cli("train-ppo", "--config", config, "--run-dir", tmp_path / "run", "--resume", "auto")
    assert again["iterations"] == 2  # already done: resumed at the end, nothing to run
    out = subprocess.run(
        [sys.executable, "-m", "diffpolicy_ros.cli", "plot", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    png = Path(out.stdout.strip())
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.quick
def test_plot_of_two_runs_puts_both_heads_held_out_evaluations_in_one_png(tmp_path, run_cli, monkeypatch):
    """`diffpolicy plot RUN_A RUN_B`: each PPO run's held-out evaluations against env steps, labelled with the head
    its checkpoints hold, in one PNG (the diffusion-vs-Gaussian comparison a user makes)."""
    from diffpolicy_ros import cli
    from diffpolicy_ros.eval import plots

    for kind in ("diffusion", "gaussian"):
        train = {**TINY_RUN["train"], "total_env_steps": 320, "eval_every": 1}
        config = tmp_path / f"{kind}.yaml"
        config.write_text(yaml.safe_dump({**TINY_RUN, "policy": {**TINY_RUN["policy"], "kind": kind}, "train": train}))
        run_cli("train-ppo", "--config", config, "--run-dir", tmp_path / f"run_{kind}")
    drawn, draw = {}, plots.plot_success_vs_steps
    monkeypatch.setattr(plots, "plot_success_vs_steps", lambda c, *a, **k: drawn.update(c) or draw(c, *a, **k))
    out = tmp_path / "both.png"
    assert cli.main(["plot", str(tmp_path / "run_diffusion"), str(tmp_path / "run_gaussian"), "--out", str(out)]) == 0
    assert set(drawn) == {"diffusion: run_diffusion", "gaussian: run_gaussian"}
    assert [x for x, _ in drawn["gaussian: run_gaussian"]] == [160, 320]  # an evaluation per iteration
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.quick
def test_train_ppo_deploy_fine_tunes_in_the_sim_as_deployed_and_evaluates_as_deployed(tmp_path, run_cli):
    """train-ppo --deploy: a decision every re-plan interval (real_arm.yaml's replan_steps, 2 periods; the chunk
    lands 60-110 ms after its observation), the trainer's evaluations are eval --deploy's, and the deployment
    travels in the checkpoint."""
    config = tmp_path / "tiny_push.yaml"
    train = {**TINY_RUN["train"], "n_envs": 2, "rollout_steps": 6, "total_env_steps": 2 * 2 * 12, "eval_episodes": 1}
    config.write_text(yaml.safe_dump({**TINY_RUN, "task": "push", "env": {"max_episode_steps": 12}, "train": train}))
    result = run_cli("train-ppo", "--config", config, "--run-dir", tmp_path / "run",
                     "--deploy", REPO / "config" / "real_arm.yaml", "max_accel:=0.8", timeout=300)  # fmt: skip
    # 2 iterations x 2 envs x 6 decisions of 2 periods each
    assert result["iterations"] == 2 and result["env_steps"] == 48
    final = result["final_eval"]
    assert final["deployment"]["max_accel"] == 0.8 and final["deployment"]["latency_ms"] == [60, 110]
    assert final["deployment"]["replan_steps"] == 2
    assert final["active_ticks"] > 0 and "switch_jump_mean" in final
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoints" / "best.pt")
    assert ckpt["meta"]["config"]["deploy"]["max_speed"] == 0.1 and ckpt["meta"]["config"]["deploy"]["max_accel"] == 0.8
    with pytest.raises(subprocess.CalledProcessError):  # real_arm arguments without a file to apply them to
        run_cli("train-ppo", "--config", config, "max_accel:=0.8")


@pytest.mark.quick
def test_reward_centering_tracks_the_average_reward_and_resumes(tmp_path):
    trainer = PPOTrainer(tiny_run(reward_centering=True, reward_centering_step=0.1), tmp_path, progress=False)
    trainer.train(until_iteration=1)
    average = trainer.centerer.average
    assert average != 0.0
    resumed = PPOTrainer(
        tiny_run(reward_centering=True, reward_centering_step=0.1),
        tmp_path,
        resume=latest_checkpoint(tmp_path),
        progress=False,
    )
    assert resumed.centerer.average == average  # part of the exact-resume state
    resumed.envs.close()


@pytest.mark.quick
@pytest.mark.parametrize("path", sorted((REPO / "config" / "train").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_train_config_loads(path):
    run = load_ppo_run(path)  # an unknown or misspelt option is an error naming it
    assert run.task in TASKS


@pytest.mark.quick
def test_best_pt_is_the_best_held_out_evaluation_never_a_rollouts_success(tmp_path):
    """A lucky rollout (exploration, training seeds) must not block later real improvements: only evaluations
    count, and best.pt carries the evaluation that made it best."""
    run = tiny_run(total_env_steps=4 * 160, eval_every=2)  # 4 iterations, evaluated at 2 and 4
    trainer = PPOTrainer(run, tmp_path, progress=False)
    evaluations = iter([0.5, 0.25])

    def evaluate(episodes: int) -> dict:
        rate = next(evaluations)
        return {"task": "point_mass", "episodes": episodes, "seed": 10_000, "success_rate": rate,
                "success_ci95": (0.0, 1.0), "mean_return": 0.0}  # fmt: skip

    trainer.evaluate = evaluate
    trainer.train(until_iteration=1)
    best = tmp_path / "checkpoints" / "best.pt"
    assert not best.exists()  # iteration 1 had rollouts but no evaluation: nothing is "best" yet
    result = trainer.train()
    meta = load_checkpoint(best)["meta"]
    assert meta["evaluation"]["success_rate"] == 0.5 and meta["metrics"]["iteration"] == 2  # not the later 0.25
    assert result["best_success_rate"] == 0.5
    unevaluated = load_checkpoint(tmp_path / "checkpoints" / "iter_000003.pt")["meta"]
    assert unevaluated["evaluation"] == {}  # weights that were never evaluated carry no evaluation


@pytest.mark.quick
def test_fresh_eval_scenes_give_each_evaluation_held_out_scenes_of_its_own(tmp_path):
    """With fresh_eval_scenes no two evaluations share a scene, and none is one of `eval`'s default held-out
    scenes (EVAL_SEED + i), so the figure `eval` gives best.pt is not the one it was chosen on."""
    run = tiny_run(total_env_steps=3 * 160, eval_every=1, fresh_eval_scenes=True)
    trainer = PPOTrainer(run, tmp_path, progress=False)
    trainer.train()
    ckpts = sorted((tmp_path / "checkpoints").glob("iter_*.pt"))
    evaluations = [load_checkpoint(path)["meta"]["evaluation"] for path in ckpts]
    blocks = [set(range(e["seed"], e["seed"] + e["episodes"])) for e in evaluations]
    assert len(blocks) == 3 and all(len(b) == 4 for b in blocks)
    assert not (blocks[0] & blocks[1]) and not (blocks[1] & blocks[2]) and not (blocks[0] & blocks[2])
    assert all(min(b) >= FRESH_EVAL_SEED and max(b) < ROLLOUT_SEED for b in blocks)
    assert not any(b & set(range(EVAL_SEED, FRESH_EVAL_SEED)) for b in blocks)
    assert tiny_run(eval_every=1).train.fresh_eval_scenes is False  # the default: one fixed block


@pytest.mark.quick
def test_best_evaluation_counts_only_evaluations_trusts_more_episodes_and_keeps_the_earlier_of_a_tie():
    from diffpolicy_ros.rl.best import BestEvaluation, evaluation_record

    best = BestEvaluation()
    assert not best.offer({}) and not best.offer(None) and best.success_rate is None
    assert best.offer({"success_rate": 0.4}) and not best.offer({"success_rate": 0.4})
    assert best.offer({"success_rate": 0.7}) and not best.offer({"success_rate": 0.6}) and best.success_rate == 0.7
    # more episodes are trusted further: the low ends of the 95 % intervals rank them, not the rates
    sized = BestEvaluation()
    assert sized.offer({"success_rate": 0.85, "episodes": 20})  # 17/20: 0.64 at the low end
    assert sized.offer({"success_rate": 0.83, "episodes": 100})  # 83/100: 0.74
    assert not sized.offer({"success_rate": 0.9, "episodes": 20}) and sized.episodes == 100  # 18/20: 0.70
    same_size = {"success_rate": 0.84, "episodes": 100}
    assert sized.offer(same_size) and not sized.offer(dict(same_size))  # one size: the rates rank them
    record = evaluation_record({"task": "push", "episodes": 50, "seed": 10_000, "success_rate": 0.8,
                                "success_ci95": (0.67, 0.89), "per_episode": [], "wall_s": 3.0})  # fmt: skip
    assert record == {"task": "push", "episodes": 50, "seed": 10_000, "success_rate": 0.8, "success_ci95": [0.67, 0.89]}
    assert evaluation_record(None) == {} and evaluation_record({"episodes": 3}) == {}


@pytest.mark.quick
def test_configs_check_every_field_with_a_domain_after_every_override():
    import dataclasses

    from diffpolicy_ros.config import ConfigError, override
    from diffpolicy_ros.rl.bc import BCConfig
    from diffpolicy_ros.rl.ppo import PPOConfig, SamplerOverrides

    for bad in ({"eval_every": 0}, {"iters": -1}, {"lr": 0.0}, {"ema_decay": 1.5}, {"device": "gpu"}):
        with pytest.raises(ConfigError, match=f"BCConfig.{next(iter(bad))}"):
            BCConfig(**bad)
    for bad in ({"checkpoint_every": 0}, {"gamma": 1.2}, {"pair_fraction": 0.0}, {"n_envs": 2.5}, {"seed": -1}):
        with pytest.raises(ConfigError, match=f"PPOConfig.{next(iter(bad))}"):
            PPOConfig(**bad)
    cfg = PPOConfig()
    with pytest.raises(ConfigError, match="PPOConfig.checkpoint_every = 0"):
        cfg.checkpoint_every = 0  # a CLI, node or bench override set on the built object is checked too
    with pytest.raises(ConfigError, match="PPOConfig.eval_episodes"):
        dataclasses.replace(cfg, eval_episodes=0)
    assert override(cfg, eval_every=None, n_envs=8).n_envs == 8 and cfg.n_envs == 16  # None: not given
    with pytest.raises(ConfigError, match="SamplerOverrides.ddim_steps"):
        SamplerOverrides(ddim_steps=0)
    with pytest.raises(ConfigError, match="PPOConfig.sampler"):
        PPOConfig(sampler={"ddim_steps": 5})
