"""The node graphs, defined once. ``launch/*.launch.py`` translate them to launch_ros; ``diffpolicy launch``
runs them as one process per node where launch_ros is not installed. Nodes never know which started them.

Arguments (``name:=value``) and their defaults are listed per graph in :data:`ARGUMENTS`; each has a kind in
:data:`KINDS` and is converted strictly before any node starts (``dry_run:=ture`` is an error, not ``false``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffpolicy_ros import arguments as A
from diffpolicy_ros import contract as C
from diffpolicy_ros.arguments import ArgumentError
from diffpolicy_ros.assets import config_file
from diffpolicy_ros.config import read_yaml_mapping
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.rl.recipes import OBS_RECIPES, STARTS, WEAK_START
from diffpolicy_ros.safety.deployment import Deployment, parse_latency_range
from diffpolicy_ros.user_files import (
    BAG,
    CAMERA_CALIBRATION,
    CELL_FILE,
    DATASET,
    DEPLOYMENT,
    POLICY_CONFIG,
    TOPIC_MAP,
    TRAIN_CONFIG,
    FileKind,
    check_input,
    check_output,
)

VISION_CHECKPOINT = "runs/vision/latest/checkpoints/best.pt"  # written by `make vision-policy`

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
        "replan_steps": str(C.REPLAN_STEPS),  # the policy decides every this many control periods
        # '' below: the trainer recipe's value (obs, start; rl/recipes.py)
        "iters": "",  # BC iterations (2000; weak start 1100)
        "eval_every": "",  # BC iterations between evaluations (each writes a checkpoint the policy loads)
        "first_checkpoint_iter": "50",  # an early, unevaluated BC checkpoint: the arm moves within minutes
        "ppo_env_steps": "",  # PPO after BC: 50k multimodal / 200k state / 300k weak start; 0: BC only
        "ppo_config": "",  # config/train/push.yaml (weak start: push_weak.yaml)
        "ppo_envs": "",  # the trainer's PPO sim workers (4; weak start 32)
        # a real_arm argument file (config/real_arm.yaml with the cell filled in): the trainer's PPO fine-tunes and
        # evaluates in the sim as deployed (that file's filter limits, executor rate, latency range)
        "deploy": "",
        "demo_episodes": "",  # expert episodes the trainer records for BC (100; weak start 50)
        "eval_episodes": "",  # held-out episodes per trainer evaluation (10; weak start 100)
        "threads": "1",  # the trainer's torch threads (it shares the CPU with the graph)
        "trainer": "true",  # false: the robot graph only (benchmarks, a fixed checkpoint)
        "max_speed": str(C.MAX_SPEED),  # safety filter: m/s on the norm of the commanded velocity
        "dry_run": "false",  # safety filter: publish zero, report what would be sent on ~/would_send
        "record": "",  # a bag folder to record every topic of the run into ('' = no recording)
        # a cell file (config/cells/train.yaml): the sim lays out a cell sampled from its ranges at every episode,
        # and the trainer records its demonstrations and runs PPO in sampled cells ('' = the sim's own world)
        "cells": "",
    },
    "real_arm": {
        "config": "",  # a YAML file of these arguments (config/real_arm.yaml); name:=value still wins over it
        "checkpoint": VISION_CHECKPOINT,  # the camera + joint-state policy (make vision-policy); no block/goal pose
        # the deploy gate: only a checkpoint whose stored held-out evaluation reaches this success is loaded
        "min_success": "0.5",
        "allow_unproven": "false",  # true: lift the gate (logged loudly at every start and load)
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
        "blend_s": "0.0",  # the executor's cross-fade from the old chunk to a new one (0: switch at once)
        "real_time_chunking": "false",  # the policy samples each chunk to continue the one the arm plays
        # the policy decides every this many control periods (contract.REPLAN_STEPS; docs/real_arm.md)
        "replan_steps": str(C.REPLAN_STEPS),
        "instruction": C.DEFAULT_INSTRUCTION,
        "hil": "false",  # true: sim_bridge as the arm (driver mode: real time, a MoveIt Servo stand-in, no resets)
        "task": "push",  # hil: the simulated cell
        "seed": "0",  # hil: the scene
        "cells": "",  # hil: a cell file; each episode's cell sampled from its ranges ('' = the sim's own world)
        # hil: the sim also publishes /task/object_pose and /task/goal_pose, as a cell's perception would, for
        # a policy that reads them (a state policy); the default vision policy needs neither
        "hil_task_state": "false",
        # hil: delay each chunk by this much more (ms), to measure the tolerance to latency rather than guess it
        "extra_latency_ms": "0",
        "top_device": "",  # OpenCV capture device of each camera ('' = use the driver's topic)
        "side_device": "",
        "top_topic": C.raw_camera_topic("top"),  # each camera driver's sensor_msgs/Image topic
        "side_topic": C.raw_camera_topic("side"),
        # a camera calibration file (config/cells/sim_cameras.yaml): the cameras' hand-eye calibration, for a
        # policy with a calibrated estimator (the lens: each driver's CameraInfo beside its image topic, or the
        # file's camera_info for a driver or device without one)
        "camera_calibration": "",
        "joint_states_topic": C.JOINT_STATES_TOPIC,
        "joint_names": ",".join(C.ARM_JOINTS),  # the cell's names for the contract's six joints, in that order
        "ee_pose_topic": C.EE_POSE_TOPIC,  # geometry_msgs/PoseStamped of the tool in frame_id (the box check)
        "speed_scaling_topic": C.SPEED_SCALING_TOPIC,  # the UR driver's speed scaling (0 = paused: latches)
        # not used by the graph: the observation -> command latency this cell has, in ms, for the commands that
        # model the deployment in the sim (demo/eval/train-ppo --deploy FILE); bench hil measures it
        "deploy_latency_ms": "[60, 110]",
    },
    "replay_eval": {
        "bag": "",  # REQUIRED: the bag to replay (cameras, /joint_states, instruction, commands; poses if used)
        "checkpoint": "",  # REQUIRED: the policy to evaluate against what the bag recorded
        "out": "replay_eval",  # report.json and PNGs
        "device": "auto",
        "ddim_steps": "0",  # 0: the checkpoint's own
        "rate": "1.0",  # playback speed
        "command_topic": C.CMD_TWIST_TOPIC,  # the recorded commands the chunks are compared with
        "topic_map": "",  # the cell's topic names (role: topic YAML, as eval-bag --topic-map); over command_topic
        # the bag plays once the policy node says it is ready (/policy/ready: its first load may build the native
        # kernel), then after delay_s; no ready policy within ready_timeout_s fails the replay with a reason
        "ready_timeout_s": "600",
        "delay_s": "1.0",
    },
}


def _joint_names(name: str, value: Any) -> list[str]:
    names = [j.strip() for j in str(value).strip("[]").split(",") if j.strip()]
    if len(names) != len(C.ARM_JOINTS):
        raise ArgumentError(f"argument {name}: expected {len(C.ARM_JOINTS)} comma-separated names, got {names}")
    return names


class FileArgument:
    """A graph argument that names a file of ``kind`` ('' : not given). Converting it is plain text — a graph can
    be described for files still to be made —; :func:`check_files` checks it before a node starts, and reads it
    with ``read`` where that is cheap (configs; a dataset or a bag is read by its node, which stops with one
    line)."""

    def __init__(self, kind: FileKind, read: Callable[[str], Any] | None = None):
        self.kind, self.read = kind, read

    def __call__(self, name: str, value: Any) -> str:
        return A.text(name, value)

    def check(self, path: str) -> None:
        check_input(path, self.kind)
        if self.read is not None:
            self.read(path)


class OutputArgument:
    """A graph argument that names where a node writes: a ``form`` (user_files.check_output) called ``what``."""

    def __init__(self, form: str, what: str, required: bool = False):
        self.form, self.what, self.required = form, what, required

    def __call__(self, name: str, value: Any) -> str:
        return A.nonempty(name, value) if self.required else A.text(name, value)

    def check(self, path: str) -> None:
        check_output(path, self.form, self.what)


def _read_policy_config(path: str) -> None:
    from diffpolicy_ros.rl.bc import load_bc_run  # torch: only when a graph is given its own config

    load_bc_run(path)


def _read_cells(path: str) -> None:
    from diffpolicy_ros.sim.cell import load_cell_ranges  # the sim's package: only when a cell file is given

    load_cell_ranges(path)


def _read_camera_calibration(path: str) -> None:
    from diffpolicy_ros.calibration import load_camera_calibration

    load_camera_calibration(path)


def _path(value: str) -> str:
    """A file argument as the nodes get it: absolute ('' stays '': not given)."""
    return str(Path(value).expanduser().resolve()) if value else ""


def _read_topic_map(path: str) -> None:
    from diffpolicy_ros.messages.topic_map import TopicMap  # ROS message types: only when a map is given

    TopicMap.load(path)


def _read_train_config(path: str) -> None:
    from diffpolicy_ros.rl.ppo import load_ppo_run

    load_ppo_run(path)


# The kind of every argument of every graph (one name means one thing in all graphs).
KINDS: dict[str, A.Kind] = {
    "device": A.device,
    "obs": A.choice(OBS_RECIPES),
    "start": A.choice(STARTS),
    "policy_config": FileArgument(POLICY_CONFIG, _read_policy_config),
    "demos": FileArgument(DATASET),
    "checkpoint": A.text,
    "min_success": A.number(0, 1),
    "allow_unproven": A.flag,
    "ddim_steps": A.integer(0),
    "headless": A.flag,
    "run_dir": OutputArgument("folder", "run folder"),
    "task": A.choice(C.TASK_NAMES),
    "seed": A.integer(0),
    "real_time_factor": A.POSITIVE,
    "executor_rate_hz": A.POSITIVE,
    "blend_s": A.number(0, 1),
    "real_time_chunking": A.flag,
    "replan_steps": A.integer(1),
    "iters": A.optional(A.integer(1)),
    "eval_every": A.optional(A.integer(1)),
    "first_checkpoint_iter": A.integer(0),
    "ppo_env_steps": A.optional(A.integer(0)),
    "ppo_config": FileArgument(TRAIN_CONFIG, _read_train_config),
    "deploy": FileArgument(DEPLOYMENT, lambda path: load_deployment(path)),
    "ppo_envs": A.optional(A.integer(1)),
    "demo_episodes": A.optional(A.integer(1)),
    "eval_episodes": A.optional(A.integer(1)),
    "threads": A.integer(0),
    "trainer": A.flag,
    "max_speed": A.POSITIVE,
    "dry_run": A.flag,
    "record": OutputArgument("new folder", "bag"),
    "config": FileArgument(DEPLOYMENT),  # read by load_arguments, before the others
    "cmd_twist_topic": A.topic,
    "servo_node": A.text,
    "box_low": A.point,
    "box_high": A.point,
    "frame_id": A.nonempty,
    "max_accel": A.POSITIVE,
    "max_run_time_s": A.NON_NEGATIVE,
    "instruction": A.nonempty,
    "hil": A.flag,
    "hil_task_state": A.flag,
    "extra_latency_ms": A.NON_NEGATIVE,
    "top_device": A.text,
    "side_device": A.text,
    "top_topic": A.topic,
    "side_topic": A.topic,
    "joint_states_topic": A.topic,
    "joint_names": _joint_names,
    "ee_pose_topic": A.topic,
    "speed_scaling_topic": A.topic,
    "deploy_latency_ms": parse_latency_range,
    "bag": FileArgument(BAG),
    "out": OutputArgument("folder", "report folder", required=True),
    "rate": A.POSITIVE,
    "command_topic": A.topic,
    "delay_s": A.NON_NEGATIVE,
    "topic_map": FileArgument(TOPIC_MAP, _read_topic_map),
    "ready_timeout_s": A.POSITIVE,
    "cells": FileArgument(CELL_FILE, _read_cells),
    "camera_calibration": FileArgument(CAMERA_CALIBRATION, _read_camera_calibration),
}


# the policy node's own inputs, remapped in a replay when a cell names them otherwise
ROLE_TOPICS = {
    "object_pose": C.OBJECT_POSE_TOPIC,
    "goal_pose": C.GOAL_POSE_TOPIC,
    "instruction": C.INSTRUCTION_TOPIC,
    **{f"camera_pose_{cam}": C.camera_pose_topic(cam) for cam in C.CAMERAS},  # a calibrated policy's
}


@dataclass
class NodeSpec:
    name: str
    executable: str  # console script in lib/diffpolicy_ros (launch_ros) and module diffpolicy_ros.nodes.<executable>
    parameters: dict = field(default_factory=dict)
    remappings: list[tuple[str, str]] = field(default_factory=list)
    required: bool = True


def load_arguments(name: str, path: str) -> dict[str, str]:
    """Graph arguments from a YAML mapping (``config:=FILE``); unknown keys are an error naming the file."""
    if not path:
        return {}
    data = read_yaml_mapping(path, DEPLOYMENT)  # real_arm's config:=
    unknown = set(data) - set(ARGUMENTS[name]) - {"config"}
    if unknown:
        raise ArgumentError(
            f"{DEPLOYMENT.name} {path}: unknown argument(s) {sorted(unknown)}; valid: {sorted(ARGUMENTS[name])}"
        )
    # YAML gives numbers, booleans and lists; graph arguments are strings, as on the command line
    return {k: ("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)) for k, v in data.items()}


def resolve_arguments(name: str, overrides: dict[str, str] | None = None) -> dict[str, Any]:
    """Defaults, then the argument file (``config:=``), then ``overrides``; every value converted by its kind.
    An unknown graph or argument, or a value not of its kind, is an :class:`ArgumentError` naming it."""
    if name not in ARGUMENTS:
        raise ArgumentError(f"unknown graph {name!r}; choose one of {sorted(ARGUMENTS)}")
    overrides = overrides or {}
    unknown = set(overrides) - set(ARGUMENTS[name])
    if unknown:
        raise ArgumentError(f"unknown argument(s) for {name}: {sorted(unknown)}; valid: {sorted(ARGUMENTS[name])}")
    try:
        from_file = load_arguments(name, overrides.get("config", ""))
    except UserError as exc:
        raise ArgumentError(f"argument config:={overrides['config']}: {exc}") from None
    raw = {**ARGUMENTS[name], **from_file, **overrides}
    values = {}
    for key, value in raw.items():
        try:
            values[key] = KINDS[key](key, value)
        except ArgumentError as exc:  # a value the file gave: say which file
            in_file = key in from_file and key not in overrides
            raise (ArgumentError(f"argument config:={overrides['config']}: {exc}") if in_file else exc) from None
    if values.get("checkpoint"):  # nodes may run in another working directory (ros2 launch): an absolute path
        values["checkpoint"] = str(Path(values["checkpoint"]).expanduser().resolve())
    return values


def load_deployment(path: str | Path, overrides: dict[str, str] | None = None) -> Deployment:
    """The deployment a ``real_arm`` argument file describes (``name:=value`` overrides over it), read as strictly
    as the graph reads it: what ``demo --deploy`` and ``eval --deploy`` model."""
    return Deployment.from_arguments(resolve_arguments("real_arm", {"config": str(path), **(overrides or {})}))


def graph(name: str, overrides: dict[str, str] | None = None) -> list[NodeSpec]:
    """The nodes of graph ``name`` with arguments applied (unknown or malformed arguments are an error)."""
    values = resolve_arguments(name, overrides)
    return {"sim_train": sim_train, "real_arm": real_arm, "replay_eval": replay_eval}[name](values)


def check_files(name: str, overrides: dict[str, str] | None = None) -> None:
    """The files graph ``name``'s arguments name, checked (and configs read) as the nodes will read them: a bad
    one is an ArgumentError naming ``name:=`` and what is wrong with the file, before any node starts."""
    values = resolve_arguments(name, overrides)
    for key, value in values.items():
        argument = KINDS[key]
        if isinstance(argument, (FileArgument, OutputArgument)) and value:
            try:
                argument.check(value)
            except UserError as exc:
                raise ArgumentError(f"argument {key}:={value}: {exc}") from None


def launch_graph(name: str, overrides: dict[str, str] | None = None) -> list[NodeSpec]:
    """What a launcher starts (``diffpolicy launch``, the launch files): :func:`graph` once its files are checked."""
    check_files(name, overrides)
    return graph(name, overrides)


# -- the nodes every graph shares -------------------------------------------------------------------------
def policy_node(a: dict, replan_steps: int) -> NodeSpec:
    return NodeSpec("policy_node", "policy_node", {"checkpoint": a["checkpoint"], "device": a["device"],
                                                   "ddim_steps": a["ddim_steps"],
                                                   "replan_steps": replan_steps})  # fmt: skip


def camera_nodes() -> list[NodeSpec]:
    return [NodeSpec(f"camera_{c}", "camera_node", {"camera_name": c}) for c in C.CAMERAS]


def safety_filter(a: dict, remappings: list | None = None, **parameters) -> NodeSpec:
    """The safety filter: executor -> /arm/cmd_twist -> filter -> /arm/cmd_twist_safe (the arm's input)."""
    params = {"max_speed": a["max_speed"], "dry_run": a["dry_run"],
              "chunk_timeout_s": C.chunk_timeout_s(a["replan_steps"]), **parameters}  # fmt: skip
    return NodeSpec("safety_filter", "safety_filter", params, remappings=remappings or [])


# -- the graphs -----------------------------------------------------------------------------------------------
def sim_train(a: dict) -> list[NodeSpec]:
    """The sim as the arm, the robot graph on its clock, and the trainer beside it."""
    recipe = WEAK_START if a["start"] == "weak" else OBS_RECIPES[a["obs"]]

    def trainer(key: str) -> int:  # a trainer argument, or the recipe's value when not given
        return a[key] if a[key] is not None else getattr(recipe, key)

    rtf = a["real_time_factor"]
    # a node's sim clock is the last /clock message its executor took: the sim publishes a step's data before its
    # tick, and on a busy machine an executor can be a few ticks behind (0.2 s seen), more at a faster-than-real-
    # time sim. Stamps up to this far ahead are normal; a wrong clock (wall stamps against sim time) is hours out.
    clock_lag_s = 0.5 * max(rtf, 1.0)
    nodes = [
        NodeSpec("sim_bridge", "sim_bridge",
                 {"task": a["task"], "seed": a["seed"], "real_time_factor": rtf, "cells": _path(a["cells"])}),
        *camera_nodes(),
        NodeSpec("proprio_node", "proprio_node"),
        NodeSpec("instruction_node", "instruction_node", {"relay_topic": C.EPISODE_INSTRUCTION_TOPIC}),
        policy_node(a, a["replan_steps"]),
        NodeSpec("chunk_executor", "chunk_executor",
                 {"rate_hz": a["executor_rate_hz"], "future_tolerance_s": clock_lag_s}),
        safety_filter(
            a,
            box_low=list(C.WORKSPACE_LOW),
            box_high=list(C.WORKSPACE_HIGH),
            # the deadman runs on the steady clock: a slowed-down sim sends commands further apart
            command_timeout_s=0.25 / min(rtf, 1.0),
            pose_timeout_s=0.25 / min(rtf, 1.0),
            chunk_timeout_s=C.chunk_timeout_s(a["replan_steps"]) / min(rtf, 1.0),
            future_tolerance_s=clock_lag_s,
            expect_pose_jumps=True,  # each episode reset teleports the tool
        ),
    ]
    if a["trainer"]:
        parameters = {
            "config": a["policy_config"] or str(config_file(recipe.policy_config)),
            "demos": a["demos"],
            "device": a["device"],
            "run_dir": a["run_dir"],
            "task": a["task"],
            "first_checkpoint_iter": a["first_checkpoint_iter"],
            "ppo_config": a["ppo_config"] or str(config_file(recipe.ppo_config)),
            "deploy": _path(a["deploy"]),
            "cells": _path(a["cells"]),
            "torch_threads": a["threads"],
        }
        for key in ("iters", "eval_every", "ppo_env_steps", "ppo_envs", "demo_episodes", "eval_episodes"):
            parameters[key] = trainer(key)
        # a finished or failed trainer leaves the robot graph running
        nodes.append(NodeSpec("trainer_node", "trainer_node", parameters, required=False))
    for node in nodes[1:]:  # the bridge publishes /clock; everyone else follows it
        node.parameters["use_sim_time"] = True
    if a["record"]:  # the whole run as a bag (receive time, like ros2 bag record)
        out = str(Path(a["record"]).expanduser().resolve())
        nodes.append(NodeSpec("bag_recorder", "bag_recorder", {"out": out}, required=False))
    return nodes


def real_arm(a: dict) -> list[NodeSpec]:
    """Cameras and joint states from the cell's drivers, the policy, the executor and the safety filter in front
    of MoveIt Servo; ``hil:=true`` puts the sim behind a Servo stand-in instead of the arm."""
    cameras = camera_nodes()
    for cam in cameras:
        cam_name = cam.parameters["camera_name"]
        cam.parameters["input_topic"] = a[f"{cam_name}_topic"]
        if a[f"{cam_name}_device"]:  # a string: '0' is an OpenCV index, not an integer parameter
            cam.parameters["device"] = a[f"{cam_name}_device"]
        if a["camera_calibration"]:
            if a["hil"]:
                raise ArgumentError("argument camera_calibration: not with hil:=true (the sim publishes its own)")
            cam.parameters["camera_calibration"] = _path(a["camera_calibration"])
        cam.required = False  # a dead camera leaves the graph up: the filter stops the arm, diagnostics say why
    proprio = NodeSpec("proprio_node", "proprio_node", {"joint_names": a["joint_names"]})
    proprio.remappings.append((C.JOINT_STATES_TOPIC, a["joint_states_topic"]))
    policy = policy_node(a, a["replan_steps"])
    policy.parameters["frame_id"] = a["frame_id"]  # commands, the ee pose and the box share one frame
    if a["extra_latency_ms"] and not a["hil"]:
        raise ArgumentError("argument extra_latency_ms: only with hil:=true (a test of the latency a policy tolerates)")
    policy.parameters["extra_latency_s"] = a["extra_latency_ms"] / 1e3
    policy.parameters["real_time_chunking"] = a["real_time_chunking"]
    policy.parameters.update(min_success=a["min_success"], allow_unproven=a["allow_unproven"])  # the deploy gate
    box = {k: a[k] for k in ("box_low", "box_high") if a[k] is not None}
    if len(box) == 2 and not all(lo < hi for lo, hi in zip(box["box_low"], box["box_high"])):
        raise ArgumentError(f"arguments box_low:={box['box_low']} box_high:={box['box_high']}: box_low must be below "
                            "box_high on every axis")  # fmt: skip
    arm = []
    if a["hil"]:  # hardware in the loop: the sim as a driver-mode arm behind a Servo stand-in
        sim = {"task": a["task"], "seed": a["seed"], "driver_mode": True, "publish_task_state": a["hil_task_state"],
               "command_topic": a["cmd_twist_topic"], "frame_id": a["frame_id"],
               "cells": _path(a["cells"])}  # fmt: skip
        arm = [NodeSpec("sim_bridge", "sim_bridge", sim)]
    return [
        *arm,
        *cameras,
        proprio,
        NodeSpec("instruction_node", "instruction_node", {"instruction": a["instruction"]}),
        policy,
        NodeSpec("chunk_executor", "chunk_executor",
                 {"rate_hz": a["executor_rate_hz"], "frame_id": a["frame_id"], "blend_s": a["blend_s"]}),
        safety_filter(
            a,
            **box,
            servo_node="" if a["hil"] else a["servo_node"],  # the HIL stand-in needs no activation
            require_box=True,  # refuses to start without an explicit box
            frame_id=a["frame_id"],
            max_accel=a["max_accel"],
            max_run_time_s=a["max_run_time_s"],
            speed_scaling_topic=a["speed_scaling_topic"],
            remappings=[(C.CMD_TWIST_SAFE_TOPIC, a["cmd_twist_topic"]), (C.EE_POSE_TOPIC, a["ee_pose_topic"])],
        ),
    ]


def replay_eval(a: dict) -> list[NodeSpec]:
    """The bag player provides /clock and the recorded topics (instruction included); the policy runs on sim
    time; the evaluator ends the graph with a report when the bag ends."""
    for key in ("bag", "checkpoint"):
        if not a[key]:
            raise ArgumentError(f"replay_eval needs {key}:=PATH")
    from diffpolicy_ros.data.bag_io import bag_info
    from diffpolicy_ros.messages.topic_map import TopicMap

    bag = str(Path(a["bag"]).expanduser().resolve())
    out = str(Path(a["out"]).expanduser().resolve())
    topics = TopicMap.load(a["topic_map"]).with_command(None if a["topic_map"] else a["command_topic"])
    topics = topics.for_bag(bag_info(bag).topics)  # cameras raw or compressed, as the bag holds them
    # a chunk at every tick: each observation of the bag gets one to score against the commands that followed it
    cameras, proprio, policy = camera_nodes(), NodeSpec("proprio_node", "proprio_node"), policy_node(a, 1)
    for cam in cameras:  # the camera node picks raw or compressed transport from the topic name
        name = cam.parameters["camera_name"]
        cam.parameters["input_topic"] = topics.topics[f"image_{name}"]
        cam.parameters["camera_info_topic"] = topics.topics[f"camera_info_{name}"]
    proprio.remappings.append((C.JOINT_STATES_TOPIC, topics.topics["joint_states"]))
    for role, contract_topic in ROLE_TOPICS.items():
        if topics.topics[role] != contract_topic:
            policy.remappings.append((contract_topic, topics.topics[role]))
    for node in (*cameras, proprio, policy):
        node.parameters["use_sim_time"] = True
    # the bag's commands are compared with, never sent: the player's command topic goes nowhere else
    player = NodeSpec(
        "bag_player", "bag_player",
        {"bag": bag, "rate": a["rate"], "delay_s": a["delay_s"], "clock": True,
         "wait_for_topic": C.POLICY_READY_TOPIC, "wait_timeout_s": a["ready_timeout_s"]},
        required=False,
    )  # fmt: skip
    evaluator = NodeSpec(
        "evaluator",
        "evaluator",
        {"out": out, "command_topic": topics.command, "bag": bag, "checkpoint": a["checkpoint"],
         "use_sim_time": True},
    )  # fmt: skip
    return [player, *cameras, proprio, policy, evaluator]
