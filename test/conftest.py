"""Test-wide environment: loopback-only ROS 2 traffic, a per-run domain id, a temp log dir, headless GL."""

from __future__ import annotations

import os
import random
import tempfile

# Set before rclpy or mujoco is imported anywhere in the test session.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 101)))
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="diffpolicy_roslog_"))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")

import diffpolicy_ros  # noqa: E402,F401  (selects the headless GL backend before mujoco loads)
