"""The node graphs, defined once. ``launch/*.launch.py`` translate them to launch_ros; ``diffpolicy launch``
runs them as one process per node where launch_ros is not installed. Nodes never know which started them.

Arguments (``name:=value``) and their defaults are listed per graph in :data:`ARGUMENTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diffpolicy_ros import contract as C

ARGUMENTS: dict[str, dict[str, str]] = {
    "sim_train": {
        "device": "auto",
        "config": "",  # trainer's policy/BC config (default config/policy/diffusion_state.yaml)
        "demos": "",
        "checkpoint": "",  # start the policy from this checkpoint instead of waiting for the trainer
        "ddim_steps": "0",  # 0: the checkpoint's own
        "headless": "true",  # accepted for launch compatibility: MuJoCo always renders offscreen here
        "run_dir": "",
        "task": "push",
        "seed": "0",  # episode i of the sim uses seed + i
        "real_time_factor": "1.0",
        "executor_rate_hz": "10.0",
        "iters": "2000",
        "eval_every": "500",  # BC iterations between evaluations (each writes a checkpoint the policy loads)
        "ppo_env_steps": "200000",  # PPO fine-tuning after BC (0: BC only)
        "ppo_config": "",  # default config/train/push.yaml
        "trainer": "true",  # false: the robot graph only (benchmarks, a fixed checkpoint)
        "max_speed": str(C.MAX_SPEED),  # safety filter: m/s on the norm of the commanded velocity
        "dry_run": "false",  # safety filter: publish zero, report what would be sent on ~/would_send
    },
    "real_arm": {
        "checkpoint": "",
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
        "cmd_twist_topic": "/servo_node/delta_twist_cmds",  # MoveIt Servo's twist input (the filter's output)
        "box_low": "",  # REQUIRED: workspace box of the tool, "[x, y, z]" in m in frame_id; no default on purpose
        "box_high": "",
        "frame_id": C.WORLD_FRAME,  # the frame of the commands and of /arm/ee_pose
        "max_speed": "0.1",  # m/s: start slow on a real cell
        "max_accel": "0.5",  # m/s^2
        "max_run_time_s": "120.0",  # the filter latches 'timeout' after this long active (0: no limit)
        "dry_run": "true",  # the first run of a new cell: nothing moves, ~/would_send shows what would
        "executor_rate_hz": "30.0",
        "instruction": "push the block to the target",
        "top_device": "",  # OpenCV capture device of each camera ('' = use the driver's topic)
        "side_device": "",
    },
    "replay_eval": {
        "checkpoint": "",
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
    },
}


@dataclass
class NodeSpec:
    name: str
    executable: str  # console script in lib/diffpolicy_ros (launch_ros) and module diffpolicy_ros.nodes.<executable>
    parameters: dict = field(default_factory=dict)
    remappings: list[tuple[str, str]] = field(default_factory=list)
    required: bool = True


def _bool(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes", "on")


def _point(text: str, name: str) -> list[float]:
    """'[x, y, z]' or 'x,y,z' -> three floats (an error names the argument)."""
    parts = [p for p in str(text).strip().strip("[]").replace(",", " ").split() if p]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3:
        raise ValueError(f"argument {name}:={text!r}: expected three numbers, e.g. {name}:='[0.3, -0.2, 0.05]'")
    return values


def safety_filter(a: dict[str, str], remappings: list | None = None, **parameters) -> NodeSpec:
    """The safety filter: executor -> /arm/cmd_twist -> filter -> /arm/cmd_twist_safe (the arm's input)."""
    params = {"max_speed": float(a["max_speed"]), "dry_run": _bool(a["dry_run"]), **parameters}
    return NodeSpec("safety_filter", "safety_filter", params, remappings=remappings or [])


def graph(name: str, overrides: dict[str, str] | None = None) -> list[NodeSpec]:
    """The nodes of graph ``name`` with arguments applied (unknown arguments are an error)."""
    if name not in ARGUMENTS:
        raise ValueError(f"unknown graph {name!r}; choose one of {sorted(ARGUMENTS)}")
    unknown = set(overrides or {}) - set(ARGUMENTS[name])
    if unknown:
        raise ValueError(f"unknown argument(s) for {name}: {sorted(unknown)}; valid: {sorted(ARGUMENTS[name])}")
    a = {**ARGUMENTS[name], **(overrides or {})}
    policy = NodeSpec(
        "policy_node",
        "policy_node",
        {"checkpoint": a["checkpoint"], "device": a["device"], "ddim_steps": int(a["ddim_steps"])},
    )
    cameras = [NodeSpec(f"camera_{c}", "camera_node", {"camera_name": c}) for c in ("top", "side")]
    proprio = NodeSpec("proprio_node", "proprio_node")

    if name == "sim_train":
        sim_time = {"use_sim_time": True}
        rtf = float(a["real_time_factor"])
        nodes = [
            NodeSpec("sim_bridge", "sim_bridge", {"task": a["task"], "seed": int(a["seed"]), "real_time_factor": rtf}),
            *cameras,
            proprio,
            NodeSpec("instruction_node", "instruction_node", {"relay_topic": C.EPISODE_INSTRUCTION_TOPIC}),
            policy,
            NodeSpec("chunk_executor", "chunk_executor", {"rate_hz": float(a["executor_rate_hz"])}),
            safety_filter(
                a,
                box_low=list(C.WORKSPACE_LOW),
                box_high=list(C.WORKSPACE_HIGH),
                # the deadman runs on the steady clock: a slowed-down sim sends commands further apart
                command_timeout_s=0.25 / min(rtf, 1.0),
                pose_timeout_s=0.25 / min(rtf, 1.0),
            ),
            NodeSpec(
                "trainer_node",
                "trainer_node",
                {
                    "config": a["config"],
                    "demos": a["demos"],
                    "device": a["device"],
                    "run_dir": a["run_dir"],
                    "task": a["task"],
                    "iters": int(a["iters"]),
                    "eval_every": int(a["eval_every"]),
                    "ppo_env_steps": int(a["ppo_env_steps"]),
                    "ppo_config": a["ppo_config"],
                },
                required=False,  # a finished or failed trainer leaves the robot graph running
            ),
        ]
        if not _bool(a["trainer"]):
            nodes = [n for n in nodes if n.executable != "trainer_node"]
        for node in nodes:
            if node.executable != "sim_bridge":  # the bridge publishes /clock; everyone else follows it
                node.parameters.update(sim_time)
        return nodes

    if name == "real_arm":
        for cam in cameras:
            device = a[f"{cam.parameters['camera_name']}_device"]
            if device:
                cam.parameters["device"] = device  # a string: '0' is an OpenCV index, not an integer parameter
        box = {k: _point(a[k], k) for k in ("box_low", "box_high") if a[k]}
        return [
            *cameras,
            proprio,
            NodeSpec("instruction_node", "instruction_node", {"instruction": a["instruction"]}),
            policy,
            NodeSpec("chunk_executor", "chunk_executor", {"rate_hz": float(a["executor_rate_hz"])}),
            safety_filter(
                a,
                **box,
                require_box=True,  # refuses to start without an explicit box
                frame_id=a["frame_id"],
                max_accel=float(a["max_accel"]),
                max_run_time_s=float(a["max_run_time_s"]),
                remappings=[(C.CMD_TWIST_SAFE_TOPIC, a["cmd_twist_topic"])],
            ),
        ]

    # replay_eval: a bag player provides /clock and the recorded topics; the policy runs on sim time.
    for node in (*cameras, proprio, policy):
        node.parameters["use_sim_time"] = True
    return [*cameras, proprio, NodeSpec("instruction_node", "instruction_node", {"use_sim_time": True}), policy]
