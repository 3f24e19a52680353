"""The kinds of file a user gives the package, and the checks every one of them gets before it is read.

Each kind is read by one function (listed beside the kinds below); before that function parses anything,
:func:`check_input` turns the mistakes every kind shares — the path does not exist, a folder where a file goes (or
the reverse), an empty file or folder — into one :class:`UserFileError` line that names the kind, the path and
what a good one looks like. The reader then turns what only it can see (not parseable, unknown keys, wrong types,
a required key missing) into the same kind of line. The CLI checks its path options this way before a command starts
(:class:`InputPath`, :class:`OutputPath`, ``cli.check_paths``), the launchers the graphs' file arguments
(``nodes.graph.check_files``), the nodes their path parameters (``nodes.common.file_parameter``).

Dependency-free, like :mod:`diffpolicy_ros.arguments`: ``diffpolicy --help`` and the launch files import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from diffpolicy_ros.errors import UserError


class UserFileError(UserError):
    """A file or folder a user named that cannot be used as what it was given as; the message names both."""


@dataclass(frozen=True)
class FileKind:
    """What a user calls a kind of file, its form on disk, and what a good one looks like."""

    name: str
    form: str  # "file" | "folder" | "file or folder"
    example: str
    yaml: bool = False  # a YAML mapping (read by config.read_yaml_mapping first)

    def hint(self) -> str:
        article = "an" if self.name[0] in "aeiou" else "a"
        return f" ({article} {self.name}: {self.example})"


# Each is read by one function (docs/cli.md lists them): sim.load_task_config, rl.bc.load_bc_run,
# rl.ppo.load_ppo_run, nodes.graph.load_deployment (real_arm's config:=, through load_arguments),
# TopicMap.load, models.checkpoint.load_checkpoint,
# EpisodeDataset.load (bags: bags.dataset.dataset_from_bags), data.bag_io.bag_info, eval.plots.read_metrics,
# sim.cell.load_cell_ranges, calibration.load_camera_calibration, sim.operator.load_operator.
TASK_CONFIG = FileKind("task config", "file", "config/sim/push.yaml", yaml=True)
POLICY_CONFIG = FileKind("policy config", "file", "config/policy/diffusion.yaml", yaml=True)
TRAIN_CONFIG = FileKind("train config", "file", "config/train/push.yaml", yaml=True)
DEPLOYMENT = FileKind("real_arm argument file", "file", "config/real_arm.yaml with the cell filled in", yaml=True)
TOPIC_MAP = FileKind("topic map", "file", "config/topic_maps/ur_cell.yaml", yaml=True)
CHECKPOINT = FileKind("checkpoint", "file", "runs/latest/checkpoints/best.pt")
DATASET = FileKind("dataset", "file or folder", "a .npz from `diffpolicy demo --out FILE`, or rosbag2 bag(s)")
BAG = FileKind("bag", "file or folder", "a rosbag2 folder: metadata.yaml beside .mcap or .db3 files")
RUN_DIR = FileKind("run folder", "folder", "runs/latest: a training run's metrics.csv and checkpoints/")
CELL_FILE = FileKind("cell file", "file", "config/cells/train.yaml", yaml=True)
OPERATOR_FILE = FileKind("operator file", "file", "a preset, teleop or novice, or YAML: 'overshoot: 0.5'", yaml=True)
CAMERA_CALIBRATION = FileKind("camera calibration file", "file", "config/cells/sim_cameras.yaml", yaml=True)

KINDS: tuple[FileKind, ...] = (
    TASK_CONFIG, POLICY_CONFIG, TRAIN_CONFIG, DEPLOYMENT, TOPIC_MAP, CHECKPOINT, DATASET, BAG, RUN_DIR, CELL_FILE,
    CAMERA_CALIBRATION, OPERATOR_FILE,
)  # fmt: skip


def check_input(path: str | Path, kind: FileKind) -> Path:
    """``path`` as a Path if it can be read as a ``kind``; else a UserFileError naming the kind and the path."""
    text = str(path)
    if not text.strip():
        raise UserFileError(f"{kind.name}: no path given{kind.hint()}")
    file = Path(text).expanduser()
    where = f"{kind.name} {text}"
    if not file.exists():
        raise UserFileError(f"{where}: no such {kind.form}{kind.hint()}")
    if kind.form == "file" and file.is_dir():
        raise UserFileError(f"{where}: is a folder, not a file{kind.hint()}")
    if kind.form == "folder" and not file.is_dir():
        raise UserFileError(f"{where}: is a file, not a folder{kind.hint()}")
    if not os.access(file, os.R_OK):
        raise UserFileError(f"{where}: cannot be read (permissions)")
    if file.is_dir() and not any(file.iterdir()):
        raise UserFileError(f"{where}: is an empty folder{kind.hint()}")
    if file.is_file() and file.stat().st_size == 0:
        raise UserFileError(f"{where}: is empty{kind.hint()}")
    return file


def check_output(path: str | Path, form: str, what: str) -> Path:
    """``path`` as a Path if ``what`` can be written there: a ``form`` ("file", "folder" or "new folder": one
    that must not exist yet, as rosbag2 wants) whose nearest existing parent is a writable folder."""
    file = Path(str(path)).expanduser()
    where = f"{what} {path}"
    if form == "new folder" and file.exists():
        raise UserFileError(f"{where}: already exists (give a new folder)")
    if form == "folder" and file.exists() and not file.is_dir():
        raise UserFileError(f"{where}: is a file, not a folder")
    if form == "file" and file.is_dir():
        raise UserFileError(f"{where}: is a folder, not a file")
    parent = file.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserFileError(f"{where}: cannot be created ({parent} is a file)")
    if not os.access(parent, os.W_OK):
        raise UserFileError(f"{where}: cannot be created ({parent} is not writable)")
    return file


class InputPath:
    """An argparse ``type`` for a path the command reads. Parsing only makes it a Path (a documented command
    line parses anywhere, before its files exist); the CLI then calls :meth:`check` on each given path before the
    command starts, so a mistake ends as ``argument --config: task config X: no such file (...)``. ``kind`` also
    tells the parser-walking test which bad files to try."""

    def __init__(self, kind: FileKind, also: tuple[str, ...] = ()):
        self.kind = kind
        self.also = also  # words accepted besides a path (``--resume auto``)
        self.__name__ = kind.name  # what argparse calls the type in its messages

    def __call__(self, text: str) -> Path | str:
        return text if text in self.also else Path(text)

    def check(self, value: Path | str) -> None:
        if value not in self.also:
            check_input(value, self.kind)


class OutputPath:
    """An argparse ``type`` for a path the command writes (checked by :func:`check_output`, as InputPath)."""

    def __init__(self, form: str, what: str):
        self.form = form
        self.what = what
        self.__name__ = what

    def __call__(self, text: str) -> Path:
        return Path(text)

    def check(self, value: Path) -> None:
        check_output(value, self.form, self.what)
