"""The robot/task contract: what the arm, the cameras, the policy and the ROS graph agree on.

One module, importing neither ROS, MuJoCo nor torch, so the real-arm nodes (and a robot PC without a
simulator) read the same constants as the sim, the models and the trainer. A value that a user can change
per deployment (a topic remap, a joint-name mapping) is a node parameter whose *default* comes from here.
"""

from __future__ import annotations

# -- the arm ---------------------------------------------------------------------------------------------
# The UR ROS 2 driver's joint names, in the model's proprio order.
ARM_JOINTS: tuple[str, ...] = (
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "wrist_1_joint",
    "wrist_2_joint",
    "wrist_3_joint",
)
WORLD_FRAME = "world"

# -- tasks ----------------------------------------------------------------------------------------------
TASK_NAMES: tuple[str, ...] = ("push", "push_two_goals", "point_mass")  # the simulated tasks (sim.TASKS)

# -- cameras ---------------------------------------------------------------------------------------------
CAMERAS: tuple[str, ...] = ("top", "side")  # top-down and 45 degree side view
IMAGE_SIZE = 128  # px, square RGB at model size
IMAGE_SHAPE: tuple[int, int, int] = (IMAGE_SIZE, IMAGE_SIZE, 3)

# -- proprio: float32[PROPRIO_DIM], slices by meaning ------------------------------------------------------
# Joint state comes from the arm's driver; task state (block and goal xy) from perception or the user.
N_JOINTS = len(ARM_JOINTS)
PROPRIO_SLICES: dict[str, slice] = {
    "joint_positions": slice(0, N_JOINTS),
    "joint_velocities": slice(N_JOINTS, 2 * N_JOINTS),
    "object_xy": slice(2 * N_JOINTS, 2 * N_JOINTS + 2),
    "goal_xy": slice(2 * N_JOINTS + 2, 2 * N_JOINTS + 4),
}
PROPRIO_DIM = 2 * N_JOINTS + 4
JOINT_STATE_DIM = 2 * N_JOINTS  # the joint-state slots lead the layout
JOINT_STATE_SLOTS = ("joint_positions", "joint_velocities")
TASK_STATE_SLOTS = ("object_xy", "goal_xy")
# the block and goal xy, adjacent after the joint state: what a vision policy estimates, and its labels
TASK_STATE_SLICE = slice(PROPRIO_SLICES["object_xy"].start, PROPRIO_SLICES["goal_xy"].stop)

# -- actions and chunks ----------------------------------------------------------------------------------
ACTION_DIM = 3  # end-effector linear velocity (vx, vy, vz), m/s, in WORLD_FRAME
CHUNK_HORIZON = 16  # actions per predicted chunk
CONTROL_PERIOD_S = 0.1  # one action is held for this long (10 Hz)
EXECUTE_HORIZON = 4  # actions of a chunk executed before re-planning (BC success 0.84 at 4 vs 0.72 at 8)
MAX_SPEED = 0.25  # m/s per axis: the task's velocity command limit
# control periods between a deployed policy's decisions (real_arm's replan_steps): the chunk lands a latency after
# its observation, so the arm plays its points 1-2. Against re-planning at every period: 261/300 against 249/300
# as deployed in the sim, 52/60 against 54/60 live (within the noise), at half the policy's compute and half the
# chunks PPO samples per env step (docs/real_arm.md)
REPLAN_STEPS = 2


def chunk_timeout_s(replan_steps: int = REPLAN_STEPS) -> float:
    """How long the safety filter waits for the policy's next chunk before it takes the policy's inputs for stale
    and stops the arm: the policy's decision interval and two missed ticks."""
    return (replan_steps + 2) * CONTROL_PERIOD_S


# The task's workspace: the sim keeps the pusher in this box; the sim graph's safety filter uses it too.
WORKSPACE_LOW: tuple[float, float, float] = (0.15, -0.40, 0.022)  # m, in WORLD_FRAME
WORKSPACE_HIGH: tuple[float, float, float] = (0.85, 0.40, 0.20)

DEFAULT_INSTRUCTION = "push the block to the target"
MAX_INSTRUCTION_CHARS = 256


def check_instruction(text: str) -> str | None:
    """The reason an instruction is unusable, or None."""
    if not text.strip():
        return "empty instruction"
    if len(text) > MAX_INSTRUCTION_CHARS:
        return f"instruction longer than {MAX_INSTRUCTION_CHARS} characters"
    return None


# -- topics (the ROS 2 topic contract, docs/topics.md) ---------------------------------------------------
def raw_camera_topic(camera: str) -> str:
    return f"/cameras/{camera}/image_raw"


def camera_info_topic(camera: str) -> str:
    return f"/cameras/{camera}/camera_info"


def camera_pose_topic(camera: str) -> str:
    """geometry_msgs/PoseStamped, latched: the camera's optical frame in the world frame (its hand-eye calibration)."""
    return f"/cameras/{camera}/optical_pose"


def policy_camera_topic(camera: str) -> str:
    return f"/policy/camera/{camera}"


def paired_camera_info_topic(image_topic: str) -> str:
    """The CameraInfo topic image_transport pairs with an image topic: ``/ns/image_raw[/compressed]`` ->
    ``/ns/camera_info``."""
    base = image_topic.removesuffix("/compressed").rstrip("/")
    return f"{base.rsplit('/', 1)[0]}/camera_info" if "/" in base else "camera_info"


def policy_camera_info_topic(camera: str) -> str:
    """The CameraInfo of the model-size image camera_node publishes (K cropped and resized with it)."""
    return f"/policy/camera/{camera}/camera_info"


JOINT_STATES_TOPIC = "/joint_states"
POLICY_JOINT_STATES_TOPIC = "/policy/joint_states"
OBJECT_POSE_TOPIC = "/task/object_pose"
GOAL_POSE_TOPIC = "/task/goal_pose"
INSTRUCTION_TOPIC = "/task/instruction"
EPISODE_INSTRUCTION_TOPIC = "/task/episode_instruction"
ACTION_CHUNK_TOPIC = "/policy/action_chunk"
CMD_TWIST_TOPIC = "/arm/cmd_twist"
CMD_TWIST_SAFE_TOPIC = "/arm/cmd_twist_safe"
EE_POSE_TOPIC = "/arm/ee_pose"
ESTOP_TOPIC = "/safety/estop"
SPEED_SCALING_TOPIC = "/speed_scaling_state_broadcaster/speed_scaling"  # the UR driver's (std_msgs/Float64)
CHECKPOINT_TOPIC = "/trainer/checkpoint"
POLICY_READY_TOPIC = "/policy/ready"  # std_msgs/String, latched: the checkpoint the policy node has loaded
MARKERS_TOPIC = "/visualization/markers"
DIAGNOSTICS_TOPIC = "/diagnostics"
CLOCK_TOPIC = "/clock"
