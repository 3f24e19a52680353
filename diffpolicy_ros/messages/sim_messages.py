"""One sim step as the ROS messages a cell's drivers would publish: what sim_bridge sends live and what
``diffpolicy demo --to-bag`` records, from the same function. The env is any push-family env (duck-typed:
no MuJoCo import here)."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time

from diffpolicy_ros import contract as C
from diffpolicy_ros.messages.conversions import (
    COMPRESSED_SUFFIX,
    camera_info,
    camera_pose,
    make_joint_state,
    make_pose,
    numpy_to_image,
    rgb_to_compressed,
)
from diffpolicy_ros.messages.markers import scene_markers


def step_messages(
    env, obs: dict, stamp: Time, frame_id: str, images: bool, task_state: bool, compressed: bool = False
) -> list[tuple[str, object]]:
    """(topic, message) for cameras (+ camera_info and the optical frame's pose), joint states, the tool pose, the
    block and goal poses (``task_state``: privileged, a real cell has them only from perception) and the viewer's
    scene markers.
    ``compressed``: the cameras as image_transport's JPEG CompressedImage on ``<raw topic>/compressed``."""
    out: list[tuple[str, object]] = []
    if images:
        for cam in C.CAMERAS:
            frame = f"{cam}_camera"
            if compressed:
                topic = C.raw_camera_topic(cam) + COMPRESSED_SUFFIX
                out.append((topic, rgb_to_compressed(obs[f"image_{cam}"], stamp, frame)))
            else:
                out.append((C.raw_camera_topic(cam), numpy_to_image(obs[f"image_{cam}"], stamp, frame)))
            calibration = env.camera_calibrations[cam]  # this episode's, exact (a cell may move the camera)
            info = camera_info(calibration.k, calibration.width, calibration.height, stamp, frame)
            out.append((C.camera_info_topic(cam), info))
            out.append((C.camera_pose_topic(cam), camera_pose(calibration.pose, stamp)))
    out.append((C.JOINT_STATES_TOPIC, make_joint_state(C.ARM_JOINTS, env.joint_positions, env.joint_velocities, stamp)))
    out.append((C.EE_POSE_TOPIC, make_pose(env.pusher_position, stamp, frame_id)))
    block, yaw = env.block_pose
    if task_state:
        out.append((C.OBJECT_POSE_TOPIC, make_pose(block, stamp, frame_id, yaw)))
        goal = obs["proprio"][C.PROPRIO_SLICES["goal_xy"]]  # the goal slot (the midpoint with two goals)
        out.append((C.GOAL_POSE_TOPIC, make_pose([goal[0], goal[1], 0.0], stamp, frame_id)))
    goals = env.goals if task_state else np.zeros((0, 2))
    markers = scene_markers(
        env.arm_points, block, yaw, env.block_half_size, goals, env.cfg.success_radius, stamp, frame_id
    )
    out.append((C.MARKERS_TOPIC, markers))
    return out
