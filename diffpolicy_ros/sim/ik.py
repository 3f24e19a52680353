"""Damped-least-squares differential IK for the pusher arm.

The policy commands a Cartesian linear velocity of the pusher tip. Each IK tick turns it into joint
velocities for the arm's integrated-velocity servos:

    v_cmd = v_ref + k_pos * clip(p_ref - p)          (resolved-rate with position feedback)
    w_cmd = k_rot * e_rot(R, R_ref)                   (keep the tool pointing down, fixed yaw)
    qdot  = J^T (J J^T + lambda^2 I)^-1 [v_cmd; w_cmd]  (damped least squares, 6x6)

``p_ref`` integrates the commanded velocity inside the workspace box, so clipping the workspace is clipping
the reference: the pusher can never be commanded through the table. The feedback error is bounded so a
blocked pusher does not wind up.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass
class IKConfig:
    damping: float = 0.05  # lambda of damped least squares
    k_pos: float = 8.0  # 1/s, position feedback toward the integrated reference
    k_rot: float = 8.0  # 1/s, orientation feedback
    max_pos_error: float = 0.02  # m, bound on the feedback term (anti wind-up)
    max_joint_speed: float = 3.0  # rad/s, UR5e joints allow ~3.14


def orientation_error(rot: np.ndarray, rot_ref: np.ndarray) -> np.ndarray:
    """Small-angle rotation vector taking ``rot`` toward ``rot_ref`` (both 3x3, world frame)."""
    return 0.5 * (
        np.cross(rot[:, 0], rot_ref[:, 0]) + np.cross(rot[:, 1], rot_ref[:, 1]) + np.cross(rot[:, 2], rot_ref[:, 2])
    )


class DiffIK:
    """Differential IK on one site of a MuJoCo model, over the first ``n_joints`` dofs."""

    def __init__(self, model: mujoco.MjModel, site: str, dof_ids: np.ndarray, cfg: IKConfig | None = None):
        self.model = model
        self.cfg = cfg or IKConfig()
        self.site_id = model.site(site).id
        self.dof_ids = np.asarray(dof_ids)
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._eye6 = np.eye(6)

    def site_pose(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        return data.site_xpos[self.site_id].copy(), data.site_xmat[self.site_id].reshape(3, 3).copy()

    def joint_velocity(
        self, data: mujoco.MjData, v_ref: np.ndarray, p_ref: np.ndarray, rot_ref: np.ndarray
    ) -> np.ndarray:
        """Joint velocities that move the site at ``v_ref`` toward ``p_ref`` while holding ``rot_ref``."""
        cfg = self.cfg
        p = data.site_xpos[self.site_id]
        rot = data.site_xmat[self.site_id].reshape(3, 3)
        err = np.clip(p_ref - p, -cfg.max_pos_error, cfg.max_pos_error)
        twist = np.concatenate([v_ref + cfg.k_pos * err, cfg.k_rot * orientation_error(rot, rot_ref)])
        mujoco.mj_jacSite(self.model, data, self._jacp, self._jacr, self.site_id)
        jac = np.vstack([self._jacp[:, self.dof_ids], self._jacr[:, self.dof_ids]])
        qdot = jac.T @ np.linalg.solve(jac @ jac.T + cfg.damping**2 * self._eye6, twist)
        return np.clip(qdot, -cfg.max_joint_speed, cfg.max_joint_speed)

    def solve_pose(
        self,
        data: mujoco.MjData,
        qpos_ids: np.ndarray,
        p_target: np.ndarray,
        rot_target: np.ndarray,
        iterations: int = 200,
        tol: float = 1e-5,
    ) -> bool:
        """Move ``data.qpos`` (kinematics only) so the site reaches the target pose. Returns convergence."""
        for _ in range(iterations):
            mujoco.mj_kinematics(self.model, data)
            mujoco.mj_comPos(self.model, data)
            p = data.site_xpos[self.site_id]
            rot = data.site_xmat[self.site_id].reshape(3, 3)
            twist = np.concatenate([p_target - p, orientation_error(rot, rot_target)])
            if np.linalg.norm(twist) < tol:
                return True
            mujoco.mj_jacSite(self.model, data, self._jacp, self._jacr, self.site_id)
            jac = np.vstack([self._jacp[:, self.dof_ids], self._jacr[:, self.dof_ids]])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * self._eye6, twist)
            data.qpos[qpos_ids] += dq
        return False
