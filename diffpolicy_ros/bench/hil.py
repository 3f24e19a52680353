"""``diffpolicy bench hil``: does the ``real_arm`` graph push the block? Episodes on the live graph in
hardware-in-the-loop mode (``hil:=true``: the sim as a driver-mode arm behind a MoveIt Servo stand-in).

The graph runs as deployed — cameras -> camera nodes -> policy -> chunk executor -> safety filter -> Servo
input, with ``real_arm``'s limits (0.1 m/s, 0.5 m/s²) unless overridden — and a probe in this process runs the
episodes the way an operator would in a cell: ``/sim_bridge/reset`` lays out a new scene, then the probe waits
for the sim's outcome on ``/diagnostics`` ("block at the goal" / "block off the table") or the episode's time
limit. Episode i is scene ``seed + i``: by default the held-out seeds ``diffpolicy eval`` uses, so both can be
compared scene by scene; a block that reaches the goal after the task's own limit (120 steps: the driver-mode sim,
like an arm, runs on) counts as a failure there too. The graph's ``max_run_time_s`` is off here; the per-episode
limit plays its part.

Reported: the success rate with its 95 % interval, seconds to success, what the safety filter did (its
intervention counts), the policy's latency and chunk rate, and the fastest output the arm received; with
``--out``, a PNG of each episode's tool and block paths over its scene.
"""

from __future__ import annotations

import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from diffpolicy_ros import contract as C
from diffpolicy_ros.bench.load import busy_neighbour
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.models.checkpoint import load_checkpoint
from diffpolicy_ros.runs import EVAL_SEED

FILTER_COUNTS = ("speed_limited", "accel_limited", "box_limited", "deadman_stops", "stale_input_stops", "ticks")


def _values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def bench_hil(
    checkpoint: Path,
    episodes: int = 10,
    episode_timeout_s: float = 60.0,
    seed: int = EVAL_SEED,
    overrides: dict[str, str] | None = None,
    startup_timeout_s: float = 180.0,
    progress: bool = True,
    out_dir: Path | None = None,
    busy: bool = False,
) -> dict:
    """``out_dir``: also ``hil_episodes.png`` (each episode's tool and block paths over its scene) and
    ``hil.json`` there. ``busy``: one busy process beside the graph the whole time, as a robot PC has."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from tqdm import tqdm
    from trajectory_msgs.msg import MultiDOFJointTrajectory
    from visualization_msgs.msg import MarkerArray

    from diffpolicy_ros.bench.ros import init_rclpy, loopback_env
    from diffpolicy_ros.nodes.common import COMMAND_QOS, DIAGNOSTICS_QOS, LATCHED_QOS, SENSOR_QOS, VIEWER_QOS
    from diffpolicy_ros.nodes.graph import resolve_arguments
    from diffpolicy_ros.nodes.runner import spawn_graph, stop_graph
    from diffpolicy_ros.sim import PushConfig

    every = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)  # every command counts, not the newest

    if "seed" in (overrides or {}):
        raise UserError("bench hil: give the first scene as --seed, not seed:=")
    if not Path(checkpoint).is_file():
        raise UserError(f"no checkpoint at {checkpoint} (make vision-policy writes the default one)")
    load_checkpoint(checkpoint)  # a file that is not one ends here, in one line, before any node starts
    env = loopback_env()
    tmp = Path(tempfile.mkdtemp(prefix="diffpolicy_bench_hil_"))
    arguments = {
        "hil": "true",
        "checkpoint": str(Path(checkpoint).resolve()),
        "seed": str(seed - 1),  # the scene the graph starts on; the first reset lays out `seed`
        "box_low": str(list(C.WORKSPACE_LOW)),
        "box_high": str(list(C.WORKSPACE_HIGH)),
        "dry_run": "false",
        "max_run_time_s": "0",  # the per-episode limit below takes its place
        "allow_unproven": "true",  # measuring a checkpoint is how it gets proven (min_success:=... to gate it)
        **(overrides or {}),
    }
    # what the graph runs with (defaults and an argument file included); an unknown or malformed argument is one
    # clear error before anything starts
    resolved = resolve_arguments("real_arm", arguments)
    task_limit = PushConfig.max_episode_steps  # the driver-mode sim runs on past it; eval's episodes end there
    log = open(tmp / "graph.log", "w")
    neighbour = ExitStack()
    neighbour.enter_context(busy_neighbour(busy))  # one core busy, the whole run
    began = time.monotonic()
    graph = spawn_graph("real_arm", arguments, env, stdout=log)
    init_rclpy(env)
    node = Node("bench_hil")
    outcomes: list[dict[str, str]] = []  # the sim's outcome reports
    last: dict[str, dict[str, str]] = {}  # newest diagnostics values per node
    speeds: list[float] = []
    chunks: list[float] = []
    states: list[str] = []
    tool: list[tuple[float, float]] = []  # this episode's tool xy (/arm/ee_pose) and block xy (the scene markers)
    block: list[tuple[float, float]] = []

    def on_markers(msg: MarkerArray) -> None:
        for m in msg.markers:
            if m.ns == "block":
                block.append((m.pose.position.x, m.pose.position.y))

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            name = status.name.lstrip("/")
            if name == "sim_bridge" and status.message in ("block at the goal", "block off the table"):
                outcomes.append({"message": status.message, **_values(status)})
            else:
                last[name] = _values(status)

    intents: list[tuple[float, np.ndarray]] = []  # the executor's commands before the filter, with their times
    outputs: list[tuple[float, np.ndarray]] = []  # what the filter let through
    switches: list[float] = []  # when a chunk from a new observation arrived

    def on_out(msg: TwistStamped) -> None:
        v = msg.twist.linear
        speeds.append(float(np.linalg.norm([v.x, v.y, v.z])))
        outputs.append((time.monotonic(), np.array([v.x, v.y, v.z])))

    def on_intent(msg: TwistStamped) -> None:
        v = msg.twist.linear
        intents.append((time.monotonic(), np.array([v.x, v.y, v.z])))

    def on_chunk(msg: MultiDOFJointTrajectory) -> None:
        chunks.append(time.monotonic())
        switches.append(chunks[-1])

    node.create_subscription(DiagnosticArray, C.DIAGNOSTICS_TOPIC, on_diagnostics, DIAGNOSTICS_QOS)
    node.create_subscription(TwistStamped, resolved["cmd_twist_topic"], on_out, every)
    node.create_subscription(MultiDOFJointTrajectory, C.ACTION_CHUNK_TOPIC, on_chunk, COMMAND_QOS)
    node.create_subscription(TwistStamped, C.CMD_TWIST_TOPIC, on_intent, every)
    node.create_subscription(String, "/safety_filter/state", lambda m: states.append(m.data), LATCHED_QOS)
    node.create_subscription(
        PoseStamped,
        resolved["ee_pose_topic"],
        lambda m: tool.append((m.pose.position.x, m.pose.position.y)),
        SENSOR_QOS,
    )
    node.create_subscription(MarkerArray, C.MARKERS_TOPIC, on_markers, VIEWER_QOS)
    reset = node.create_client(Trigger, "/sim_bridge/reset")

    def spin(seconds: float, until=None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
            if graph.poll() is not None:
                raise RuntimeError(f"the real_arm graph exited ({graph.returncode}); see {log.name}")
            if until is not None and until():
                return True
        return False

    results: list[dict] = []
    try:
        if not spin(startup_timeout_s, until=lambda: bool(chunks) and reset.service_is_ready()):
            raise RuntimeError(
                f"no action chunk in {startup_timeout_s:.0f} s: the graph did not come up; see {log.name}"
            )
        startup_s = time.monotonic() - began
        bar = tqdm(range(episodes), desc="hil episodes", unit="ep", disable=not progress)
        for episode in bar:
            future = reset.call_async(Trigger.Request())
            if not spin(10.0, until=future.done) or not future.result().success:
                raise RuntimeError("/sim_bridge/reset did not answer")
            spin(0.3)  # the reset scene's first messages
            tool.clear()
            block.clear()
            reported, start = len(outcomes), time.monotonic()
            done = spin(episode_timeout_s, until=lambda n=reported: len(outcomes) > n)
            outcome = outcomes[reported] if done else None
            message = outcome["message"] if outcome else f"time limit ({episode_timeout_s:.0f} s)"
            # an arm has no episode limit, the task has: the goal reached after it is a failure, as in `eval`
            late = outcome is not None and int(outcome["steps"]) > task_limit
            if late:
                message += f" after the task's limit ({outcome['steps']} > {task_limit} steps)"
            success = outcome is not None and outcome["message"] == "block at the goal" and not late
            results.append(
                {
                    "episode": episode,
                    "scene_seed": seed + episode,
                    "success": success,
                    "outcome": message,
                    "seconds": round(time.monotonic() - start, 1),
                    "steps": int(outcome["steps"]) if outcome else None,
                    "tool_xy": np.round(tool, 4).tolist(),
                    "block_xy": np.round(block, 4).tolist(),
                }
            )
            bar.set_postfix(success=f"{np.mean([r['success'] for r in results]):.2f}")
        bar.close()
        spin(1.5)  # the nodes' next once-a-second diagnostics
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        stop_graph(graph, timeout=30)
        log.close()
        neighbour.close()

    paths = {r["episode"]: (r.pop("tool_xy"), r.pop("block_xy")) for r in results}
    successes = sum(r["success"] for r in results)
    times = [r["seconds"] for r in results if r["success"]]
    policy, filt = last.get("policy_node", {}), last.get("safety_filter", {})
    gaps = np.diff(chunks[len(chunks) // 2 :]) if len(chunks) > 2 else np.array([np.nan])
    result = {
        "episodes": episodes,
        "success_rate": successes / episodes,
        "success_ci95": wilson_interval(successes, episodes),
        "seconds_to_success_mean": round(float(np.mean(times)), 1) if times else None,
        "episode_timeout_s": episode_timeout_s,
        "max_speed_cap": resolved["max_speed"],
        "max_accel_cap": resolved["max_accel"],
        "max_output_speed": round(max(speeds), 4) if speeds else None,
        "filter": {k: int(float(filt[k])) for k in FILTER_COUNTS if k in filt},
        "filter_states_seen": sorted(set(states)),
        "policy_latency_p50_ms": float(policy["latency_p50_ms"]) if "latency_p50_ms" in policy else None,
        "policy_latency_p99_ms": float(policy["latency_p99_ms"]) if "latency_p99_ms" in policy else None,
        "chunk_rate_hz": round(float(1.0 / np.mean(gaps)), 2) if np.isfinite(gaps).all() else None,
        **switch_figures(switches, intents, outputs, resolved["max_accel"] / resolved["executor_rate_hz"]),
        "startup_s": round(startup_s, 1),
        "busy_neighbour": busy,
        "graph_arguments": arguments,
        "graph_log": log.name,
        "per_episode": results,
    }
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        result["plot"] = str(plot_episodes(results, paths, out_dir / "hil_episodes.png"))
        (out_dir / "hil.json").write_text(json.dumps(result, indent=1))
    return result


def switch_figures(
    switches: list[float], intents: list[tuple[float, np.ndarray]], outputs: list[tuple[float, np.ndarray]],
    max_step: float,
) -> dict:
    """At each chunk switch: the executor's pre-filter velocity change across it (``switch_jump_mean``, m/s), and
    how many switches the filter's acceleration cap clipped within one tick (its output changed by the cap)."""
    t_in, v_in = np.array([t for t, _ in intents]), [v for _, v in intents]
    t_out, v_out = np.array([t for t, _ in outputs]), [v for _, v in outputs]
    jumps, clips = [], 0
    for s in switches:
        i = int(np.searchsorted(t_in, s))  # the first executor command after the chunk arrived
        if 0 < i < len(v_in) and np.any(v_in[i - 1]) and np.any(v_in[i]):  # moving on both sides
            jumps.append(float(np.linalg.norm(v_in[i] - v_in[i - 1])))
        j = int(np.searchsorted(t_out, s))
        if 0 < j < len(v_out) - 1:  # the next two filter ticks: did either change by the full cap?
            steps = [np.linalg.norm(v_out[k] - v_out[k - 1]) for k in (j, j + 1)]
            clips += any(step >= 0.98 * max_step for step in steps)
    return {"switch_jump_mean": round(float(np.mean(jumps)), 4) if jumps else None, "switch_accel_clips": clips,
            "switches": len(switches)}  # fmt: skip


def plot_episodes(results: list[dict], paths: dict[int, tuple[list, list]], path: Path) -> Path:
    """One panel per episode: the tool's path, the block's, where the block started and the goal disc."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from diffpolicy_ros.sim import make_env

    env = make_env("push")  # the scene of each episode, from its seed: the driver-mode graph never says the goal
    cols = min(5, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, r in zip(axes.flat, results):
        obs, _ = env.reset(seed=r["scene_seed"])
        start = obs["proprio"][C.PROPRIO_SLICES["object_xy"]]
        goal = obs["proprio"][C.PROPRIO_SLICES["goal_xy"]]
        tool, block = (np.asarray(p, float).reshape(-1, 2) for p in paths[r["episode"]])
        ax.set_axis_on()
        ax.add_patch(plt.Circle(goal, env.cfg.success_radius, color="tab:green", alpha=0.3, label="goal"))
        ax.plot(*start, "s", color="tab:orange", label="block start")
        if len(block):
            ax.plot(block[:, 0], block[:, 1], color="tab:orange", lw=2, label="block")
        if len(tool):
            ax.plot(tool[:, 0], tool[:, 1], color="tab:blue", lw=1, label="tool")
            ax.plot(*tool[0], "o", color="tab:blue", ms=4)
        ax.set_xlim(C.WORKSPACE_LOW[0], C.WORKSPACE_HIGH[0])
        ax.set_ylim(-0.35, 0.35)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=7)
        verdict = "success" if r["success"] else r["outcome"]
        ax.set_title(f"scene {r['scene_seed']}: {verdict}, {r['seconds']:.0f} s", fontsize=8)
    env.close()
    axes.flat[0].legend(fontsize=6, loc="upper right")
    fig.suptitle("real_arm HIL episodes (x forward from the robot, y to its left; m)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
