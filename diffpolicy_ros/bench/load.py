"""A robot PC's normal state for a benchmark: one other process keeping one core busy beside what is measured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_neighbour(enabled: bool = True) -> Iterator[None]:
    """One process spinning on one core while the block runs (nothing when not ``enabled``); ended by its PID."""
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if enabled else None
    try:
        yield
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
