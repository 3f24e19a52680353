"""sim_bridge: the MuJoCo push env as a robot, speaking the real-arm topics.

Steps the sim at the control rate (times ``real_time_factor``), applying the last ``/arm/cmd_twist_safe``
(the safety filter's output) for at most one control period (then zero: a robot without fresh commands
stops), and publishes cameras,
joint states, poses, the episode's instruction and ``/clock``. Episodes reset automatically; outcomes go to
``/diagnostics``.

``driver_mode: true`` (hardware in the loop, ``diffpolicy launch real_arm hil:=true``) makes it behave like a
real cell instead: real time on the wall clock (no ``/clock``), no episode resets or time limit, only what
drivers publish (cameras, ``/joint_states``, ``/arm/ee_pose``; no block or goal pose unless asked), and a
MoveIt Servo stand-in on its twist input: a command is obeyed only while ``now - header.stamp`` is below
``incoming_command_timeout_s`` (0.1 s, Servo's default), its norm capped at ``servo_scale_linear``; a stale
or missing command halts the arm, nothing is held.
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
from visualization_msgs.msg import MarkerArray

from diffpolicy_ros import contract as C
from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.messages.conversions import (
    MessageError,
    twist_vector,
)
from diffpolicy_ros.messages.sim_messages import step_messages
from diffpolicy_ros.nodes.common import (
    COMMAND_QOS,
    LATCHED_QOS,
    VIEWER_QOS,
    WARN_THROTTLE_S,
    Diagnostics,
    file_parameter,
    flag,
    parameter,
    positive,
    run_node,
)
from diffpolicy_ros.user_files import CELL_FILE


class SimBridge(Node):
    FILE_PARAMETERS = {"cells": CELL_FILE}

    def __init__(self):
        super().__init__("sim_bridge")
        self.declare_parameter("task", "push")
        self.declare_parameter("seed", 0)
        parameter(self, "control_rate_hz", 1.0 / C.CONTROL_PERIOD_S, positive, "must be > 0")
        parameter(self, "real_time_factor", 1.0, positive, "must be > 0")
        self.declare_parameter("frame_id", C.WORLD_FRAME)
        self.driver_mode = flag(self, "driver_mode", False)
        command_topic = parameter(self, "command_topic", C.CMD_TWIST_SAFE_TOPIC, bool, "must not be empty")
        self.servo_timeout = parameter(self, "incoming_command_timeout_s", 0.1, positive, "must be > 0")
        self.servo_scale = parameter(self, "servo_scale_linear", C.MAX_SPEED, positive, "must be > 0 (m/s)")
        self.task_state = flag(self, "publish_task_state", not self.driver_mode)
        p = {n: self.get_parameter(n).value for n in ("task", "seed", "control_rate_hz", "real_time_factor")}
        self.frame_id = self.get_parameter("frame_id").value
        self.images = flag(self, "publish_images", True)

        from diffpolicy_ros.sim import make_env  # MuJoCo: only this node and the trainer need a simulator
        from diffpolicy_ros.sim.cell import load_cell_ranges

        _, cells = file_parameter(self, "cells", "a cell file: each episode in a cell sampled from its ranges",
                                  load_cell_ranges)  # fmt: skip
        obs_mode = "image" if self.images else "state"
        # a real cell has no time limit: the episode runs until someone stops it
        settings = {"max_episode_steps": 10**9} if self.driver_mode else {}
        if cells is not None:
            settings["cells"] = cells
        self.env = make_env(p["task"], obs_mode=obs_mode, control_dt=1 / p["control_rate_hz"], **settings)
        self.cmd_stamp = -np.inf  # driver mode: the command's header stamp (ROS time, s)
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

        # every topic of a step (messages/sim_messages.py); sensor data at depth 5-10, the viewer's scene shallow
        types = {
            **{C.raw_camera_topic(c): (Image, 5) for c in CAMERAS},
            **{C.camera_info_topic(c): (CameraInfo, 5) for c in CAMERAS},
            **{C.camera_pose_topic(c): (PoseStamped, LATCHED_QOS) for c in CAMERAS},  # a mount: latched
            C.JOINT_STATES_TOPIC: (JointState, 10),
            C.EE_POSE_TOPIC: (PoseStamped, 10),
            C.OBJECT_POSE_TOPIC: (PoseStamped, 10),
            C.GOAL_POSE_TOPIC: (PoseStamped, 10),
            C.MARKERS_TOPIC: (MarkerArray, VIEWER_QOS),
        }
        self.publishers_by_topic = {t: self.create_publisher(cls, t, qos) for t, (cls, qos) in types.items()}
        self.pub_instruction = self.create_publisher(String, C.EPISODE_INSTRUCTION_TOPIC, LATCHED_QOS)
        self.pub_clock = self.create_publisher(Clock, C.CLOCK_TOPIC, 10)
        self.diag = Diagnostics(self)
        # the safety filter's output (or Servo's input, remapped): the sim obeys what an arm would obey, only that
        self.create_subscription(TwistStamped, command_topic, self.on_twist, COMMAND_QOS)
        self.create_service(Trigger, "~/reset", self.on_reset)

        self.reset_episode()
        rtf = 1.0 if self.driver_mode else p["real_time_factor"]  # a real arm runs in real time
        self.create_timer(self.period / rtf, self.step_driver if self.driver_mode else self.step)
        self.get_logger().info(f"sim_bridge: task {p['task']}, {p['control_rate_hz']} Hz, rtf {p['real_time_factor']}")

    def on_twist(self, msg: TwistStamped) -> None:
        try:
            v = twist_vector(msg)
        except MessageError as exc:
            self.get_logger().warn(f"ignoring twist: {exc}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        with self.lock:
            self.cmd, self.cmd_time = v, self.sim_time_ns
            self.cmd_stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9

    def servo_command(self) -> np.ndarray:
        """MoveIt Servo's rule: a twist is stale once ``now - stamp >= incoming_command_timeout`` -> halt."""
        now = self.get_clock().now().nanoseconds * 1e-9
        if not now - self.cmd_stamp < self.servo_timeout:
            return np.zeros(3)
        v = np.asarray(self.cmd, float)
        speed = float(np.linalg.norm(v))
        return v * (self.servo_scale / speed) if speed > self.servo_scale else v

    def step_driver(self) -> None:
        """One control period of the arm as a driver sees it: no resets, wall-clock stamps."""
        with self.lock:
            obs, reward, terminated, _, info = self.env.step(self.servo_command())
            self.ep_return += reward
            if terminated and not self.reported:
                self.reported = True
                result = "block at the goal" if info["is_success"] else "block off the table"
                self.get_logger().info(f"task: {result} after {info['elapsed_steps']} steps")
                self.diag.publish({"success": info["is_success"], "steps": info["elapsed_steps"]}, message=result)
            self.publish(obs, self.get_clock().now().to_msg())

    def on_reset(self, request, response):
        """A new episode on the next scene (seed + episode): in driver mode the only way to get one."""
        with self.lock:
            self.episode += 1
            self.reset_episode()
        response.success, response.message = True, f"episode {self.episode} started"
        return response

    def reset_episode(self) -> None:
        obs, _ = self.env.reset(seed=self.seed + self.episode)
        self.ep_return = 0.0
        self.cmd_time = -(10**18)
        self.reported = False
        self.pub_instruction.publish(String(data=obs["instruction"]))
        self.publish(obs, None if not self.driver_mode else self.get_clock().now().to_msg())

    def step(self) -> None:
        with self.lock:
            fresh = self.sim_time_ns - self.cmd_time <= self.period_ns
            action = self.cmd if fresh else np.zeros(3)
            obs, reward, terminated, truncated, info = self.env.step(action)
            self.sim_time_ns += self.period_ns
            self.ep_return += reward
            self.publish(obs)
            if terminated or truncated:
                outcome = "success" if info["is_success"] else "off the table" if info["off_table"] else "time out"
                self.get_logger().info(
                    f"episode {self.episode}: {outcome}, return {self.ep_return:.2f}, {info['elapsed_steps']} steps"
                )
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

    def publish(self, obs: dict, stamp: Time | None = None) -> None:
        """Every topic of one step; ``stamp`` None: sim time (and ``/clock`` last)."""
        sim_clock = stamp is None
        if sim_clock:
            stamp = Time(sec=self.sim_time_ns // 1_000_000_000, nanosec=self.sim_time_ns % 1_000_000_000)
        for topic, msg in step_messages(self.env, obs, stamp, self.frame_id, self.images, self.task_state):
            self.publishers_by_topic[topic].publish(msg)
        if sim_clock:  # /clock last: sim-time timers downstream (the policy tick) fire after this step's data
            self.pub_clock.publish(Clock(clock=stamp))

    def close(self) -> None:
        self.env.close()


def main(args: list[str] | None = None) -> int:
    return run_node(SimBridge, args, threads=1)  # the renderer's GL context is bound to one thread


if __name__ == "__main__":
    raise SystemExit(main())
