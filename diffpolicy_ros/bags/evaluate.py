"""Open-loop evaluation of a checkpoint against a bag: ``diffpolicy eval-bag BAG --checkpoint CKPT``.

The bag is walked at the policy's rate (10 Hz of bag time) through the live graph's preprocessing; every tick
with a complete, fresh observation gets a chunk (inference batched, deterministic for a seed), compared with
the commands recorded after the observation's stamp. The field's open-loop metrics (Octo, GR00T, Diffusion
Policy): per-step MAE / MSE against the recorded actions, the translation direction's accuracy (angle < 0.5
rad) while the arm moves, and the best of N sampled chunks (a multimodal policy can be right far from one
recording). Writes ``report.json`` and two PNGs when given an output folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from diffpolicy_ros import contract as C
from diffpolicy_ros.bags.replay import Command, Episode, Tick, walk_bag
from diffpolicy_ros.data.bag_io import BagError, bag_info
from diffpolicy_ros.eval.chunk_scores import score, write_report
from diffpolicy_ros.messages.observation import RawInputs
from diffpolicy_ros.messages.topic_map import TopicMap
from diffpolicy_ros.models.checkpoint import checkpoint_meta, load_policy
from diffpolicy_ros.models.obs import obs_to_torch


def evaluate_bag(
    bag: str | Path,
    checkpoint: str | Path,
    samples: int = 1,
    seed: int = 0,
    device: str = "cpu",
    batch_size: int = 32,
    ddim_steps: int | None = None,
    topic_map: TopicMap | None = None,
    rate_hz: float = 1.0 / C.CONTROL_PERIOD_S,
    max_age: float = 0.35,
    out_dir: str | Path | None = None,
    warn=print,
) -> dict:
    start = time.perf_counter()
    policy, ckpt = load_policy(checkpoint, device)
    fusion = policy.config.fusion
    need_images, need_task_state = bool(fusion.use_images), bool(fusion.use_task_state)
    need_calibration = bool(getattr(policy.encoder, "calibrated", False))  # the cameras' CameraInfo and poses
    execute = checkpoint_meta(ckpt).execute_horizon
    info = bag_info(bag)
    topics = (topic_map or TopicMap()).for_bag(info.topics)  # the cell's names; cameras raw or compressed
    command_topic = topics.command

    # -- walk the bag: observations at the policy's ticks, and the recorded commands --------------------
    inputs = RawInputs(topics.inputs())
    observations, stamps = [], []
    # policy ticks without a complete, fresh observation, by cause: an input not seen yet (the bag's start),
    # one older than max_age inside an episode (a dropped or late message); the gaps between a demo bag's
    # episodes hold no data and are counted apart
    unobserved = {"waiting": 0, "stale": 0, "between_episodes": 0}
    cmd_t, cmd_v, episode_starts = [], [], []
    in_episode = True  # a bag without episode markers is one long episode
    walk = walk_bag(bag, inputs, need_images, need_task_state, command_topic, rate_hz, max_age, warn, need_calibration)
    for event in walk:
        if isinstance(event, Tick):
            if not isinstance(event.obs, str):
                observations.append(event.obs[0])
                stamps.append(event.obs[1])
            elif not in_episode:
                unobserved["between_episodes"] += 1
            else:
                unobserved["waiting" if event.obs.startswith("waiting for") else "stale"] += 1
        elif isinstance(event, Command):
            cmd_t.append(event.t)
            cmd_v.append(event.velocity)
        elif isinstance(event, Episode):
            in_episode = event.mark.get("event") == "start"
            if in_episode:
                episode_starts.append(event.t)
    if not cmd_t:
        raise BagError(f"{bag}: no commands on {command_topic} to compare with")
    cmd_t, cmd_v = np.asarray(cmd_t), np.asarray(cmd_v, np.float64)

    # -- batched inference: samples x chunks, one generator so a seed fixes the result -------------------
    generator = torch.Generator(device=device).manual_seed(seed)
    preds = np.zeros((samples, len(observations), C.CHUNK_HORIZON, C.ACTION_DIM))
    batch_ms: list[float] = []
    with torch.inference_mode():
        for lo in range(0, len(observations), batch_size):
            part = observations[lo : lo + batch_size]
            batch = {k: np.stack([o[k] for o in part]) for k in part[0] if k != "instruction"}
            batch["instruction"] = [o["instruction"] for o in part]
            obs = obs_to_torch(batch, device)
            for s in range(samples):
                t0 = time.perf_counter()
                chunk = policy.predict_chunk(obs, ddim_steps, generator=generator)
                batch_ms.append((time.perf_counter() - t0) * 1e3 / len(part))
                preds[s, lo : lo + len(part)] = chunk.float().cpu().numpy()

    report = {
        "bag": str(bag),
        "checkpoint": str(checkpoint),
        **score(np.asarray(stamps), preds, cmd_t, cmd_v, execute),
        "stale_inputs": unobserved["waiting"] + unobserved["stale"],  # ticks in an episode without an observation
        "ticks_without_observation": unobserved,
        "episodes": len(episode_starts),
        "dropped_inputs": dict(inputs.dropped),
        "infer_ms_p50": round(float(np.percentile(batch_ms, 50)), 2) if batch_ms else None,
        "infer_ms_p99": round(float(np.percentile(batch_ms, 99)), 2) if batch_ms else None,
        "bag_duration_s": round(info.duration_s, 2),  # first to last message, as the bag's metadata says
        "wall_s": round(time.perf_counter() - start, 2),
    }
    report["realtime_factor"] = round(report["bag_duration_s"] / max(report["wall_s"], 1e-9), 1)
    if out_dir is not None:
        write_report(out_dir, report, np.asarray(stamps), preds[0], cmd_t, cmd_v, execute, episode_starts)
    return report
