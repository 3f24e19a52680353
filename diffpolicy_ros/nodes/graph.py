"""The node graphs, defined once. ``launch/*.launch.py`` translate them to launch_ros; ``diffpolicy launch``
runs them as one process per node where launch_ros is not installed. Nodes never know which started them.

Arguments (``name:=value``) and their defaults are listed per graph in :data:`ARGUMENTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diffpolicy_ros import contract as C
from diffpolicy_ros.assets import config_file

VISION_CHECKPOINT = "runs/vision/latest/checkpoints/best.pt"  # written by `make vision-policy`


@dataclass(frozen=True)
class TrainerDefaults:
    """What the ``sim_train`` trainer runs when not told: the policy config and BC length, the demos, and a PPO
    budget that ends within the hour on a 2-core CPU (image PPO renders both cameras every step: several times
    slower than state PPO here)."""

    policy_config: str
    ppo_env_steps: int
    iters: int = 2000
    eval_every: int = 500
    demo_episodes: int = 100
    eval_episodes: int = 10
    ppo_config: str = "train/push.yaml"
    ppo_envs: int = 4


OBS_DEFAULTS = {
    "multimodal": TrainerDefaults("policy/diffusion.yaml", 50_000),  # cameras, proprio, instruction
    "state": TrainerDefaults("policy/diffusion_state.yaml", 200_000),
}
# start:=weak: DPPO's practice of fine-tuning an early BC start (few demos, BC stopped early: ~0.5 success), so
# PPO has room to show its gain; the push recipe `diffpolicy bench learn --start weak` measured (it reads it
# from here; docs/experiments.md), run by the graph's trainer: the small state-only policy, 32 PPO workers
# to 300k env steps, 100 evaluation episodes per point
WEAK_START = TrainerDefaults(
    "policy/diffusion_state_small.yaml",
    307_200,
    iters=1100,
    eval_every=1100,
    demo_episodes=50,
    eval_episodes=100,
    ppo_config="train/push_weak.yaml",
    ppo_envs=32,
)
STARTS = ("full", "weak")

ARGUMENTS: dict[str, dict[str, str]] = {
    "sim_train": {
        "device": "auto",
        "obs": "multimodal",  # the trainer's policy: multimodal (cameras, proprio, text) | state (the quick one)
        # full: BC to the end, then PPO | weak: watch PPO improve a weak start (the small state-only policy, BC
        # stopped early on 50 demos, then PPO to 300k env steps; ~40 min here; replaces obs)
        "start": "full",
        "policy_config": "",  # the trainer's policy/BC config (config/policy/*.yaml); overrides obs
        "demos": "",
        "checkpoint": "",  # start the policy from this checkpoint instead of waiting for the trainer
        "ddim_steps": "0",  # 0: the checkpoint's own
        "headless": "true",  # accepted for launch compatibility: MuJoCo always renders offscreen here
        "run_dir": "",
        "task": "push",
        "seed": "0",  # episode i of the sim uses seed + i
        "real_time_factor": "1.0",
        "executor_rate_hz": "10.0",
        # '' below: the trainer recipe's value (obs, start; TrainerDefaults)
        "iters": "",  # BC iterations (2000; weak start 1100)
        "eval_every": "",  # BC iterations between evaluations (each writes a checkpoint the policy loads)
        "first_checkpoint_iter": "50",  # an early, unevaluated BC checkpoint: the arm moves within minutes
        "ppo_env_steps": "",  # PPO after BC: 50k multimodal / 200k state / 300k weak start; 0: BC only
        "ppo_config": "",  # config/train/push.yaml (weak start: push_weak.yaml)
        "ppo_envs": "",  # the trainer's PPO sim workers (4; weak start 32)
        "demo_episodes": "",  # expert episodes the trainer records for BC (100; weak start 50)
        "eval_episodes": "",  # held-out episodes per trainer evaluation (10; weak start 100)
        "threads": "1",  # the trainer's torch threads (it shares the CPU with the graph)
        "trainer": "true",  # false: the robot graph only (benchmarks, a fixed checkpoint)
        "max_speed": str(C.MAX_SPEED),  # safety filter: m/s on the norm of the commanded velocity
        "dry_run": "false",  # safety filter: publish zero, report what would be sent on ~/would_send
        "record": "",  # a bag folder to record every topic of the run into ('' = no recording)
    },
    "real_arm": {
        "config": "",  # a YAML file of these arguments (config/real_arm.yaml); name:=value still wins over it
        "checkpoint": VISION_CHECKPOINT,  # the camera + joint-state policy (make vision-policy); no block/goal pose
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
        "cmd_twist_topic": "/servo_node/delta_twist_cmds",  # MoveIt Servo's twist input (the filter's output)
        "servo_node": "/servo_node",  # its services select TWIST input and unpause it ('' when not MoveIt Servo)
        "box_low": "",  # REQUIRED: workspace box of the tool, "[x, y, z]" in m in frame_id; no default on purpose
        "box_high": "",
        "frame_id": C.WORLD_FRAME,  # the frame of the commands and of /arm/ee_pose
        "max_speed": "0.1",  # m/s: start slow on a real cell
        "max_accel": "0.5",  # m/s^2
        "max_run_time_s": "120.0",  # the filter latches 'timeout' after this long active (0: no limit)
        "dry_run": "true",  # the first run of a new cell: nothing moves, ~/would_send shows what would
        "executor_rate_hz": "30.0",
        "instruction": C.DEFAULT_INSTRUCTION,
        "hil": "false",  # true: sim_bridge as the arm (driver mode: real time, a MoveIt Servo stand-in, no resets)
        "task": "push",  # hil: the simulated cell
        "seed": "0",  # hil: the scene
        # hil: the sim also publishes /task/object_pose and /task/goal_pose, as a cell's perception would, for
        # a policy that reads them (a state policy); the default vision policy needs neither
        "hil_task_state": "false",
        "top_device": "",  # OpenCV capture device of each camera ('' = use the driver's topic)
        "side_device": "",
        "top_topic": C.raw_camera_topic("top"),  # each camera driver's sensor_msgs/Image topic
        "side_topic": C.raw_camera_topic("side"),
        "joint_states_topic": C.JOINT_STATES_TOPIC,
        "joint_names": ",".join(C.ARM_JOINTS),  # the cell's names for the contract's six joints, in that order
        "ee_pose_topic": C.EE_POSE_TOPIC,  # geometry_msgs/PoseStamped of the tool in frame_id (the box check)
        "speed_scaling_topic": C.SPEED_SCALING_TOPIC,  # the UR driver's speed scaling (0 = paused: latches)
    },
    "replay_eval": {
        "bag": "",  # REQUIRED: the bag to replay (cameras, /joint_states, instruction, commands; poses if used)
        "checkpoint": "",  # REQUIRED: the policy to evaluate against what the bag recorded
        "out": "replay_eval",  # report.json and PNGs
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
        "rate": "1.0",  # playback speed
        "command_topic": C.CMD_TWIST_TOPIC,  # the recorded commands the chunks are compared with
        "delay_s": "8.0",  # before the first message: the graph discovers the topics and the policy warms up
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


def _choice(args: dict[str, str], name: str, choices: dict) -> str:
    if args[name] not in choices:
        raise ValueError(f"argument {name}: {args[name]!r} is not one of {sorted(choices)}")
    return args[name]


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


def load_arguments(name: str, path: str) -> dict[str, str]:
    """Graph arguments from a YAML mapping (``config:=FILE``); unknown keys are an error naming the file."""
    if not path:
        return {}
    import yaml

    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"argument config:={path}: no such file")
    data = yaml.safe_load(file.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a mapping of {name} arguments")
    unknown = set(data) - set(ARGUMENTS[name]) - {"config"}
    if unknown:
        raise ValueError(f"{file}: unknown argument(s) {sorted(unknown)}; valid: {sorted(ARGUMENTS[name])}")
    # YAML gives numbers, booleans and lists; graph arguments are strings, as on the command line
    return {k: ("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)) for k, v in data.items()}


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
    arguments_file = (overrides or {}).get("config", "")  # only graphs with a 'config' argument (real_arm)
    a = {**ARGUMENTS[name], **load_arguments(name, arguments_file), **(overrides or {})}
    if a.get("checkpoint"):  # nodes may run in another working directory (ros2 launch): an absolute path
        a["checkpoint"] = str(Path(a["checkpoint"]).expanduser().resolve())
    policy = NodeSpec(
        "policy_node",
        "policy_node",
        {"checkpoint": a["checkpoint"], "device": a["device"], "ddim_steps": int(a["ddim_steps"])},
    )
    cameras = [NodeSpec(f"camera_{c}", "camera_node", {"camera_name": c}) for c in ("top", "side")]
    proprio = NodeSpec("proprio_node", "proprio_node")

    if name == "sim_train":
        trainer = OBS_DEFAULTS[_choice(a, "obs", OBS_DEFAULTS)]
        if _choice(a, "start", dict.fromkeys(STARTS)) == "weak":
            trainer = WEAK_START

        def recipe(key: str) -> int:  # a trainer argument, or the recipe's value when not given
            return int(a[key] or getattr(trainer, key))

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
                # the sim publishes a step's data before its /clock tick: a pose can arrive stamped one control
                # period ahead of the filter's sim clock (0.1 s, rejected by the default 0.05 s tolerance)
                future_tolerance_s=C.CONTROL_PERIOD_S + 0.05,
            ),
            NodeSpec(
                "trainer_node",
                "trainer_node",
                {
                    "config": a["policy_config"] or str(config_file(trainer.policy_config)),
                    "demos": a["demos"],
                    "device": a["device"],
                    "run_dir": a["run_dir"],
                    "task": a["task"],
                    "iters": recipe("iters"),
                    "eval_every": recipe("eval_every"),
                    "first_checkpoint_iter": int(a["first_checkpoint_iter"]),
                    "ppo_env_steps": recipe("ppo_env_steps"),
                    "ppo_config": a["ppo_config"] or str(config_file(trainer.ppo_config)),
                    "ppo_envs": recipe("ppo_envs"),
                    "demo_episodes": recipe("demo_episodes"),
                    "eval_episodes": recipe("eval_episodes"),
                    "torch_threads": int(a["threads"]),
                },
                required=False,  # a finished or failed trainer leaves the robot graph running
            ),
        ]
        if not _bool(a["trainer"]):
            nodes = [n for n in nodes if n.executable != "trainer_node"]
        for node in nodes:
            if node.executable != "sim_bridge":  # the bridge publishes /clock; everyone else follows it
                node.parameters.update(sim_time)
        if a["record"]:  # the whole run as a bag (receive time, like ros2 bag record)
            out = str(Path(a["record"]).expanduser().resolve())
            nodes.append(NodeSpec("bag_recorder", "bag_recorder", {"out": out}, required=False))
        return nodes

    if name == "real_arm":
        for cam in cameras:
            cam_name = cam.parameters["camera_name"]
            cam.parameters["input_topic"] = a[f"{cam_name}_topic"]
            if a[f"{cam_name}_device"]:  # a string: '0' is an OpenCV index, not an integer parameter
                cam.parameters["device"] = a[f"{cam_name}_device"]
        joint_names = [j.strip() for j in a["joint_names"].strip("[]").split(",") if j.strip()]
        if len(joint_names) != len(C.ARM_JOINTS):
            raise ValueError(f"argument joint_names: expected {len(C.ARM_JOINTS)} names, got {joint_names}")
        proprio.parameters["joint_names"] = joint_names
        proprio.remappings.append((C.JOINT_STATES_TOPIC, a["joint_states_topic"]))
        policy.parameters["frame_id"] = a["frame_id"]  # commands, the ee pose and the box share one frame
        box = {k: _point(a[k], k) for k in ("box_low", "box_high") if a[k]}
        arm = []
        if _bool(a["hil"]):  # hardware in the loop: the sim as a driver-mode arm behind a Servo stand-in
            arm = [
                NodeSpec(
                    "sim_bridge",
                    "sim_bridge",
                    {
                        "task": a["task"],
                        "seed": int(a["seed"]),
                        "driver_mode": True,
                        "publish_task_state": _bool(a["hil_task_state"]),
                        "command_topic": a["cmd_twist_topic"],
                        "frame_id": a["frame_id"],
                    },
                )
            ]
        for cam in cameras:  # a dead camera leaves the graph up: the filter stops the arm, diagnostics say why
            cam.required = False
        return [
            *arm,
            *cameras,
            proprio,
            NodeSpec("instruction_node", "instruction_node", {"instruction": a["instruction"]}),
            policy,
            NodeSpec(
                "chunk_executor", "chunk_executor", {"rate_hz": float(a["executor_rate_hz"]), "frame_id": a["frame_id"]}
            ),
            safety_filter(
                a,
                **box,
                servo_node="" if _bool(a["hil"]) else a["servo_node"],  # the HIL stand-in needs no activation
                require_box=True,  # refuses to start without an explicit box
                frame_id=a["frame_id"],
                max_accel=float(a["max_accel"]),
                max_run_time_s=float(a["max_run_time_s"]),
                speed_scaling_topic=a["speed_scaling_topic"],
                remappings=[(C.CMD_TWIST_SAFE_TOPIC, a["cmd_twist_topic"]), (C.EE_POSE_TOPIC, a["ee_pose_topic"])],
            ),
        ]

    # replay_eval: the bag player provides /clock and the recorded topics (instruction included); the policy
    # runs on sim time; the evaluator ends the graph with a report when the bag ends.
    for key in ("bag", "checkpoint"):
        if not a[key]:
            raise ValueError(f"replay_eval needs {key}:=PATH")
    bag = str(Path(a["bag"]).expanduser().resolve())
    out = str(Path(a["out"]).expanduser().resolve())
    for node in (*cameras, proprio, policy):
        node.parameters["use_sim_time"] = True
    # the bag's commands are compared with, never sent: the player's command topic goes nowhere else
    player = NodeSpec(
        "bag_player",
        "bag_player",
        {"bag": bag, "rate": float(a["rate"]), "delay_s": float(a["delay_s"]), "clock": True},
        required=False,
    )
    evaluator = NodeSpec(
        "evaluator",
        "evaluator",
        {"out": out, "command_topic": a["command_topic"], "bag": bag, "checkpoint": a["checkpoint"],
         "use_sim_time": True},
    )  # fmt: skip
    return [player, *cameras, proprio, policy, evaluator]
