"""A camera-free stand-in for a staged vision policy's estimator (``PPOConfig.simulated_estimates``).

A staged vision policy's actor reads only a task-state estimate: its cameras feed a frozen estimator that
places the block and the goal. Fine-tuning that actor needs estimates as good as the deployed ones and no
better, not pixels: so the rollouts skip rendering and add ``task_state_estimate`` — the true block and goal xy
moved by isotropic Gaussian noise whose median radius is the estimator's measured median error (a 2-D
Gaussian's median radius is sigma * sqrt(2 ln 2)). Staged BC trains the actor the same way.

Across cells the estimator does not err alike everywhere: a dim light or a turned camera costs it more than a
heavier block. :class:`EstimateErrorModel` carries its median error in the sim's world and, per factor of a
cell file, at each edge of the factor's range, all measured by rendering frames in those cells and running the
estimator (``rl/estimator.py: measure_error_model``). An episode's cell sets that episode's median: the nominal
one scaled by the ratio of the factor that costs the estimator most in that cell, each factor's ratio taken in
proportion to how far toward its edge the factor lies (log-linear). The worst factor, not the product of all:
on the calibrated estimator across the shipped training cells the product predicted a median of 5.5 mm over
sampled cells and the worst factor 4.6 mm, where the estimator measured 4.2 (docs/experiments.md). A ratio
below 1 is read as 1: a factor is not taken to help.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from diffpolicy_ros import contract as C
from diffpolicy_ros.sim.cell import nominal_value

MEDIAN_RADIUS_PER_SIGMA = math.sqrt(2 * math.log(2))


@dataclass
class FactorEdge:
    """The estimator's median errors (mm) with one factor alone at ``value``, every other factor nominal."""

    factor: str
    value: float
    block_mm: float
    goal_mm: float


@dataclass
class EstimateErrorModel:
    """(block, goal) median errors (mm) in the sim's world and at each measured factor edge (none: one world)."""

    block_mm: float
    goal_mm: float
    edges: list[FactorEdge] = field(default_factory=list)
    sampled: dict = field(default_factory=dict)  # the estimator on sampled cells (all factors): how to read the model

    def medians_m(self, cell: dict | None = None) -> tuple[float, float]:
        """(block, goal) median errors (m) in ``cell`` (``info["cell"]``; None: the sim's world)."""
        scale = np.ones(2)
        for edge in self.edges if cell else ():
            nominal = nominal_value(edge.factor)
            toward = (cell[edge.factor] - nominal) / (edge.value - nominal)  # 0 at nominal, 1 at this edge
            if toward <= 0:  # on the factor's other side: that edge's own entry scales it
                continue
            ratios = np.maximum(1.0, np.array([edge.block_mm / self.block_mm, edge.goal_mm / self.goal_mm]))
            scale = np.maximum(scale, ratios ** min(toward, 1.0))
        block, goal = np.array([self.block_mm, self.goal_mm]) * scale / 1e3
        return float(block), float(goal)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EstimateErrorModel:
        edges = [FactorEdge(**e) for e in data.get("edges", [])]
        return cls(data["block_mm"], data["goal_mm"], edges, dict(data.get("sampled", {})))


class EstimatedTaskState(gym.ObservationWrapper):
    """Adds ``obs['task_state_estimate']`` [4] (block xy, goal xy, metres): truth + N(0, sigma^2) per axis, sigma
    from ``error``'s medians in the episode's cell (set at every reset)."""

    def __init__(self, env: gym.Env, error: EstimateErrorModel):
        super().__init__(env)
        self.error = error
        self._set_sigma(None)
        box = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.observation_space = spaces.Dict({**env.observation_space.spaces, "task_state_estimate": box})

    def _set_sigma(self, cell: dict | None) -> None:
        sigma_block, sigma_goal = (m / MEDIAN_RADIUS_PER_SIGMA for m in self.error.medians_m(cell))
        self.sigma = np.array([sigma_block, sigma_block, sigma_goal, sigma_goal])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._set_sigma(info.get("cell"))
        return self.observation(obs), info

    def observation(self, obs: dict) -> dict:
        truth = np.asarray(obs["proprio"], dtype=np.float64)[C.TASK_STATE_SLICE]
        estimate = truth + self.np_random.normal(0.0, self.sigma)
        return {**obs, "task_state_estimate": estimate.astype(np.float32)}
