"""The PPO agent: a policy (diffusion or Gaussian head) plus a critic on the policy's global representation.

PPO needs three things from a policy, and they differ by head:

- ``act(obs)``: sample an action chunk (normalized, in [-1, 1]), the *record* needed to score it later (the
  head's ``explore``) and the record's log-probabilities under the sampler. Diffusion (DPPO): the whole
  denoising chain [B, K+1, H, A] drawn with ``eta`` > 0 and a per-step std of at least ``min_std``, scored
  from its own step noise. Gaussian: the pre-clamp sample [B, H, A].
- ``forward(obs, record, terms)``: (log-probability of the record under the current weights, value).
  Diffusion: the exact Gaussian likelihood of the last K' denoising steps (``DiffusionPolicy.record_log_prob``,
  maths in ``models/scheduler.py``) — with ``terms`` only one step per row, one U-Net pass; Gaussian: the
  diagonal Normal. ``forward`` is the only training entry point so the agent can be wrapped in
  ``DistributedDataParallel``.
- ``value(obs)``: the critic alone (GAE, bootstrapping).

The heads return log-densities per likelihood term and chunk action ([B, S, H]); :meth:`ActorCritic.reduce`
is the one place that turns them into PPO's log-probabilities, so the sampler's and the update's agree.

With ``per_step_ratio`` (the default, DPPO's two-layer "denoising MDP") each fine-tuned denoising step is its
own PPO sample: its ratio is the exact Gaussian density ratio of that step, clipped on its own, and it gets
the decision's advantage. The gradient before clipping equals the joint chain's (the chain log-likelihood is
the sum of the steps'); the difference is the trust region. A joint ratio over K' x H x A Gaussian terms
leaves the clip range after a tiny update, so most samples stop contributing (measured: ~55 % clipped, and
no improvement from a weak start on the point mass); per-step ratios keep the update informative.

``per_element_log_prob`` averages each log-density over the chunk's H x A elements instead of summing it
(as DPPO's reference code does): the ratio becomes the per-element geometric mean, a looser trust region on
which DPPO's small clip coefficients (~0.01) act. Off by default: the default ratio is the exact density's.

``likelihood_actions`` (DPPO's ``reward_horizon``) scores only the chunk's first actions — the ones the env
executes. The unexecuted tail never earns reward; left in, it adds score-function variance and makes each
step's ratio four times sharper (16 scored actions instead of 4).

The critic reads the shared representation detached by default (``detach_critic_encoder``): value-loss
gradients would otherwise reshape a BC-trained encoder at the start of fine-tuning, when the critic is still
wrong. The encoder then learns from the PPO objective only, as the actor's part.
"""

from __future__ import annotations

import torch
from torch import nn

from diffpolicy_ros.models.critic import Critic
from diffpolicy_ros.models.heads import PolicyHead


class ActorCritic(nn.Module):
    def __init__(
        self,
        policy: PolicyHead,
        *,
        critic_hidden: int = 256,
        detach_critic_encoder: bool = True,
        per_step_ratio: bool = True,
        per_element_log_prob: bool = False,
        likelihood_actions: int | None = None,
    ):
        super().__init__()
        self.policy = policy
        self.critic = Critic(policy.config.fusion.dim, critic_hidden)
        self.detach_critic_encoder = detach_critic_encoder
        self.per_step_ratio = per_step_ratio
        self.per_element_log_prob = per_element_log_prob
        self.likelihood_actions = likelihood_actions or policy.config.horizon

    def record_shape(self) -> tuple[int, ...]:
        return self.policy.record_shape()

    def ratio_terms(self) -> int:
        """PPO samples per decision: one per fine-tuned denoising step with ``per_step_ratio``, else one."""
        return self.policy.likelihood_terms() if self.per_step_ratio else 1

    def reduce(self, terms: torch.Tensor) -> torch.Tensor:
        """Head log-densities [B, S, H] -> the PPO log-probabilities [B, ratio_terms()]: the scored actions
        summed (or averaged per element), then one per step or the joint sum."""
        logp = terms[:, :, : self.likelihood_actions].sum(2)
        if self.per_element_log_prob:  # mean over the scored elements instead of the sum
            logp = logp / (self.likelihood_actions * self.policy.config.action_dim)
        return logp if self.per_step_ratio else logp.sum(1, keepdim=True)

    def _value(self, cond: torch.Tensor) -> torch.Tensor:
        return self.critic(cond.detach() if self.detach_critic_encoder else cond).float()

    @torch.no_grad()
    def act(
        self, obs: dict, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(normalized chunk [B, H, A] in [-1, 1], record, its log-probabilities [B, ratio_terms()] under the
        sampling policy) for a batch of observations. A diffusion chain runs in the native kernel on the CPU
        (``explore(fast=True)``): the rollouts' largest cost, and no gradient flows through it."""
        action, record, terms = self.policy.explore(self.policy.encoder(obs), generator, fast=True)
        return action, record, self.reduce(terms)

    @torch.no_grad()
    def value(self, obs: dict) -> torch.Tensor:
        return self._value(self.policy.encoder(obs))

    def forward(
        self, obs: dict, record: torch.Tensor, terms: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log pi_theta(record | obs), V(obs) [B]) with gradients. The log-probability is [B, ratio_terms()];
        with ``terms`` ([B] indices < ratio_terms()) only that term of each row, [B] — with ``per_step_ratio``
        the U-Net then runs one denoising step per row, not K'."""
        cond = self.policy.encoder(obs)
        if terms is None:
            return self.reduce(self.policy.record_log_prob(cond, record)), self._value(cond)
        steps = terms if self.per_step_ratio else None  # the joint ratio needs every step
        return self.reduce(self.policy.record_log_prob(cond, record, steps))[:, 0], self._value(cond)
