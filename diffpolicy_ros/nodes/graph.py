"""The node graphs, defined once. ``launch/*.launch.py`` translate them to launch_ros; ``diffpolicy launch``
runs them as one process per node where launch_ros is not installed. Nodes never know which started them.

Arguments (``name:=value``) and their defaults are listed per graph in :data:`ARGUMENTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    },
    "real_arm": {
        "checkpoint": "",
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
        "cmd_twist_topic": "/servo_node/delta_twist_cmds",  # MoveIt Servo's twist input
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
        nodes = [
            NodeSpec(
                "sim_bridge",
                "sim_bridge",
                {"task": a["task"], "seed": int(a["seed"]), "real_time_factor": float(a["real_time_factor"])},
            ),
            *cameras,
            proprio,
            NodeSpec("instruction_node", "instruction_node", {"relay_topic": "/task/episode_instruction"}),
            policy,
            NodeSpec("chunk_executor", "chunk_executor", {"rate_hz": float(a["executor_rate_hz"])}),
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
                cam.parameters["device"] = device
        return [
            *cameras,
            proprio,
            NodeSpec("instruction_node", "instruction_node", {"instruction": a["instruction"]}),
            policy,
            NodeSpec(
                "chunk_executor",
                "chunk_executor",
                {"rate_hz": float(a["executor_rate_hz"])},
                remappings=[("/arm/cmd_twist", a["cmd_twist_topic"])],
            ),
        ]

    # replay_eval: a bag player provides /clock and the recorded topics; the policy runs on sim time.
    for node in (*cameras, proprio, policy):
        node.parameters["use_sim_time"] = True
    return [*cameras, proprio, NodeSpec("instruction_node", "instruction_node", {"use_sim_time": True}), policy]
