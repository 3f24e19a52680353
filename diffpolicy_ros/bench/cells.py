"""``diffpolicy bench cells``: a policy's success on cells it never saw — the sim's own world (nominal), each
factor of a cell file alone at each edge of its range, for a camera policy both cameras moved and turned and
calibrated again, and cells sampled with every factor at once.

Every condition plays the same held-out scenes (episode i: scene seed + i, eval's held-out seeds), so the
conditions differ only by the cell; a sampled cell is drawn from the episode's seed on the cells' own stream,
so cells seen in training (demonstration seeds from 0) are not the ones measured here.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.eval.stats import wilson_interval
from diffpolicy_ros.runs import EVAL_SEED
from diffpolicy_ros.sim.cell import CellRanges, factor_edges

# factors a policy without cameras cannot see: a state policy is measured on the physics alone
APPEARANCE = ("cameras.", "lights.", "colours.", "image.")
# A bumped mount, calibrated again: both cameras moved and turned at once. The sim hands every policy each
# episode's exact calibration (obs camera_projection); a calibrated estimator reads it, a learned one cannot.
RECALIBRATED = (
    "both cameras moved 3 cm, turned 3 deg, recalibrated",
    {f"cameras.{cam}.{factor}": (value, value) for cam in CAMERAS for factor, value in (("shift_m", 0.03),
                                                                                      ("turn_deg", 3.0))},
)  # fmt: skip


def edge_conditions(ranges: CellRanges, obs_mode: str) -> list[tuple[str, float]]:
    """(factor, value) for each bound of each factor the file varies that is not the nominal value; a state
    policy's: the physics alone."""
    return [(name, v) for name, v in factor_edges(ranges) if obs_mode != "state" or not name.startswith(APPEARANCE)]


def bench_cells(
    checkpoint: str | Path,
    ranges: CellRanges,
    cells_file: str | None = None,
    episodes: int = 100,
    sampled_episodes: int | None = None,
    seed: int = EVAL_SEED,
    deploy: str | Path | None = None,
    deploy_overrides: dict | None = None,
    device: str = "cpu",
    progress: bool = True,
    out_dir: str | Path | None = None,
) -> dict:
    """Success per condition with its 95 % interval (``episodes`` each; ``sampled_episodes`` for the sampled
    cells, default ``episodes``); ``deploy``: as deployed (``eval --deploy``); ``out_dir``: cells.json and
    cells.png there."""
    from diffpolicy_ros.eval.rollout import evaluate_policy
    from diffpolicy_ros.models.checkpoint import checkpoint_meta, load_policy

    start = time.perf_counter()
    policy, ckpt = load_policy(checkpoint, device)
    meta = checkpoint_meta(ckpt)
    deployment = None
    if deploy is not None:
        from diffpolicy_ros.nodes.graph import load_deployment

        deployment = load_deployment(deploy, deploy_overrides or {})
    conditions = [("nominal", None, CellRanges(), episodes)]
    for name, value in edge_conditions(ranges, meta.obs_mode):
        conditions.append((f"{name} = {value:g}", name, CellRanges().with_factors({name: (value, value)}), episodes))
    if meta.obs_mode == "image":
        conditions.append((RECALIBRATED[0], "cameras", CellRanges().with_factors(RECALIBRATED[1]), episodes))
    conditions.append(("sampled cells (all factors)", "all", ranges, sampled_episodes or episodes))

    rows = []
    bar = tqdm(conditions, desc="bench cells", unit="cell", disable=not progress)
    for label, factor, cell_ranges, n in bar:
        bar.set_postfix_str(label)
        env_kwargs = {"cells": cell_ranges}
        if deployment is not None:
            from diffpolicy_ros.eval.deployed import evaluate_deployed

            result = evaluate_deployed(policy, deployment, meta.task, n, seed, meta.obs_mode, device,
                                       progress=False, env_kwargs=env_kwargs)  # fmt: skip
        else:
            result = evaluate_policy(policy, task=meta.task, episodes=n, seed=seed, obs_mode=meta.obs_mode,
                                     device=device, execute_horizon=meta.execute_horizon, progress=False,
                                     env_kwargs=env_kwargs)  # fmt: skip
        successes = round(result["success_rate"] * n)
        rows.append({"condition": label, "factor": factor, "episodes": n, "success_rate": result["success_rate"],
                     "success_ci95": list(wilson_interval(successes, n))})  # fmt: skip
    edges = [r for r in rows if r["factor"] not in (None, "cameras", "all")]  # one factor at a bound
    summary = {
        "checkpoint": str(checkpoint),
        "cells_file": cells_file,
        "task": meta.task,
        "obs_mode": meta.obs_mode,
        "as_deployed": deployment is not None,
        "seed": seed,
        "conditions": rows,
        "nominal": rows[0]["success_rate"],
        "sampled_cells": rows[-1]["success_rate"],
        "worst_factor": min(edges, key=lambda r: r["success_rate"])["condition"] if edges else None,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    if out_dir is not None:
        import json

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cells.json").write_text(json.dumps(summary, indent=2))
        summary["plot"] = str(plot_conditions(rows, out / "cells.png", f"{checkpoint}"))
    return summary


def plot_conditions(rows: list[dict], path: Path, title: str) -> Path:
    """Success per condition with its 95 % interval, one bar each, nominal first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["condition"] for r in rows]
    rates = [r["success_rate"] for r in rows]
    low = [r["success_rate"] - r["success_ci95"][0] for r in rows]
    high = [r["success_ci95"][1] - r["success_rate"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    colours = ["tab:green"] + ["tab:blue"] * (len(rows) - 2) + ["tab:orange"]
    ax.barh(y, rates, xerr=[low, high], color=colours[: len(rows)], capsize=3)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, 1)
    ax.axvline(rates[0], color="tab:green", linestyle=":", linewidth=1)
    ax.set_xlabel("success rate (95 % interval)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
