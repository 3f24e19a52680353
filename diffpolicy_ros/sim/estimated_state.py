"""A camera-free stand-in for a staged vision policy's estimator (``PPOConfig.simulated_estimates``).

A staged vision policy's actor reads only a task-state estimate: its cameras feed a frozen estimator that
places the block and the goal. Fine-tuning that actor needs estimates as good as the deployed ones and no
better, not pixels: so the rollouts skip rendering and add ``task_state_estimate`` — the true block and goal xy
moved by isotropic Gaussian noise whose median radius is the estimator's measured median error (a 2-D
Gaussian's median radius is sigma * sqrt(2 ln 2)). Staged BC trains the actor the same way.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from diffpolicy_ros import contract as C

MEDIAN_RADIUS_PER_SIGMA = math.sqrt(2 * math.log(2))


class EstimatedTaskState(gym.ObservationWrapper):
    """Adds ``obs['task_state_estimate']`` [4] (block xy, goal xy, metres): truth + N(0, sigma^2) per axis."""

    def __init__(self, env: gym.Env, block_median_m: float, goal_median_m: float):
        super().__init__(env)
        sigma_block, sigma_goal = (m / MEDIAN_RADIUS_PER_SIGMA for m in (block_median_m, goal_median_m))
        self.sigma = np.array([sigma_block, sigma_block, sigma_goal, sigma_goal])
        box = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.observation_space = spaces.Dict({**env.observation_space.spaces, "task_state_estimate": box})

    def observation(self, obs: dict) -> dict:
        truth = np.asarray(obs["proprio"], dtype=np.float64)[C.TASK_STATE_SLICE]
        estimate = truth + self.np_random.normal(0.0, self.sigma)
        return {**obs, "task_state_estimate": estimate.astype(np.float32)}
