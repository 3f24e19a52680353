"""The run layout shared by BC, PPO, the trainer node and the CLI.

    runs/<kind>-<YYYYmmdd-HHMMSS>/      one run (kind: bc, ppo, sim_train, demos)
        checkpoints/{iter_*.pt, last.pt, best.pt}
        metrics.csv                     one row per logged step (the CSV columns are fixed per run kind)
        tb/                             TensorBoard scalars, the same values
    runs/latest -> the newest run       (a symlink, where the filesystem has them)

Episode seeds are split once, here, so that training never sees the held-out evaluation episodes:
demonstrations use seeds ``DEMO_SEED`` + i, PPO rollouts ``ROLLOUT_SEED`` + ..., evaluation ``EVAL_SEED`` + i.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

RUNS_ROOT = Path("runs")
DEMO_SEED = 0
EVAL_SEED = 10_000  # held out: never a demonstration or a rollout episode
ROLLOUT_SEED = 1_000_000  # PPO rollouts: disjoint from demonstrations (0+) and evaluation (10000+)


_NEW_RUNS: list[tuple[Path, Path | None]] = []  # (run dir, what latest pointed at before) made by this process


def new_run_dir(kind: str, root: str | Path = RUNS_ROOT) -> Path:
    """``root/<kind>-<timestamp>`` (not created), and ``root/latest`` pointed at it."""
    run_dir = Path(root) / f"{kind}-{datetime.now():%Y%m%d-%H%M%S}"
    link = Path(root) / "latest"
    _NEW_RUNS.append((run_dir, Path(os.readlink(link)) if link.is_symlink() else None))
    point_latest(run_dir)
    return run_dir


def discard_empty_runs() -> None:
    """Remove the run folders this process named but never wrote a file into, and point ``latest`` back."""
    while _NEW_RUNS:
        run_dir, previous = _NEW_RUNS.pop()
        if run_dir.exists() and any(p.is_file() for p in run_dir.rglob("*")):
            continue
        if run_dir.exists():
            for d in sorted(run_dir.rglob("*"), reverse=True):
                d.rmdir()
            run_dir.rmdir()
        link = run_dir.parent / "latest"
        if link.is_symlink() and Path(os.readlink(link)) == Path(run_dir.name):
            link.unlink()
            if previous is not None:
                os.symlink(previous, link, target_is_directory=True)
        if run_dir.parent.is_dir() and not any(run_dir.parent.iterdir()):
            run_dir.parent.rmdir()


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
