"""A deployment: the arguments of a ``real_arm`` file that shape what the arm does — the safety filter's limits
(speed, acceleration, workspace box), the executor's rate, how often the policy re-plans, and the observation ->
command latency the cell has (``deploy_latency_ms``: a range, for a sim that models it). ``demo --deploy FILE``
records demonstrations within these limits, so a policy learns motions the arm behind its filter can follow.

Data: the CLI reads the file through the launch graph's strict argument parsing and builds one of these; a PPO
run stores it (``as_dict``) so a resumed run trains under the same deployment.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from diffpolicy_ros import contract as C
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.safety.filter import SafetyLimits


@dataclass(frozen=True)
class Deployment:
    max_speed: float  # m/s, the filter's cap on the norm
    max_accel: float  # m/s^2, the filter's cap on the change per tick
    executor_rate_hz: float
    latency_s: tuple[float, float]  # observation -> command, the range a deployment-faithful sim samples from
    box_low: tuple[float, float, float] | None = None
    box_high: tuple[float, float, float] | None = None
    blend_s: float = 0.0  # the executor's cross-fade at a chunk switch (safety/chunk_player.py)
    real_time_chunking: bool = False  # the policy continues the chunk that plays (models/realtime_chunking.py)
    replan_steps: int = C.REPLAN_STEPS  # control periods between the policy's decisions

    @classmethod
    def from_arguments(cls, values: dict[str, Any]) -> Deployment:
        """From resolved ``real_arm`` arguments (``nodes.graph.resolve_arguments``)."""
        low, high = values["deploy_latency_ms"]
        return cls(
            max_speed=values["max_speed"],
            max_accel=values["max_accel"],
            executor_rate_hz=values["executor_rate_hz"],
            latency_s=(low / 1e3, high / 1e3),
            box_low=tuple(values["box_low"]) if values.get("box_low") else None,
            box_high=tuple(values["box_high"]) if values.get("box_high") else None,
            blend_s=values["blend_s"],
            real_time_chunking=values["real_time_chunking"],
            replan_steps=values["replan_steps"],
        )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Deployment:
        """From :meth:`as_dict` (a checkpoint's or a YAML file's lists back to tuples)."""
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise UserError(f"deployment: unknown fields {sorted(unknown)}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    def safety_limits(self) -> SafetyLimits:
        """The filter's limits as real_arm sets them; without a box in the file, the task's workspace (bench hil's)."""
        return SafetyLimits(
            max_speed=self.max_speed, max_accel=self.max_accel, box_low=tuple(self.box_low or C.WORKSPACE_LOW),
            box_high=tuple(self.box_high or C.WORKSPACE_HIGH), tick_period_s=1.0 / self.executor_rate_hz,
        )  # fmt: skip

    def expert_limits(self) -> dict[str, float]:
        return {"max_speed": self.max_speed, "max_accel": self.max_accel}


def parse_latency_range(name: str, value: Any) -> tuple[float, float]:
    """'[60, 110]' or '60,110' (ms) -> (low, high), 0 <= low <= high."""
    parts = [p for p in str(value).strip().strip("[]").replace(",", " ").split() if p]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise UserError(f"argument {name}:={value!r}: expected two numbers of ms, e.g. {name}:='[60, 110]'") from None
    if not 0 <= low <= high:
        raise UserError(f"argument {name}:={value!r}: expected 0 <= low <= high")
    return low, high
