"""Build a policy from a config (YAML or the dict stored in a checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from diffpolicy_ros.config import ConfigError, from_dict, to_dict
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.gaussian_policy import GaussianPolicy, GaussianPolicyConfig

POLICY_KINDS = ("diffusion", "gaussian")


@dataclass
class PolicySpec:
    kind: str = "diffusion"
    diffusion: DiffusionPolicyConfig = field(default_factory=DiffusionPolicyConfig)
    gaussian: GaussianPolicyConfig = field(default_factory=GaussianPolicyConfig)

    def active(self) -> DiffusionPolicyConfig | GaussianPolicyConfig:
        return self.diffusion if self.kind == "diffusion" else self.gaussian

    def fit_task(self, proprio_dim: int, goals_dim: int, action_dim: int) -> None:
        """The task defines the shapes, not the policy YAML: the proprio width, the extra state of a two-goal task
        (both goals' xy: ``obs["goals"]``, 0 without it) and the action width."""
        active = self.active()
        active.fusion.proprio_dim, active.fusion.extra_state_dim, active.action_dim = proprio_dim, goals_dim, action_dim

    def state_dim(self) -> int:
        """The state vector the policy reads: proprio plus the extra (two-goal) state."""
        return self.active().fusion.proprio_dim + self.active().fusion.extra_state_dim


def policy_spec(data: dict[str, Any] | None) -> PolicySpec:
    spec = from_dict(PolicySpec, data)
    if spec.kind not in POLICY_KINDS:
        raise ConfigError(f"policy kind must be one of {POLICY_KINDS}, got {spec.kind!r}")
    return spec


def build_policy(spec: PolicySpec) -> nn.Module:
    return DiffusionPolicy(spec.diffusion) if spec.kind == "diffusion" else GaussianPolicy(spec.gaussian)


def spec_dict(spec: PolicySpec) -> dict[str, Any]:
    """Only the active head's config is stored, so a checkpoint says exactly what was trained."""
    return {"kind": spec.kind, spec.kind: to_dict(spec.active())}
