"""A scripted expert for the push task, used to record demonstrations.

The pusher starts on the goal's side of the block, so the expert first goes around the block, on the left
or on the right (a seeded choice: the two modes a diffusion policy should keep), gets behind it, and then
pushes it along the block->goal line while steering laterally to keep the block on that line. "Left" is the
robot's left, +y in the world.

The expert reads privileged state (block and goal positions) from the unwrapped env; it is a data source,
not a policy under test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from diffpolicy_ros.sim.push_env import PushEnv


@dataclass
class ExpertConfig:
    travel_speed: float = 0.22  # m/s while going around
    push_speed: float = 0.12  # m/s while pushing
    clearance: float = 0.085  # m, block centre to pusher centre while going around
    standoff: float = 0.055  # m, block centre to pusher centre when starting to push
    waypoint_tolerance: float = 0.015  # m
    lateral_gain: float = 4.0  # 1/s, steering toward the push line
    realign_error: float = 0.035  # m, lateral error that sends the expert back around
    push_height: float = 0.025  # m, pusher centre above the table
    height_gain: float = 5.0  # 1/s
    # A deployment's limits (``demo --deploy``: the real_arm file's max_speed, max_accel), so the demonstrations
    # are motions the arm can follow behind its safety filter. None: the sim's own limits only — the default,
    # for training in the sim, where the filter caps at the task's 0.25 m/s.
    max_speed: float | None = None  # m/s on the norm of the commanded velocity (the filter's rule)
    max_accel: float | None = None  # m/s^2 on the change of the command between control steps


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n > 1e-9 else np.zeros_like(v)


class TwoRouteExpert:
    """A closed-loop expert that goes around an obstacle on a seeded side, in phases. Call :meth:`reset`
    after each env reset, then :meth:`act` every step."""

    def __init__(self, env):
        self.env = env.unwrapped
        self.side = "left"
        self._phase = 0

    def reset(self, rng: np.random.Generator) -> str:
        """Start a new episode; picks the route side from ``rng`` and returns it (``left``/``right``)."""
        self.side = "left" if rng.random() < 0.5 else "right"
        self._phase = 0
        self._previous = np.zeros(3, np.float32)  # the arm starts at rest
        return self.side

    def act(self) -> np.ndarray:
        raise NotImplementedError


class ScriptedPushExpert(TwoRouteExpert):
    def __init__(self, env: PushEnv, config: ExpertConfig | None = None):
        super().__init__(env)
        cfg = config or ExpertConfig()
        if cfg.max_speed is not None:  # plan within the cap rather than only clip to it
            cap = cfg.max_speed
            cfg = replace(cfg, travel_speed=min(cfg.travel_speed, cap), push_speed=min(cfg.push_speed, cap))
        self.cfg = cfg
        self._previous = np.zeros(3, np.float32)

    APPROACH_PHASES = 4  # the waypoints around the block; then the push

    def act(self) -> np.ndarray:
        return self.limit(self.plan())

    @property
    def going_around(self) -> bool:
        """Still on the way around the block (not yet pushing)."""
        return self._phase < self.APPROACH_PHASES

    def go_around(self, side: str) -> None:
        """Start around the block again, on ``side`` (a teleoperator changing its mind)."""
        self.side, self._phase = side, 0

    def plan(self) -> np.ndarray:
        """The velocity the expert wants now (before the sim's and the deployment's limits)."""
        cfg, env = self.cfg, self.env
        tip = env.pusher_position
        block = env.block_pose[0][:2]
        goal = env.target_goal
        u = _unit(goal - block)  # push direction
        n = np.array([-u[1], u[0]])
        if (n[1] < 0) == (self.side == "left"):  # n points to the chosen side (+y is the robot's left)
            n = -n

        waypoints = (
            block + cfg.clearance * (u + n),  # beside the block, on the goal side
            block + cfg.clearance * n,  # abreast of it
            block + cfg.clearance * (n - u),  # beside it, behind
            block - cfg.standoff * u,  # behind it, on the push line
        )
        v_xy = np.zeros(2)
        if self._phase < len(waypoints):
            target = waypoints[self._phase]
            err = target - tip[:2]
            if np.linalg.norm(err) < cfg.waypoint_tolerance:
                self._phase += 1
            speed = min(cfg.travel_speed, 4.0 * np.linalg.norm(err))
            v_xy = speed * _unit(err)
        else:
            rel = tip[:2] - block
            lateral = float(rel @ n)
            behind = float(-(rel @ u))
            if abs(lateral) > cfg.realign_error or behind < 0.02:
                self._phase = 2  # lost the block: go back around on the same side
            contact_point = block - cfg.standoff * 0.8 * u
            v_xy = cfg.push_speed * u + cfg.lateral_gain * ((contact_point - tip[:2]) @ n) * n
        vz = cfg.height_gain * (cfg.push_height - tip[2])
        return np.array([v_xy[0], v_xy[1], vz])

    def limit(self, action: np.ndarray) -> np.ndarray:
        """The sim's per-axis limit, then the deployment's speed and acceleration caps (the safety filter's rules),
        applied to what is sent; remembers it for the next acceleration cap."""
        cfg, env = self.cfg, self.env
        limit = env.cfg.max_speed
        action = np.clip(action, -limit, limit)
        if cfg.max_speed is not None:  # the norm, direction kept: what the safety filter would do to it
            action *= min(1.0, cfg.max_speed / max(float(np.linalg.norm(action)), 1e-9))
        if cfg.max_accel is not None:
            step, max_step = action - self._previous, cfg.max_accel * env.cfg.control_dt
            action = self._previous + step * min(1.0, max_step / max(float(np.linalg.norm(step)), 1e-9))
        self._previous = action.astype(np.float32)
        return self._previous.copy()
