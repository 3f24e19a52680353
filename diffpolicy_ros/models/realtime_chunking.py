"""Real-time chunking (Black et al. 2025, "Real-Time Execution of Action Chunking Flow Policies"): sample the next
chunk so that it continues the one the arm is executing.

A chunk computed from an observation at time s is stamped s and played from s on, but it reaches the executor
only after the policy's latency L; meanwhile the arm still follows the previous chunk. So the new chunk's first
steps — the ones that execute (or would have) during inference — are already decided: they are the previous
chunk's actions at the same times. Naive switching ignores that and jumps from the old plan to the new one.
Here the sampler is told those actions (:class:`~diffpolicy_ros.models.scheduler.Committed`) and replaces its
x0 estimate by them at every denoising step (RePaint-style, as the paper suggests for DDIM), with weight 1 on the
steps that run during inference and weights falling off over the next ``blend_steps`` (the paper's soft mask),
so the rest of the chunk is sampled to continue them and the switch lands on the plan the arm is following.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class RealTimeChunking:
    frozen_s: float = 0.1  # how long a chunk takes to reach the executor (the inference latency, rounded up)
    blend_steps: int = 4  # after the frozen steps, weights fall from 1 to 0 over this many chunk steps

    def committed(
        self, previous: np.ndarray | None, previous_stamp: float, stamp: float, dt: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(actions [H, A] in m/s, weights [H]) for a chunk stamped ``stamp`` while ``previous`` (stamped
        ``previous_stamp``) plays, each chunk step ``dt`` long; None when nothing plays."""
        if previous is None:
            return None
        horizon = len(previous)
        offset = int(round((stamp - previous_stamp) / dt))  # the previous chunk's step at the new chunk's start
        index = np.arange(horizon) + offset
        inside = (index >= 0) & (index < horizon)  # past its end the executor commands zero: nothing to continue
        actions = np.where(inside[:, None], previous[np.clip(index, 0, horizon - 1)], 0.0).astype(np.float32)
        frozen = max(1, math.ceil(self.frozen_s / dt - 1e-9))
        steps = np.arange(horizon)
        fade = np.clip(1.0 - (steps - frozen + 1) / (self.blend_steps + 1), 0.0, 1.0)  # 1 ... 1, then linearly to 0
        weights = np.where(steps < frozen, 1.0, fade) * inside
        return actions, weights.astype(np.float32)
