"""Learning curves as PNG, from a run directory's ``metrics.csv`` (PPO or BC runs)."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: files only
import matplotlib.pyplot as plt  # noqa: E402

from diffpolicy_ros.errors import UserError
from diffpolicy_ros.eval.stats import wilson_interval  # noqa: E402
from diffpolicy_ros.user_files import RUN_DIR, check_input  # noqa: E402

PPO_PANELS = (
    ("success rate", ("success_rate", "eval_success_rate")),
    ("episode return", ("episode_return",)),
    ("losses", ("policy_loss", "value_loss", "actor_loss")),
    ("update size", ("approx_kl", "clip_fraction")),
)
BC_PANELS = (("loss", ("loss",)), ("evaluation", ("eval_success_rate",)))


def read_metrics(run_dir: str | Path) -> list[dict[str, str]]:
    path = check_input(run_dir, RUN_DIR) / "metrics.csv"
    if not path.is_file():
        raise UserError(f"{path}: no metrics.csv (is {run_dir} a training run directory?)")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a metrics table ({type(exc).__name__}){RUN_DIR.hint()}") from None
    if not rows:
        raise UserError(f"{path}: no rows yet")
    return rows


def _series(rows: list[dict[str, str]], x_key: str, y_key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in rows:
        if row.get(y_key) not in (None, ""):
            xs.append(float(row[x_key]))
            ys.append(float(row[y_key]))
    return xs, ys


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write RUN_DIR/curves.png (or ``out``): PPO curves against env steps, BC curves against iterations."""
    rows = read_metrics(run_dir)
    is_ppo = "env_steps" in rows[0]
    x_key, panels = ("env_steps", PPO_PANELS) if is_ppo else ("iter", BC_PANELS)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels):
        for key in keys:
            xs, ys = _series(rows, x_key, key)
            if xs:
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=key)
        ax.set_title(title)
        ax.set_xlabel(x_key.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(str(run_dir), fontsize=8)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def run_head(run_dir: str | Path) -> str:
    """The policy head a run trained ("diffusion", "gaussian"), from the newest checkpoint it wrote; '' if none."""
    from diffpolicy_ros.models.checkpoint import load_checkpoint

    checkpoints = sorted(Path(run_dir, "checkpoints").glob("*.pt"), key=lambda f: f.stat().st_mtime)
    return str(load_checkpoint(checkpoints[-1])["policy_spec"]["kind"]) if checkpoints else ""


def plot_runs(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Several PPO runs' held-out evaluations in one plot (success against env steps), each labelled with its
    head and folder: both heads of a comparison, or one head across recipes, side by side."""
    curves = {}
    for run_dir in run_dirs:
        rows = read_metrics(run_dir)
        if "env_steps" not in rows[0]:
            raise UserError(f"{run_dir}: a BC run (curves against iterations); compare PPO runs, or plot it alone")
        xs, ys = _series(rows, "env_steps", "eval_success_rate")
        head = run_head(run_dir)
        curves[f"{head}: {Path(run_dir).name}" if head else Path(run_dir).name] = list(zip(xs, ys))
    return plot_success_vs_steps(curves, out, "held-out evaluations")


def plot_success_vs_steps(
    curves: dict[str, list[tuple[int, float]]], out: str | Path, title: str, episodes: int | None = None
) -> Path:
    """One line per label: (env steps, evaluated success rate) points — the ``bench learn`` comparison;
    with ``episodes`` (per evaluation) each line carries its 95 % Wilson band, so a gap can be read as real
    or as evaluation noise."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in curves.items():
        if points:
            xs, ys = zip(*points)
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=label)
            if episodes:
                lo, hi = zip(*(wilson_interval(round(y * episodes), episodes) for y in ys))
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel("success rate (deployed policy, held-out seeds)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
