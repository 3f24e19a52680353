"""Vectorized rollouts: N push envs in worker processes, observations stacked as numpy arrays.

Built on ``gymnasium.vector.AsyncVectorEnv`` with the ``forkserver`` start method: each worker builds its
own MuJoCo model and creates its renderer lazily, and no GL context or accelerator state is inherited from
the parent (sampling workers never touch the learner's device). Workers ignore SIGINT: a terminal's Ctrl-C
reaches the whole process group, and the learner, not the signal, ends them (a worker killed mid-step made the
trainer fail with "Connection reset by peer"). ``reset(seed=s)`` seeds env i with s + i,
so the vector env reproduces N single envs seeded the same way.
"""

from __future__ import annotations

import multiprocessing
import signal

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.sim import ChunkStepEnv, make_env
from diffpolicy_ros.sim.deployed import DeployedChunkEnv
from diffpolicy_ros.sim.estimated_state import EstimatedTaskState, EstimateErrorModel


def _env_factory(
    task: str,
    chunk_horizon: int | None,
    env_kwargs: dict,
    deployment: Deployment | None,
    estimate_error: EstimateErrorModel | None,
):
    def build() -> gym.Env:
        if multiprocessing.parent_process() is not None:  # a worker (the parent also builds one, for its spaces)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the learner stops the workers
        env = make_env(task, **env_kwargs)
        if deployment is not None:
            env = DeployedChunkEnv(env, deployment, chunk_horizon)
        elif chunk_horizon:
            env = ChunkStepEnv(env, chunk_horizon)
        return EstimatedTaskState(env, estimate_error) if estimate_error else env

    return build


def make_vec_env(
    task: str = "push",
    n_envs: int = 4,
    *,
    chunk_horizon: int | None = None,
    asynchronous: bool = True,
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    deployment: Deployment | None = None,
    estimate_error: EstimateErrorModel | None = None,
    **env_kwargs,
) -> gym.vector.VectorEnv:
    """N push envs; with ``chunk_horizon`` each step takes a [N, H, 3] batch of action chunks.

    ``deployment``: each env is the sim as deployed (sim/deployed.py), a step one decision of the policy node.
    ``estimate_error``: a staged policy's estimator's measured errors; observations gain a
    ``task_state_estimate`` that far off in the episode's cell (sim/estimated_state.py).

    ``autoreset_mode`` defaults to SAME_STEP: a finished env is reset inside the step that ended it and its
    final observation is in ``info['final_obs']``, so every returned observation is one to act on.
    ``asynchronous=False`` runs the envs in this process (debugging, or a single core).
    """
    if deployment is not None and not chunk_horizon:
        raise ValueError("a deployed vector env steps chunks: give chunk_horizon")
    fns = [_env_factory(task, chunk_horizon, dict(env_kwargs), deployment, estimate_error) for _ in range(n_envs)]
    if asynchronous:
        # SIGINT blocked while the workers start: a forkserver started now, and every worker it forks, inherit
        # the mask, so a Ctrl-C mid-import cannot kill one (after start-up, build() ignores SIGINT as well)
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            # shared_memory=False: gymnasium's shared-memory path garbles Text spaces (the instruction).
            return AsyncVectorEnv(fns, shared_memory=False, context="forkserver", autoreset_mode=autoreset_mode)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return SyncVectorEnv(fns, autoreset_mode=autoreset_mode)
