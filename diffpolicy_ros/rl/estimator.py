"""Stage one of staged BC: the task-state estimator (keypoint CNN + head, ``MultimodalEncoder``) on the cameras.

A vision policy whose actor reads a state estimate (``fusion.estimate_task_state``, no image tokens) needs the
pixels only to place the block and the goal. So the estimator is trained alone, supervised on the
demonstrations' positions, on frames decoded once into memory; then the actor trains on states (``rl/bc.py``),
with the estimator's error measured on held-out episodes added to the true positions, so it learns to act on
estimates as good as the deployed ones and no better. Stage one costs a small CNN's forward and backward per
sample; the joint recipe ran the cameras through the keypoint CNN and the image encoders at every actor step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.contract import CAMERAS, TASK_STATE_SLICE
from diffpolicy_ros.data.augmentation import random_shift_with_offsets, shifted_projection
from diffpolicy_ros.data.episodes import EpisodeDataset
from diffpolicy_ros.models.checkpoint import CheckpointError, load_policy
from diffpolicy_ros.models.encoders import normalized_images
from diffpolicy_ros.models.fusion import MultimodalEncoder
from diffpolicy_ros.rl import distributed
from diffpolicy_ros.runs import EVAL_SEED
from diffpolicy_ros.sim.cell import CellRanges, factor_edges
from diffpolicy_ros.sim.demos import run_demos
from diffpolicy_ros.sim.estimated_state import EstimateErrorModel, FactorEdge


@dataclass
class EstimatorResult:
    """What stage one hands to stage two: held-out residuals (estimate - truth, metres) and their summary."""

    residuals: np.ndarray  # [N, 4]: block xy, goal xy
    summary: dict


def true_task_state(proprio: np.ndarray) -> np.ndarray:
    """[N, 4] block xy, goal xy (metres) from proprio: the labels, never an input."""
    return proprio[:, TASK_STATE_SLICE]


def held_out_steps(dataset: EpisodeDataset, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Step indices of the training episodes and of the last ``fraction`` of episodes (at least one)."""
    n_held = max(1, round(dataset.n_episodes * fraction)) if dataset.n_episodes > 1 else 0
    cut = dataset.episode_slice(dataset.n_episodes - n_held).start if n_held else dataset.n_steps
    return np.arange(cut), np.arange(cut, dataset.n_steps)


def train_estimator(
    encoder: MultimodalEncoder,
    dataset: EpisodeDataset,
    iters: int,
    batch_size: int,
    lr: float,
    holdout: float,
    image_shift: int,
    rng: np.random.Generator,
    gen: torch.Generator,
    device: torch.device,
    progress: bool = True,
    dist: distributed.DistInfo = distributed.SINGLE,
) -> EstimatorResult:
    """Train ``encoder``'s estimator in place (its other weights untouched), then measure it on held-out episodes.
    ``iters`` 0: measure it as it is (an estimator copied from another run, ``copy_estimator``). Under torchrun
    each rank draws ``batch_size / world_size`` frames from its shard of the training frames and the gradients
    are averaged: the global batch is ``batch_size``."""
    start = time.perf_counter()
    frames = {cam: torch.from_numpy(dataset.obs[f"image_{cam}"]) for cam in CAMERAS}  # uint8, decoded once
    projections = camera_projections(encoder, dataset)
    truth = torch.from_numpy(true_task_state(dataset.obs["proprio"])).float()
    train_idx, held_idx = held_out_steps(dataset, holdout)
    own_idx, batch_size = distributed.shard(dist, train_idx), distributed.rank_batch(dist, batch_size)

    params = encoder.estimator_parameters()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-6)
    span = max(1, iters)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: 0.5 * (1 + math.cos(math.pi * it / span)))
    encoder.train()
    losses: list[float] = []
    bar = tqdm(range(iters), desc="estimator", unit="it", disable=not progress)
    for _ in bar:
        idx = torch.from_numpy(own_idx[rng.integers(0, len(own_idx), batch_size)])
        images, projection = {}, []
        for i, cam in enumerate(CAMERAS):
            images[cam], offsets = random_shift_with_offsets(frames[cam][idx], image_shift, gen)
            if projections is not None:  # the pixels the labels project to move with the image
                projection.append(shifted_projection(projections[idx, i], offsets))
        images = normalized_images({cam: x.to(device) for cam, x in images.items()}, CAMERAS)
        projection = torch.stack(projection, dim=1).to(device) if projection else None
        loss = encoder.estimator_loss(images, truth[idx].to(device), projection)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        losses.append(distributed.average_gradients(dist, params, loss))
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.5f}")

    residuals = estimate(encoder, frames, projections, held_idx, device) - truth[held_idx].numpy()
    block_mm = 1000 * np.linalg.norm(residuals[:, :2], axis=1)
    goal_mm = 1000 * np.linalg.norm(residuals[:, 2:], axis=1)
    summary = {
        "iters": iters,
        "held_out_steps": int(len(held_idx)),
        "block_median_mm": round(float(np.median(block_mm)), 2),
        "block_p90_mm": round(float(np.percentile(block_mm, 90)), 2),
        "goal_median_mm": round(float(np.median(goal_mm)), 2),
        "goal_p90_mm": round(float(np.percentile(goal_mm, 90)), 2),
        "final_loss": float(np.mean(losses[-50:])) if losses else None,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    return EstimatorResult(residuals.astype(np.float32), summary)


def camera_projections(encoder: MultimodalEncoder, dataset: EpisodeDataset) -> torch.Tensor | None:
    """Each step's camera projections [T, cameras, 3, 4] for a calibrated estimator (None for a learned one)."""
    if not encoder.calibrated:
        return None
    if "camera_projection" not in dataset.obs:
        raise ConfigError(
            "fusion.task_state_estimator calibrated: this dataset has no camera_projection (record it with "
            "`diffpolicy demo --images`, which stores each episode's camera calibration)"
        )
    return torch.from_numpy(np.asarray(dataset.obs["camera_projection"], dtype=np.float32))


@torch.no_grad()
def estimate(
    encoder: MultimodalEncoder, frames: dict, projections, steps: np.ndarray, device, batch: int = 256
) -> np.ndarray:
    """The estimator's block and goal xy (metres) [N, 4] on the given steps' frames."""
    encoder.eval()
    out = []
    for i in range(0, len(steps), batch):
        idx = torch.from_numpy(steps[i : i + batch])
        images = normalized_images({cam: frames[cam][idx].to(device) for cam in CAMERAS}, CAMERAS)
        projection = None if projections is None else projections[idx].to(device)
        out.append(encoder.estimate_task_state(images, projection).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 4), np.float32)


def copy_estimator(path: str, encoder: MultimodalEncoder) -> None:
    """Load the estimator (keypoint CNN and head) of the staged checkpoint at ``path`` into ``encoder``."""
    source, _ = load_policy(path)
    theirs, ours = getattr(source.encoder, "estimator_modules", dict)(), encoder.estimator_modules()
    if not (theirs and ours):
        raise ConfigError(f"train.estimator_from {path}: both policies must estimate the task state from the cameras")
    try:
        for name, module in ours.items():
            module.load_state_dict(theirs[name].state_dict(), strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"train.estimator_from {path}: its estimator does not fit this policy's ({exc})") from exc


# factors that change no frame at a scene's start: the estimator is not measured on them (ratio 1)
UNSEEN_FACTORS = ("physics.block_mass", "physics.block_friction")
SAMPLED_CELLS_PER_EPISODES = 4  # sampled cells differ from one another: more of them than scenes per edge


def measure_error_model(
    policy: torch.nn.Module,
    task: str,
    ranges: CellRanges,
    env_kwargs: dict | None = None,
    episodes: int = 6,
    seed: int = EVAL_SEED,
    device: str = "cpu",
    progress: bool = True,
) -> EstimateErrorModel:
    """A staged policy's estimator's median errors in the sim's world, with each factor of ``ranges`` alone at
    each edge of its range, and (to check the model against) in sampled cells with every factor at once: on
    every frame of the scripted expert's ``episodes`` held-out scenes per condition (four times as many sampled
    cells, one per scene), rendered in that cell."""
    edges = [(n, v) for n, v in factor_edges(ranges) if n not in UNSEEN_FACTORS]
    conditions = [(CellRanges(), episodes)]
    conditions += [(CellRanges().with_factors({n: (v, v)}), episodes) for n, v in edges]
    conditions.append((ranges, SAMPLED_CELLS_PER_EPISODES * episodes))
    medians = []
    for cells, n in tqdm(conditions, desc="estimator error per factor", unit="cell", disable=not progress):
        _, demos = run_demos(task, n, seed, obs_mode="image", progress=False,
                             env_overrides={**(env_kwargs or {}), "cells": cells})  # fmt: skip
        frames = {cam: torch.from_numpy(demos.obs[f"image_{cam}"]) for cam in CAMERAS}
        steps = np.arange(demos.n_steps)
        estimates = estimate(policy.encoder, frames, camera_projections(policy.encoder, demos), steps, device)
        residuals = estimates - true_task_state(demos.obs["proprio"])
        radii = [1000 * np.linalg.norm(residuals[:, part], axis=1) for part in (slice(0, 2), slice(2, 4))]
        medians.append([round(float(np.median(r)), 2) for r in radii])
    (block, goal), (sampled_block, sampled_goal) = medians[0], medians[-1]
    measured = [FactorEdge(n, float(v), b, g) for (n, v), (b, g) in zip(edges, medians[1:-1])]
    return EstimateErrorModel(block, goal, measured, {"block_mm": sampled_block, "goal_mm": sampled_goal})
