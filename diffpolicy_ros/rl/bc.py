"""Behaviour cloning of a diffusion (or Gaussian) policy on recorded demonstrations.

Reads top to bottom: config -> data -> model and normalizers -> optimizer, EMA, LR schedule -> loop
(sample batch, augment, loss, step, EMA, log) -> periodic closed-loop evaluation in the sim -> checkpoints.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from diffpolicy_ros.config import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    Checked,
    ConfigError,
    Domain,
    to_dict,
)
from diffpolicy_ros.contract import EXECUTE_HORIZON
from diffpolicy_ros.data.augmentation import random_shift
from diffpolicy_ros.data.episodes import DatasetError, EpisodeDataset
from diffpolicy_ros.device import TRAINING_PRECISIONS, AutocastSettings, training_autocast
from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.eval.rollout import evaluate_policy
from diffpolicy_ros.models.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    load_checkpoint,
    make_payload,
    save_checkpoint,
)
from diffpolicy_ros.models.factory import PolicySpec, build_policy, policy_spec, spec_dict
from diffpolicy_ros.models.obs import index_obs, is_camera_input, obs_to_torch
from diffpolicy_ros.rl import distributed
from diffpolicy_ros.rl.best import BestEvaluation, evaluation_record
from diffpolicy_ros.rl.estimator import copy_estimator, train_estimator, true_task_state
from diffpolicy_ros.rl.hooks import TrainHooks
from diffpolicy_ros.runs import EVAL_SEED, MetricsLogger, RunDir, as_run_dir
from diffpolicy_ros.sim.cell import ranges_from_dict

CSV_FIELDS = ("iter", "loss", "lr", "eval_success_rate", "eval_mean_return", "eval_left_fraction", "wall_s")


@dataclass
class BCConfig(Checked):
    iters: int = 4000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-6
    warmup_iters: int = 200
    ema_decay: float = 0.995
    grad_clip: float = 1.0
    image_shift: int = 4  # px of random-shift augmentation (DrQ-style) on camera images
    eval_every: int = 1000
    # one unevaluated checkpoint this early (0: none): a running graph (sim_train) moves within minutes
    # instead of waiting for the first evaluation
    first_checkpoint_iter: int = 0
    eval_episodes: int = 20
    final_eval_episodes: int = 50
    execute_horizon: int = EXECUTE_HORIZON  # actions of each chunk executed before re-planning
    log_every: int = 50
    # staged BC (a policy whose cameras feed only the task-state estimator, fusion.image_tokens_per_camera 0):
    # the estimator trains alone first for this many iterations, then the actor on states plus the estimator's
    # held-out error (rl/estimator.py); 0: one joint stage
    estimator_iters: int = 0
    estimator_batch_size: int = 32
    estimator_lr: float = 3e-3  # measured on push: per second of CPU, batch 32 at 3e-3 beat batch 64 at 1e-3
    estimator_holdout: float = 0.1  # the share of episodes (the last ones) the estimator's error is measured on
    # staged BC from an estimator already trained: a staged checkpoint whose estimator is copied, frozen and
    # measured on this dataset's held-out episodes instead of training one (estimator_iters is then unused), so
    # a new actor on the same cameras costs only its own stage. The measure is honest when the source trained
    # on the same demonstrations (the same held-out episodes)
    estimator_from: str = ""
    # staged BC: the estimator's held-out errors are scaled by this before they move the actor's true positions
    # (0: the actor trains on exact positions)
    estimate_noise_scale: float = 1.0
    # the actor's forward: fp32, bf16 (bfloat16 autocast; weights, optimizer and EMA stay float32) or auto (bf16
    # where the device computes it natively: device.training_autocast). The staged estimator trains in fp32:
    # its keypoints are sub-pixel, and bf16 saved 5 % of its step against 8-18 % of the actor's (docs/experiments.md)
    precision: str = "fp32"
    seed: int = 0
    device: str = "auto"

    DOMAINS: ClassVar[dict[str, Domain]] = {
        "iters": COUNT, "batch_size": COUNT, "lr": POSITIVE, "weight_decay": NON_NEGATIVE,
        "warmup_iters": NON_NEGATIVE_INT, "ema_decay": FRACTION, "grad_clip": POSITIVE, "image_shift": NON_NEGATIVE_INT,
        "eval_every": COUNT, "first_checkpoint_iter": NON_NEGATIVE_INT, "eval_episodes": COUNT,
        "final_eval_episodes": COUNT, "execute_horizon": COUNT, "log_every": COUNT, "seed": NON_NEGATIVE_INT,
        "estimator_iters": NON_NEGATIVE_INT, "estimator_batch_size": COUNT, "estimator_lr": POSITIVE,
        "estimator_holdout": FRACTION, "estimate_noise_scale": NON_NEGATIVE,
    }  # fmt: skip

    def __post_init__(self) -> None:
        if self.precision not in TRAINING_PRECISIONS:
            raise ConfigError(f"BCConfig.precision = {self.precision!r}: expected one of {list(TRAINING_PRECISIONS)}")


@dataclass
class BCRun:
    policy: dict = field(default_factory=dict)  # a PolicySpec as a dict
    train: BCConfig = field(default_factory=BCConfig)

    def obs_mode(self) -> str:
        """The observations the policy reads, so the demonstrations it needs: "image" or "state"."""
        return policy_spec(self.policy).active().fusion.obs_mode()


def chunk_targets(dataset: EpisodeDataset, horizon: int) -> np.ndarray:
    """[T, horizon, 3]: the actions from each step on, zero-padded past the episode's end (the arm stops)."""
    targets = np.zeros((dataset.n_steps, horizon, dataset.action.shape[1]), dtype=np.float32)
    for e in range(dataset.n_episodes):
        sl = dataset.episode_slice(e)
        acts = dataset.action[sl]
        for j in range(len(acts)):
            seg = acts[j : j + horizon]
            targets[sl.start + j, : len(seg)] = seg
    return targets


def step_instructions(dataset: EpisodeDataset) -> list[str]:
    out: list[str] = []
    for e in range(dataset.n_episodes):
        sl = dataset.episode_slice(e)
        out += [str(dataset.episode["instruction"][e])] * (sl.stop - sl.start)
    return out


def bc_step(
    policy: nn.Module, optimizer: torch.optim.Optimizer, obs: dict, actions: torch.Tensor, grad_clip: float,
    dist: distributed.DistInfo = distributed.SINGLE, autocast: AutocastSettings | None = None,
) -> float:
    """One gradient step: the action loss (+ the encoder's auxiliary loss, if any), averaged over the ranks under
    torchrun, clipped, applied. ``autocast``: the forward's mixed precision (None: fp32). Returns the loss (over
    every rank's batch)."""
    with torch.autocast(**autocast.kwargs()) if autocast is not None else nullcontext():
        cond, task_state_prediction = policy.encoder.features(obs)
        loss = policy.bc_loss(obs, actions, cond) + policy.encoder.auxiliary_loss(obs, task_state_prediction)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    mean_loss = distributed.average_gradients(dist, [p for p in policy.parameters() if p.requires_grad], loss)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip)
    optimizer.step()
    return mean_loss


def train_bc(
    run: BCRun,
    data_path: str | Path | EpisodeDataset,
    run_dir: str | Path | RunDir | None = None,
    progress: bool = True,
    hooks: TrainHooks | None = None,
    resume: str | Path | None = None,
) -> dict:
    """Behaviour cloning; under torchrun one rank per device (the process group joined, and left once every rank
    is done or when this one fails). ``resume``: a BC run's ``last.pt`` to continue (into ``run_dir``)."""
    dist = distributed.init_distributed(run.train.device)
    try:
        run_folder = as_run_dir(run_dir, "bc")  # rank 0's timestamped name on every rank
        run_folder = RunDir(Path(distributed.broadcast_object(dist, str(run_folder.path))), run_folder.latest)
        result = _train_bc(run, dist, data_path, run_folder, progress, hooks or TrainHooks(), resume)
    except BaseException:
        distributed.shutdown(dist, finished=False)
        raise
    distributed.shutdown(dist)
    return result


def _train_bc(
    run: BCRun, dist: distributed.DistInfo, data_path: str | Path | EpisodeDataset, run_folder: RunDir,
    progress: bool, hooks: TrainHooks, resume: str | Path | None,
) -> dict:  # fmt: skip
    cfg, device, run_dir = run.train, dist.device, run_folder.path
    spec = policy_spec(run.policy)
    # torchrun: each rank on its shard of the data with batch_size / world_size of the batch, the gradients
    # averaged (distributed.average_gradients); rank 0 writes the run, evaluates and reports
    rank_batch = distributed.rank_batch(dist, cfg.batch_size)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank (broadcast from rank 0 below as well)
    # each rank its own batches and image shifts; rank 0 draws exactly what one process draws
    rng = np.random.default_rng(cfg.seed if dist.is_main else [cfg.seed, dist.rank])
    gen = torch.Generator().manual_seed(cfg.seed + 1_000_003 * dist.rank)

    # -- data -------------------------------------------------------------------------------------
    # an .npz from `diffpolicy demo`, or a dataset already built (from bags, by the caller)
    dataset = data_path if isinstance(data_path, EpisodeDataset) else EpisodeDataset.load(data_path)
    if isinstance(data_path, EpisodeDataset):
        data_path = ", ".join(dataset.meta.get("source", ["(in memory)"]))
    task = dataset.meta.get("task", "push")
    # demonstrations recorded across cells (demo --cells): evaluated across the same ranges, on held-out cells
    cell_ranges = dataset.meta.get("env_config", {}).get("cells")
    eval_env = {"cells": ranges_from_dict(cell_ranges, f"dataset {data_path}")} if cell_ranges else {}
    goals = dataset.obs.get("goals")
    spec.fit_task(dataset.obs["proprio"].shape[1], goals[0].size if goals is not None else 0, dataset.action.shape[1])
    fusion = spec.active().fusion
    obs_mode = run.obs_mode()
    if fusion.use_images and "image_top" not in dataset.obs:
        raise DatasetError(f"{data_path}: the policy uses images but the dataset has none (record with --images)")
    staged = cfg.estimator_iters > 0 or bool(cfg.estimator_from)
    if staged and not fusion.cameras_feed_only_estimator():
        raise ConfigError(
            "train.estimator_iters / estimator_from (staged BC) needs a policy whose cameras feed only the "
            "task-state estimator: fusion.use_images true, estimate_task_state true, image_tokens_per_camera 0"
        )
    horizon = spec.active().horizon
    targets = chunk_targets(dataset, horizon)
    actor_reads_images = obs_mode == "image" and not staged
    obs_np = {k: v for k, v in dataset.obs.items() if actor_reads_images or not is_camera_input(k)}
    obs_np["instruction"] = step_instructions(dataset)

    # -- model, normalizers (fitted on the data, stored as buffers in the model) ------------------
    policy = build_policy(spec)
    policy.action_norm.fit(torch.from_numpy(dataset.action))
    state_obs = {k: torch.from_numpy(dataset.obs[k]) for k in ("proprio", "goals") if k in dataset.obs}
    policy.encoder.state_norm.fit(policy.encoder.state_vector(state_obs))
    resumed = resumable_checkpoint(resume, spec) if resume is not None else None
    if resumed is not None:  # the weights, normalizers and (staged) estimator it had reached
        policy.load_state_dict(resumed["train_state"]["policy"])
    policy.to(device)
    distributed.broadcast_parameters(dist, policy)
    main = dist.is_main  # rank 0 writes the run, evaluates and reports

    # -- stage one of staged BC: the estimator on the cameras, then frozen --------------------------
    start = time.perf_counter()
    estimator = None
    if staged:
        if cfg.estimator_from and resumed is None:  # one already trained: copied, then only measured (0 iterations)
            copy_estimator(cfg.estimator_from, policy.encoder)
        measure_only = bool(cfg.estimator_from) or resumed is not None  # a resumed run's is in its weights
        estimator = train_estimator(
            policy.encoder, dataset, iters=0 if measure_only else cfg.estimator_iters,
            batch_size=cfg.estimator_batch_size, lr=cfg.estimator_lr, holdout=cfg.estimator_holdout,
            image_shift=cfg.image_shift, rng=rng, gen=gen, device=device, progress=progress and main, dist=dist,
        )  # fmt: skip
        if cfg.estimator_from:
            estimator.summary["from"] = cfg.estimator_from
        for param in policy.encoder.estimator_parameters():
            param.requires_grad_(False)
        true_state = true_task_state(dataset.obs["proprio"])
        if main:
            tqdm.write(f"[bc] estimator: {estimator.summary}", file=sys.stderr)  # stdout: the --json report

    # -- stage two (or the only stage): the actor -------------------------------------------------
    ema = AveragedModel(policy, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay), use_buffers=True)
    trained = [param for param in policy.parameters() if param.requires_grad]
    autocast = training_autocast(cfg.precision, str(device))
    optimizer = torch.optim.AdamW(trained, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def lr_lambda(it: int) -> float:  # linear warm-up, then cosine decay to 0
        if it < cfg.warmup_iters:
            return (it + 1) / cfg.warmup_iters
        return 0.5 * (1 + math.cos(math.pi * (it - cfg.warmup_iters) / max(1, cfg.iters - cfg.warmup_iters)))

    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    start_it, best = 0, BestEvaluation()
    if resumed is not None:  # weights, EMA, optimizer, schedule and iteration exact; the sampling streams reseeded
        state = resumed["train_state"]
        start_it = int(state["iter"])
        optimizer.load_state_dict(state["optimizer"])
        lr_schedule.load_state_dict(state["lr_schedule"])
        ema.module.load_state_dict(resumed["model"])
        ema.n_averaged.fill_(max(1, start_it))  # an average under way: the next update blends, not copies
        best = BestEvaluation(state.get("best_success"), state.get("best_episodes"))
        seed = np.random.SeedSequence([cfg.seed, dist.rank, start_it])  # not a replay of the run's first batches
        rng, stream = np.random.default_rng(seed), int(seed.generate_state(1)[0])
        gen = torch.Generator().manual_seed(stream)
        torch.manual_seed(stream)
    logger = None
    if main:  # the inputs were good: the run begins writing
        (run_folder.start() / "checkpoints").mkdir(exist_ok=True)
        logger = MetricsLogger(run_dir, CSV_FIELDS, prefix="bc", step_field="iter",
                               resume_step=start_it if resumed is not None else None)  # fmt: skip

    def checkpoint(name: str, it: int, evaluation: dict) -> Path | None:
        """``evaluation``: the held-out evaluation of the weights being saved ({} when they were not evaluated).
        Rank 0 writes it (every rank holds the same weights)."""
        if not main:
            return None
        meta = CheckpointMeta(
            source="bc",
            task=task,
            obs_mode=obs_mode,
            execute_horizon=cfg.execute_horizon,
            config=to_dict(run),
            metrics={"iter": it, **evaluation, **({"estimator": estimator.summary} if estimator else {})},
            evaluation=evaluation_record(evaluation),
            data=str(data_path),
        )
        train_state = None  # best.pt is deployable: the EMA weights, config and normalizers
        if name != "best.pt":  # last.pt also holds what a resume needs
            train_state = {
                "policy": policy.state_dict(),
                "optimizer": optimizer.state_dict(),
                "lr_schedule": lr_schedule.state_dict(),
                "iter": it,
                "best_success": best.success_rate,
                "best_episodes": best.episodes,
            }
        path = save_checkpoint(run_dir / "checkpoints" / name, make_payload(spec, ema.module, meta, train_state))
        run_folder.wrote_checkpoint()
        hooks.on_checkpoint(path, meta.evaluation)
        return path

    def evaluate(episodes: int) -> dict:
        return evaluate_policy(
            ema.module,
            task,
            episodes,
            seed=EVAL_SEED,
            obs_mode=obs_mode,
            device=device,
            execute_horizon=cfg.execute_horizon,
            progress=False,
            env_kwargs=eval_env,
            stop=hooks.stop,
        )

    # -- loop -------------------------------------------------------------------------------------
    last_eval, losses = {}, []
    own_steps = distributed.shard(dist, np.arange(dataset.n_steps))  # this rank's share of the data
    bar = tqdm(range(start_it, cfg.iters), initial=start_it, total=cfg.iters, desc=f"bc {spec.kind}", unit="it",
               disable=not (progress and main))  # fmt: skip
    for it in bar:
        hooks.running.wait()  # paused by the host
        if hooks.stop.is_set():  # asked to stop: keep what was learned, skip the final evaluation
            if losses:
                checkpoint("last.pt", it, {})  # trained past its last evaluation: unevaluated
            break
        policy.train()
        idx = own_steps[rng.integers(0, len(own_steps), rank_batch)]
        obs = obs_to_torch(index_obs(obs_np, idx), device)
        for cam in ("image_top", "image_side"):
            if cam in obs:
                obs[cam] = random_shift(obs[cam], cfg.image_shift, gen)
        if estimator is not None:  # the true block and goal, off by an error the estimator made on held-out frames
            drawn = estimator.residuals[rng.integers(0, len(estimator.residuals), rank_batch)]
            noise = cfg.estimate_noise_scale * drawn
            obs["task_state_estimate"] = torch.from_numpy(true_state[idx] + noise).to(device)
        actions = torch.from_numpy(targets[idx]).to(device, non_blocking=True)
        losses.append(bc_step(policy, optimizer, obs, actions, cfg.grad_clip, dist, autocast))
        lr_schedule.step()
        ema.update_parameters(policy)
        mean_loss = float(np.mean(losses[-cfg.log_every :]))  # the loss a progress line shows: always current
        hooks.progress.update(iter=it + 1, iters_total=cfg.iters, loss=mean_loss)

        if hooks.save_now.is_set() or it + 1 == cfg.first_checkpoint_iter:
            hooks.save_now.clear()
            checkpoint("last.pt", it + 1, {})
        is_last = it + 1 == cfg.iters
        evaluated = main and ((it + 1) % cfg.eval_every == 0 or is_last)
        if evaluated:
            episodes = cfg.final_eval_episodes if is_last else cfg.eval_episodes
            hooks.on_evaluation(it + 1, episodes)
            try:
                last_eval = evaluate(episodes)
            except StopRequested:  # asked to stop mid-evaluation: keep what was learned, unevaluated
                checkpoint("last.pt", it + 1, {})
                break
            last_eval.pop("per_episode")
            hooks.progress.update(success_rate=last_eval["success_rate"], success_ci95=last_eval["success_ci95"])
        if main and ((it + 1) % cfg.log_every == 0 or evaluated):  # a CSV row per log step, evaluations when due
            row = {"iter": it + 1, "loss": mean_loss, "lr": lr_schedule.get_last_lr()[0],
                   "wall_s": round(time.perf_counter() - start, 1)}  # fmt: skip
            if evaluated:
                row.update({f"eval_{k}": last_eval[k] for k in ("success_rate", "mean_return", "left_fraction")})
            logger.row(row)
            bar.set_postfix(loss=f"{mean_loss:.4f}", success=last_eval.get("success_rate", "-"))
        if evaluated:
            checkpoint("last.pt", it + 1, last_eval)
            if best.offer(last_eval):
                checkpoint("best.pt", it + 1, last_eval)
    if logger is not None:
        logger.close()
    return {
        "kind": spec.kind,
        "task": task,
        "obs_mode": obs_mode,
        "iters": start_it + len(losses),
        "final_loss": float(np.mean(losses[-cfg.log_every :])) if losses else float("nan"),
        "final_eval": last_eval,
        "eval_cells": bool(eval_env),  # evaluated in held-out cells of the demonstrations' cell ranges
        "best_success_rate": best.success_rate,
        "train_wall_s": round(time.perf_counter() - start, 1),
        **({"estimator": estimator.summary} if estimator else {}),
        "world_size": dist.world_size,
        "run_dir": str(run_dir),
        "checkpoint": str(run_dir / "checkpoints" / "last.pt"),
    }


def resumable_checkpoint(path: str | Path, spec: PolicySpec) -> dict:
    """A BC run's ``last.pt`` to continue, for the policy ``spec`` describes (the same config and data)."""
    ckpt = load_checkpoint(path)
    if ckpt["meta"].get("source") != "bc" or "optimizer" not in (ckpt.get("train_state") or {}):
        raise CheckpointError(f"{path}: not a BC last.pt (no training state to continue; a best.pt holds none)")
    if ckpt["policy_spec"] != spec_dict(spec):
        raise CheckpointError(f"{path}: its policy is not the one the config describes for this data")
    return ckpt


def latest_bc_checkpoint(root: str | Path) -> Path | None:
    """The ``last.pt`` of the newest BC run under ``root`` (what ``train-bc --resume auto`` continues)."""
    for run_dir in sorted(Path(root).glob("bc-*"), reverse=True):
        last = run_dir / "checkpoints" / "last.pt"
        if last.is_file():
            return last
    return None


def load_bc_run(path: str | Path | None) -> BCRun:
    """A policy config (config/policy/*.yaml; None: the defaults), its policy checked as it is read."""
    from diffpolicy_ros.config import load_config
    from diffpolicy_ros.user_files import POLICY_CONFIG

    if not path:
        return BCRun()
    run = load_config(BCRun, path, POLICY_CONFIG)
    try:
        policy_spec(run.policy)
    except ConfigError as exc:
        raise ConfigError(f"{POLICY_CONFIG.name} {path}: policy: {exc}") from None
    return run
