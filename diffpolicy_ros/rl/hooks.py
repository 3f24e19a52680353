"""How a host (the trainer node, a test) steers a running training loop from another thread."""

from __future__ import annotations

import threading
from pathlib import Path


class TrainHooks:
    """How a host (the trainer node) steers a running training: pause, stop, save now, checkpoint news."""

    def __init__(self):
        self.running = threading.Event()
        self.running.set()
        self.stop = threading.Event()
        self.save_now = threading.Event()
        self.progress: dict = {}

    def on_checkpoint(self, path: Path, evaluation: dict) -> None:
        """Called after each checkpoint file is written (override or assign), ``best.pt`` included;
        ``evaluation``: the held-out evaluation of its weights (rl/best.py: evaluation_record), {} when none."""

    def on_evaluation(self, iteration: int, episodes: int) -> None:
        """Called as a held-out evaluation of iteration ``iteration``'s weights on ``episodes`` episodes starts."""
