"""A 2-D point-mass reach task with two equally good routes around an obstacle (the seed's debugging task).

The point starts below a round obstacle and must reach a goal above it; it can pass on the left (-x) or on
the right (+x), which are equally short. Going straight into the obstacle ends the episode as a failure.
Low-dimensional and fast (no physics engine, thousands of steps per second), it is where diffusion-PPO is
checked to learn in minutes on a CPU before anything runs on the arm. It speaks the push task's interface:
``step``/``step_chunk``, ``obs = {'proprio', 'instruction'}``, ``info['is_success' | 'route' |
'elapsed_steps' | 'steps_executed']``, so the same trainer, evaluation and demo code drive both.

    proprio = [x, y, goal_x, goal_y]  (metres, the arena is [-1, 1]^2)
    action  = (vx, vy) in m/s, clipped to +-max_speed; one step is ``dt`` seconds
    reward  = progress_scale * (distance-to-goal decrease) + success_bonus on reaching the goal
              - collision_penalty on hitting the obstacle
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from diffpolicy_ros.contract import CONTROL_PERIOD_S, EXECUTE_HORIZON
from diffpolicy_ros.sim.chunk import execute_chunk
from diffpolicy_ros.sim.expert import TwoRouteExpert
from diffpolicy_ros.sim.push_env import INSTRUCTION_CHARSET

POINT_MASS_INSTRUCTION = "reach the goal"


@dataclass
class PointMassConfig:
    obs_mode: str = "state"  # the only mode: the task has no cameras
    dt: float = CONTROL_PERIOD_S
    max_speed: float = 1.0  # m/s per axis
    obstacle_radius: float = 0.3
    start_y: float = -0.8
    goal_y: float = 0.8
    spawn_jitter: float = 0.15  # m, uniform in x for start and goal
    goal_tolerance: float = 0.1
    max_episode_steps: int = 40
    execute_horizon: int = EXECUTE_HORIZON
    progress_scale: float = 1.0
    success_bonus: float = 1.0
    collision_penalty: float = 1.0


class PointMassEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, config: PointMassConfig | None = None, **overrides):
        cfg = config or PointMassConfig()
        for key, value in overrides.items():
            if not hasattr(cfg, key):
                raise TypeError(f"unknown PointMassEnv option {key!r}")
            setattr(cfg, key, value)
        if cfg.obs_mode != "state":
            raise ValueError("the point-mass task has state observations only (obs_mode='state')")
        self.cfg = cfg
        self.action_space = spaces.Box(-cfg.max_speed, cfg.max_speed, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {
                "proprio": spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32),
                "instruction": spaces.Text(64, charset=INSTRUCTION_CHARSET),
            }
        )
        self._pos = np.zeros(2)
        self._goal = np.zeros(2)
        self._t = 0
        self._route = "none"

    @property
    def position(self) -> np.ndarray:
        return self._pos.copy()

    @property
    def goal(self) -> np.ndarray:
        return self._goal.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        cfg, rng = self.cfg, self.np_random
        self._pos = np.array([rng.uniform(-cfg.spawn_jitter, cfg.spawn_jitter), cfg.start_y])
        self._goal = np.array([rng.uniform(-cfg.spawn_jitter, cfg.spawn_jitter), cfg.goal_y])
        self._t = 0
        self._route = "none"
        return self._observation(), self._info(False, False)

    def step(self, action):
        return self._step_validated(self._validate(action, (2,)))

    def step_chunk(self, actions):
        """Execute up to ``execute_horizon`` actions of a [H, 2] chunk, stopping early at termination."""
        actions = np.asarray(actions)
        if actions.ndim != 2 or actions.shape[0] == 0:
            raise ValueError(f"action chunk must have shape [H, 2] with H >= 1, got {actions.shape}")
        actions = self._validate(actions, (actions.shape[0], 2))
        return execute_chunk(self._step_validated, actions, self.cfg.execute_horizon)

    def _validate(self, actions, shape: tuple[int, ...]) -> np.ndarray:
        arr = np.asarray(actions)
        if arr.dtype.kind != "f" or arr.shape != shape:
            raise ValueError(f"action must be a float array of shape {shape}, got {arr.dtype} {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("action contains NaN or inf")
        return np.clip(arr.astype(np.float64), -self.cfg.max_speed, self.cfg.max_speed)

    def _step_validated(self, action: np.ndarray):
        cfg = self.cfg
        before = np.linalg.norm(self._goal - self._pos)
        self._pos = np.clip(self._pos + action * cfg.dt, -1.0, 1.0)
        self._t += 1
        if self._route == "none" and self._pos[1] >= 0.0:  # abreast of the obstacle's centre
            self._route = "left" if self._pos[0] < 0 else "right"
        after = np.linalg.norm(self._goal - self._pos)
        success = bool(after < cfg.goal_tolerance)
        collided = bool(np.linalg.norm(self._pos) < cfg.obstacle_radius)
        reward = cfg.progress_scale * (before - after) + cfg.success_bonus * success - cfg.collision_penalty * collided
        terminated = success or collided
        truncated = bool(self._t >= cfg.max_episode_steps and not terminated)
        return self._observation(), float(reward), terminated, truncated, self._info(success, collided)

    def _observation(self) -> dict:
        proprio = np.concatenate([self._pos, self._goal]).astype(np.float32)
        return {"proprio": proprio, "instruction": POINT_MASS_INSTRUCTION}

    def _info(self, success: bool, collided: bool) -> dict:
        return {"is_success": success, "collided": collided, "elapsed_steps": self._t, "route": self._route}


class PointMassExpert(TwoRouteExpert):
    """Goes to a waypoint beside the obstacle (a seeded side), then to the goal: both modes in the data."""

    def __init__(self, env: PointMassEnv, clearance: float = 0.15, tolerance: float = 0.08):
        super().__init__(env)
        self.clearance, self.tolerance = clearance, tolerance

    def act(self) -> np.ndarray:
        env = self.env
        sign = -1.0 if self.side == "left" else 1.0
        waypoint = np.array([sign * (env.cfg.obstacle_radius + self.clearance), 0.0])
        if self._phase == 0 and np.linalg.norm(waypoint - env.position) < self.tolerance:
            self._phase = 1
        target = waypoint if self._phase == 0 else env.goal
        delta = target - env.position
        speed = env.cfg.max_speed * min(1.0, np.linalg.norm(delta) / (env.cfg.max_speed * env.cfg.dt))
        return (delta / max(np.linalg.norm(delta), 1e-9) * speed).astype(np.float32)
