"""The sim_train graph across processes with real rclpy on loopback: sensors -> policy @ 5 Hz -> executor ->
sim; checkpoint hot reload; Ctrl-C stops everything.

The checkpoints here are real diffusion policies whose action normalizer spans a single velocity, so every
chunk they produce is that velocity whatever the (untrained) network outputs: the test checks the graph's
plumbing and timing deterministically, not a policy's skill (BC and eval tests do that).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffpolicy_ros.bench.safety import constant_velocity_checkpoint
from diffpolicy_ros.nodes.graph import graph as graph_definition
from diffpolicy_ros.nodes.runner import spawn_graph, stop_graph

REPO = Path(__file__).resolve().parents[2]
GRAPH_NODES = {n.name for n in graph_definition("sim_train", {"trainer": "false"})}
SEED_BLOCK_AHEAD = 29  # a reset whose block sits straight ahead of the pusher (y within 1 cm)


@pytest.mark.slow
def test_sim_train_graph_end_to_end(tmp_path, spin_until):
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.node import Node
    from std_msgs.msg import String
    from trajectory_msgs.msg import MultiDOFJointTrajectory

    from diffpolicy_ros.messages.conversions import stamp_to_sec, trajectory_to_chunk
    from diffpolicy_ros.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS

    forward = constant_velocity_checkpoint(tmp_path / "forward.pt", (0.2, 0.0, 0.0), use_task_state=True)
    sideways = constant_velocity_checkpoint(tmp_path / "sideways.pt", (0.0, 0.1, 0.0), use_task_state=True)
    log = open(tmp_path / "graph.log", "w")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    overrides = {
        "checkpoint": str(forward),
        "trainer": "false",
        "seed": str(SEED_BLOCK_AHEAD),
        "run_dir": str(tmp_path),
    }
    graph = spawn_graph("sim_train", overrides, env, stdout=log)
    rclpy.init()
    node = Node("graph_test_probe")
    chunks, twists, safe, poses = [], [], [], []
    node.create_subscription(
        MultiDOFJointTrajectory,
        "/policy/action_chunk",
        lambda m: chunks.append((stamp_to_sec(m.header.stamp), trajectory_to_chunk(m, 16, 0.1))),
        COMMAND_QOS,
    )
    node.create_subscription(TwistStamped, "/arm/cmd_twist", lambda m: twists.append(m.twist.linear.x), COMMAND_QOS)
    node.create_subscription(TwistStamped, "/arm/cmd_twist_safe", lambda m: safe.append(m.twist.linear.x), COMMAND_QOS)
    node.create_subscription(PoseStamped, "/task/object_pose", lambda m: poses.append(m.pose.position.x), SENSOR_QOS)
    from visualization_msgs.msg import MarkerArray

    from diffpolicy_ros.nodes.common import VIEWER_QOS

    marker_ns: set[str] = set()
    node.create_subscription(
        MarkerArray, "/visualization/markers", lambda m: marker_ns.update(k.ns for k in m.markers), VIEWER_QOS
    )
    announce = node.create_publisher(String, "/trainer/checkpoint", LATCHED_QOS)
    try:
        came_up = spin_until(node, lambda: len(chunks) > 0, 90)
        assert came_up, "no chunk: " + (tmp_path / "graph.log").read_text()[-3000:]
        # a chunk proves the graph runs; discovery of every node's name can lag it by a moment
        spin_until(node, lambda: GRAPH_NODES <= set(node.get_node_names()), 15)
        names = set(node.get_node_names())
        assert GRAPH_NODES <= names, GRAPH_NODES - names

        # one 16-point finite chunk per re-plan interval (replan_steps: 2 periods, 0.2 s) of the sim's clock, all
        # the checkpoint's velocity (after settling): counted against the observation stamps, so a slow shared
        # machine slows the sim and the count alike
        spin_until(node, lambda: False, 2.0)
        chunks.clear()
        assert spin_until(node, lambda: len(chunks) >= 20, 120), len(chunks)
        periods = np.diff([stamp for stamp, _ in chunks])
        assert np.median(periods) == pytest.approx(0.2, abs=0.011), periods
        assert (len(chunks) - 1) / (chunks[-1][0] - chunks[0][0]) >= 4.5  # few decisions went without a chunk
        for _, chunk in chunks:
            assert chunk.shape == (16, 3) and np.all(np.isfinite(chunk))
            np.testing.assert_allclose(chunk, np.tile([0.2, 0.0, 0.0], (16, 1)), atol=1e-4)
        # the executor streams those velocities, the safety filter passes them (under its cap), the block moves
        assert sum(abs(v - 0.2) < 1e-6 for v in twists) > 50
        # (the filter's box stops the pusher at the workspace's far face after ~3 s of +x at 0.2 m/s: a window of
        # ~150 commands, of which this probe's depth-1 subscription keeps only some on a busy machine — 19 seen)
        assert sum(abs(v - 0.2) < 1e-6 for v in safe) >= 5 and max(safe) <= 0.2 + 1e-6
        assert max(poses) - poses[0] > 0.02, (poses[0], max(poses))
        # a viewer (Foxglove, rviz) gets the scene from the sim and the predicted path from the policy
        assert {"arm", "block", "goal", "policy_chunk"} <= marker_ns, marker_ns

        # a new checkpoint announced by the trainer is picked up
        announce.publish(String(data=str(sideways)))
        assert spin_until(node, lambda: abs(chunks[-1][1][0, 1] - 0.1) < 1e-4, 30), "new checkpoint not picked up"
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        code = stop_graph(graph, timeout=30)  # Ctrl-C to the whole launch; None if it had to be killed
        log.close()
    text = (tmp_path / "graph.log").read_text()
    assert code == 0, text[-3000:]
    assert "Traceback" not in text and "Destroyable" not in text, text[-3000:]  # a clean Ctrl-C
    leftover = subprocess.run(["pgrep", "-g", str(graph.pid)], capture_output=True, text=True).stdout.strip()
    assert not leftover, f"processes left running: {leftover}"


@pytest.mark.slow
def test_the_trainer_records_trains_and_moves_the_arm_with_the_multimodal_policy(tmp_path, spin_until):
    """``make sim-train`` at a tiny budget, from a fresh folder: the default (multimodal) policy's demonstrations
    carry both cameras, the early BC checkpoint reaches the policy node and the arm moves, the console tells the
    story, the finished trainer says so — and the README's next commands find the run's best checkpoint where
    the README says it is."""
    import rclpy
    from geometry_msgs.msg import TwistStamped
    from rclpy.node import Node
    from std_msgs.msg import String

    from diffpolicy_ros.data.episodes import EpisodeDataset
    from diffpolicy_ros.nodes.common import COMMAND_QOS, LATCHED_QOS

    log = open(tmp_path / "graph.log", "w")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    overrides = {
        "demo_episodes": "2",
        "iters": "4",
        "first_checkpoint_iter": "1",
        "eval_every": "4",
        "eval_episodes": "1",
        "ppo_env_steps": "0",
    }
    graph = spawn_graph("sim_train", overrides, env, stdout=log, cwd=str(tmp_path))  # the run: runs/sim_train-*
    rclpy.init()
    node = Node("trainer_test_probe")
    announced, moving = [], []
    node.create_subscription(String, "/trainer/checkpoint", lambda m: announced.append(m.data), LATCHED_QOS)
    node.create_subscription(
        TwistStamped,
        "/arm/cmd_twist_safe",
        lambda m: moving.append(abs(m.twist.linear.x) + abs(m.twist.linear.y) > 1e-4),
        COMMAND_QOS,
    )
    try:
        assert spin_until(node, lambda: any(moving), 180), "the arm never moved: " + log_tail(tmp_path)
        assert announced and announced[0].endswith("bc/checkpoints/last.pt")
        assert spin_until(node, lambda: "training finished" in log_tail(tmp_path), 300), log_tail(tmp_path)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        code = stop_graph(graph, timeout=30)
        log.close()
    assert code == 0, log_tail(tmp_path)
    run = (tmp_path / "runs" / "latest").resolve()
    assert run.name.startswith("sim_train-")
    demos = EpisodeDataset.load(run / "demos.npz")
    assert {"image_top", "image_side", "proprio"} <= set(demos.obs) and demos.n_episodes == 2
    console = (tmp_path / "graph.log").read_text()
    assert console.count("training finished") == 1
    # the console tells the story: what the trainer does and what comes next, the first motion, once each
    assert "recording 2 expert demonstrations with both cameras for BC; then BC 4 iterations" in console
    assert console.count("the arm is moving") == 1
    assert "ee pose rejected" not in console  # a sim reset's pose jump is expected: INFO, counted
    # the run's best checkpoint is where the README's next commands look for it
    best = tmp_path / "runs" / "latest" / "checkpoints" / "best.pt"
    assert best.resolve() == (run / "bc" / "checkpoints" / "best.pt").resolve()
    guide = readme_commands()
    readme = [line for line in guide.COMMANDS if "runs/latest/checkpoints/best.pt" in line]
    assert readme, "the README no longer names runs/latest/checkpoints/best.pt"
    for line in readme:
        args = guide.cli_args(line)
        if args[0] == "eval":  # the cheap follow-on (the graph ones have their own tests)
            result = subprocess.run([sys.executable, "-m", "diffpolicy_ros.cli", *guide.small(args), "--json"],
                                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
            assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"


def readme_commands():
    """test/test_readme.py's reading of the README's command lines (one parser for both tests)."""
    spec = importlib.util.spec_from_file_location("readme_commands", REPO / "test" / "test_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log_tail(tmp_path: Path) -> str:
    return (tmp_path / "graph.log").read_text()[-3000:]


# sim_train stopped with Ctrl-C in each of the trainer's phases: (arguments, the console line that says the phase
# has begun). The phases are long (seconds to minutes) next to the stop, which ends each within one step.
STOP_PHASES = {
    "demonstrations": ({"demo_episodes": "60"}, "recording 60 expert demonstrations"),
    "bc": ({"demo_episodes": "2", "first_checkpoint_iter": "1", "iters": "100000", "eval_every": "100000"},
           "the arm is moving"),
    "evaluation": ({"demo_episodes": "2", "first_checkpoint_iter": "1", "iters": "100", "eval_every": "2",
                    "eval_episodes": "60"}, "evaluating BC iteration 2 on 60 held-out episodes"),
    "ppo_start": ({"obs": "state", "demo_episodes": "2", "iters": "2", "eval_every": "2", "eval_episodes": "1",
                   "ppo_env_steps": "1000000"}, "); PPO to 1000000 env steps"),  # its sim workers still importing
    "ppo": ({"obs": "state", "demo_episodes": "2", "iters": "2", "eval_every": "2", "eval_episodes": "1",
             "ppo_env_steps": "1000000"}, "training (PPO): iter"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("phase", STOP_PHASES)
def test_ctrl_c_stops_sim_train_cleanly_in_every_phase(tmp_path, phase):
    """Every node exits on its own within the stop timeout (none killed), exit 0, no traceback and no error from
    publishing into a context being torn down — and once the first checkpoint has moved the arm, the README's
    next command loads ``runs/latest/checkpoints/best.pt``."""
    import time

    overrides, begun = STOP_PHASES[phase]
    log_path = tmp_path / "graph.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log_path, "w") as log:
        graph = spawn_graph("sim_train", overrides, env, stdout=log, cwd=str(tmp_path))
        deadline = time.monotonic() + 300
        while begun not in log_path.read_text() and time.monotonic() < deadline and graph.poll() is None:
            time.sleep(0.2)
        assert begun in log_path.read_text(), log_tail(tmp_path)
        time.sleep(1.0)  # into the phase (it lasts far longer)
        code = stop_graph(graph, timeout=30)
    console = log_path.read_text()
    assert code == 0, console[-3000:]
    for bad in ("did not stop", "Traceback", "[ERROR]", "context is invalid", "failed"):
        assert bad not in console, (bad, console[-3000:])
    assert "training stopped" in console or "stopped while recording demonstrations" in console, console[-3000:]
    if phase == "demonstrations":  # nothing to load yet: runs/latest does not move to this run
        assert not (tmp_path / "runs" / "latest").exists()
        return
    best = tmp_path / "runs" / "latest" / "checkpoints" / "best.pt"
    assert best.exists(), console[-3000:]
    guide = readme_commands()
    line = next(line for line in guide.COMMANDS if "eval --checkpoint runs/latest/checkpoints/best.pt" in line)
    result = subprocess.run([sys.executable, "-m", "diffpolicy_ros.cli", *guide.small(guide.cli_args(line)), "--json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"
