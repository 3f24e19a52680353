"""Checkpoints: one typed payload, written atomically, loaded with ``torch.load(weights_only=True)``.

On disk a checkpoint is a plain dict of tensors and Python primitives (what ``weights_only`` accepts):

    format, version            "diffpolicy_ros/checkpoint", :data:`VERSION`
    policy_spec                the policy config (kind + the active head's dataclass as a dict)
    model                      the weights to deploy (the EMA weights when BC used EMA)
    meta                       :class:`CheckpointMeta` as a dict: source, task, obs_mode, execute_horizon, ...
    train_state                only where a resume needs it (optimizers, counters, RNG states)

The model's state_dict includes the noise schedule and every normalizer (they are buffers), so a loaded
policy samples exactly as the saved one did. Loading for deployment lives here, in the model layer, so the
policy node needs neither the trainer nor a simulator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from diffpolicy_ros.atomic_file import atomic_write
from diffpolicy_ros.contract import EXECUTE_HORIZON
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.models.factory import PolicySpec, build_policy, policy_spec, spec_dict
from diffpolicy_ros.user_files import CHECKPOINT, UserFileError, check_input

FORMAT = "diffpolicy_ros/checkpoint"
VERSION = 2  # 2: meta is a CheckpointMeta (version 1 files still load; their missing meta keys get defaults)


class CheckpointError(UserError):
    """The file is missing, truncated, not ours, or does not match its policy config."""


@dataclass
class CheckpointMeta:
    source: str = "unknown"  # bc | ppo | test
    task: str = "push"
    obs_mode: str = "state"  # state | image
    execute_horizon: int = EXECUTE_HORIZON
    config: dict = field(default_factory=dict)  # the training run's config (BCRun / PPORun as a dict)
    metrics: dict = field(default_factory=dict)  # the metrics at the time of saving
    # the held-out evaluation of these very weights (task, episodes, seed, success_rate, success_ci95; see
    # rl/best.py), {} when they were not evaluated: what "best" and the deploy gate read
    evaluation: dict = field(default_factory=dict)
    data: str = ""  # the demonstrations it was trained on (BC)


def make_payload(
    spec: PolicySpec, model: nn.Module, meta: CheckpointMeta, train_state: dict | None = None
) -> dict[str, Any]:
    """The one place a checkpoint dict is assembled."""
    payload = {"policy_spec": spec_dict(spec), "model": model.state_dict(), "meta": asdict(meta)}
    if train_state is not None:
        payload["train_state"] = train_state
    return payload


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically: a crash leaves the previous checkpoint loadable, never a partial file."""
    return atomic_write(path, lambda f: torch.save({"format": FORMAT, "version": VERSION, **payload}, f))


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict[str, Any]:
    try:
        path = check_input(path, CHECKPOINT)
    except UserFileError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, pickle with foreign objects, ...
        # torch's own text suggests weights_only=False, which would run arbitrary pickled code: never that
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "weights_only" in reason:
            reason = "holds objects other than tensors and plain data, or is not a torch file"
        raise CheckpointError(f"{path}: corrupt or not a checkpoint ({type(exc).__name__}: {reason[:200]})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a diffpolicy_ros checkpoint")
    if ckpt.get("version", 0) > VERSION:
        raise CheckpointError(f"{path}: written by a newer diffpolicy_ros (version {ckpt['version']})")
    for key in ("policy_spec", "model"):
        if key not in ckpt:
            raise CheckpointError(f"{path}: missing {key!r}")
    return ckpt


def checkpoint_meta(ckpt: dict[str, Any]) -> CheckpointMeta:
    """The typed meta of a loaded checkpoint (unknown keys from other versions are ignored)."""
    known = CheckpointMeta.__dataclass_fields__
    return CheckpointMeta(**{k: v for k, v in (ckpt.get("meta") or {}).items() if k in known})


def deploy_refusal(meta: CheckpointMeta, min_success: float) -> str | None:
    """Why a checkpoint may not drive a real arm (None: it may): it must carry a held-out evaluation of its own
    weights (``meta.evaluation``) with a success rate of at least ``min_success``."""
    evaluation = meta.evaluation or {}
    if "success_rate" not in evaluation:
        return (
            f"it carries no held-out evaluation (a {meta.source} checkpoint saved without one, e.g. an early BC "
            f"checkpoint); evaluate it with `diffpolicy eval --checkpoint FILE --write-evaluation`"
        )
    if evaluation["success_rate"] < min_success:
        return f"its held-out evaluation, {describe_evaluation(evaluation)}, is below min_success {min_success:g}"
    return None


def describe_evaluation(evaluation: dict) -> str:
    """'success 0.86 [0.74, 0.93] on 50 held-out episodes of push (seeds 10000+)', or 'not evaluated'."""
    if "success_rate" not in (evaluation or {}):
        return "not evaluated"
    ci = evaluation.get("success_ci95")
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    seeds = f" (seeds {evaluation['seed']}+)" if "seed" in evaluation else ""
    return (
        f"success {evaluation['success_rate']:.2f}{interval} on {evaluation.get('episodes', '?')} held-out episodes "
        f"of {evaluation.get('task', '?')}{seeds}"
    )


def describe_checkpoint(ckpt: dict[str, Any]) -> str:
    """One line on what a checkpoint is: kind, inputs, evaluation, training steps."""
    meta = checkpoint_meta(ckpt)
    spec = policy_spec(ckpt["policy_spec"])
    fusion = spec.active().fusion
    inputs = [name for name, used in (("cameras", fusion.use_images), ("block/goal poses", fusion.use_task_state),
                                      ("instruction", fusion.use_text)) if used]  # fmt: skip
    steps = {k: meta.metrics[k] for k in ("iter", "iteration", "env_steps") if k in meta.metrics}
    trained = ", ".join(f"{k} {v}" for k, v in steps.items()) or "steps not recorded"
    return (
        f"{spec.kind} policy from {meta.source} on {meta.task} ({trained}); reads joint state"
        + "".join(f", {i}" for i in inputs)
        + f"; {describe_evaluation(meta.evaluation)}"
    )


def policy_from_checkpoint(ckpt: dict[str, Any], name: str = "checkpoint") -> nn.Module:
    """Rebuild the policy from a loaded checkpoint's stored config and load its weights (strict, finite)."""
    try:
        policy = build_policy(policy_spec(ckpt["policy_spec"]))
        policy.load_state_dict(ckpt["model"], strict=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{name}: weights do not match the stored policy config ({exc})") from exc
    for key, tensor in policy.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"{name}: non-finite values in {key}")
    return policy


def load_policy(path: str | Path, device: str = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Load a checkpoint and its policy; eval mode on ``device``."""
    ckpt = load_checkpoint(path)
    return policy_from_checkpoint(ckpt, str(path)).to(device).eval(), ckpt
