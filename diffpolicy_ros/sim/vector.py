"""Vectorized rollouts: N push envs in worker processes, observations stacked as numpy arrays.

Built on ``gymnasium.vector.AsyncVectorEnv`` with the ``forkserver`` start method: each worker builds its
own MuJoCo model and creates its renderer lazily, and no GL context or accelerator state is inherited from
the parent (sampling workers never touch the learner's device). ``reset(seed=s)`` seeds env i with s + i,
so the vector env reproduces N single envs seeded the same way.
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from diffpolicy_ros.sim import ChunkStepEnv, make_env


def _env_factory(task: str, chunk_horizon: int | None, env_kwargs: dict):
    def build() -> gym.Env:
        env = make_env(task, **env_kwargs)
        return ChunkStepEnv(env, chunk_horizon) if chunk_horizon else env

    return build


def make_vec_env(
    task: str = "push",
    n_envs: int = 4,
    *,
    chunk_horizon: int | None = None,
    asynchronous: bool = True,
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    **env_kwargs,
) -> gym.vector.VectorEnv:
    """N push envs; with ``chunk_horizon`` each step takes a [N, H, 3] batch of action chunks.

    ``autoreset_mode`` defaults to SAME_STEP: a finished env is reset inside the step that ended it and its
    final observation is in ``info['final_obs']``, so every returned observation is one to act on.
    ``asynchronous=False`` runs the envs in this process (debugging, or a single core).
    """
    fns = [_env_factory(task, chunk_horizon, dict(env_kwargs)) for _ in range(n_envs)]
    if asynchronous:
        # shared_memory=False: gymnasium's shared-memory path garbles Text spaces (the instruction).
        return AsyncVectorEnv(fns, shared_memory=False, context="forkserver", autoreset_mode=autoreset_mode)
    return SyncVectorEnv(fns, autoreset_mode=autoreset_mode)
