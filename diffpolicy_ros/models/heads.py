"""The one interface a policy head offers (diffusion and Gaussian implement it), and how PPO changes a
head's sampler settings.

PPO needs from a head only what :class:`PolicyHead` lists, so the trainer, the actor-critic and the
inference call carry no ``isinstance`` branches:

- ``explore(cond)``: a normalized chunk in [-1, 1], the *record* needed to score it later (diffusion: the
  whole denoising chain; Gaussian: the pre-clamp sample) and the record's log-densities under the sampler;
- ``record_log_prob(cond, record, steps)``: the record's log-densities under the current weights, one per
  likelihood term and chunk action, [B, S, H] (S = ``likelihood_terms()``: the fine-tuned denoising steps,
  or 1), or only the term ``steps`` names per row, [B, 1, H]; the trainer reduces them (actions scored,
  per-step ratios or the joint one);
- ``record_action(record)``: the normalized chunk the record stands for;
- ``record_shape()``: the shape of one record.

The sampler settings belong to the policy config (``DiffusionPolicyConfig``: ddim_steps, eta, min_std,
finetune_steps; ``GaussianPolicyConfig``: min_std). PPO states its changes in ``PPOConfig.sampler``, a
mapping applied once by :func:`apply_sampler`; keys a head does not have are ignored, so one PPO config
serves both heads. The fine-tuned policy deploys as the stochastic sampler it was optimized as.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import torch

from diffpolicy_ros.config import ConfigError

SAMPLER_KEYS = ("ddim_steps", "eta", "min_std", "finetune_steps")


class PolicyHead(Protocol):
    config: Any

    def bc_loss(self, obs: dict, actions: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor: ...

    def predict_chunk(
        self, obs: dict, ddim_steps: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor: ...

    def explore(
        self, cond: torch.Tensor, generator: torch.Generator | None = None, fast: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def record_log_prob(
        self, cond: torch.Tensor, record: torch.Tensor, steps: torch.Tensor | None = None
    ) -> torch.Tensor: ...

    def likelihood_terms(self) -> int: ...

    def record_action(self, record: torch.Tensor) -> torch.Tensor: ...

    def record_shape(self) -> tuple[int, ...]: ...


def apply_sampler(config: Any, overrides: dict[str, Any]) -> Any:
    """A copy of ``config`` with PPO's sampler ``overrides`` (unknown keys are an error, keys the head lacks
    are skipped) and, for a head with a ``stochastic`` flag, deployment set to the fine-tuned stochastic chain."""
    unknown = set(overrides) - set(SAMPLER_KEYS)
    if unknown:
        raise ConfigError(f"sampler: unknown setting(s) {sorted(unknown)}; valid: {list(SAMPLER_KEYS)}")
    fields = {f.name for f in dataclasses.fields(config)}
    changes = {k: v for k, v in overrides.items() if k in fields and v is not None}
    if "stochastic" in fields:
        changes["stochastic"] = True
    return dataclasses.replace(config, **changes)
