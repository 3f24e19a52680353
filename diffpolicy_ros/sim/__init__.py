"""Simulated tasks (MuJoCo push, 2-D point mass), their scripted experts and vectorized rollouts.

Importing registers the Gymnasium ids.
"""

import dataclasses
import typing
from pathlib import Path
from typing import Any

import gymnasium as gym

from diffpolicy_ros.config import ConfigError, read_yaml_mapping, type_problem
from diffpolicy_ros.sim.chunk import ChunkStepEnv
from diffpolicy_ros.sim.point_mass import PointMassConfig, PointMassEnv, PointMassExpert
from diffpolicy_ros.sim.push_env import PushConfig, PushEnv
from diffpolicy_ros.user_files import TASK_CONFIG

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


# set by the task's name and the command's options (--task, --images, --cells), not by an override
_NOT_OVERRIDES = ("two_goals", "obs_mode", "cells")


def check_env_overrides(task: str, env: Any, label: str) -> dict[str, Any]:
    """``env`` (a config file's ``env:`` overrides of ``task``'s settings) if every key is a setting of that task
    and every value of its type; else a ConfigError starting with ``label`` (the file) and naming the key."""
    if task not in TASKS:
        raise ConfigError(f"{label}: task = {task!r}: expected one of {', '.join(TASKS)}")
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise ConfigError(f"{label}: env = {env!r}: expected a mapping of the task's settings")
    cls = PointMassConfig if task == "point_mass" else PushConfig
    hints = typing.get_type_hints(cls)
    names = sorted(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_OVERRIDES)
    for key, value in env.items():
        if key not in names:
            raise ConfigError(f"{label}: env: unknown {task} setting {key!r}; valid: {names}")
        expected = type_problem(value, hints[key])
        if expected:
            raise ConfigError(f"{label}: env.{key} = {value!r}: expected {expected}")
    return dict(env)


def load_task_config(path: str | Path, task: str | None = None) -> tuple[str, dict[str, Any]]:
    """(task, env overrides) of a task config (``task: push`` and an optional ``env:`` mapping of its settings,
    e.g. config/sim/push.yaml; ``task``: an explicit one over the file's, as ``--task``); a missing task, an
    unknown key or a value of the wrong type for the task is an error naming the file."""
    label = f"{TASK_CONFIG.name} {path}"
    data = read_yaml_mapping(path, TASK_CONFIG)
    unknown = sorted(set(data) - {"task", "env"})
    if unknown:
        raise ConfigError(f"{label}: unknown key(s) {unknown}; a task config has 'task' and 'env'")
    if "task" not in data:
        raise ConfigError(f"{label}: no 'task' key (one of {', '.join(TASKS)})")
    task = task or data["task"]
    return task, check_env_overrides(task, data.get("env"), label)


def make_expert(
    task: str, env: gym.Env, max_speed: float | None = None, max_accel: float | None = None, operator=None
):
    """The task's scripted expert (``reset(rng) -> side``, ``act() -> action``); ``max_speed`` (m/s, norm) and
    ``max_accel`` (m/s^2): a deployment's limits the demonstrations stay within (push tasks); ``operator`` (an
    ``OperatorConfig``): the expert's plan played as a teleoperator plays it (``sim/operator.py``)."""
    from diffpolicy_ros.sim.expert import ExpertConfig, ScriptedPushExpert

    if task == "point_mass":
        if operator is not None:
            raise ConfigError("--operator: the push tasks only (point_mass's expert has no plan to play)")
        return PointMassExpert(env)
    expert = ScriptedPushExpert(env, ExpertConfig(max_speed=max_speed, max_accel=max_accel))
    if operator is None:
        return expert
    from diffpolicy_ros.sim.operator import Operator

    return Operator(expert, operator, env.unwrapped.cfg.control_dt)


__all__ = [
    "TASKS", "ChunkStepEnv", "PointMassEnv", "PushConfig", "PushEnv", "check_env_overrides", "load_task_config",
    "make_env", "make_expert",
]  # fmt: skip
