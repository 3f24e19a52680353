"""Action chunks: execute the first ``execute_horizon`` actions of a chunk, and a wrapper that makes a chunk
the action of any of our envs (so a standard vector env steps chunks in parallel)."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from diffpolicy_ros.contract import CHUNK_HORIZON


def execute_chunk(
    step: Callable[[np.ndarray], tuple],
    actions: np.ndarray,
    execute_horizon: int,
    observe: Callable[[], dict] | None = None,
):
    """Call ``step`` on up to ``execute_horizon`` (validated) actions, stopping at termination/truncation.

    Returns ``(obs, rewards[k], terminated, truncated, info)`` with ``k`` the steps executed (also in
    ``info['steps_executed']``); ``info`` is the last step's. ``observe``: ``step`` makes no observation and this
    makes the chunk's one, at its end (a camera env renders once per chunk, not at every step a policy skips).
    """
    rewards = []
    for action in actions[:execute_horizon]:
        obs, reward, terminated, truncated, info = step(action)
        rewards.append(reward)
        if terminated or truncated:
            break
    info["steps_executed"] = len(rewards)
    if observe is not None:
        obs = observe()
    return obs, np.asarray(rewards, dtype=np.float32), terminated, truncated, info


class ChunkStepEnv(gym.Wrapper):
    """Make one chunk [H, A] the action, so a standard vector env can step chunks in parallel.

    The reward is the sum over executed steps; ``info['step_rewards']`` (length H, zero-padded) and
    ``info['steps_executed']`` keep the exact per-step rewards and the chunk boundary.
    """

    def __init__(self, env: gym.Env, horizon: int = CHUNK_HORIZON):
        super().__init__(env)
        self.horizon = horizon
        low = float(env.action_space.low[0])
        high = float(env.action_space.high[0])
        self.action_space = spaces.Box(low, high, shape=(horizon, *env.action_space.shape), dtype=np.float32)

    def step(self, action):
        obs, rewards, terminated, truncated, info = self.env.unwrapped.step_chunk(action)
        padded = np.zeros(self.horizon, dtype=np.float32)
        padded[: len(rewards)] = rewards
        info["step_rewards"] = padded
        return obs, float(rewards.sum()), terminated, truncated, info
