"""PPO fine-tuning of a diffusion actor (DPPO, Ren et al. 2024) or of the Gaussian baseline.

One iteration reads top to bottom (CleanRL's ``ppo_continuous_action.py`` is the model):

1. rollout   — every env is reset with seeds derived from (seed, iteration, rank); for ``rollout_steps``
               decisions the agent samples a chunk (diffusion: the whole DDIM chain, eta > 0, per-step std
               >= min_std) and the vectorized CPU workers execute ``execute_horizon`` of its actions. The
               sampler also returns the record's log-probabilities (diffusion: from its own step noise), so no
               second pass scores the rollout. Observations pile up as numpy; chains stay on the device.
               Under a deployment (``PPORun.deploy``, ``train-ppo --deploy``) each worker is the sim as
               deployed (sim/deployed.py): a decision lasts until the policy is free again (~1.2 periods at
               60-110 ms), its chunk lands a latency late and the filter core stands between it and the arm.
2. batch     — the rollout moves to the device once; values and the bootstrap values of truncated episodes
               are computed in micro-batches; GAE with per-decision discounts gamma**steps_executed (a chunk is
               one decision).
3. update    — PPO samples are (decision, ratio term) pairs: one per fine-tuned denoising step with per-step
               ratios (DPPO), else one per decision. ``update_epochs`` passes, each over a random
               ``pair_fraction`` of the pairs in shuffled minibatches of ``micro_batch * grad_accum`` decisions'
               worth of pairs (DPPO v0.6+), gradients accumulated over ``grad_accum`` micro-batches (DDP syncs
               only the last). A pair costs one U-Net pass forward and back, so ``pair_fraction`` sets the
               update's cost. Clipped surrogate with a clip per denoising step (``clip_coef`` at the last,
               ``clip_coef_first`` at the earliest) and advantages discounted over denoising steps
               (``gamma_denoising``), clipped value loss, grad-norm clipping, separate actor/critic optimizers,
               actor frozen for the first ``critic_warmup_iters`` iterations. A non-finite loss or gradient is
               caught before its optimizer step and ends the update there (nothing non-finite is applied).
4. log / evaluate / checkpoint.

Exact resume: env episodes never straddle iterations (reset at each iteration from derived seeds), so a
checkpoint taken between iterations — weights, optimizers, scaler, normalizers and noise schedule (buffers),
reward-centering state, counters, and every rank's RNG states — resumes bit-for-bit on the CPU.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from diffpolicy_ros.config import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    OPEN_FRACTION,
    POSITIVE,
    Checked,
    ConfigError,
    Domain,
    load_config,
    to_dict,
)
from diffpolicy_ros.contract import CONTROL_PERIOD_S, EXECUTE_HORIZON
from diffpolicy_ros.device import autocast_settings, device_type
from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.eval.deployed import evaluate_deployed
from diffpolicy_ros.eval.rollout import evaluate_policy
from diffpolicy_ros.models.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    load_checkpoint,
    make_payload,
    policy_from_checkpoint,
    save_checkpoint,
)
from diffpolicy_ros.models.factory import build_policy, policy_spec
from diffpolicy_ros.models.heads import apply_sampler
from diffpolicy_ros.models.obs import obs_to_torch
from diffpolicy_ros.rl import distributed
from diffpolicy_ros.rl.actor_critic import ActorCritic
from diffpolicy_ros.rl.best import BestEvaluation, evaluation_record
from diffpolicy_ros.rl.estimator import measure_error_model
from diffpolicy_ros.rl.hooks import TrainHooks
from diffpolicy_ros.rl.ppo_math import (
    RewardCenterer,
    clipped_policy_loss,
    clipped_value_loss,
    denoising_clip_schedule,
    denoising_discounts,
    gae,
    normalize_advantages,
)
from diffpolicy_ros.runs import EVAL_SEED, FRESH_EVAL_SEED, ROLLOUT_SEED, MetricsLogger, RunDir, as_run_dir
from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.sim import PushConfig, check_env_overrides, make_env
from diffpolicy_ros.sim.deployed import expected_periods_per_decision, periods_per_decision
from diffpolicy_ros.sim.estimated_state import EstimateErrorModel
from diffpolicy_ros.sim.vector import make_vec_env
from diffpolicy_ros.user_files import TRAIN_CONFIG

CSV_FIELDS = (
    "iteration", "env_steps", "success_rate", "episode_return", "episodes", "actor_loss", "policy_loss",
    "value_loss", "approx_kl", "clip_fraction", "actor_grad_norm", "critic_grad_norm", "skipped_updates", "kl_stopped",
    "eval_success_rate", "rollout_s", "update_s", "env_steps_per_s", "wall_s",
)  # fmt: skip


@dataclass
class SamplerOverrides(Checked):
    ddim_steps: int | None = None  # denoising steps while fine-tuning (and when deployed after it)
    finetune_steps: int | None = None  # K': the last K' denoising steps carry the likelihood
    eta: float | None = 1.0  # DDIM eta while fine-tuning (BC policies deploy with eta 0)
    min_std: float | None = None  # floor of the per-step sampling/likelihood std (also the Gaussian head's)

    DOMAINS: ClassVar[dict[str, Domain]] = {
        "ddim_steps": Domain(1, integer=True, optional=True),
        "finetune_steps": Domain(1, integer=True, optional=True),
        "eta": Domain(0, optional=True),
        "min_std": Domain(0, optional=True),
    }


@dataclass
class PPOConfig(Checked):
    # -- rollouts (one decision = one chunk; an iteration = n_envs * rollout_steps decisions per rank)
    total_env_steps: int = 200_000
    n_envs: int = 16
    # x env steps per decision (execute_horizon, or as deployed the re-plan interval: replan_steps) should cover
    # the episode limit: every env's first episode ends
    rollout_steps: int = 10
    execute_horizon: int = EXECUTE_HORIZON
    asynchronous_envs: bool = True  # worker processes (MuJoCo); the point mass is faster in-process
    # a staged vision policy (cameras feed only its frozen estimator): rollouts skip the cameras and the actor reads
    # the true block and goal moved by its estimator's measured error (sim/estimated_state.py), as in staged BC;
    # evaluations still run the cameras and the estimator
    simulated_estimates: bool = False
    # across cells the error depends on the cell: measured once per run's cell file, the estimator on this many
    # held-out scenes per factor edge (rl/estimator.py: measure_error_model)
    estimate_error_scenes: int = 6
    # -- exploration / likelihood of the actor (DPPO). The policy config owns the sampler settings; these
    #    are PPO's changes to them, applied once (models/heads.py: apply_sampler). None keeps the policy's.
    sampler: SamplerOverrides = field(default_factory=lambda: SamplerOverrides())
    per_step_ratio: bool = True  # one PPO ratio per fine-tuned denoising step (DPPO); False: the joint chain
    per_element_log_prob: bool = False  # log-densities averaged over the chunk's elements (DPPO's code), not summed
    # Only the first execute_horizon actions of a chunk enter the ratio (DPPO's reward_horizon): the
    # unexecuted tail earns no reward, so its likelihood adds variance to the gradient and sharpness to the ratio.
    likelihood_executed_only: bool = False
    # -- PPO
    gamma: float = 0.99
    gae_lambda: float = 0.95
    update_epochs: int = 4
    micro_batch: int = 256
    grad_accum: int = 4
    clip_coef: float = 0.2  # per-step ratios: the clip of the last denoising step (the one that makes the action)
    # DPPO: earlier fine-tuned steps get exponentially tighter clips, down to clip_coef_first at the earliest
    # (rl/ppo_math.py: denoising_clip_schedule). None: clip_coef for every step.
    clip_coef_first: float | None = None
    clip_schedule_rate: float = 3.0
    gamma_denoising: float = 1.0  # DPPO 0.99: step i of K' gets the advantage times gamma_denoising**(K'-1-i)
    # Each epoch draws this fraction of the (decision, fine-tuned step) pairs (DPPO v0.6+ minibatches over
    # pairs). A pair costs one U-Net pass forward and back, so the update's cost scales with it; 1.0 = all.
    pair_fraction: float = 1.0
    value_clip: float = 1.0  # returns are O(1..10) here; 0.2 would throttle the critic
    vf_coef: float = 0.5
    norm_advantages: bool = True
    max_grad_norm: float = 1.0  # actor and critic each clipped to this norm
    actor_lr: float = 1e-4
    critic_lr: float = 1e-3
    # CleanRL's anneal_lr: both learning rates fall linearly to 0 over the run's iterations, so late updates,
    # those the final policy is made of, are small
    anneal_lr: bool = False
    critic_warmup_iters: int = 2
    # Stop the update at the first minibatch whose approx-KL (the policy so far vs the rollout policy) exceeds
    # this, before stepping on it (as Spinning Up does per step; CleanRL checks once per epoch, which lets one
    # epoch of a sharp 48-dim-per-step chain likelihood run far: KL 2.7 measured on push_two_goals).
    target_kl: float | None = None
    reward_scale: float = 1.0
    reward_centering: bool = False  # Naik & Sutton 2024
    reward_centering_step: float = 0.01
    detach_critic_encoder: bool = True
    critic_hidden: int = 256
    # -- evaluation, checkpoints, device
    eval_every: int = 0  # iterations between evaluations on held-out seeds (0: only at the end)
    eval_episodes: int = 50
    # Each evaluation on scenes of its own (seeds FRESH_EVAL_SEED + iteration x eval_episodes, held out like
    # EVAL_SEED's): the last evaluations pool distinct scenes, and the scenes `eval` and `bench cells` report
    # on are never those best.pt was chosen on. False: every evaluation on the same EVAL_SEED scenes (a curve
    # whose points differ only by the policy).
    fresh_eval_scenes: bool = False
    checkpoint_every: int = 5
    keep_last: int = 3
    seed: int = 0
    device: str = "auto"
    amp: bool = True  # bf16/fp16 autocast on npu/cuda (off on the CPU)

    DOMAINS: ClassVar[dict[str, Domain]] = {
        "total_env_steps": NON_NEGATIVE_INT, "n_envs": COUNT, "rollout_steps": COUNT, "execute_horizon": COUNT,
        "estimate_error_scenes": COUNT,
        "gamma": FRACTION, "gae_lambda": FRACTION, "update_epochs": COUNT, "micro_batch": COUNT, "grad_accum": COUNT,
        "clip_coef": POSITIVE, "clip_coef_first": Domain(0, low_open=True, optional=True),
        "clip_schedule_rate": NON_NEGATIVE, "gamma_denoising": FRACTION, "pair_fraction": OPEN_FRACTION,
        "value_clip": POSITIVE, "vf_coef": NON_NEGATIVE, "max_grad_norm": POSITIVE, "actor_lr": NON_NEGATIVE,
        "critic_lr": POSITIVE, "critic_warmup_iters": NON_NEGATIVE_INT,
        "target_kl": Domain(0, low_open=True, optional=True), "reward_scale": POSITIVE,
        "reward_centering_step": OPEN_FRACTION, "critic_hidden": COUNT,
        "eval_every": NON_NEGATIVE_INT,  # 0: only at the end
        "eval_episodes": COUNT, "checkpoint_every": COUNT, "keep_last": COUNT, "seed": NON_NEGATIVE_INT,
    }  # fmt: skip

    def __post_init__(self) -> None:
        if not isinstance(self.sampler, SamplerOverrides):
            raise ConfigError(f"PPOConfig.sampler: expected a mapping of {list(SamplerOverrides.DOMAINS)}")


@dataclass
class PPORun:
    task: str = "point_mass"
    env: dict = field(default_factory=dict)  # task overrides, e.g. {max_episode_steps: 40}
    policy: dict = field(default_factory=dict)  # PolicySpec, used only when not starting from a checkpoint
    init: str | None = None  # BC checkpoint to fine-tune (else: from scratch)
    # the sim as deployed (train-ppo --deploy FILE: a real_arm file's Deployment.as_dict): rollouts and evaluations
    # run behind the executor and the safety-filter core with the cell's latency, one decision per re-plan interval
    # (sim/deployed.py); None: execute_horizon actions per decision, no filter
    deploy: dict | None = None
    train: PPOConfig = field(default_factory=PPOConfig)


def load_ppo_run(path: str | Path | None) -> PPORun:
    """A train config (config/train/*.yaml; None: the defaults). It must name its task: a default there would
    silently fine-tune on another task than the user's."""
    if not path:
        return PPORun()
    run = load_config(PPORun, path, TRAIN_CONFIG, required=("task",))
    label = f"{TRAIN_CONFIG.name} {path}"
    run.env = check_env_overrides(run.task, run.env, label)
    if run.policy:
        try:
            policy_spec(run.policy)
        except ConfigError as exc:
            raise ConfigError(f"{label}: policy: {exc}") from None
    return run


@dataclass
class Rollout:
    obs: dict  # numpy [T, N, ...] per key, instruction: list of T tuples
    records: torch.Tensor  # device [T, N, *record]
    log_probs: torch.Tensor  # device [T, N, ratio terms]: the records' log-probabilities under the sampler
    rewards: np.ndarray  # [T, N] discounted sum of the executed steps' rewards
    discounts: np.ndarray  # [T, N] gamma ** steps executed
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: list[tuple[int, int, dict]]  # (t, env, obs) of truncated episodes, for bootstrapping
    last_obs: dict
    episode_returns: list[float]
    episode_successes: list[bool]
    env_steps: int


def task_dims(observation_space, action_space) -> tuple[int, int, int]:
    """(proprio width, two-goal extra state width, action width) of an env's (single) spaces."""
    goals = observation_space.spaces.get("goals")
    goals_dim = int(np.prod(goals.shape)) if goals is not None else 0
    return observation_space["proprio"].shape[0], goals_dim, action_space.shape[-1]


def step_info(info: dict, key: str) -> np.ndarray:
    """``key`` from the step that just ran, per env: envs that finished report it in ``final_info``
    (their ``info`` is already the next episode's reset info)."""
    final = info.get("_final_info")
    if key in info:
        out = np.array(info[key])
    else:
        out = np.zeros_like(info["final_info"][key])
    if final is not None and final.any():
        out[final] = info["final_info"][key][final]
    return out


def select(obs: dict, idx: torch.Tensor) -> dict:
    """Rows ``idx`` (a device tensor) of a flat torch observation batch."""
    rows = idx.tolist()
    return {k: (v[idx] if k != "instruction" else [v[i] for i in rows]) for k, v in obs.items()}


def micro_batches(n: int, size: int, device: str | torch.device) -> list[torch.Tensor]:
    return list(torch.arange(n, device=device).split(size))


class PPOTrainer:
    """Build with a :class:`PPORun`; :meth:`train` runs to ``total_env_steps`` (or ``until_iteration``)."""

    def __init__(
        self,
        run: PPORun,
        run_dir: str | Path | RunDir | None = None,
        resume: str | Path | None = None,
        progress: bool = True,
        hooks: TrainHooks | None = None,
    ):
        self.run, cfg = run, run.train
        self.progress, self.hooks = progress, hooks or TrainHooks()
        self.dist = distributed.init_distributed(cfg.device)
        self.device = self.dist.device
        self.amp = autocast_settings(self.device, cfg.amp)
        rank = self.dist.rank
        torch.manual_seed(cfg.seed + rank)
        self.sample_gen = torch.Generator(device=self.device).manual_seed(cfg.seed * 1000 + rank)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.seed * 1000 + rank + 500)
        run_folder = as_run_dir(run_dir, "ppo")  # every rank writes into rank 0's folder
        run_folder = RunDir(Path(distributed.broadcast_object(self.dist, str(run_folder.path))), run_folder.latest)
        self.run_folder, self.run_dir = run_folder, run_folder.path

        # -- envs (CPU workers; they never touch the learner's device) ------------------------------
        resume_ckpt = load_checkpoint(resume) if resume else None
        self.policy, self.spec, self.fit_state_norm = self._build_policy(resume_ckpt)
        # the fine-tuning sampler; the policy deploys (and is evaluated) as exactly this stochastic sampler
        self.policy.config = apply_sampler(self.policy.config, to_dict(cfg.sampler))
        setattr(self.spec, self.spec.kind, self.policy.config)  # what checkpoints store
        self.obs_mode = self.spec.active().fusion.obs_mode()  # what evaluations (and deployments) read
        self.horizon = self.spec.active().horizon
        rollout_obs_mode, estimate_error = self.obs_mode, None
        if cfg.simulated_estimates:
            estimate_error, rollout_obs_mode = self._estimate_error_model(), "state"
        self.deployment = Deployment.from_dict(run.deploy) if run.deploy else None
        # env steps per decision: execute_horizon, or under a deployment its re-plan interval or the latency
        self.steps_per_decision = float(cfg.execute_horizon)
        if self.deployment is not None:
            period = run.env.get("control_dt", CONTROL_PERIOD_S)
            self.steps_per_decision = expected_periods_per_decision(self.deployment, period)
        self.envs = make_vec_env(
            run.task,
            cfg.n_envs,
            chunk_horizon=self.horizon,
            asynchronous=cfg.asynchronous_envs,
            obs_mode=rollout_obs_mode,
            execute_horizon=cfg.execute_horizon,
            deployment=self.deployment,
            estimate_error=estimate_error,
            **run.env,
        )
        self._check_policy_fits_task()
        episode_limit = run.env.get("max_episode_steps", PushConfig.max_episode_steps)
        if self.deployment is not None:
            # the fewest env steps a decision takes (the shortest latency): below the episode limit, an env's first
            # episode may not end within the rollout, and the failures, which last longest, drop out of its
            # success rate
            period = run.env.get("control_dt", CONTROL_PERIOD_S)
            fewest = periods_per_decision(self.deployment.latency_s[0], period, self.deployment.replan_steps)
            if cfg.rollout_steps * fewest < episode_limit:
                tqdm.write(f"[ppo] rollout_steps {cfg.rollout_steps} decisions x {fewest} env step(s) each at the "
                           f"shortest latency < the {episode_limit}-step episode: first episodes are cut and the "
                           "rollout success rate counts too few failures (config/train/push_deployed.yaml sizes it)",
                           file=sys.stderr)  # fmt: skip
        if self.dist.is_main:  # the inputs were good: the run begins writing
            (run_folder.start() / "checkpoints").mkdir(exist_ok=True)
        distributed.barrier(self.dist)  # other ranks write RNG states into it at the first checkpoint

        # -- agent, optimizers ------------------------------------------------------------------------
        self.agent = ActorCritic(
            self.policy,
            critic_hidden=cfg.critic_hidden,
            detach_critic_encoder=cfg.detach_critic_encoder,
            per_step_ratio=cfg.per_step_ratio,
            per_element_log_prob=cfg.per_element_log_prob,
            likelihood_actions=cfg.execute_horizon if cfg.likelihood_executed_only else None,
        ).to(self.device)
        self.model: torch.nn.Module = self.agent
        if self.dist.enabled:
            ids = [torch.device(self.device).index] if device_type(self.device) == "cuda" else None
            # parameters are broadcast from rank 0 here; buffers (normalizers, schedule) never change during
            # an update, so they are not re-broadcast at every forward
            self.model = DistributedDataParallel(self.agent, device_ids=ids, broadcast_buffers=False)
        # per ratio term (fine-tuned denoising step, earliest first): clip coefficient and advantage weight
        terms = self.agent.ratio_terms()
        self.term_clip = denoising_clip_schedule(terms, cfg.clip_coef, cfg.clip_coef_first, cfg.clip_schedule_rate)
        self.term_clip = self.term_clip.to(self.device)
        self.term_discount = denoising_discounts(terms, cfg.gamma_denoising).to(self.device)
        self.actor_opt = torch.optim.Adam(self.agent.policy.parameters(), lr=cfg.actor_lr)
        self.critic_opt = torch.optim.Adam(self.agent.critic.parameters(), lr=cfg.critic_lr)
        self.scaler = torch.amp.GradScaler(self.amp.device_type, enabled=self.amp.use_grad_scaler)
        self.centerer = RewardCenterer(cfg.reward_centering_step)
        self.iteration = 0
        self.rescaled_at: tuple[int, int] | None = None  # (iteration, env steps) of a resume at another world size
        self.env_steps = 0
        self.nonfinite_updates = 0
        self.best = BestEvaluation()  # rl/best.py: the best held-out evaluation, never a rollout's success
        self.last_eval: dict = {}
        if resume_ckpt is not None:
            self._load_train_state(resume_ckpt, str(resume))

    # ------------------------------------------------------------------ set-up helpers
    def _build_policy(self, resume_ckpt: dict | None):
        """From the checkpoint being resumed, else the BC checkpoint ``init``, else the run's policy spec."""
        run = self.run
        source, name = resume_ckpt, "resumed checkpoint"
        if source is None and run.init:
            source, name = load_checkpoint(run.init), run.init
        # a staged policy's measured estimator error travels from its BC checkpoint into every PPO checkpoint
        self.estimator_summary = (source or {}).get("meta", {}).get("metrics", {}).get("estimator")
        if source is not None:
            policy = policy_from_checkpoint(source, name)
            return policy, policy_spec(source["policy_spec"]), False
        spec = policy_spec(run.policy)
        env = make_env(run.task, **run.env)  # for its spaces
        spec.fit_task(*task_dims(env.observation_space, env.action_space))
        policy = build_policy(spec)
        # from scratch: actions normalized by the env's bounds; state statistics fitted on the first rollout
        bounds = [torch.as_tensor(b, dtype=torch.float32) for b in (env.action_space.low, env.action_space.high)]
        policy.action_norm.fit(torch.stack(bounds))
        env.close()
        return policy, spec, True

    def _estimate_error_model(self) -> EstimateErrorModel:
        """How far a staged policy's estimator errs: its checkpoint's held-out medians in one world; across cells,
        measured per factor edge of the run's cells (once: the measurement travels in every PPO checkpoint)."""
        if not self.spec.active().fusion.cameras_feed_only_estimator():
            raise ConfigError("train.simulated_estimates needs a staged vision policy (cameras feed only its "
                              "task-state estimator: config/policy/diffusion_vision.yaml)")  # fmt: skip
        if not self.estimator_summary:
            raise ConfigError("train.simulated_estimates: the checkpoint has no measured estimator error "
                              "(meta.metrics.estimator: train it with staged BC, train.estimator_iters)")  # fmt: skip
        cells = self.run.env.get("cells")
        if cells is None:
            summary = self.estimator_summary
            return EstimateErrorModel(summary["block_median_mm"], summary["goal_median_mm"])
        ranges = json.loads(json.dumps(to_dict(cells)))  # as a checkpoint gives it back
        measured = self.estimator_summary.get("cell_error") or {}
        if measured.get("cells") != ranges:
            model = None
            if self.dist.is_main:
                tqdm.write("[ppo] measuring the estimator in each factor's edge cells (simulated estimates)",
                           file=sys.stderr)  # fmt: skip
                env = {k: v for k, v in self.run.env.items() if k != "cells"}
                scenes = self.run.train.estimate_error_scenes
                model = measure_error_model(self.policy, self.run.task, cells, env, scenes, progress=self.progress)
            model = distributed.broadcast_object(self.dist, model)
            measured = {"cells": ranges, **model.to_dict()}
            self.estimator_summary = {**self.estimator_summary, "cell_error": measured}
        return EstimateErrorModel.from_dict(measured)

    def _check_policy_fits_task(self) -> None:
        envs = self.envs
        proprio_dim, goals_dim, action_dim = task_dims(envs.single_observation_space, envs.single_action_space)
        policy = (self.spec.state_dim(), self.spec.active().action_dim)
        if policy != (proprio_dim + goals_dim, action_dim):
            raise ConfigError(
                f"the policy (state {policy[0]}, actions {policy[1]}) does not fit task {self.run.task!r} "
                f"(state {proprio_dim + goals_dim}, actions {action_dim})"
            )

    def total_iterations(self) -> int:
        """The iteration at which ``total_env_steps`` are reached. A run resumed at another world size collects
        another number of steps per iteration: its remaining steps are counted from where it was resumed."""
        cfg = self.run.train
        per_iter = cfg.n_envs * self.dist.world_size * cfg.rollout_steps * self.steps_per_decision
        if self.rescaled_at is not None:
            iteration, env_steps = self.rescaled_at
            return iteration + max(0, math.ceil((cfg.total_env_steps - env_steps) / per_iter))
        return max(1, math.ceil(cfg.total_env_steps / per_iter))

    def autocast(self):
        return torch.autocast(**self.amp.kwargs()) if self.amp.enabled else nullcontext()

    # ------------------------------------------------------------------ 1. rollout
    def interrupted(self) -> bool:
        """Asked to stop mid-iteration (the trainer node's shutdown, Ctrl-C): the half-done rollout or update is
        dropped rather than finished, so a stop takes one env step, not a whole iteration (~20 s with 32 workers).
        Single-process only: DDP ranks must leave a collective together, so they stop between iterations."""
        return self.hooks.stop.is_set() and self.dist.world_size == 1

    def collect_rollout(self) -> Rollout | None:
        cfg, n, t_max = self.run.train, self.run.train.n_envs, self.run.train.rollout_steps
        episode = (self.iteration * self.dist.world_size + self.dist.rank) * n
        base_seed = ROLLOUT_SEED + cfg.seed * 100_000_000 + episode
        obs, _ = self.envs.reset(seed=base_seed)
        obs_buf = {k: np.empty((t_max, n, *v.shape[1:]), v.dtype) for k, v in obs.items() if k != "instruction"}
        obs_buf["instruction"] = []
        records = torch.empty((t_max, n, *self.agent.record_shape()), device=self.device)
        log_probs = torch.empty((t_max, n, self.agent.ratio_terms()), device=self.device)
        rewards = np.zeros((t_max, n), np.float32)
        discounts = np.zeros((t_max, n), np.float32)
        terminated = np.zeros((t_max, n), bool)
        truncated = np.zeros((t_max, n), bool)
        final_obs: list[tuple[int, int, dict]] = []
        running_return = np.zeros(n)
        first_episode = np.ones(n, bool)  # statistics from each env's first episode only: an episode started
        ep_returns: list[float] = []  # mid-rollout finishes inside it only if it fails early (a biased sample)
        ep_successes: list[bool] = []
        env_steps = 0
        powers = cfg.gamma ** np.arange(self.horizon)
        self.agent.eval()
        for t in range(t_max):
            if self.interrupted():
                return None
            for key, buf in obs_buf.items():
                if key == "instruction":
                    buf.append(tuple(obs["instruction"]))
                else:
                    buf[t] = obs[key]
            with self.autocast():
                action, record, log_probs[t] = self.agent.act(obs_to_torch(obs, self.device), self.sample_gen)
            records[t] = record
            chunk = self.policy.action_norm.unnormalize(action.float()).cpu().numpy()
            obs, _, term, trunc, info = self.envs.step(chunk)

            step_rewards = step_info(info, "step_rewards").astype(np.float64)  # [N, H], zero past the end
            executed = step_info(info, "steps_executed").astype(np.int64)
            mask = np.arange(self.horizon)[None] < executed[:, None]
            running_return += step_rewards.sum(1)
            shaped = step_rewards * cfg.reward_scale
            if cfg.reward_centering:
                shaped[mask] = self.centerer(torch.from_numpy(shaped[mask])).numpy()
            rewards[t] = (shaped * mask * powers).sum(1)
            discounts[t] = cfg.gamma**executed
            terminated[t], truncated[t] = term, trunc
            env_steps += int(executed.sum())
            done = term | trunc
            if done.any():
                success = step_info(info, "is_success")
                for i in np.flatnonzero(done):
                    if first_episode[i]:
                        ep_returns.append(float(running_return[i]))
                        ep_successes.append(bool(success[i]))
                        first_episode[i] = False
                    running_return[i] = 0.0
                    if trunc[i]:
                        final_obs.append((t, int(i), info["final_obs"][i]))
        return Rollout(
            obs=obs_buf, records=records, log_probs=log_probs, rewards=rewards, discounts=discounts,
            terminated=terminated, truncated=truncated, final_obs=final_obs, last_obs=obs,
            episode_returns=ep_returns, episode_successes=ep_successes, env_steps=env_steps,
        )  # fmt: skip

    # ------------------------------------------------------------------ 2. batch: values, old log-probs, GAE
    @torch.no_grad()
    def prepare_batch(self, rollout: Rollout) -> dict:
        cfg = self.run.train
        t_max, n = rollout.rewards.shape
        flat = {k: v.reshape(t_max * n, *v.shape[2:]) for k, v in rollout.obs.items() if k != "instruction"}
        flat["instruction"] = [s for row in rollout.obs["instruction"] for s in row]
        # one host->device copy of the rollout, plus the N last and the truncation observations
        extra = [rollout.last_obs] + [_as_batch(o) for _, _, o in rollout.final_obs]
        everything = {
            k: np.concatenate([flat[k]] + [np.asarray(e[k]) for e in extra]) for k in flat if k != "instruction"
        }
        everything["instruction"] = flat["instruction"] + [s for e in extra for s in e["instruction"]]
        obs_all = obs_to_torch(everything, self.device)
        refit = self.fit_state_norm and self.iteration == 0
        if refit:  # from scratch: state statistics of the first rollout
            self.policy.encoder.state_norm.fit(self.policy.encoder.state_vector(obs_all))
            distributed.broadcast_buffers(self.dist, self.policy.encoder.state_norm)  # one normalizer for all ranks
        self.agent.eval()
        with self.autocast():
            chunks = micro_batches(len(obs_all["proprio"]), cfg.micro_batch, self.device)
            values_all = torch.cat([self.agent.value(select(obs_all, i)) for i in chunks]).float()
        b = t_max * n
        values = values_all[:b].view(t_max, n)
        last_values = values_all[b : b + n]
        final_values = torch.zeros(t_max, n, device=self.device)
        for j, (t, i, _) in enumerate(rollout.final_obs):
            final_values[t, i] = values_all[b + n + j]
        obs = select(obs_all, torch.arange(b, device=self.device))
        records = rollout.records.view(b, *rollout.records.shape[2:])
        old_logp = rollout.log_probs.view(b, -1).float()  # the sampler's own: exact on fp32, no second pass
        # recomputed where the sampler's densities are not the update's: under autocast (low-precision means
        # differ between batches) and after the normalizer was just fitted
        if self.amp.enabled or refit:
            with self.autocast():
                old_logp = torch.cat(
                    [self.agent(select(obs, i), records[i])[0] for i in micro_batches(b, cfg.micro_batch, self.device)]
                ).float()

        def dev(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(self.device)

        advantages, returns = gae(
            dev(rollout.rewards), values, last_values, dev(rollout.terminated), dev(rollout.truncated),
            dev(rollout.discounts), cfg.gae_lambda, final_values,
        )  # fmt: skip
        return {
            "obs": obs,
            "records": records,
            "old_logp": old_logp,
            "old_values": values.reshape(b),
            "advantages": advantages.reshape(b),
            "returns": returns.reshape(b),
        }

    # ------------------------------------------------------------------ 3. update
    def losses(self, batch: dict, idx: torch.Tensor, advantages: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(policy loss, value loss, stats) for the (decision, ratio term) pairs ``idx`` of the batch (pair
        p = decision p // S, term p % S, S ratio terms per decision), with gradients. Every term of a decision
        shares its advantage, weighted by the denoising discount, and is clipped with its own coefficient."""
        cfg = self.run.train
        rows, terms = idx // batch["old_logp"].shape[1], idx % batch["old_logp"].shape[1]
        with self.autocast():
            new_logp, new_values = self.model(select(batch["obs"], rows), batch["records"][rows], terms)
        adv = advantages[rows] * self.term_discount[terms]
        old_logp = batch["old_logp"].view(-1)[idx]
        policy_loss, stats = clipped_policy_loss(new_logp.float(), old_logp, adv, self.term_clip[terms])
        value_loss = clipped_value_loss(new_values, batch["old_values"][rows], batch["returns"][rows], cfg.value_clip)
        return policy_loss, value_loss, stats

    def update(self, batch: dict) -> dict:
        """``update_epochs`` passes over shuffled minibatches; stops early at the KL limit or a non-finite step."""
        cfg = self.run.train
        advantages = normalize_advantages(batch["advantages"]) if cfg.norm_advantages else batch["advantages"]
        actor_frozen = self.iteration < cfg.critic_warmup_iters  # critic warm-up: the actor does not step
        # minibatches over (decision, ratio term) pairs, sized in decisions' worth of pairs (DPPO v0.6+ scales
        # its batch with K'): at pair_fraction 1 the optimizer steps are as many as over decisions
        pairs = batch["old_logp"].numel()
        per_epoch = max(1, round(cfg.pair_fraction * pairs))
        minibatch = cfg.micro_batch * cfg.grad_accum * batch["old_logp"].shape[1]
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        self.agent.train()
        for _epoch in range(cfg.update_epochs):
            perm = torch.randperm(pairs, generator=self.shuffle_gen)[:per_epoch].to(self.device)
            for start in range(0, per_epoch, minibatch):
                if self.interrupted():
                    return {"skipped_updates": 0, "kl_stopped": 0.0, **_means(sums, max(steps, 1))}
                mb_stats = self.minibatch_gradients(batch, perm[start : start + minibatch], advantages)
                if cfg.target_kl is not None and not actor_frozen and steps > 0:
                    # every rank must take the same decision (DDP): the ranks' mean
                    kl = distributed.mean_across_ranks(self.dist, {"kl": float(mb_stats["approx_kl"])})["kl"]
                    if kl > cfg.target_kl:  # stop before stepping on the minibatch past the limit
                        return {"skipped_updates": 0, "kl_stopped": 1.0, **_means(sums, steps)}
                norms = self.optimizer_step(actor_frozen, mb_stats.pop("loss"))
                if norms is None:
                    return {"skipped_updates": 1, "kl_stopped": 0.0, **_means(sums, max(steps, 1))}
                for key, value in {**mb_stats, **norms}.items():
                    sums[key] = sums.get(key, 0.0) + value
                steps += 1
        return {"skipped_updates": 0, "kl_stopped": 0.0, **_means(sums, steps)}

    def minibatch_gradients(self, batch: dict, mb: torch.Tensor, advantages: torch.Tensor) -> dict:
        """Gradients of one minibatch, accumulated over its micro-batches (DDP syncs only the last); returns
        the minibatch's loss and statistics, averaged over its rows."""
        cfg = self.run.train
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        micro = mb.split(cfg.micro_batch * batch["old_logp"].shape[1])  # a micro-batch of decisions' worth of pairs
        out: dict[str, torch.Tensor] = {"loss": torch.zeros((), device=self.device)}
        for j, idx in enumerate(micro):
            sync = nullcontext() if (j == len(micro) - 1 or not self.dist.enabled) else self.model.no_sync()
            with sync:
                policy_loss, value_loss, stats = self.losses(batch, idx, advantages)
                weight = len(idx) / len(mb)
                loss = (policy_loss + cfg.vf_coef * value_loss) * weight
                self.scaler.scale(loss).backward()
            out["loss"] = out["loss"] + loss.detach()
            for key, value in {"policy_loss": policy_loss, "value_loss": value_loss, **stats}.items():
                out[key] = out.get(key, 0.0) + value.detach() * weight
        return out

    def optimizer_step(self, actor_frozen: bool, loss: torch.Tensor) -> dict | None:
        """Clip and apply the accumulated gradients; None (nothing applied) when the loss or a gradient is not
        finite. The check comes before the step, so weights and Adam moments never see a NaN: the state stays
        at the last finite step and no snapshot is needed to roll back."""
        cfg = self.run.train
        self.scaler.unscale_(self.actor_opt)
        self.scaler.unscale_(self.critic_opt)
        # clipped separately: one joint norm lets the critic's (large, return-scaled) gradient shrink the
        # actor's step by a factor that changes from minibatch to minibatch
        actor_norm = torch.nn.utils.clip_grad_norm_(self.agent.policy.parameters(), cfg.max_grad_norm)
        critic_norm = torch.nn.utils.clip_grad_norm_(self.agent.critic.parameters(), cfg.max_grad_norm)
        # one host sync per optimizer step (fp16's GradScaler skips non-finite steps by itself)
        finite = torch.isfinite(loss) & torch.isfinite(actor_norm) & torch.isfinite(critic_norm)
        if not self.scaler.is_enabled() and not bool(finite):
            self.actor_opt.zero_grad(set_to_none=True)
            self.critic_opt.zero_grad(set_to_none=True)
            self.nonfinite_updates += 1
            tqdm.write(
                f"[ppo] iteration {self.iteration}: non-finite loss/gradient; the rest of this update is skipped "
                f"(count {self.nonfinite_updates})",
                file=sys.stderr,
            )
            return None
        if not actor_frozen:
            self.scaler.step(self.actor_opt)
        self.scaler.step(self.critic_opt)
        self.scaler.update()
        return {"actor_grad_norm": actor_norm.detach(), "critic_grad_norm": critic_norm.detach()}

    @torch.no_grad()
    def actor_loss(self, batch: dict) -> float:
        """The seed's ``actor_loss``: the policy's behaviour-cloning (denoising) loss on one micro-batch of
        its own rollout chunks — a monitor of how sharply it reproduces what it samples (no gradient)."""
        idx = torch.arange(min(self.run.train.micro_batch, batch["records"].shape[0]), device=self.device)
        chunk = self.policy.record_action(batch["records"][idx])
        with self.autocast():
            loss = self.policy.bc_loss(select(batch["obs"], idx), self.policy.action_norm.unnormalize(chunk))
        return float(loss)

    # ------------------------------------------------------------------ 4. evaluation and checkpoints
    def eval_seed(self, iteration: int, episodes: int) -> int:
        """The first scene of the evaluation at ``iteration`` (``fresh_eval_scenes``: a block of its own)."""
        if not self.run.train.fresh_eval_scenes:
            return EVAL_SEED
        seed = FRESH_EVAL_SEED + iteration * episodes
        if seed + episodes > ROLLOUT_SEED:
            raise ConfigError(f"fresh_eval_scenes: iteration {iteration} x {episodes} episodes runs into the "
                              f"rollouts' seeds ({ROLLOUT_SEED}+): fewer eval_episodes")  # fmt: skip
        return seed

    def evaluate(self, episodes: int) -> dict:
        """The deployment sampler (for diffusion: the fine-tuned stochastic chain), on held-out seeds; under a
        deployment, as deployed (``eval --deploy``'s figure). A stop (single-process) ends it: StopRequested."""
        stop = self.hooks.stop if self.dist.world_size == 1 else None  # DDP ranks stop between iterations
        seed = self.eval_seed(self.iteration, episodes)
        if self.deployment is not None:
            result = evaluate_deployed(self.policy, self.deployment, self.run.task, episodes, seed=seed,
                                       obs_mode=self.obs_mode, device=self.device, progress=False,
                                       env_kwargs=self.run.env, stop=stop)  # fmt: skip
            result.pop("per_episode")
            return result
        result = evaluate_policy(
            self.policy,
            self.run.task,
            episodes,
            seed=seed,
            obs_mode=self.obs_mode,
            device=self.device,
            execute_horizon=self.run.train.execute_horizon,
            progress=False,
            env_kwargs=self.run.env,
            stop=stop,
        )
        result.pop("per_episode")
        return result

    def save(self, metrics: dict, evaluation: dict, best: bool = False) -> Path | None:
        """``evaluation``: the held-out evaluation of the current weights ({} when not evaluated at this iteration);
        ``best``: it beats every evaluation before it, so best.pt is written too."""
        cfg = self.run.train
        mine = {"torch": torch.get_rng_state(), "sample": self.sample_gen.get_state()}
        rng = distributed.gather_objects(self.dist, {**mine, "shuffle": self.shuffle_gen.get_state()})
        if not self.dist.is_main:
            return None
        meta = CheckpointMeta(
            source="ppo",
            task=self.run.task,
            obs_mode=self.obs_mode,
            execute_horizon=cfg.execute_horizon,
            config=to_dict(self.run),
            metrics={**metrics, **({"estimator": self.estimator_summary} if self.estimator_summary else {})},
            evaluation=evaluation,
        )
        payload = make_payload(
            self.spec,
            self.policy,
            meta,
            train_state={
                "critic": self.agent.critic.state_dict(),
                "actor_opt": self.actor_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(),
                "scaler": self.scaler.state_dict(),
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "nonfinite_updates": self.nonfinite_updates,
                "best_success": self.best.success_rate,
                "best_episodes": self.best.episodes,
                "reward_centering": self.centerer.state_dict(),
                "rng": rng,
            },
        )
        ckpt_dir = self.run_dir / "checkpoints"
        path = save_checkpoint(ckpt_dir / f"iter_{self.iteration:06d}.pt", payload)
        self.run_folder.wrote_checkpoint()
        for old in sorted(ckpt_dir.glob("iter_*.pt"))[: -cfg.keep_last]:
            old.unlink(missing_ok=True)
        self.hooks.on_checkpoint(path, evaluation)
        if best:  # deployable: no optimizer, critic or RNG state (iter_*.pt hold those for --resume)
            best_path = save_checkpoint(ckpt_dir / "best.pt", {k: v for k, v in payload.items() if k != "train_state"})
            self.hooks.on_checkpoint(best_path, evaluation)
        return path

    def _load_train_state(self, ckpt: dict, path: str) -> None:
        state = ckpt.get("train_state")
        if not state or "critic" not in state:
            raise CheckpointError(f"{path}: not a PPO checkpoint (no critic/optimizer state to resume)")
        self.agent.critic.load_state_dict(state["critic"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.iteration, self.env_steps = int(state["iteration"]), int(state["env_steps"])
        self.nonfinite_updates = int(state["nonfinite_updates"])
        best = state["best_success"]
        # < 0: older files, none yet; no episode count (older files): ranked by its rate
        self.best = BestEvaluation(None if best is None or best < 0 else float(best), state.get("best_episodes"))
        self.centerer.load_state_dict(state["reward_centering"])
        rng = state["rng"]
        if len(rng) != self.dist.world_size:  # weights, optimizers, counters exact; sampling streams start anew
            # seeded from (seed, rank, iteration): not a replay of the streams the run began with
            seed = self.run.train.seed * 1000 + self.dist.rank + 1_000_003 * self.iteration
            torch.manual_seed(seed)
            self.sample_gen.manual_seed(seed)
            self.shuffle_gen.manual_seed(seed + 500)
            tqdm.write(f"[ppo] {path}: saved by {len(rng)} ranks, resumed on {self.dist.world_size}: RNGs reseeded",
                       file=sys.stderr)
            self.rescaled_at = (self.iteration, self.env_steps)
            return
        mine = rng[self.dist.rank]
        torch.set_rng_state(mine["torch"])
        self.sample_gen.set_state(mine["sample"])
        self.shuffle_gen.set_state(mine["shuffle"])

    # ------------------------------------------------------------------ the loop
    def train(self, until_iteration: int | None = None) -> dict:
        cfg = self.run.train
        total = self.total_iterations()
        stop_at = min(total, until_iteration) if until_iteration is not None else total
        self.eval_seed(total, cfg.eval_episodes)  # a run too long for its fresh evaluation blocks fails now
        logger = None
        if self.dist.is_main:  # a resumed run continues its own CSV and TensorBoard curves
            logger = MetricsLogger(
                self.run_dir, CSV_FIELDS, "ppo", "iteration", "env_steps", self.iteration, self.env_steps
            )
        start = time.perf_counter()
        rollout_time = update_time = 0.0
        steps_trained = 0  # by this call (a resumed run counts from its resume)
        metrics: dict = {}
        bar = tqdm(
            total=total, initial=self.iteration, desc=f"ppo {self.spec.kind}", unit="it",
            disable=not (self.progress and self.dist.is_main), file=sys.stderr,
        )  # fmt: skip
        while self.iteration < stop_at:
            self.hooks.running.wait()
            if self.hooks.stop.is_set():
                break
            t0 = time.perf_counter()
            rollout = self.collect_rollout()
            if rollout is None:
                break
            t1 = time.perf_counter()
            if cfg.anneal_lr:
                frac = 1.0 - self.iteration / total
                self.actor_opt.param_groups[0]["lr"] = frac * cfg.actor_lr
                self.critic_opt.param_groups[0]["lr"] = frac * cfg.critic_lr
            batch = self.prepare_batch(rollout)
            stats = self.update(batch)
            if self.interrupted():  # a partial update is not an iteration: the last checkpoint stands
                break
            actor_loss = self.actor_loss(batch)
            t2 = time.perf_counter()
            self.iteration += 1
            rollout_time += t1 - t0
            update_time += t2 - t1

            local = {
                "success_rate": float(np.mean(rollout.episode_successes)) if rollout.episode_successes else 0.0,
                "episode_return": float(np.mean(rollout.episode_returns)) if rollout.episode_returns else 0.0,
                "episodes": float(len(rollout.episode_returns)),
                "env_steps": float(rollout.env_steps),
                "actor_loss": actor_loss,
                **{k: float(v) for k, v in stats.items()},
            }
            local = distributed.mean_across_ranks(self.dist, local)
            new_steps = int(round(local.pop("env_steps") * self.dist.world_size))
            self.env_steps += new_steps
            steps_trained += new_steps
            metrics = {
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                **local,
                "eval_success_rate": "",
                "rollout_s": round(t1 - t0, 3),
                "update_s": round(t2 - t1, 3),
                "env_steps_per_s": round(rollout.env_steps * self.dist.world_size / (t2 - t0), 1),
                "wall_s": round(time.perf_counter() - start, 1),
            }
            self.hooks.progress.update(
                iter=self.iteration,
                iters_total=total,
                rollout_success_rate=metrics["success_rate"],  # this iteration's episodes; success_rate: evaluations
                env_steps=self.env_steps,
                env_steps_per_s=metrics["env_steps_per_s"],
            )
            is_last = self.iteration == total
            evaluation: dict = {}  # the held-out evaluation of this iteration's weights, if one is due
            if self.dist.is_main and ((cfg.eval_every and self.iteration % cfg.eval_every == 0) or is_last):
                self.hooks.on_evaluation(self.iteration, cfg.eval_episodes)
                try:
                    self.last_eval = self.evaluate(cfg.eval_episodes)
                except StopRequested:  # an unevaluated iteration: the last checkpoint stands, as mid-rollout
                    break
                evaluation = evaluation_record(self.last_eval)
                metrics["eval_success_rate"] = evaluation["success_rate"]
                self.hooks.progress.update(
                    success_rate=evaluation["success_rate"], success_ci95=self.last_eval.get("success_ci95", ())
                )
            improved = distributed.broadcast_object(self.dist, self.best.offer(evaluation))
            if self.dist.is_main:
                logger.row(metrics)
                ci95 = self.last_eval.get("success_ci95") if metrics["eval_success_rate"] != "" else None
                bar.write(_log_line(metrics, ci95), file=sys.stderr)
            bar.update(1)
            if self.iteration % cfg.checkpoint_every == 0 or is_last or improved or self.hooks.save_now.is_set():
                self.hooks.save_now.clear()
                self.save(metrics, evaluation, best=improved)
        bar.close()
        ranks_in_sync = distributed.in_sync(self.dist, self.agent)
        if logger is not None:
            logger.close()
        self.envs.close()
        return {
            "task": self.run.task,
            "kind": self.spec.kind,
            "iterations": self.iteration,
            "env_steps": self.env_steps,
            "final": metrics,
            "final_eval": self.last_eval,
            "best_success_rate": self.best.success_rate,
            "nonfinite_updates": self.nonfinite_updates,
            "world_size": self.dist.world_size,
            "ranks_in_sync": ranks_in_sync,
            "learner_overhead_ratio": round((rollout_time + update_time) / max(rollout_time, 1e-9), 2),
            # rollouts and updates only (evaluations and checkpoints excluded): the training throughput
            "env_steps_per_s": round(steps_trained / max(rollout_time + update_time, 1e-9), 1),
            "wall_s": round(time.perf_counter() - start, 1),
            "run_dir": str(self.run_dir),
        }


def _log_line(m: dict, eval_ci95: tuple | None = None) -> str:
    """The seed's log line, one per iteration; an evaluation adds its success and 95 % interval."""
    evaluated = ""
    if m["eval_success_rate"] != "":
        evaluated = f" (eval {m['eval_success_rate']:.2f}"
        evaluated += f" [{eval_ci95[0]:.2f}, {eval_ci95[1]:.2f}])" if eval_ci95 else ")"
    return (
        f"iter {m['iteration']:4d} | env_steps {m['env_steps']:8d} | actor_loss {m['actor_loss']:.4f} | "
        f"value_loss {m['value_loss']:.4f} | policy_loss {m['policy_loss']:+.4f} | "
        f"total_reward {m['episode_return']:.3f} | success_rate {m['success_rate']:.2f}{evaluated}"
        f" | step_time {m['rollout_s'] + m['update_s']:.2f}s | env_steps/s {m['env_steps_per_s']:.0f}"
    )


def _means(sums: dict, steps: int) -> dict:
    return {k: float(v) / steps for k, v in sums.items()}


def _as_batch(obs: dict) -> dict:
    """A single env observation as a batch of one."""
    return {k: ([v] if k == "instruction" else np.asarray(v)[None]) for k, v in obs.items()}


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest loadable ``iter_*.pt`` in RUN_DIR/checkpoints (a damaged newest one is skipped)."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    candidates = sorted(ckpt_dir.glob("iter_*.pt"), key=lambda p: int(re.findall(r"\d+", p.stem)[0]), reverse=True)
    for path in candidates:
        try:
            load_checkpoint(path)
            return path
        except CheckpointError as exc:
            tqdm.write(f"[ppo] skipping {path}: {exc}", file=sys.stderr)
    return None


def train_ppo(
    run: PPORun,
    run_dir: str | Path | RunDir | None = None,
    resume: str | None = None,
    progress: bool = True,
    hooks: TrainHooks | None = None,
) -> dict:
    """``resume``: a checkpoint path, or ``'auto'`` for the newest in ``run_dir`` (fresh start if none)."""
    if resume == "auto":
        if run_dir is None:
            raise ConfigError("--resume auto needs --run-dir (the run to continue)")
        found = latest_checkpoint(run_dir.path if isinstance(run_dir, RunDir) else run_dir)
        resume = str(found) if found else None
        # say which: a resume that silently trains from scratch wastes a day
        print(f"resume: {found}" if found else f"resume auto: no checkpoint in {run_dir}, starting fresh",
              file=sys.stderr)  # fmt: skip
    trainer = PPOTrainer(run, run_dir, resume=resume, progress=progress, hooks=hooks)
    try:
        result = trainer.train()
    except BaseException:  # a failure, Ctrl-C: the sim workers are ended and joined, the group left
        trainer.envs.close(terminate=True)
        distributed.shutdown(trainer.dist, finished=False)
        raise
    distributed.shutdown(trainer.dist)
    return result
