"""The run layout shared by BC, PPO, the trainer node and the CLI.

    runs/<kind>-<YYYYmmdd-HHMMSS>/      one run (kind: bc, ppo, sim_train, demos)
        checkpoints/{iter_*.pt, last.pt, best.pt}   best.pt: the best held-out evaluation (sim_train: a link
                                        into the phase, bc/ or ppo/, that wrote it)
        metrics.csv                     one row per logged step (the CSV columns are fixed per run kind)
        tb/                             TensorBoard scalars, the same values
    runs/latest -> the newest run       (a symlink, where the filesystem has them), once it has written a checkpoint

Episode seeds are split once, here, so that training never sees the held-out evaluation episodes:
demonstrations use seeds ``DEMO_SEED`` + i, PPO rollouts ``ROLLOUT_SEED`` + ..., evaluation ``EVAL_SEED`` + i, and
PPO's evaluations with ``fresh_eval_scenes`` ``FRESH_EVAL_SEED`` + ... (held out too, and never ``eval``'s scenes).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

RUNS_ROOT = Path("runs")
DEMO_SEED = 0
EVAL_SEED = 10_000  # held out: never a demonstration or a rollout episode
FRESH_EVAL_SEED = 100_000  # PPO's per-iteration held-out blocks: below the rollouts', above eval's scenes
ROLLOUT_SEED = 1_000_000  # PPO rollouts: disjoint from demonstrations (0+) and evaluation (10000+)


@dataclass(frozen=True)
class RunDir:
    """A run's folder, before anything is written. :meth:`start` creates it when the run writes its first file;
    :meth:`wrote_checkpoint` makes a top-level run (``latest``) ``<parent>/latest`` once it has a checkpoint to
    load — so ``latest`` never names a run that failed on its inputs or was stopped before its first checkpoint,
    and the README's next command always finds something. A phase inside another run (sim_train's ``bc/``) has
    ``latest=False``: its host marks the run itself."""

    path: Path
    latest: bool = True

    def start(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def wrote_checkpoint(self) -> None:
        """Called after each checkpoint the run writes; the first one points ``latest`` here (later ones leave
        ``latest`` alone, so a newer run that has a checkpoint keeps it)."""
        if self.latest and self.path not in _MARKED_LATEST:
            _MARKED_LATEST.add(self.path)
            point_latest(self.path)


_MARKED_LATEST: set[Path] = set()  # runs of this process that have pointed ``latest`` at themselves


def new_run_dir(kind: str, root: str | Path = RUNS_ROOT) -> RunDir:
    """``root/<kind>-<timestamp>``, not created yet (:meth:`RunDir.start` does that)."""
    return RunDir(Path(root) / f"{kind}-{datetime.now():%Y%m%d-%H%M%S}")


def as_run_dir(run_dir: str | Path | RunDir | None, kind: str) -> RunDir:
    """What a trainer was given: a :class:`RunDir`, a folder the caller owns (no ``latest`` link), or nothing (a
    new top-level run of ``kind``)."""
    if isinstance(run_dir, RunDir):
        return run_dir
    if run_dir is None or str(run_dir) == "":
        return new_run_dir(kind)
    return RunDir(Path(run_dir), latest=False)


def link_checkpoint(link: str | Path, target: str | Path) -> None:
    """Make ``link`` name checkpoint ``target`` (a relative symlink, replaced atomically; a copy where the
    filesystem has no symlinks): the place a user takes a run's best checkpoint from, whichever phase wrote it."""
    link, target = Path(link), Path(target)
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(os.path.relpath(target.resolve(), link.parent.resolve()), tmp)
    except OSError:
        import shutil

        shutil.copyfile(target, tmp)
    os.replace(tmp, link)


def point_latest(run_dir: str | Path) -> None:
    """Make ``<parent>/latest`` a relative symlink to ``run_dir`` (best effort: a plain dir named latest wins)."""
    run_dir = Path(run_dir)
    link = run_dir.parent / "latest"
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            os.symlink(run_dir.name, link, target_is_directory=True)
    except OSError:
        pass  # read-only root or no symlinks: the run itself is unaffected


class MetricsLogger:
    """CSV + TensorBoard for one run: ``row(values)`` appends a CSV row and logs its numbers as scalars;
    ``scalars(values, step)`` logs to TensorBoard only (frequent values such as the BC loss).

    ``resume_step``: drop CSV rows past this step (they will be logged again) and purge TensorBoard events
    after it (after ``resume_x`` when the x axis is another field), so a resumed run has one curve, not two."""

    def __init__(
        self,
        run_dir: str | Path,
        fields: Sequence[str],
        prefix: str,
        step_field: str,
        x_field: str | None = None,
        resume_step: int | None = None,
        resume_x: int | None = None,
    ):
        from torch.utils.tensorboard import SummaryWriter  # torch is only needed where we train

        self.path = Path(run_dir) / "metrics.csv"
        self.fields, self.prefix = tuple(fields), prefix
        self.step_field, self.x_field = step_field, x_field or step_field
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = self._rows_up_to(resume_step) if resume_step is not None else []
        with open(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept)
        purge = resume_x if resume_x is not None else resume_step
        self.writer = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)

    def _rows_up_to(self, step: int) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, newline="") as f:
            return [r for r in csv.DictReader(f) if int(float(r[self.step_field])) <= step]

    def scalars(self, values: dict, step: int) -> None:
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(f"{self.prefix}/{key}", value, step)

    def row(self, values: dict) -> None:
        with open(self.path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore").writerow(values)
        skip = {self.step_field, self.x_field}
        self.scalars({k: v for k, v in values.items() if k not in skip}, int(values[self.x_field]))

    def close(self) -> None:
        self.writer.close()
