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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class RealTimeChunking:
    frozen_s: float = 0.1  # how long a chunk takes to reach the executor (the inference latency, rounded up)
    # after the frozen steps, weights fall from 1 to 0 over this many chunk steps. The graph re-plans every
    # control period, so the steps after the frozen one are the ones the arm plays next: a long fade pins them to
    # a plan one period older (4 steps: success 0.97 -> 0.77 as deployed with DDIM-10); one keeps the switch
    # smooth and the policy in charge (docs/experiments.md)
    blend_steps: int = 1
    # when a new chunk typically takes over, after its stamp (None: frozen_s). The two chunks are aligned at that
    # moment: stamps are the observations' (a camera's), off the control-period grid, so a step count rounded
    # from their difference pairs the wrong steps whenever the switch falls near a step boundary, as it does
    # for a policy much faster than the period
    switch_s: float | None = None

    def committed(
        self, previous: np.ndarray | None, previous_stamp: float, stamp: float, dt: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(actions [H, A] in m/s, weights [H]) for a chunk stamped ``stamp`` while ``previous`` (stamped
        ``previous_stamp``) plays, each chunk step ``dt`` long; None when nothing plays."""
        if previous is None:
            return None
        horizon = len(previous)
        # the previous chunk's step playing at the switch, less the new chunk's: the executor's indices then
        # (safety/chunk_player.py)
        switch = self.frozen_s if self.switch_s is None else self.switch_s
        offset = math.floor((stamp - previous_stamp + switch) / dt + 1e-9) - math.floor(switch / dt + 1e-9)
        index = np.arange(horizon) + offset
        inside = (index >= 0) & (index < horizon)  # past its end the executor commands zero: nothing to continue
        actions = np.where(inside[:, None], previous[np.clip(index, 0, horizon - 1)], 0.0).astype(np.float32)
        frozen = max(1, math.ceil(self.frozen_s / dt - 1e-9))
        steps = np.arange(horizon)
        fade = np.clip(1.0 - (steps - frozen + 1) / (self.blend_steps + 1), 0.0, 1.0)  # 1 ... 1, then linearly to 0
        weights = np.where(steps < frozen, 1.0, fade) * inside
        return actions, weights.astype(np.float32)


def next_tick(ticks: Sequence[float], t: float) -> float:
    """The first tick at or after ``t`` of a periodic timer that ticked at ``ticks`` (its recent tick times,
    oldest first); ``t`` itself when fewer than two are known. The executor takes a new chunk over at its next
    tick after the chunk lands (up to one executor period later), and pairing the chunks at the landing moment
    instead pairs the wrong steps whenever an old step ends in between."""
    if len(ticks) < 2:
        return t
    period = float(np.median(np.diff(ticks)))
    if not period > 0:
        return t
    last = ticks[-1]
    return last + math.ceil((t - last) / period - 1e-6) * period
