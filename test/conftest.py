"""Test-wide environment: loopback-only ROS 2 traffic, a domain id per test, a temp log dir, headless GL."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Set before rclpy or mujoco is imported anywhere in the test session.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 101)))
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="diffpolicy_roslog_"))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")

import diffpolicy_ros  # noqa: E402,F401  (selects the headless GL backend before mujoco loads)

REPO = Path(__file__).resolve().parents[1]

# Every test gets a domain of its own (1..101, shuffled per run, reused only after 101 tests). Tests kill DDS
# participants on purpose (a camera node, SIGKILL; a node the launcher gives up on), and Fast DDS's shared-memory
# transport can keep what a killed process left half-written (a port, its lock) for the next participant that
# opens the same port: the same domain's ports, reused by the next test's graph. Seen once in CI as a
# safety_filter stuck in rcl_node_fini (the graph-leave message) until the launcher killed it.
_DOMAINS = list(range(1, 102))
random.Random(os.getpid()).shuffle(_DOMAINS)
_NEXT_DOMAIN = itertools.cycle(_DOMAINS)


@pytest.fixture(autouse=True)
def ros_domain(monkeypatch) -> int:
    """This test's ``ROS_DOMAIN_ID``: rclpy in the test process and every graph it starts inherit it."""
    domain = next(_NEXT_DOMAIN)
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    return domain


def pytest_configure(config):
    # torch's default (every core) collapses when another process holds a core; the CLI's default does not
    import torch

    from diffpolicy_ros.device import default_threads

    torch.set_num_threads(default_threads())


@pytest.fixture
def run_cli():
    """Run ``diffpolicy <args> --json`` in a fresh interpreter (as a user would) and return its JSON."""

    def run(*args: str, timeout: float = 300) -> dict:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-m", "diffpolicy_ros.cli", *map(str, args), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=True,
        )
        return json.loads(out.stdout)

    return run


def pytest_collection_modifyitems(config, items):
    """Every test belongs to a tier: ``quick`` (``make test``, colcon) or ``slow`` (``make test-all``)."""
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(t) for t in ("quick", "slow"))]
    if unmarked:
        raise pytest.UsageError(f"tests without a tier marker (quick or slow): {unmarked}")


def _spin_until(node, predicate, timeout: float, period: float = 0.05) -> bool:
    """Spin ``node`` until ``predicate()`` holds (True) or ``timeout`` seconds pass (False)."""
    import time

    import rclpy

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=period)
        if predicate():
            return True
    return False


@pytest.fixture
def spin_until():
    """``spin_until(node, predicate, timeout)``: spin a probe node until a condition holds, with a deadline
    (count what arrived; never assert a rate over a fixed window)."""
    return _spin_until
