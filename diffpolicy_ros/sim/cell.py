"""A robot cell as data: how far each thing a real cell gets wrong may differ from the sim's world, and the
sampler that lays one such cell out in the MuJoCo model at every reset.

A cell file (``config/cells/*.yaml``, read by :func:`load_cell_ranges`) gives each factor a range ``[low, high]``;
the factor's nominal value (:data:`NOMINAL`: no shift, no turn, scale 1, no noise, no JPEG) is the sim's world as
the MJCF draws it, and a cell whose every factor is nominal leaves the model bit for bit as it was. Factors:

- ``cameras.{top,side}``: ``shift_m`` (how far the camera moved, in a random direction), ``turn_deg`` (how far it
  turned, about a random axis through it), ``fovy_deg`` (change of its vertical field of view);
- ``lights``: ``headlight`` and ``key`` (scales of their intensity), ``key_turn_deg`` (the key light's direction);
- ``colours``: ``table``, ``block``, ``floor``, ``goal`` (how far the RGB colour moves, in a random RGB direction);
- ``image``: ``noise_std`` (Gaussian pixel noise, 0-255 levels), ``blur_sigma`` (px), ``jpeg_quality`` (100: none);
- ``physics``: ``block_mass``, ``block_friction`` (the block's and the table's sliding friction: MuJoCo takes the
  larger of a contact's two), ``block_size`` (scales).

Randomizing what a camera sees and how the world responds is how sim-trained policies reach hardware (Tobin et al.,
"Domain Randomization for Transferring Deep Neural Networks from Simulation to the Real World").
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffpolicy_ros.config import ConfigError, load_config
from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.user_files import CELL_FILE

Range = tuple[float, float]


@dataclass
class CameraFactors:
    shift_m: Range = (0.0, 0.0)
    turn_deg: Range = (0.0, 0.0)
    fovy_deg: Range = (0.0, 0.0)


@dataclass
class LightFactors:
    headlight: Range = (1.0, 1.0)
    key: Range = (1.0, 1.0)
    key_turn_deg: Range = (0.0, 0.0)


@dataclass
class ColourFactors:
    table: Range = (0.0, 0.0)
    block: Range = (0.0, 0.0)
    floor: Range = (0.0, 0.0)
    goal: Range = (0.0, 0.0)


@dataclass
class ImageFactors:
    noise_std: Range = (0.0, 0.0)
    blur_sigma: Range = (0.0, 0.0)
    jpeg_quality: Range = (100.0, 100.0)


@dataclass
class PhysicsFactors:
    block_mass: Range = (1.0, 1.0)
    block_friction: Range = (1.0, 1.0)
    block_size: Range = (1.0, 1.0)


@dataclass
class CellRanges:
    """The ranges of a cell file; the defaults are the sim's world (every range at its nominal value)."""

    cameras: dict[str, CameraFactors] = field(default_factory=lambda: {cam: CameraFactors() for cam in CAMERAS})
    lights: LightFactors = field(default_factory=LightFactors)
    colours: ColourFactors = field(default_factory=ColourFactors)
    image: ImageFactors = field(default_factory=ImageFactors)
    physics: PhysicsFactors = field(default_factory=PhysicsFactors)

    def factors(self) -> dict[str, Range]:
        """Every factor by its dotted name (``cameras.top.shift_m``, ``physics.block_mass``) with its range."""
        out = {}
        for cam in CAMERAS:
            for f in dataclasses.fields(CameraFactors):
                out[f"cameras.{cam}.{f.name}"] = getattr(self.cameras[cam], f.name)
        for group in ("lights", "colours", "image", "physics"):
            part = getattr(self, group)
            for f in dataclasses.fields(part):
                out[f"{group}.{f.name}"] = getattr(part, f.name)
        return out

    def with_factors(self, values: dict[str, Range]) -> CellRanges:
        """A copy with the named factors' ranges replaced (``bench cells``: one factor at its edge)."""
        out = copy.deepcopy(self)
        for name, value in values.items():
            *path, leaf = name.split(".")
            part = out.cameras[path[1]] if path[0] == "cameras" else getattr(out, path[0])
            setattr(part, leaf, (float(value[0]), float(value[1])))
        return out


def factor_edges(ranges: CellRanges) -> list[tuple[str, float]]:
    """(factor, value) for each bound of each factor ``ranges`` varies that is not the factor's nominal value."""
    out = []
    for name, (low, high) in ranges.factors().items():
        out += [(name, value) for value in dict.fromkeys((low, high)) if value != nominal_value(name)]
    return out


def nominal_value(name: str) -> float:
    """The sim's world for a factor (``cameras.top.shift_m`` -> 0.0)."""
    return NOMINAL[name.rsplit(".", 1)[-1]]


# the value of each factor that means "as the MJCF draws it", and where a factor may lie
NOMINAL = {"shift_m": 0.0, "turn_deg": 0.0, "fovy_deg": 0.0, "headlight": 1.0, "key": 1.0, "key_turn_deg": 0.0,
           "table": 0.0, "block": 0.0, "floor": 0.0, "goal": 0.0, "noise_std": 0.0, "blur_sigma": 0.0,
           "jpeg_quality": 100.0, "block_mass": 1.0, "block_friction": 1.0, "block_size": 1.0}  # fmt: skip
BOUNDS = {"shift_m": (0.0, 0.2), "turn_deg": (0.0, 30.0), "fovy_deg": (-20.0, 20.0), "headlight": (0.0, 3.0),
          "key": (0.0, 5.0), "key_turn_deg": (0.0, 60.0), "table": (0.0, 1.0), "block": (0.0, 1.0),
          "floor": (0.0, 1.0), "goal": (0.0, 1.0), "noise_std": (0.0, 50.0), "blur_sigma": (0.0, 5.0),
          "jpeg_quality": (5.0, 100.0), "block_mass": (0.05, 20.0), "block_friction": (0.05, 20.0),
          "block_size": (0.5, 2.0)}  # fmt: skip


def check_ranges(ranges: CellRanges, label: str) -> CellRanges:
    """Each factor a [low, high] pair of numbers within its bounds; else a ConfigError naming the factor."""
    unknown = sorted(set(ranges.cameras) - set(CAMERAS))
    if unknown:
        raise ConfigError(f"{label}: cameras: unknown camera(s) {unknown}; the cameras are {list(CAMERAS)}")
    valid = [f.name for f in dataclasses.fields(CameraFactors)]
    for cam in CAMERAS:  # a camera the file leaves out stays where it is
        factors = ranges.cameras.get(cam, CameraFactors())
        if isinstance(factors, dict):  # from YAML: a mapping per camera
            if set(factors) - set(valid):
                raise ConfigError(f"{label}: cameras.{cam}: unknown factor(s) {sorted(set(factors) - set(valid))}; "
                                  f"valid: {valid}")  # fmt: skip
            factors = CameraFactors(**{k: tuple(v) if isinstance(v, list) else v for k, v in factors.items()})
        elif not isinstance(factors, CameraFactors):
            raise ConfigError(f"{label}: cameras.{cam} = {factors!r}: expected a mapping of {valid}")
        ranges.cameras[cam] = factors
    for name, value in ranges.factors().items():
        low_bound, high_bound = BOUNDS[name.rsplit(".", 1)[-1]]
        ok = (isinstance(value, (list, tuple)) and len(value) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))  # fmt: skip
        if not ok or not low_bound <= value[0] <= value[1] <= high_bound:
            raise ConfigError(
                f"{label}: {name} = {value!r}: expected [low, high] with {low_bound:g} <= low <= high <= "
                f"{high_bound:g} (nominal {nominal_value(name):g})"
            )
    return ranges


def ranges_from_dict(data: dict, label: str) -> CellRanges:
    """A cell file's ranges from their dict form (a dataset's recorded ``env_config.cells``)."""
    from diffpolicy_ros.config import from_dict

    try:
        ranges = from_dict(CellRanges, data)
    except ConfigError as exc:
        raise ConfigError(f"{label}: cells: {exc}") from None
    return check_ranges(ranges, f"{label}: cells")


def load_cell_ranges(path: str | Path) -> CellRanges:
    """A cell file (``config/cells/*.yaml``): unknown keys, wrong types and ranges out of bounds name the file
    and the factor."""
    ranges = load_config(CellRanges, path, CELL_FILE)
    return check_ranges(ranges, f"{CELL_FILE.name} {path}")


def sample_cell(ranges: CellRanges, rng: np.random.Generator) -> dict:
    """One cell: every factor drawn uniformly from its range, with the random directions (camera shift and turn
    axes, the key light's turn axis, the colour shifts) drawn too. A plain dict: it goes into ``info["cell"]``."""
    cell: dict = {}
    for name, (low, high) in ranges.factors().items():
        cell[name] = float(rng.uniform(low, high))
    for cam in CAMERAS:
        cell[f"cameras.{cam}.shift_dir"] = _unit(rng.normal(size=3))
        cell[f"cameras.{cam}.turn_axis"] = _unit(rng.normal(size=3))
    cell["lights.key_turn_axis"] = _unit(rng.normal(size=3))
    for part in ("table", "block", "floor", "goal"):
        cell[f"colours.{part}_dir"] = _unit(rng.normal(size=3))
    return cell


def _unit(v: np.ndarray) -> list[float]:
    return (v / max(float(np.linalg.norm(v)), 1e-9)).tolist()


def is_nominal(cell: dict, name: str) -> bool:
    return cell[name] == nominal_value(name)


class CellLayout:
    """Lays a sampled cell out in a MuJoCo model: every field it touches is restored from the model's own
    values first, so cells do not accumulate and a nominal cell is the MJCF's world bit for bit."""

    def __init__(self, model):  # a mujoco.MjModel
        self.model = model
        m = model
        self._cams = {cam: m.camera(cam).id for cam in CAMERAS}
        self._key = m.light("key").id
        self._block_body, self._block_geom, self._table = m.body("block").id, m.geom("block").id, m.geom("table").id
        self._materials = {part: m.material(part).id for part in ("table", "block", "floor")}
        self._goal = m.geom("goal").id if "goal" in _geom_names(m) else None  # the two-goal task's colours are named
        self._saved = {name: getattr(m, name).copy() for name in (
            "cam_pos", "cam_quat", "cam_fovy", "light_diffuse", "light_dir", "mat_rgba", "geom_rgba", "body_mass",
            "body_inertia", "geom_friction", "geom_size", "geom_rbound", "geom_aabb")}  # fmt: skip
        self._headlight = (m.vis.headlight.ambient.copy(), m.vis.headlight.diffuse.copy())

    def apply(self, cell: dict) -> None:
        m = self.model
        for name, value in self._saved.items():
            getattr(m, name)[:] = value
        m.vis.headlight.ambient[:], m.vis.headlight.diffuse[:] = self._headlight
        for cam, cid in self._cams.items():
            key = f"cameras.{cam}"
            if not is_nominal(cell, f"{key}.shift_m"):
                m.cam_pos[cid] += cell[f"{key}.shift_m"] * np.asarray(cell[f"{key}.shift_dir"])
            if not is_nominal(cell, f"{key}.turn_deg"):
                m.cam_quat[cid] = _turned(m.cam_quat[cid], cell[f"{key}.turn_axis"], cell[f"{key}.turn_deg"])
            if not is_nominal(cell, f"{key}.fovy_deg"):
                m.cam_fovy[cid] += cell[f"{key}.fovy_deg"]
        if not is_nominal(cell, "lights.headlight"):
            m.vis.headlight.ambient[:] = self._headlight[0] * cell["lights.headlight"]
            m.vis.headlight.diffuse[:] = self._headlight[1] * cell["lights.headlight"]
        if not is_nominal(cell, "lights.key"):
            m.light_diffuse[self._key] *= cell["lights.key"]
        if not is_nominal(cell, "lights.key_turn_deg"):
            turn = _rotation(cell["lights.key_turn_axis"], cell["lights.key_turn_deg"])
            m.light_dir[self._key] = turn @ m.light_dir[self._key]
        for part in ("table", "block", "floor", "goal"):
            if is_nominal(cell, f"colours.{part}") or (part == "goal" and self._goal is None):
                continue
            rgba = m.geom_rgba[self._goal] if part == "goal" else m.mat_rgba[self._materials[part]]
            rgba[:3] = np.clip(rgba[:3] + cell[f"colours.{part}"] * np.asarray(cell[f"colours.{part}_dir"]), 0, 1)
        if not is_nominal(cell, "physics.block_mass"):
            m.body_mass[self._block_body] *= cell["physics.block_mass"]
            m.body_inertia[self._block_body] *= cell["physics.block_mass"]
        if not is_nominal(cell, "physics.block_size"):
            scale = cell["physics.block_size"]
            m.geom_size[self._block_geom] *= scale
            m.geom_rbound[self._block_geom] *= scale
            m.geom_aabb[self._block_geom] *= scale
            m.body_inertia[self._block_body] *= scale**2  # a box's inertia: mass x size^2
        if not is_nominal(cell, "physics.block_friction"):
            m.geom_friction[[self._block_geom, self._table], 0] *= cell["physics.block_friction"]


def _geom_names(m) -> set[str]:
    return {m.geom(i).name for i in range(m.ngeom)}


def _rotation(axis: list[float], degrees: float) -> np.ndarray:
    import mujoco

    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, np.asarray(axis, dtype=float), np.deg2rad(degrees))
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


def _turned(quat: np.ndarray, axis: list[float], degrees: float) -> np.ndarray:
    """A camera's orientation turned by ``degrees`` about ``axis`` (in the world frame)."""
    import mujoco

    turn = np.zeros(4)
    mujoco.mju_axisAngle2Quat(turn, np.asarray(axis, dtype=float), np.deg2rad(degrees))
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, turn, np.asarray(quat, dtype=float))
    return out


def degrade_image(image: np.ndarray, cell: dict, rng: np.random.Generator) -> np.ndarray:
    """What a real camera adds to a rendered frame: blur, sensor noise, JPEG compression (in that order)."""
    import cv2

    out = image
    if not is_nominal(cell, "image.blur_sigma"):
        out = cv2.GaussianBlur(out, (0, 0), cell["image.blur_sigma"])
    if not is_nominal(cell, "image.noise_std"):
        noisy = out.astype(np.float32) + rng.normal(0.0, cell["image.noise_std"], size=out.shape).astype(np.float32)
        out = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
    if not is_nominal(cell, "image.jpeg_quality"):
        ok, encoded = cv2.imencode(".jpg", out[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, int(cell["image.jpeg_quality"])])
        out = cv2.imdecode(encoded, cv2.IMREAD_COLOR)[..., ::-1] if ok else out
    return np.ascontiguousarray(out)
