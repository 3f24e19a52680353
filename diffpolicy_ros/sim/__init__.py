"""Simulated tasks (MuJoCo push, 2-D point mass), their scripted experts and vectorized rollouts.

Importing registers the Gymnasium ids.
"""

import gymnasium as gym

from diffpolicy_ros.sim.chunk import ChunkStepEnv
from diffpolicy_ros.sim.point_mass import PointMassEnv, PointMassExpert
from diffpolicy_ros.sim.push_env import PushConfig, PushEnv

TASKS = {
    "push": "diffpolicy_ros/Push-v0",
    "push_two_goals": "diffpolicy_ros/PushTwoGoals-v0",
    "point_mass": "diffpolicy_ros/PointMass-v0",
}

for _task, _env_id in TASKS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point="diffpolicy_ros.sim."
            + ("point_mass:PointMassEnv" if _task == "point_mass" else "push_env:PushEnv"),
            kwargs={} if _task == "point_mass" else {"two_goals": _task == "push_two_goals"},
            disable_env_checker=True,  # checked by our own tests with gymnasium's env_checker
        )


def make_env(task: str = "push", **kwargs) -> PushEnv | PointMassEnv:
    """Create an environment by task name (``push`` | ``push_two_goals`` | ``point_mass``)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    if task == "point_mass":
        return PointMassEnv(**kwargs)
    return PushEnv(two_goals=task == "push_two_goals", **kwargs)


def make_expert(task: str, env: gym.Env, max_speed: float | None = None, max_accel: float | None = None):
    """The task's scripted expert (``reset(rng) -> side``, ``act() -> action``); ``max_speed`` (m/s, norm) and
    ``max_accel`` (m/s^2): a deployment's limits the demonstrations stay within (push tasks)."""
    from diffpolicy_ros.sim.expert import ExpertConfig, ScriptedPushExpert

    if task == "point_mass":
        return PointMassExpert(env)
    return ScriptedPushExpert(env, ExpertConfig(max_speed=max_speed, max_accel=max_accel))


__all__ = ["TASKS", "ChunkStepEnv", "PointMassEnv", "PushConfig", "PushEnv", "make_env", "make_expert"]
