"""A node stopped by the launcher (SIGTERM) or Ctrl-C exits 0 without a traceback, even when the signal lands
while a callback is publishing (the sim bridge printed "publisher's context is invalid" on `sim_train` stop)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from diffpolicy_ros.bench.safety import constant_velocity_checkpoint

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
@pytest.mark.parametrize("sig,times", [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGINT, 2)])
def test_a_signal_mid_publish_stops_the_node_cleanly(sig, times):
    """Twice: Ctrl-C in a terminal under `ros2 launch` reaches a node from the terminal and again from launch."""
    node = subprocess.Popen(
        [sys.executable, "-c", BUSY_NODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert node.stdout.readline().strip() == "up"
    time.sleep(1.0)  # publishing in a loop by now
    for _ in range(times):
        node.send_signal(sig)
        time.sleep(0.02)
    _, err = node.communicate(timeout=30)
    assert node.returncode == 0, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


# Holds a node at a known point inside its start-up imports: the first of these modules it imports prints a line and
# waits there (inside the real import chain, with the entry point's handler in force) until a signal ends it. A test
# signals after that line, so it catches the node mid-import on a machine of any speed, never by a sleep.
HELD_IMPORTS = ("rclpy", "torch", "mujoco")
HOLD_IMPORT = textwrap.dedent(
    f"""
    import sys, time

    class HoldAtImport:
        def find_spec(self, name, path=None, target=None):
            if name in {HELD_IMPORTS!r}:
                sys.meta_path.remove(self)
                print(f"held at import {{name}}", file=sys.stderr, flush=True)
                time.sleep(60)
            return None

    sys.meta_path.insert(0, HoldAtImport())
    """
)


def wait_until_held(proc: subprocess.Popen) -> str:
    """The hold's line, read from the node's stderr (what it printed before it, if it ended first)."""
    seen = ""
    while proc.poll() is None:
        line = proc.stderr.readline()
        seen += line
        if line.startswith("held at import"):
            return line
    raise AssertionError(f"the node ended before it reached an import: {seen[-2000:]}")


@pytest.mark.quick
def test_a_node_stopped_while_it_still_imports_ends_without_a_traceback():
    """The launcher stops a graph whose required node failed at start (e.g. the filter refusing an inverted box)
    while the others still import torch: no KeyboardInterrupt traceback from inside an import."""
    script = HOLD_IMPORT + "import runpy; runpy.run_module('diffpolicy_ros.nodes.policy_node', run_name='__main__')"
    node = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_held(node)
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


def start_node(node: str, *ros_args: str, env: dict | None = None, hold: bool = False) -> subprocess.Popen:
    """A node as its console script (what ``ros2 run`` / launch_ros start) does it: the entry point's import
    (``hold``: held at its first heavy import, see HOLD_IMPORT)."""
    script = f"from diffpolicy_ros.nodes.entry_points import {node}; raise SystemExit({node}())"
    script = HOLD_IMPORT + script if hold else script
    argv = [sys.executable, "-c", script, *(["--ros-args", *ros_args] if ros_args else [])]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def seconds_to_stop(proc: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[float, str]:
    """Signal the node (the pid alone, as launch does) and time its exit; then clear its process group."""
    start = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a compiler the node started, if it outlived it
        except ProcessLookupError:
            pass
    return time.monotonic() - start, err


@pytest.mark.quick
@pytest.mark.parametrize("node", ["policy_node", "sim_bridge", "safety_filter", "bag_player", "trainer_node"])
def test_ctrl_c_while_a_node_still_imports_ends_it_quietly_within_5_s(node):
    """`ros2 launch`'s Ctrl-C reaches a node as SIGINT, often while it still imports torch and MuJoCo."""
    proc = start_node(node, hold=True)
    held = wait_until_held(proc)
    seconds, err = seconds_to_stop(proc)
    err = held + err
    assert seconds < 5.0 and proc.returncode == 0, (seconds, proc.returncode, err[-2000:])
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]


@pytest.mark.quick
def test_ctrl_c_while_the_policy_builds_its_native_kernel_stops_it_within_5_s(tmp_path):
    """A new install's first load compiles the kernel for a minute: Ctrl-C must not wait for the compiler."""
    ckpt = constant_velocity_checkpoint(tmp_path / "forward.pt", (0.05, 0.02, 0.0))
    cold = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions")}
    proc = start_node("policy_node", "-p", f"checkpoint:={ckpt}", env=cold)
    seen = ""
    deadline = time.monotonic() + 60
    while "building the native CPU kernel" not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert "building the native CPU kernel" in seen, seen[-2000:]
    time.sleep(1.0)  # the compiler is running
    seconds, err = seconds_to_stop(proc)
    assert seconds < 5.0 and proc.returncode == 0, (seconds, proc.returncode, (seen + err)[-2000:])
    assert "Traceback" not in seen + err, (seen + err)[-2000:]
