"""sim_bridge: the MuJoCo push env as a robot, speaking the real-arm topics.

Steps the sim at the control rate (times ``real_time_factor``), applying the last ``/arm/cmd_twist_safe``
(the safety filter's output) for at most one control period (then zero: a robot without fresh commands
stops), and publishes cameras,
joint states, poses, the episode's instruction and ``/clock``. Episodes reset automatically; outcomes go to
``/diagnostics``.
"""

from __future__ import annotations

import threading

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from diffpolicy_ros import contract as C
from diffpolicy_ros.contract import ARM_JOINTS, CAMERAS
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    LATCHED_QOS,
    WARN_THROTTLE_S,
    Diagnostics,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.nodes.conversions import (
    MessageError,
    camera_info,
    make_joint_state,
    make_pose,
    numpy_to_image,
    twist_vector,
)


class SimBridge(Node):
    def __init__(self):
        super().__init__("sim_bridge")
        self.declare_parameter("task", "push")
        self.declare_parameter("seed", 0)
        parameter(self, "control_rate_hz", 1.0 / C.CONTROL_PERIOD_S, positive, "must be > 0")
        parameter(self, "real_time_factor", 1.0, positive, "must be > 0")
        self.declare_parameter("publish_images", True)
        self.declare_parameter("frame_id", C.WORLD_FRAME)
        p = {n: self.get_parameter(n).value for n in ("task", "seed", "control_rate_hz", "real_time_factor")}
        self.frame_id = self.get_parameter("frame_id").value
        self.images = bool(self.get_parameter("publish_images").value)

        from diffpolicy_ros.sim import make_env  # MuJoCo: only this node and the trainer need a simulator

        obs_mode = "image" if self.images else "state"
        self.env = make_env(p["task"], obs_mode=obs_mode, control_dt=1 / p["control_rate_hz"])
        self.period = self.env.cfg.control_dt
        self.seed, self.episode = int(p["seed"]), 0
        # Integer nanoseconds, monotonic across episodes (env time restarts at each reset). A float sum of
        # 0.1 s steps drifts 1 ns short of the period, which makes sim-time timers skip and then double-fire.
        self.period_ns = round(self.period * 1e9)
        self.sim_time_ns = 0
        self.lock = threading.Lock()
        self.cmd = np.zeros(3)
        self.cmd_time = -(10**18)
        self.ep_return = 0.0

        self.pub_img = {c: self.create_publisher(Image, C.raw_camera_topic(c), 5) for c in CAMERAS}
        self.pub_info = {c: self.create_publisher(CameraInfo, C.camera_info_topic(c), 5) for c in CAMERAS}
        self.pub_joints = self.create_publisher(JointState, C.JOINT_STATES_TOPIC, 10)
        self.pub_ee = self.create_publisher(PoseStamped, C.EE_POSE_TOPIC, 10)
        self.pub_object = self.create_publisher(PoseStamped, C.OBJECT_POSE_TOPIC, 10)
        self.pub_goal = self.create_publisher(PoseStamped, C.GOAL_POSE_TOPIC, 10)
        self.pub_instruction = self.create_publisher(String, C.EPISODE_INSTRUCTION_TOPIC, LATCHED_QOS)
        self.pub_clock = self.create_publisher(Clock, C.CLOCK_TOPIC, 10)
        self.diag = Diagnostics(self)
        # the safety filter's output: the sim obeys what an arm would obey, nothing else
        self.create_subscription(TwistStamped, C.CMD_TWIST_SAFE_TOPIC, self.on_twist, COMMAND_QOS)
        self.create_service(Trigger, "~/reset", self.on_reset)

        self.reset_episode()
        self.create_timer(self.period / p["real_time_factor"], self.step)
        self.get_logger().info(f"sim_bridge: task {p['task']}, {p['control_rate_hz']} Hz, rtf {p['real_time_factor']}")

    def on_twist(self, msg: TwistStamped) -> None:
        try:
            v = twist_vector(msg)
        except MessageError as exc:
            self.get_logger().warn(f"ignoring twist: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        with self.lock:
            self.cmd, self.cmd_time = v, self.sim_time_ns

    def on_reset(self, request, response):
        with self.lock:
            self.reset_episode()
        response.success, response.message = True, f"episode {self.episode} started"
        return response

    def reset_episode(self) -> None:
        obs, _ = self.env.reset(seed=self.seed + self.episode)
        self.ep_return = 0.0
        self.cmd_time = -(10**18)
        self.pub_instruction.publish(String(data=obs["instruction"]))
        self.publish(obs)

    def step(self) -> None:
        with self.lock:
            fresh = self.sim_time_ns - self.cmd_time <= self.period_ns
            action = self.cmd if fresh else np.zeros(3)
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.sim_time_ns += self.period_ns
            self.ep_return += reward
            self.publish(obs)
            if terminated or truncated:
                self.diag.publish(
                    {
                        "episode": self.episode,
                        "success": info["is_success"],
                        "return": self.ep_return,
                        "steps": info["elapsed_steps"],
                        "off_table": info["off_table"],
                    },
                    message="episode finished",
                )
                self.episode += 1
                self.reset_episode()

    def publish(self, obs: dict) -> None:
        stamp = Time(sec=self.sim_time_ns // 1_000_000_000, nanosec=self.sim_time_ns % 1_000_000_000)
        env = self.env
        if self.images:
            for cam in CAMERAS:
                frame = f"{cam}_camera"
                self.pub_img[cam].publish(numpy_to_image(obs[f"image_{cam}"], stamp, frame))
                fovy = float(env.model.cam_fovy[env.model.camera(cam).id])
                size = env.cfg.image_size
                self.pub_info[cam].publish(camera_info(size, size, fovy, stamp, frame))
        self.pub_joints.publish(make_joint_state(ARM_JOINTS, env.joint_positions, env.joint_velocities, stamp))
        self.pub_ee.publish(make_pose(env.pusher_position, stamp, self.frame_id))
        block, yaw = env.block_pose
        self.pub_object.publish(make_pose(block, stamp, self.frame_id, yaw))
        goal = obs["proprio"][C.PROPRIO_SLICES["goal_xy"]]  # the env's goal slot (the midpoint in the two-goal task)
        self.pub_goal.publish(make_pose([goal[0], goal[1], 0.0], stamp, self.frame_id))
        # /clock last: sim-time timers downstream (the policy tick) fire after this step's data is out
        self.pub_clock.publish(Clock(clock=stamp))

    def close(self) -> None:
        self.env.close()


def main(args: list[str] | None = None) -> int:
    return run_node(SimBridge, args, threads=1)  # the renderer's GL context is bound to one thread


if __name__ == "__main__":
    raise SystemExit(main())
