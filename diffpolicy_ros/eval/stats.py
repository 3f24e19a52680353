"""Reading evaluation figures: how far a success rate from N episodes can be trusted."""

from __future__ import annotations

import math


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % (z = 1.96) Wilson score interval of a success rate: unlike the normal approximation it stays
    inside [0, 1] and is honest near 0 and 1, where fine-tuned policies sit."""
    if n <= 0:
        raise ValueError("a success rate needs at least one episode")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
