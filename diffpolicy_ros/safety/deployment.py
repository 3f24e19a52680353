"""A deployment: the arguments of a ``real_arm`` file that shape what the arm does — the safety filter's limits
(speed, acceleration, workspace box), the executor's rate, and the observation -> command latency the cell
has (``deploy_latency_ms``: a range, for a sim that models it). ``demo --deploy FILE`` records demonstrations
within these limits, so a policy learns motions the arm behind its filter can follow.

Pure data: the CLI reads the file through the launch graph's strict argument parsing and builds one of these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffpolicy_ros.errors import UserError


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
        )

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
