"""A node stopped by the launcher (SIGTERM) or Ctrl-C exits 0 without a traceback, even when the signal lands
while a callback is publishing (the sim bridge printed "publisher's context is invalid" on `sim_train` stop)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

BUSY_NODE = textwrap.dedent(
    """
    import sys
    from rclpy.node import Node
    from std_msgs.msg import String
    from diffpolicy_ros.nodes.common import run_node

    class Busy(Node):
        def __init__(self):
            super().__init__("busy")
            self.pub = self.create_publisher(String, "busy", 10)
            self.create_timer(0.001, self.tick)
            print("up", flush=True)

        def tick(self):  # nearly always publishing when the signal lands
            for _ in range(2000):
                self.pub.publish(String(data="x"))

    raise SystemExit(run_node(Busy, sys.argv))
    """
)


@pytest.mark.quick
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_publish_stops_the_node_cleanly(sig):
    node = subprocess.Popen(
        [sys.executable, "-c", BUSY_NODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert node.stdout.readline().strip() == "up"
    time.sleep(1.0)  # publishing in a loop by now
    node.send_signal(sig)
    _, err = node.communicate(timeout=30)
    assert node.returncode == 0, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


@pytest.mark.quick
def test_a_node_stopped_while_it_still_imports_ends_without_a_traceback():
    """The launcher stops a graph whose required node failed at start (e.g. the filter refusing an inverted box)
    while the others still import torch: no KeyboardInterrupt traceback from inside an import."""
    node = subprocess.Popen(
        [sys.executable, "-m", "diffpolicy_ros.nodes.policy_node"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    time.sleep(0.3)  # importing rclpy and torch by now
    node.send_signal(signal.SIGTERM)  # what `diffpolicy launch` sends
    _, err = node.communicate(timeout=30)
    assert "Traceback" not in err, err[-2000:]


@pytest.mark.quick
def test_diffpolicy_launch_refuses_an_inverted_box_before_any_node_starts():
    out = subprocess.run(
        [sys.executable, "-m", "diffpolicy_ros.cli", "launch", "real_arm", "box_low:=[0.7,0.3,0.3]",
         "box_high:=[0.3,-0.3,0.05]"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "box_low must be below box_high" in out.stderr
    assert "[launch]" not in out.stdout and "Traceback" not in out.stderr + out.stdout
