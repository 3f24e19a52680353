"""The MuJoCo push task (seed article, section 5) as a Gymnasium environment.

A UR5e-kinematics arm with a flat pusher pushes a block across a table to a goal. The pusher starts near
the robot, on the goal's side of the block, so it has to go around the block (on the left or on the right)
before it can push: the task has two equally good routes. A diffusion policy samples either; a Gaussian
policy must commit to one from small state differences (measured here, it does: BC success is level with
diffusion's, README "Measured here").

Action: pusher linear velocity (vx, vy, vz) in m/s, clipped per axis to ``max_speed``, held for one 0.1 s
control step and tracked by damped-least-squares differential IK feeding integrated-velocity joint servos
(tool kept pointing down, workspace box clipped so the pusher never goes through the table).

Observation (dict): ``proprio`` float32[16] = 6 joint angles, 6 joint velocities, block xy, goal xy;
``instruction`` str; with ``obs_mode='image'`` also ``image_top`` and ``image_side`` uint8[128,128,3] and
``camera_projection`` float32[2,3,4] (each camera's world -> pixel projection, exact: ``calibration.py``).
The two-goal variant adds ``goals`` float32[2,2] (red xy, blue xy) and its proprio goal slots hold the
midpoint of the two goals, so only the instruction says which goal counts.
"""

from __future__ import annotations

import atexit
import weakref
from dataclasses import dataclass, field
from functools import partial

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from diffpolicy_ros.assets import sim_asset
from diffpolicy_ros.calibration import CameraCalibration, mujoco_calibration, projections
from diffpolicy_ros.contract import (
    ARM_JOINTS,
    CAMERAS,
    CONTROL_PERIOD_S,
    DEFAULT_INSTRUCTION,
    EXECUTE_HORIZON,
    IMAGE_SIZE,
    MAX_SPEED,
    PROPRIO_DIM,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)
from diffpolicy_ros.sim.cell import CellLayout, CellRanges, degrade_image, sample_cell
from diffpolicy_ros.sim.chunk import execute_chunk
from diffpolicy_ros.sim.ik import DiffIK, IKConfig

INSTRUCTION_CHARSET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,'-"
PUSH_INSTRUCTION = DEFAULT_INSTRUCTION
GOAL_COLOURS = ("red", "blue")
ROUTE_PASS_TOLERANCE = 0.02  # m: the pusher is "abreast" of the block when their x differ by less
ROUTE_SIDE_OFFSET = 0.03  # m: lateral offset that counts as passing on one side
CELL_STREAM = 0xCE11  # the cells' own random stream beside a seed: the same scenes in every cell file
# A joint configuration near the start pose (elbow up, tool down); reset refines it with IK.
_HOME_QPOS = np.array([2.679, -1.525, 2.706, -2.752, -1.571, 2.679])
_TOOL_DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


@dataclass
class PushConfig:
    """Every task constant in one place; the defaults are the task the issues' numbers refer to."""

    two_goals: bool = False
    obs_mode: str = "state"  # 'state' | 'image'
    image_size: int = IMAGE_SIZE
    render_quality: str = "fast"  # 'fast' (no shadows, no AA) | 'rich'
    control_dt: float = CONTROL_PERIOD_S  # s, one action
    ik_rate_hz: float = 50.0  # IK ticks per second inside a control step
    max_speed: float = MAX_SPEED  # m/s per axis
    max_episode_steps: int = 120  # 12 s at 10 Hz
    execute_horizon: int = EXECUTE_HORIZON  # actions of a chunk that step_chunk executes
    success_radius: float = 0.04  # m, block centre to goal centre
    workspace_low: tuple[float, float, float] = WORKSPACE_LOW
    workspace_high: tuple[float, float, float] = WORKSPACE_HIGH
    pusher_start: tuple[float, float, float] = (0.30, 0.0, 0.025)
    pusher_start_noise: float = 0.03  # m, uniform in x and y
    block_x_range: tuple[float, float] = (0.50, 0.60)
    block_y_range: tuple[float, float] = (-0.10, 0.10)
    block_yaw_range: float = np.pi / 4
    goal_distance_range: tuple[float, float] = (0.15, 0.25)  # m from the block
    goal_angle_range: float = np.pi / 4  # rad either side of "toward the robot" (-x)
    two_goal_min_separation: float = 0.15  # m
    table_half_extent: tuple[float, float] = (0.45, 0.55)  # the table top around table_center
    table_center: tuple[float, float] = (0.55, 0.0)
    reward_reach: float = 1.0  # per metre of pusher->block progress
    reward_push: float = 10.0  # per metre of block->goal progress
    success_bonus: float = 10.0
    off_table_penalty: float = 5.0
    ik: IKConfig = field(default_factory=IKConfig)
    cells: CellRanges | None = None  # a cell file's ranges: a cell sampled at every reset (sim/cell.py)


class PushEnv(gym.Env):
    """Push a block to a (named) goal with a 6-DOF arm. See the module docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, config: PushConfig | None = None, render_mode: str | None = None, **overrides):
        cfg = config or PushConfig()
        for key, value in overrides.items():
            if not hasattr(cfg, key):
                raise TypeError(f"unknown PushEnv option {key!r}")
            setattr(cfg, key, value)
        if cfg.obs_mode not in ("state", "image"):
            raise ValueError(f"obs_mode must be 'state' or 'image', got {cfg.obs_mode!r}")
        if cfg.render_quality not in ("fast", "rich"):
            raise ValueError(f"render_quality must be 'fast' or 'rich', got {cfg.render_quality!r}")
        self.cfg = cfg
        self.render_mode = render_mode

        self.model = mujoco.MjModel.from_xml_path(str(sim_asset("push_two_goals.xml" if cfg.two_goals else "push.xml")))
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._qpos_ids = np.array([m.joint(j).qposadr[0] for j in ARM_JOINTS])
        self._dof_ids = np.array([m.joint(j).dofadr[0] for j in ARM_JOINTS])
        self._act_ids = np.array([m.actuator(j.removesuffix("_joint")).id for j in ARM_JOINTS])
        self._block_qpos = m.joint("block_joint").qposadr[0]
        self._block_body = m.body("block").id
        self._block_geom = m.geom("block").id
        goal_bodies = ("goal_red", "goal_blue") if cfg.two_goals else ("goal",)
        self._goal_mocap = [m.body(b).mocapid[0] for b in goal_bodies]
        for b in goal_bodies:  # the marker's radius is the success radius
            m.geom_size[m.geom(b).id, 0] = cfg.success_radius
        self._tip = m.site("pusher_tip").id
        self._layout = CellLayout(m) if cfg.cells is not None else None
        self._cell_rng = np.random.default_rng()
        self._cell: dict | None = None
        self._image_rng = np.random.default_rng()
        self.ik = DiffIK(m, "pusher_tip", self._dof_ids, cfg.ik)
        self._ws_low = np.array(cfg.workspace_low)
        self._ws_high = np.array(cfg.workspace_high)
        steps_per_control = cfg.control_dt / m.opt.timestep
        self._ik_ticks = round(cfg.ik_rate_hz * cfg.control_dt)
        self._substeps = round(steps_per_control / self._ik_ticks)
        if abs(self._ik_ticks * self._substeps * m.opt.timestep - cfg.control_dt) > 1e-9:
            raise ValueError("control_dt must be a whole number of IK ticks of whole physics steps")
        self._tick_dt = self._substeps * m.opt.timestep
        if cfg.render_quality == "rich":  # the MJCF defaults are the cheap look
            m.vis.quality.shadowsize = 2048
            m.vis.quality.offsamples = 4
            m.light_castshadow[:] = 1

        self.action_space = spaces.Box(-cfg.max_speed, cfg.max_speed, shape=(3,), dtype=np.float32)
        obs_spaces: dict[str, spaces.Space] = {
            "proprio": spaces.Box(-np.inf, np.inf, shape=(PROPRIO_DIM,), dtype=np.float32),
            "instruction": spaces.Text(max_length=64, min_length=1, charset=INSTRUCTION_CHARSET),
        }
        if cfg.two_goals:
            obs_spaces["goals"] = spaces.Box(-np.inf, np.inf, shape=(2, 2), dtype=np.float32)
        if cfg.obs_mode == "image":
            for cam in CAMERAS:
                obs_spaces[f"image_{cam}"] = spaces.Box(0, 255, (cfg.image_size, cfg.image_size, 3), np.uint8)
            obs_spaces["camera_projection"] = spaces.Box(-np.inf, np.inf, (len(CAMERAS), 3, 4), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)

        self._renderer: Renderer | None = None  # created on first use, in the process that renders
        self.camera_calibrations: dict[str, CameraCalibration] = {}  # this episode's, exact (set at reset)
        self._projection = np.zeros((len(CAMERAS), 3, 4), np.float32)
        self._p_ref = np.zeros(3)
        self._rot_ref = _TOOL_DOWN.copy()
        self._goals = np.zeros((len(goal_bodies), 2))
        self._target = 0
        self._instruction = PUSH_INSTRUCTION
        self._t = 0
        self._prev_d_pb = 0.0
        self._prev_d_bg = 0.0

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        cfg, m, d, rng = self.cfg, self.model, self.data, self.np_random
        if self._layout is not None:  # from its own stream: the scene (block, goal, start) is the seed's anyway
            if seed is not None:
                self._cell_rng = np.random.default_rng([seed, CELL_STREAM])
            self._cell = sample_cell(cfg.cells, self._cell_rng)
            self._layout.apply(self._cell)
            self._image_rng = np.random.default_rng(self._cell_rng.integers(2**63))
        mujoco.mj_resetData(m, d)

        block_xy = np.array([rng.uniform(*cfg.block_x_range), rng.uniform(*cfg.block_y_range)])
        yaw = rng.uniform(-cfg.block_yaw_range, cfg.block_yaw_range)
        d.qpos[self._block_qpos : self._block_qpos + 3] = [*block_xy, m.geom_size[self._block_geom, 2]]
        d.qpos[self._block_qpos + 3 : self._block_qpos + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]

        self._goals = self._sample_goals(block_xy, rng)
        for mocap, xy in zip(self._goal_mocap, self._goals):
            d.mocap_pos[mocap] = [xy[0], xy[1], 0.0005]
        if cfg.two_goals:
            self._target = int(rng.integers(2))
            self._instruction = f"push the block to the {GOAL_COLOURS[self._target]} target"
        else:
            self._target = 0
            self._instruction = PUSH_INSTRUCTION

        start = np.array(cfg.pusher_start, dtype=float)
        start[:2] += rng.uniform(-cfg.pusher_start_noise, cfg.pusher_start_noise, size=2)
        d.qpos[self._qpos_ids] = _HOME_QPOS
        if not self.ik.solve_pose(d, self._qpos_ids, start, _TOOL_DOWN):
            raise RuntimeError(f"start pose {start} is out of reach")
        mujoco.mj_forward(m, d)
        size = cfg.image_size
        self.camera_calibrations = {cam: mujoco_calibration(m, d, cam, size, size) for cam in CAMERAS}
        self._projection = projections(self.camera_calibrations.values(), size)

        self._p_ref = d.site_xpos[self._tip].copy()
        self._rot_ref = _TOOL_DOWN.copy()
        self._t = 0
        self._prev_d_pb = self._pusher_block_distance()
        self._prev_d_bg = self._block_goal_distance()
        self._route = "none"
        return self.observation(), self._info(success=False)

    def step(self, action):
        action = self._validate_actions(action, (3,))
        return self._step_validated(action)

    def step_chunk(self, actions):
        """Execute up to ``execute_horizon`` actions of a [H, 3] chunk, stopping early at termination.

        Returns ``(obs, rewards[k], terminated, truncated, info)`` with ``k`` the steps executed; ``info``
        is the last step's. The whole chunk is validated before anything moves.
        """
        actions = np.asarray(actions)
        if actions.ndim != 2:
            raise ValueError(f"action chunk must have shape [H, 3], got {actions.shape}")
        actions = self._validate_actions(actions, (actions.shape[0], 3))
        if actions.shape[0] == 0:
            raise ValueError("action chunk is empty")
        # the cameras render once, for the chunk's last step: the steps before it are not observed
        step = partial(self._step_validated, observe=False)
        return execute_chunk(step, actions, self.cfg.execute_horizon, observe=self.observation)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self.render_camera("side")

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ task state (for experts / bridges)
    @property
    def instruction(self) -> str:
        return self._instruction

    @property
    def target_goal(self) -> np.ndarray:
        return self._goals[self._target].copy()

    @property
    def pusher_position(self) -> np.ndarray:
        return self.data.site_xpos[self._tip].copy()

    @property
    def block_pose(self) -> tuple[np.ndarray, float]:
        """Block centre (x, y, z) and yaw."""
        q = self.data.xquat[self._block_body]
        yaw = np.arctan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
        return self.data.xpos[self._block_body].copy(), float(yaw)

    @property
    def block_half_size(self) -> np.ndarray:
        return self.model.geom_size[self.model.geom("block").id].copy()

    @property
    def goals(self) -> np.ndarray:
        """Every goal's xy (two in the two-goal task), [G, 2]."""
        return self._goals.copy()

    @property
    def arm_points(self) -> np.ndarray:
        """The arm drawn as a chain: each joint's body origin, then the pusher tip, [7, 3] (for viewers)."""
        bodies = self.model.jnt_bodyid[[self.model.joint(j).id for j in ARM_JOINTS]]
        return np.vstack([self.data.xpos[bodies], self.data.site_xpos[self._tip]])

    @property
    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self._qpos_ids].copy()

    @property
    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self._dof_ids].copy()

    @property
    def time(self) -> float:
        return float(self.data.time)

    def render_camera(self, camera: str) -> np.ndarray:
        """Render one camera (``top`` or ``side``) as uint8 [S, S, 3]."""
        if self._renderer is None:
            size = self.cfg.image_size
            self._renderer = Renderer(self.model, height=size, width=size)
            self._renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.cfg.render_quality == "rich"
            # MuJoCo registers eglTerminate at exit when the first context is made; atexit runs in reverse
            # order, so this closes the renderer before EGL goes away (else EGL errors at interpreter exit).
            atexit.register(_close_renderer, weakref.ref(self._renderer))
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render()

    # ------------------------------------------------------------------ internals
    def _validate_actions(self, actions, shape: tuple[int, ...]) -> np.ndarray:
        arr = np.asarray(actions)
        if arr.dtype.kind != "f":
            raise ValueError(f"actions must be floating point (m/s), got dtype {arr.dtype}")
        if arr.shape != shape:
            raise ValueError(f"action must have shape {shape}, got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("action contains NaN or inf; refusing to move the arm")
        return np.clip(arr.astype(np.float64), -self.cfg.max_speed, self.cfg.max_speed)

    @property
    def ik_ticks(self) -> int:
        """IK ticks per control step: :meth:`step_ticks` takes one velocity for each."""
        return self._ik_ticks

    @property
    def tick_dt(self) -> float:
        return self._tick_dt

    def step_ticks(self, velocities, observe: bool = True):
        """One control step with a velocity per IK tick ([ik_ticks, 3], m/s): how a deployment's commands
        reach the arm between policy steps (a 30 Hz executor behind the safety filter), not one value held.
        ``observe`` False: the observation is None (a step no policy reads; :meth:`observation` makes one)."""
        velocities = self._validate_actions(velocities, (self._ik_ticks, 3))
        return self._step_validated(velocities, observe)

    def _step_validated(self, action: np.ndarray, observe: bool = True):
        """``action``: one velocity held for the control step, or one per IK tick ([ik_ticks, 3]); ``observe``
        False: no observation (None), so no rendering."""
        m, d, cfg = self.model, self.data, self.cfg
        per_tick = np.broadcast_to(action, (self._ik_ticks, 3))
        for tick in range(self._ik_ticks):
            action = per_tick[tick]
            p_next = np.clip(self._p_ref + action * self._tick_dt, self._ws_low, self._ws_high)
            v_ref = (p_next - self._p_ref) / self._tick_dt
            self._p_ref = p_next
            d.ctrl[self._act_ids] = self.ik.joint_velocity(d, v_ref, self._p_ref, self._rot_ref)
            mujoco.mj_step(m, d, nstep=self._substeps)
        self._t += 1

        d_pb = self._pusher_block_distance()
        d_bg = self._block_goal_distance()
        success = d_bg < cfg.success_radius
        off_table = self._block_off_table()
        reward = cfg.reward_reach * (self._prev_d_pb - d_pb) + cfg.reward_push * (self._prev_d_bg - d_bg)
        reward += cfg.success_bonus * success - cfg.off_table_penalty * off_table
        self._prev_d_pb, self._prev_d_bg = d_pb, d_bg
        self._update_route()
        terminated = bool(success or off_table)
        truncated = bool(self._t >= cfg.max_episode_steps and not terminated)
        obs = self.observation() if observe else None
        return obs, float(reward), terminated, truncated, self._info(success, off_table)

    def _sample_goals(self, block_xy: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        cfg = self.cfg

        def goal_at(angle: float) -> np.ndarray:
            dist = rng.uniform(*cfg.goal_distance_range)
            return block_xy + dist * np.array([-np.cos(angle), np.sin(angle)])

        if not cfg.two_goals:
            return goal_at(rng.uniform(-cfg.goal_angle_range, cfg.goal_angle_range))[None]
        while True:  # one goal each side of the robot->block line, far enough apart to tell them apart
            a = rng.uniform(0.25, cfg.goal_angle_range + 0.25)
            goals = np.stack([goal_at(a), goal_at(-a)])
            if np.linalg.norm(goals[0] - goals[1]) >= cfg.two_goal_min_separation:
                return goals[rng.permutation(2)]

    def _update_route(self) -> None:
        """Which side of the block the pusher first passes (robot's left = +y): the episode's mode."""
        if self._route != "none":
            return
        block, tip = self.data.xpos[self._block_body], self.data.site_xpos[self._tip]
        if abs(tip[0] - block[0]) < ROUTE_PASS_TOLERANCE:
            offset = tip[1] - block[1]
            if abs(offset) > ROUTE_SIDE_OFFSET:
                self._route = "left" if offset > 0 else "right"

    def _pusher_block_distance(self) -> float:
        return float(np.linalg.norm(d_xy(self.data.site_xpos[self._tip], self.data.xpos[self._block_body])))

    def _block_goal_distance(self) -> float:
        return float(np.linalg.norm(self.data.xpos[self._block_body][:2] - self._goals[self._target]))

    def _block_off_table(self) -> bool:
        pos = self.data.xpos[self._block_body]
        rel = np.abs(pos[:2] - np.array(self.cfg.table_center))
        return bool(pos[2] < -0.01 or np.any(rel > np.array(self.cfg.table_half_extent)))

    def observation(self) -> dict:
        """The observation of the arm and the scene as they are now (image mode: both cameras rendered)."""
        d = self.data
        block_xy = d.xpos[self._block_body][:2]
        goal_slot = self._goals.mean(axis=0) if self.cfg.two_goals else self._goals[0]
        proprio = np.concatenate([d.qpos[self._qpos_ids], d.qvel[self._dof_ids], block_xy, goal_slot])
        obs = {"proprio": proprio.astype(np.float32), "instruction": self._instruction}
        if self.cfg.two_goals:
            obs["goals"] = self._goals.astype(np.float32)
        if self.cfg.obs_mode == "image":
            for cam in CAMERAS:
                image = self.render_camera(cam)
                obs[f"image_{cam}"] = image if self._cell is None else degrade_image(image, self._cell, self._image_rng)
            obs["camera_projection"] = self._projection.copy()  # what a calibrated estimator back-projects through
        return obs

    def _info(self, success: bool, off_table: bool = False) -> dict:
        info = {
            "is_success": bool(success),
            "off_table": bool(off_table),
            "block_goal_distance": self._block_goal_distance(),
            "elapsed_steps": self._t,
            "route": self._route,
        }
        if self._cell is not None:
            info["cell"] = self._cell
        return info


class Renderer(mujoco.Renderer):
    """MuJoCo's renderer, safe to collect half-built: a stop (Ctrl-C, SIGTERM) that lands while ``__init__`` makes
    the GL context leaves an object without ``_mjr_context``, and ``Renderer.__del__`` then printed an
    AttributeError traceback at shutdown. The class-level ``None``s are what ``close`` finds instead."""

    _gl_context = None
    _mjr_context = None


def _close_renderer(ref: weakref.ref) -> None:
    renderer = ref()
    if renderer is not None:
        renderer.close()


def d_xy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a[:2] - b[:2]
