"""Open-loop scores of predicted chunks against recorded commands: the field's open-loop metrics (Octo, GR00T,
Diffusion Policy) — per-step MAE / MSE, the direction's accuracy while the arm moves, the best of N sampled
chunks — and the report's plots. Shared by ``diffpolicy eval-bag`` (bags/evaluate.py) and the replay graph's
evaluator node."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from diffpolicy_ros import contract as C

MOVING = 0.02  # m/s: below this the recorded arm is treated as still (no direction to score)
DIRECTION_OK = 0.5  # rad
HOLD_S = 0.25  # a recorded command stands for at most this long (the deadman's limit)


def recorded_at(times: np.ndarray, values: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The recorded command in force at each time in ``t`` (the newest at or before it) and whether one was
    (none before the first command, or when the newest is older than ``HOLD_S``)."""
    idx = np.searchsorted(times, t + 1e-6, side="right") - 1
    valid = (idx >= 0) & (t - times[np.clip(idx, 0, None)] <= HOLD_S)
    return values[np.clip(idx, 0, None)], valid


def score(stamps: np.ndarray, preds: np.ndarray, cmd_t: np.ndarray, cmd_v: np.ndarray, execute: int) -> dict:
    """Chunks ``preds`` [samples, N, H, A] predicted from observations stamped ``stamps`` [N] against the
    recorded commands (``cmd_t`` [M], ``cmd_v`` [M, A]): the eval-bag metrics. Shared with the evaluator node."""
    dt = C.CONTROL_PERIOD_S
    horizon = preds.shape[2]
    when = stamps[:, None] + dt * np.arange(horizon)[None, :]  # [N, H]: the time each predicted step is for
    target, valid = recorded_at(cmd_t, cmd_v, when.reshape(-1))
    target, valid = target.reshape(*when.shape, -1), valid.reshape(when.shape)
    err = np.abs(preds[0] - target)  # [N, H, A]
    mae_by_step = [float(err[:, k][valid[:, k]].mean()) if valid[:, k].any() else None for k in range(horizon)]
    sq = ((preds[0] - target) ** 2)[valid]
    speed = np.linalg.norm(target, axis=-1)
    moving = valid & (speed > MOVING)
    cos = np.sum(preds[0] * target, -1) / (np.linalg.norm(preds[0], axis=-1) * speed + 1e-12)
    angle = np.arccos(np.clip(cos, -1.0, 1.0))
    per_sample = np.full(preds.shape[:2], np.nan)  # each sampled chunk's MAE over its valid steps
    for i in range(len(stamps)):
        if valid[i].any():
            per_sample[:, i] = np.abs(preds[:, i] - target[i])[:, valid[i]].mean(axis=(1, 2))
    best = np.nanmin(per_sample, axis=0) if len(stamps) else np.array([])
    covered = np.zeros(len(cmd_t), bool)
    for s in stamps:  # the recorded commands a chunk's executed part stands for
        covered |= (cmd_t >= s - 1e-6) & (cmd_t < s + execute * dt - 1e-6)
    return {
        "chunks": int(len(stamps)),
        "samples": int(preds.shape[0]),
        "mae_by_step": mae_by_step,
        "mse": float(sq.mean()) if sq.size else None,
        "direction_acc": float((angle[moving] < DIRECTION_OK).mean()) if moving.any() else None,
        "best_of_n_mae": float(np.nanmean(best)) if np.isfinite(best).any() else None,
        "coverage": float(covered.mean()) if len(cmd_t) else 0.0,
    }


def write_report(out_dir, report: dict, stamps, chunks, cmd_t, cmd_v, execute: int, episode_starts=()) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report["plots"] = plot_report(out, report, stamps, chunks, cmd_t, cmd_v, execute, episode_starts)
    (out / "report.json").write_text(json.dumps(report, indent=2))


def plot_report(
    out: Path, report: dict, stamps, chunks, cmd_t, cmd_v, execute: int, episode_starts=()
) -> list[str]:
    """actions.png: each action dimension over time, recorded vs the chunks drawn from their inference points,
    episode starts marked; error_by_step.png: MAE against the step in the chunk, from 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = cmd_t[0]
    fig, axes = plt.subplots(C.ACTION_DIM, 1, figsize=(10, 6), sharex=True)
    steps = C.CONTROL_PERIOD_S * np.arange(C.CHUNK_HORIZON)
    for d, ax in enumerate(axes):
        ax.step(cmd_t - t0, cmd_v[:, d], where="post", color="black", lw=1.2, label="recorded")
        for i, s in enumerate(stamps):
            ax.plot(s - t0 + steps, chunks[i, :, d], color="tab:orange", lw=0.6, alpha=0.35,
                    label="predicted chunks" if i == 0 else None)  # fmt: skip
            ax.plot(s - t0 + steps[:execute], chunks[i, :execute, d], color="tab:red", lw=1.0, alpha=0.7,
                    label="executed part" if i == 0 else None)  # fmt: skip
        for i, t in enumerate(episode_starts):
            ax.axvline(t - t0, color="tab:gray", lw=0.8, ls="--", label="episode start" if i == 0 else None)
        ax.set_ylabel(f"v{'xyz'[d]} (m/s)")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("bag time (s)")
    fig.suptitle(f"{Path(report['checkpoint']).name} on {Path(report['bag']).name}")
    fig.tight_layout()
    fig.savefig(out / "actions.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    mae = [np.nan if v is None else v for v in report["mae_by_step"]]
    ax.plot(np.arange(len(mae)), mae, marker="o")
    ax.axvspan(-0.5, execute - 0.5, color="tab:green", alpha=0.1, label="executed")
    ax.set_xlabel("step in chunk")
    ax.set_ylabel("MAE (m/s)")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "error_by_step.png", dpi=100)
    plt.close(fig)
    return [str(out / "actions.png"), str(out / "error_by_step.png")]
