"""Episode datasets: demonstrations recorded in the sim (and, later, converted from rosbag2 files).

One ``.npz`` file, steps of all episodes concatenated (the Diffusion Policy replay-buffer convention):

    obs/<key>        [T, ...]  observation *before* each action (proprio, image_top, image_side, goals)
    action           [T, 3]    float32, m/s
    reward           [T]       float32
    episode_ends     [E]       int64, exclusive end index of each episode in the step arrays
    episode/<field>  [E]       per-episode metadata (instruction, success, side, seed, return; cell: the sampled
                               cell as JSON, when recorded with --cells)
    meta             []        JSON string: task, env config, format version

Files are written atomically (``atomic_file.atomic_write``) and loaded without pickle; a malformed file
raises :class:`DatasetError` naming what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffpolicy_ros.atomic_file import atomic_write
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.user_files import DATASET, UserFileError, check_input

FORMAT_VERSION = 1


class DatasetError(UserError):
    """The file is not a valid episode dataset."""


@dataclass
class EpisodeDataset:
    obs: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    episode_ends: np.ndarray
    episode: dict[str, np.ndarray]
    meta: dict = field(default_factory=dict)

    @property
    def n_episodes(self) -> int:
        return len(self.episode_ends)

    @property
    def n_steps(self) -> int:
        return len(self.action)

    def episode_slice(self, i: int) -> slice:
        start = 0 if i == 0 else int(self.episode_ends[i - 1])
        return slice(start, int(self.episode_ends[i]))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        arrays = {f"obs/{k}": v for k, v in self.obs.items()}
        arrays.update({f"episode/{k}": v for k, v in self.episode.items()})
        arrays.update(
            action=self.action,
            reward=self.reward,
            episode_ends=self.episode_ends,
            meta=np.array(json.dumps({**self.meta, "format_version": FORMAT_VERSION})),
        )
        atomic_write(path, lambda f: np.savez_compressed(f, **arrays))
        return path

    @classmethod
    def load(cls, path: str | Path) -> EpisodeDataset:
        try:
            path = check_input(path, DATASET)
        except UserFileError as exc:
            raise DatasetError(str(exc)) from None
        if path.is_dir():
            raise DatasetError(f"dataset {path}: is a folder, but not a bag; a dataset file is a .npz{DATASET.hint()}")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as exc:  # zip, header or pickle errors all mean "not a dataset"
            raise DatasetError(f"{path}: not a readable episode dataset ({exc})") from exc
        for key in ("action", "reward", "episode_ends", "meta"):
            if key not in arrays:
                raise DatasetError(f"{path}: missing array {key!r}")
        ds = cls(
            obs={k[4:]: v for k, v in arrays.items() if k.startswith("obs/")},
            action=arrays["action"],
            reward=arrays["reward"],
            episode_ends=arrays["episode_ends"].astype(np.int64),
            episode={k[8:]: v for k, v in arrays.items() if k.startswith("episode/")},
            meta=json.loads(str(arrays["meta"])),
        )
        ds.validate(str(path))
        return ds

    def validate(self, name: str = "dataset") -> None:
        t = self.n_steps
        if self.action.ndim != 2 or self.action.shape[1] not in (2, 3):  # point mass (vx, vy) | arm (vx, vy, vz)
            raise DatasetError(f"{name}: action must be [T, 3] (or [T, 2] for point_mass), got {self.action.shape}")
        if not np.all(np.isfinite(self.action)):
            raise DatasetError(f"{name}: action contains NaN or inf")
        if self.reward.shape != (t,):
            raise DatasetError(f"{name}: reward must be [{t}], got {self.reward.shape}")
        for key, value in self.obs.items():
            if len(value) != t:
                raise DatasetError(f"{name}: obs/{key} has {len(value)} steps, action has {t}")
        ends = self.episode_ends
        if len(ends) == 0 or np.any(np.diff(ends) <= 0) or ends[0] <= 0 or ends[-1] != t:
            raise DatasetError(f"{name}: episode_ends must increase strictly and end at {t}")
        for key, value in self.episode.items():
            if len(value) != len(ends):
                raise DatasetError(f"{name}: episode/{key} has {len(value)} entries for {len(ends)} episodes")


class EpisodeRecorder:
    """Accumulates steps in lists and concatenates once at the end."""

    def __init__(self, obs_keys: tuple[str, ...]):
        self.obs_keys = obs_keys
        self._obs: dict[str, list[np.ndarray]] = {k: [] for k in obs_keys}
        self._action: list[np.ndarray] = []
        self._reward: list[float] = []
        self._ends: list[int] = []
        self._episode: dict[str, list] = {}

    def add_step(self, obs: dict, action: np.ndarray, reward: float) -> None:
        for k in self.obs_keys:
            self._obs[k].append(np.asarray(obs[k]))
        self._action.append(np.asarray(action, dtype=np.float32))
        self._reward.append(float(reward))

    def end_episode(self, **fields) -> None:
        if not self._action or (self._ends and self._ends[-1] == len(self._action)):
            raise ValueError("end_episode called on an empty episode")
        self._ends.append(len(self._action))
        for k, v in fields.items():
            self._episode.setdefault(k, []).append(v)

    def extend(self, other: EpisodeRecorder) -> None:
        """Append another recorder's finished episodes after this one's (blocks recorded in parallel)."""
        if other.obs_keys != self.obs_keys:
            raise ValueError(f"cannot join recordings of {other.obs_keys} and {self.obs_keys}")
        offset = len(self._action)
        for k in self.obs_keys:
            self._obs[k] += other._obs[k]
        self._action += other._action
        self._reward += other._reward
        self._ends += [offset + end for end in other._ends]
        for k, v in other._episode.items():
            self._episode.setdefault(k, []).extend(v)

    def to_dataset(self, meta: dict) -> EpisodeDataset:
        ds = EpisodeDataset(
            obs={k: np.stack(v) for k, v in self._obs.items()},
            action=np.stack(self._action),
            reward=np.asarray(self._reward, dtype=np.float32),
            episode_ends=np.asarray(self._ends, dtype=np.int64),
            episode={k: np.asarray(v) for k, v in self._episode.items()},
            meta=meta,
        )
        ds.validate()
        return ds
