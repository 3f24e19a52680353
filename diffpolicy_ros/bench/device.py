"""``diffpolicy bench device``: what an accelerator buys, each figure beside the same one on this machine's CPU,
measured in one run (``scripts/device_check.sh`` runs it on a lent GPU or NPU machine).

- chunk latency p50/p99 at batch 1 of the default multimodal DDIM-10 policy and of the one-step actor
  (``config/policy/vision_few_step.yaml``), in fp32 and in bf16 (on the CPU bf16 runs the eager loop);
- behaviour-cloning iterations per second of the vision recipe (``config/policy/diffusion_vision_calibrated.yaml``): its
  estimator stage (the cameras) and its actor stage (states), at the recipe's batch sizes, on a few recorded
  demonstrations;
- PPO env steps per second: one iteration of ``config/train/push.yaml`` (the multimodal policy, untrained: the
  rate does not depend on the weights), rollouts and update.

Small and faithful: the real training and inference code on few iterations, so the whole check takes minutes.
"""

from __future__ import annotations

import csv
import tempfile
import time
from pathlib import Path

import torch

from diffpolicy_ros.assets import config_file
from diffpolicy_ros.bench.policy import _latencies, _percentiles, example_observation, policy_from_config
from diffpolicy_ros.config import override
from diffpolicy_ros.device import resolve_device
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy
from diffpolicy_ros.models.inference import ChunkPredictor

VISION_RECIPE = "policy/diffusion_vision_calibrated.yaml"  # what make vision-policy trains
ONE_STEP = "policy/vision_few_step.yaml"
PPO_CONFIG = "train/push.yaml"


def chunk_latency(device: str, iters: int) -> dict:
    """p50/p99 ms of one observation -> chunk call, per policy and precision."""
    policies = {"ddim10": DiffusionPolicy(), "one_step": policy_from_config(config_file(ONE_STEP))}
    out: dict = {}
    for name, policy in policies.items():
        obs = example_observation(policy)
        for precision in ("fp32", "bf16"):
            predictor = ChunkPredictor(policy, device, precision=precision)
            lat = _latencies(lambda p=predictor, o=obs: p(o), iters, warmup=max(3, iters // 10))
            out[f"{name}_{precision}"] = _percentiles("", lat)
    return out


def bc_rates(device: str, demos: Path, iters: int, out_dir: Path) -> dict:
    """Iterations per second of both stages of the vision recipe (the rest of a run is evaluation)."""
    from diffpolicy_ros.rl.bc import load_bc_run, train_bc

    run = load_bc_run(config_file(VISION_RECIPE))
    iters = max(8, iters)
    run.train = override(run.train, device=device, iters=iters, estimator_iters=iters, eval_every=10 * iters,
                         final_eval_episodes=1, log_every=iters // 4)  # fmt: skip
    result = train_bc(run, demos, out_dir, progress=False)
    with open(Path(result["run_dir"]) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    first, last = rows[0], rows[-2]  # the last row's wall time includes the final evaluation
    actor = (int(last["iter"]) - int(first["iter"])) / max(float(last["wall_s"]) - float(first["wall_s"]), 1e-9)
    return {
        "estimator_it_per_s": round(iters / result["estimator"]["wall_s"], 2),
        "actor_it_per_s": round(actor, 2),
        "estimator_batch": run.train.estimator_batch_size,
        "actor_batch": run.train.batch_size,
    }


def ppo_rate(device: str, n_envs: int, rollout_steps: int, out_dir: Path) -> dict:
    """Env steps per second of one PPO iteration (rollouts and update; the evaluation excluded)."""
    from diffpolicy_ros.rl.ppo import load_ppo_run, train_ppo

    run = load_ppo_run(config_file(PPO_CONFIG))
    steps = n_envs * rollout_steps * run.train.execute_horizon
    micro_batch = min(run.train.micro_batch, n_envs * rollout_steps)
    run.train = override(run.train, device=device, n_envs=n_envs, rollout_steps=rollout_steps,
                         total_env_steps=steps, eval_episodes=1, micro_batch=micro_batch)  # fmt: skip
    result = train_ppo(run, out_dir, progress=False)
    return {"env_steps_per_s": result["env_steps_per_s"], "env_steps": result["env_steps"], "n_envs": n_envs}


def bench_device(
    device: str = "auto", latency_iters: int = 100, bc_iters: int = 40, demo_episodes: int = 6,
    n_envs: int = 8, rollout_steps: int = 10, cpu_reference: bool = True,
) -> dict:  # fmt: skip
    """Every figure on ``device`` and (``cpu_reference``) on this machine's CPU, in one JSON-able dict."""
    from diffpolicy_ros.sim.demos import run_demos

    device = resolve_device(device)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="diffpolicy_bench_device_"))
    demos = work / "demos.npz"
    run_demos(task="push", episodes=demo_episodes, seed=0, obs_mode="image", out=demos, progress=False)
    devices = [device] + (["cpu"] if cpu_reference and device != "cpu" else [])
    result: dict = {"device": device, "torch": torch.__version__, "cpu_threads": torch.get_num_threads()}
    if device.startswith("cuda"):
        result["device_name"] = torch.cuda.get_device_name(torch.device(device))
    for where in devices:
        key = "cpu" if where == "cpu" else "accelerator"
        result[key] = {
            "chunk_latency_ms": chunk_latency(where, latency_iters),
            "bc_vision_recipe": bc_rates(where, demos, bc_iters, work / f"bc_{key}"),
            "ppo": ppo_rate(where, n_envs, rollout_steps, work / f"ppo_{key}"),
        }
    if "accelerator" in result and "cpu" in result:  # how many times the CPU's figure
        acc, cpu = result["accelerator"], result["cpu"]
        speedup = {f"chunk_{name}_p50": cpu["chunk_latency_ms"][name]["p50_ms"] / lat["p50_ms"]
                   for name, lat in acc["chunk_latency_ms"].items()}  # fmt: skip
        for stage in ("estimator", "actor"):
            speedup[f"bc_{stage}"] = (acc["bc_vision_recipe"][f"{stage}_it_per_s"]
                                      / cpu["bc_vision_recipe"][f"{stage}_it_per_s"])  # fmt: skip
        speedup["ppo_env_steps"] = acc["ppo"]["env_steps_per_s"] / cpu["ppo"]["env_steps_per_s"]
        result["speedup"] = {k: round(v, 2) for k, v in speedup.items()}
    result["wall_s"] = round(time.perf_counter() - start, 1)
    return result
