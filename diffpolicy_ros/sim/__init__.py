"""MuJoCo push task, its scripted expert and vectorized rollouts. Importing registers the Gymnasium ids."""

import gymnasium as gym

from diffpolicy_ros.sim.push_env import ChunkStepEnv, PushConfig, PushEnv

TASKS = {"push": "diffpolicy_ros/Push-v0", "push_two_goals": "diffpolicy_ros/PushTwoGoals-v0"}

for _task, _env_id in TASKS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point="diffpolicy_ros.sim.push_env:PushEnv",
            kwargs={"two_goals": _task == "push_two_goals"},
            disable_env_checker=True,  # checked by our own tests with gymnasium's env_checker
        )


def make_env(task: str = "push", **kwargs) -> PushEnv:
    """Create a push environment by task name (``push`` | ``push_two_goals``)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    return PushEnv(two_goals=task == "push_two_goals", **kwargs)


__all__ = ["TASKS", "ChunkStepEnv", "PushConfig", "PushEnv", "make_env"]
