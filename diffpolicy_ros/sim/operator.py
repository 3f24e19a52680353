"""A person at the teleoperation device, as a stand-in for a team's first demonstrations: the scripted expert's
plan, played the way an operator plays it.

What an operator does that the expert does not (each a field of :class:`OperatorConfig`; all zero is the
expert):

- **hesitates**: stops and holds still for a moment, at any time (looking at the scene, regripping the device);
- **overshoots**: comes at a waypoint faster than the expert's slow-down, so it runs past and comes back;
- **jitters**: hand tremor, a slowly varying random velocity (low-pass Gaussian noise, 0.5 s) on the command;
- **starts on the wrong side**: heads around the block on one side, then changes its mind and goes around the
  other (the side the episode is recorded with).

The result still passes through the deployment's limits (``demo --deploy``), as teleoperation behind the safety
filter would. Presets (``demo --operator teleop|novice``) or a YAML file of the fields (``--operator FILE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from diffpolicy_ros.config import FRACTION, NON_NEGATIVE, NON_NEGATIVE_INT, Checked, Domain, load_config
from diffpolicy_ros.user_files import OPERATOR_FILE

TREMOR_TIME_S = 0.5  # the jitter's correlation time


@dataclass
class OperatorConfig(Checked):
    hesitation_rate: float = 0.0  # per control step (0.1 s): the chance to stop and hold still
    hesitation_steps: int = 5  # how long a hesitation lasts on average (control steps; drawn from 1 to twice this)
    overshoot: float = 0.0  # the approach runs (1 + this) times the expert's speed toward a waypoint
    jitter_std: float = 0.0  # m/s per axis (x, y): hand tremor
    wrong_side_rate: float = 0.0  # per episode: the chance to start around the block on the other side
    wrong_side_steps: int = 15  # control steps before turning back to the episode's side

    DOMAINS: ClassVar[dict[str, Domain]] = {
        "hesitation_rate": FRACTION, "hesitation_steps": Domain(1, integer=True), "overshoot": NON_NEGATIVE,
        "jitter_std": NON_NEGATIVE, "wrong_side_rate": FRACTION, "wrong_side_steps": NON_NEGATIVE_INT,
    }  # fmt: skip


# A first teleoperation session (a space mouse, an operator who knows the task) and a new operator.
OPERATOR_PRESETS: dict[str, OperatorConfig] = {
    "teleop": OperatorConfig(hesitation_rate=0.03, hesitation_steps=5, overshoot=0.5, jitter_std=0.015,
                             wrong_side_rate=0.2, wrong_side_steps=15),
    "novice": OperatorConfig(hesitation_rate=0.06, hesitation_steps=8, overshoot=1.0, jitter_std=0.03,
                             wrong_side_rate=0.35, wrong_side_steps=20),
}  # fmt: skip


def load_operator(value: str | Path) -> OperatorConfig:
    """A preset's name, or an operator file (YAML of :class:`OperatorConfig`'s fields; every error names the file
    and the key)."""
    if str(value) in OPERATOR_PRESETS:
        return OPERATOR_PRESETS[str(value)]
    return load_config(OperatorConfig, value, OPERATOR_FILE)


class Operator:
    """Wraps a push expert (``plan``/``limit``): :meth:`reset` and :meth:`act` as the expert's."""

    def __init__(self, expert, config: OperatorConfig, dt: float):
        self.expert, self.cfg = expert, config
        self.keep = math.exp(-dt / TREMOR_TIME_S)  # the tremor's step-to-step correlation
        self.rng = np.random.default_rng()

    @property
    def side(self) -> str:
        return self.expert.side

    def reset(self, rng: np.random.Generator) -> str:
        side = self.expert.reset(rng)  # the recorded side, drawn as the expert draws it
        self.rng, self.side_goal, self.t = rng, side, 0
        self.hold, self.tremor = 0, np.zeros(2)
        self.wrong_until = self.cfg.wrong_side_steps if rng.random() < self.cfg.wrong_side_rate else 0
        if self.wrong_until:
            self.expert.go_around("right" if side == "left" else "left")
        return side

    def act(self) -> np.ndarray:
        cfg, expert = self.cfg, self.expert
        if self.t == self.wrong_until and expert.side != self.side_goal:  # changes its mind: around the other side
            expert.go_around(self.side_goal)
        self.t += 1
        action = expert.plan()
        if expert.going_around:  # overshoot the waypoints
            action[:2] *= 1 + cfg.overshoot
        self.tremor = self.keep * self.tremor + math.sqrt(1 - self.keep**2) * self.rng.normal(0, cfg.jitter_std, 2)
        action[:2] += self.tremor
        if self.hold == 0 and self.rng.random() < cfg.hesitation_rate:
            self.hold = int(self.rng.integers(1, 2 * cfg.hesitation_steps + 1))
        if self.hold > 0:
            self.hold -= 1
            action[:] = 0.0
        return expert.limit(action)
