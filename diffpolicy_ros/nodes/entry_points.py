"""The nodes' console scripts (``ros2 run diffpolicy_ros policy_node``, what launch_ros starts).

A node's module imports rclpy, torch and MuJoCo before its ``main`` runs: seconds in which ``ros2 launch``'s
Ctrl-C (SIGINT) would print a KeyboardInterrupt traceback from inside an import. The entry point imports the
node's module with SIGINT ending the process quietly, then restores Python's handler, so the node itself (and
rclpy's handler in ``run_node``) decides how a stop after that point goes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from functools import partial


def _stop_while_importing(signum: int, _frame) -> None:
    sys.stderr.write(f"[INFO] stopped by signal {signum} while starting\n")
    sys.stderr.flush()
    os._exit(0)  # nothing to clean up yet; an exception here could be caught inside a library's import


def run(node: str) -> int:
    """Import the node's module (a stop here ends the process quietly, exit 0), then run its ``main``."""
    previous = signal.signal(signal.SIGINT, _stop_while_importing)
    try:
        module = importlib.import_module(f"diffpolicy_ros.nodes.{node}")
    finally:
        signal.signal(signal.SIGINT, previous)
    return module.main()


def __getattr__(name: str):
    """``from diffpolicy_ros.nodes.entry_points import policy_node``: what a console script does."""
    if not name.startswith("_") and importlib.util.find_spec(f"diffpolicy_ros.nodes.{name}") is not None:
        return partial(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
