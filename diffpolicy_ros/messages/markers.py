"""visualization_msgs/MarkerArray builders: the scene (arm, block, goals) and the policy's predicted path, in
the world frame, so Foxglove or rviz shows the run live or from a recorded bag. Plain arrays in, messages out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from visualization_msgs.msg import Marker, MarkerArray

ARM_RGBA = (0.55, 0.6, 0.7, 1.0)
BLOCK_RGBA = (0.95, 0.65, 0.1, 1.0)
GOAL_RGBA = ((0.1, 0.85, 0.2, 0.6), (0.2, 0.4, 0.95, 0.6))  # first goal green, second blue
EXECUTED_RGBA = (0.15, 0.85, 0.15, 1.0)
PLANNED_RGBA = (0.9, 0.9, 0.9, 0.8)


def _marker(ns: str, mid: int, kind: int, stamp: Time, frame: str, rgba: Sequence[float]) -> Marker:
    m = Marker(ns=ns, id=mid, type=kind, action=Marker.ADD)
    m.header.stamp, m.header.frame_id = stamp, frame
    m.color.r, m.color.g, m.color.b, m.color.a = (float(c) for c in rgba)
    m.pose.orientation.w = 1.0
    return m


def _points(xyz: np.ndarray) -> list[Point]:
    return [Point(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in np.asarray(xyz, float)]


def scene_markers(
    arm_points: np.ndarray,
    block_xyz: Sequence[float],
    block_yaw: float,
    block_half: Sequence[float],
    goals_xy: np.ndarray,
    goal_radius: float,
    stamp: Time,
    frame: str,
) -> MarkerArray:
    """The arm as a line through its joints (spheres at the joints), the block as a box, the goals as discs."""
    arm = _marker("arm", 0, Marker.LINE_STRIP, stamp, frame, ARM_RGBA)
    arm.scale.x = 0.04
    arm.points = _points(arm_points)
    joints = _marker("arm", 1, Marker.SPHERE_LIST, stamp, frame, ARM_RGBA)
    joints.scale.x = joints.scale.y = joints.scale.z = 0.06
    joints.points = _points(arm_points)
    block = _marker("block", 0, Marker.CUBE, stamp, frame, BLOCK_RGBA)
    block.pose.position = Point(x=float(block_xyz[0]), y=float(block_xyz[1]), z=float(block_xyz[2]))
    block.pose.orientation.z, block.pose.orientation.w = float(np.sin(block_yaw / 2)), float(np.cos(block_yaw / 2))
    block.scale.x, block.scale.y, block.scale.z = (2.0 * float(h) for h in block_half)
    markers = [arm, joints, block]
    for k, (x, y) in enumerate(np.asarray(goals_xy, float)):
        goal = _marker("goal", k, Marker.CYLINDER, stamp, frame, GOAL_RGBA[k % len(GOAL_RGBA)])
        goal.pose.position = Point(x=float(x), y=float(y), z=0.001)
        goal.scale.x = goal.scale.y = 2.0 * goal_radius
        goal.scale.z = 0.002
        markers.append(goal)
    return MarkerArray(markers=markers)


def chunk_path_markers(start: Sequence[float], chunk: np.ndarray, dt: float, executed: int, stamp: Time, frame: str):
    """The predicted chunk as a path from the tool: the part executed before the next inference in green."""
    path = np.vstack([np.asarray(start, float), np.asarray(start, float) + np.cumsum(chunk * dt, axis=0)])
    done = _marker("policy_chunk", 0, Marker.LINE_STRIP, stamp, frame, EXECUTED_RGBA)
    done.scale.x = 0.008
    done.points = _points(path[: executed + 1])
    rest = _marker("policy_chunk", 1, Marker.LINE_STRIP, stamp, frame, PLANNED_RGBA)
    rest.scale.x = 0.004
    rest.points = _points(path[executed:])
    return MarkerArray(markers=[done, rest])
