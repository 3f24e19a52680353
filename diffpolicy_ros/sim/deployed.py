"""The sim as deployed: the push env behind the same chunk executor and safety-filter core the ``real_arm``
graph runs, with the cell's latency. ``eval --deploy`` evaluates in it and ``train-ppo --deploy`` fine-tunes in
it (a vector env of these, one decision per step).

Per episode a latency L is drawn from the deployment's range. A step is one decision of the policy node: the
policy took the current observation (at ``now``) and returns a chunk, which arrives L later, stamped with the
observation's time. The sim runs until the policy decides again: after its re-plan interval (the deployment's
``replan_steps`` control periods), or, when the chunk arrives later than that, at the first control period after
the arrival (the node drops ticks while busy). Meanwhile the arm is driven at the executor's rate: the executor
plays the point of the newest arrived chunk due at ``now - stamp`` (zero past its end), the filter core
(:mod:`diffpolicy_ros.safety.filter`: speed cap, acceleration cap per tick, workspace box) turns it into what the
arm obeys, held until the next executor tick, integrated at the sim's IK rate. So a chunk switch jumps from the
old chunk's point to the new one's, and the filter clips it, as on the arm (``switch_jump_mean``,
``switch_accel_clips``).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from diffpolicy_ros.contract import CHUNK_HORIZON
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.safety.chunk_player import ChunkPlayer
from diffpolicy_ros.safety.deployment import Deployment
from diffpolicy_ros.safety.filter import SafetyFilter

FILTER_COUNTS = ("speed_limited", "accel_limited", "box_limited", "active_ticks")


def periods_per_decision(latency: float, period: float, replan_steps: int = 1) -> int:
    """Control periods from an observation to the policy's next: its re-plan interval, or, when its chunk is out
    later than that, the first period after."""
    return max(replan_steps, math.ceil(latency / period - 1e-9))


def expected_periods_per_decision(deployment: Deployment, period: float) -> float:
    """The mean of :func:`periods_per_decision` over the latency range (uniform): env steps per decision."""
    low, high = deployment.latency_s
    steps = [periods_per_decision(x, period, deployment.replan_steps) for x in np.linspace(low, high, 101)]
    return float(np.mean(steps))


class DeployedChunkEnv(gym.Wrapper):
    """One decision of the deployed policy per step: the action is its chunk [H, 3] (m/s).

    ``info['step_rewards']`` (length H, zero-padded) and ``info['steps_executed']`` hold the rewards of the
    control periods the decision spanned, as :class:`~diffpolicy_ros.sim.chunk.ChunkStepEnv` reports them.
    ``episode_stats()``: the filter's counts, the switch jumps and the latency of the episode so far.
    """

    def __init__(self, env: gym.Env, deployment: Deployment, horizon: int = CHUNK_HORIZON):
        super().__init__(env)
        self.deployment, self.horizon = deployment, horizon
        self.limits = deployment.safety_limits()
        core = env.unwrapped
        if not hasattr(core, "step_ticks"):
            raise UserError(f"{type(core).__name__} has no arm to deploy (a deployment needs a push task)")
        self.period, self.tick_dt = core.cfg.control_dt, core.tick_dt
        self.exec_dt = 1.0 / deployment.executor_rate_hz
        self.replan_steps = deployment.replan_steps
        # the next chunk lands after the re-plan interval and its latency: the playing one must last that long
        covered = periods_per_decision(deployment.latency_s[1], self.period, self.replan_steps) * self.period
        if covered + deployment.latency_s[1] > horizon * self.period + 1e-9:
            raise UserError(
                f"re-planning every {self.replan_steps} control period(s) at a latency up to "
                f"{deployment.latency_s[1] * 1e3:.0f} ms outlasts a {horizon}-step chunk "
                f"({horizon * self.period:.1f} s): the arm would stop between chunks"
            )
        low, high = float(env.action_space.low[0]), float(env.action_space.high[0])
        self.action_space = spaces.Box(low, high, shape=(horizon, *env.action_space.shape), dtype=np.float32)
        self._latency_rng = np.random.default_rng(0)
        self._begin_episode()

    def _begin_episode(self) -> None:
        self.latency = float(self._latency_rng.uniform(*self.deployment.latency_s))
        self.filter = SafetyFilter(self.limits)
        self.player = ChunkPlayer(self.period, blend_s=self.deployment.blend_s)
        self.pending: list[tuple[float, float, np.ndarray]] = []  # (arrival, stamp, chunk) on their way
        self.now, self._next_exec = 0.0, 0.0
        self._held, self._last_command = np.zeros(3), np.zeros(3)
        self.jumps: list[float] = []
        self.switch_accel_clips = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:  # the episode's latency follows from its seed; unseeded resets continue the stream
            self._latency_rng = np.random.default_rng([seed, 1])
        self._begin_episode()
        info["latency_s"] = self.latency
        return obs, info

    def step(self, chunk: np.ndarray):
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.shape != (self.horizon, 3):
            raise ValueError(f"a chunk must be [{self.horizon}, 3] m/s, got {chunk.shape}")
        self.pending.append((self.now + self.latency, self.now, chunk))
        periods = periods_per_decision(self.latency, self.period, self.replan_steps)
        rewards = []
        for _ in range(periods):
            _, reward, terminated, truncated, info = self._run_period()
            rewards.append(reward)
            if terminated or truncated:
                break
        obs = self.env.unwrapped.observation()  # rendered once: the periods before the policy's next look go unseen
        padded = np.zeros(self.horizon, dtype=np.float32)
        padded[: len(rewards)] = rewards
        info["step_rewards"], info["steps_executed"] = padded, len(rewards)
        return obs, float(padded.sum()), terminated, truncated, info

    def _run_period(self):
        """One control period: executor (and filter) ticks at their rate, the arm integrated at the IK rate."""
        core = self.env.unwrapped
        velocities = np.zeros((core.ik_ticks, 3))
        for k in range(core.ik_ticks):
            now = self.now + k * self.tick_dt
            if now >= self._next_exec - 1e-9:
                self._next_exec += self.exec_dt
                self._held = self._executor_tick(now, core.pusher_position)
            velocities[k] = self._held
        self.now += self.period
        return core.step_ticks(velocities, observe=False)

    def _executor_tick(self, now: float, pose: np.ndarray) -> np.ndarray:
        switched = False
        while self.pending and self.pending[0][0] <= now + 1e-9:  # a chunk arrives
            _, stamp, chunk = self.pending.pop(0)
            switched |= self.player.chunk is not None
            self.player.offer(chunk, stamp, now)
        command, _ = self.player.command(now)
        if switched:  # the pre-filter velocity change at the switch
            self.jumps.append(float(np.linalg.norm(command - self._last_command)))
        self._last_command = command
        flt, frame = self.filter, self.limits.frame_id
        if self.player.chunk is not None:
            flt.offer_command(command, now, frame, now, now)
        flt.offer_pose(pose, now, frame, now, now)
        result = flt.tick(now)
        self.switch_accel_clips += int(switched and "accel" in result.limited)
        return result.command

    def episode_stats(self) -> dict:
        return {
            **{key: self.filter.counts[key] for key in FILTER_COUNTS},
            "switch_accel_clips": self.switch_accel_clips,
            "jumps": list(self.jumps),
            "latency_s": self.latency,
        }
