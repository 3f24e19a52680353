"""The chunk executor's logic, free of ROS: which velocity to command at time ``now``. The ``chunk_executor``
node and the deployment-faithful sim (``eval --deploy``) both run it.

It plays the point of the newest chunk due at ``now - stamp`` (steps already elapsed are skipped); past a
chunk's end it commands zero. When a newer chunk arrives, the command would jump from the old chunk's point
to the new one's (the filter's acceleration cap then clips the jump). ``blend_s`` > 0 cross-fades instead: for
that long after a switch the command moves linearly from the old chunk's plan to the new one's, both played
at their own times — the old chunk is what the arm was already doing, the new one where it should go.
"""

from __future__ import annotations

import numpy as np

from diffpolicy_ros.contract import CONTROL_PERIOD_S


class ChunkPlayer:
    def __init__(self, dt: float = CONTROL_PERIOD_S, future_tolerance: float = 0.05, blend_s: float = 0.0):
        self.dt, self.future_tolerance, self.blend_s = dt, future_tolerance, blend_s
        self.chunk: np.ndarray | None = None
        self.start = -np.inf
        self.previous: tuple[np.ndarray, float] | None = None  # the chunk a blend fades out of, and its stamp
        self.switched_at = -np.inf  # when the newest chunk took over

    def offer(self, chunk: np.ndarray, stamp: float, now: float) -> str | None:
        """Take a validated chunk; returns the reason it was refused, or None ('' for a silent duplicate)."""
        if stamp == self.start:
            return ""  # the same observation again: nothing new to play
        if stamp < self.start:
            return "out-of-order chunk (older than the one playing)"
        if stamp > now + self.future_tolerance:
            return f"chunk stamped {stamp - now:.3f} s in the future"
        self.previous = (self.chunk, self.start) if self.chunk is not None else None
        self.chunk, self.start, self.switched_at = chunk, stamp, now
        return None

    def _point(self, chunk: np.ndarray, start: float, now: float) -> tuple[np.ndarray, int | None]:
        k = int(np.floor((now - start) / self.dt + 1e-9))
        if 0 <= k < len(chunk):
            return chunk[k], k
        return np.zeros(3), None

    def command(self, now: float) -> tuple[np.ndarray, int | None]:
        """(velocity, index of the newest chunk's point used, or None when that chunk gives zero)."""
        if self.chunk is None:
            return np.zeros(3), None
        v, k = self._point(self.chunk, self.start, now)
        since = now - self.switched_at
        if self.blend_s > 0 and self.previous is not None and since < self.blend_s:
            old, _ = self._point(*self.previous, now)
            w = max(since, 0.0) / self.blend_s
            v = (1.0 - w) * old + w * v
        return v, k
