"""The diffusion policy: multimodal encoder -> global condition -> a sampled 16x3 action chunk (DDIM, or the
few-step actor's Euler steps).

Roles are split as in Diffusion Policy / LeRobot: :class:`MultimodalEncoder` (observations),
:class:`ConditionalUnet1D` (noise or velocity prediction), the objective's schedule — :class:`NoiseSchedule`
(DDPM/DDIM maths and the chain likelihood, see its module docstring) or :class:`FlowSchedule` (rectified flow and
the shortcut model, ``models/flow.py``) — and this wrapper, which owns the action normalizer and exposes:

- ``bc_loss(obs, actions)``: the objective's loss (behaviour cloning);
- ``sample(cond, ...)``: sampling (one loop, :meth:`denoise`), optionally returning the whole chain;
- ``predict_chunk(obs)``: observation dict -> unnormalized chunk in m/s (inference mode);
- the PPO head interface (:class:`~diffpolicy_ros.models.heads.PolicyHead`): ``explore`` (the fine-tuning
  sampler, whose record is the denoising chain), ``record_log_prob`` (the chain's step log-densities under the
  current weights), ``likelihood_terms``, ``record_action``, ``record_shape``.

The sampler settings (``ddim_steps``, ``eta``, ``min_std``, ``finetune_steps``, ``stochastic``) live in
:class:`DiffusionPolicyConfig` only; PPO changes them through ``PPOConfig.sampler`` (see ``models/heads.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.contract import ACTION_DIM, CHUNK_HORIZON
from diffpolicy_ros.models.flow import FlowConfig, FlowSchedule
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder
from diffpolicy_ros.models.native import NativeLoop, native_kernel, weights_version
from diffpolicy_ros.models.normalizer import RangeNormalizer
from diffpolicy_ros.models.scheduler import (
    Committed,
    NoiseSchedule,
    NoiseScheduleConfig,
    StepCoefficients,
    gaussian_log_density,
)
from diffpolicy_ros.models.unet1d import ConditionalUnet1D, UNetConfig


@dataclass
class DiffusionPolicyConfig:
    horizon: int = CHUNK_HORIZON
    action_dim: int = ACTION_DIM
    # 'ddpm': epsilon prediction, DDIM sampling (Diffusion Policy); 'flow': rectified flow, or with flow.shortcut
    # a shortcut model, sampled in a few Euler steps (models/flow.py: the few-step actor)
    objective: str = "ddpm"
    ddim_steps: int = 10  # sampling steps: DDIM's, or a flow's Euler steps
    eta: float = 0.0  # deployment DDIM eta: 0 = classic deterministic DDIM (BC); after PPO the fine-tuning eta
    min_std: float = 0.1  # DPPO: floor of the per-step sampling / likelihood std while fine-tuning
    # Deployment adds each step's noise (std max(sigma_eta, min_std)). PPO sets it: the fine-tuned policy is
    # the stochastic chain it was optimized as; its noise-free mean path is a different policy, and measured
    # on the point mass it did not improve when the stochastic policy did.
    stochastic: bool = False
    finetune_steps: int = 10  # K': the last K' denoising steps carry the PPO likelihood
    fusion: FusionConfig = field(default_factory=FusionConfig)
    unet: UNetConfig = field(default_factory=UNetConfig)
    schedule: NoiseScheduleConfig = field(default_factory=NoiseScheduleConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)

    def __post_init__(self) -> None:
        """Settings the network cannot run with are errors here, naming the setting (LeRobot's practice)."""
        levels = len(self.unet.down_dims) - 1  # stride-2 downsamplings in the U-Net
        if self.horizon < 1 or self.horizon % 2**levels:
            raise ConfigError(
                f"horizon {self.horizon} cannot be downsampled {levels} times by the U-Net "
                f"(down_dims {list(self.unet.down_dims)}): use a multiple of {2**levels}"
            )
        if self.objective not in ("ddpm", "flow"):
            raise ConfigError(f"objective must be 'ddpm' or 'flow', got {self.objective!r}")
        if self.objective == "flow":
            self.flow.check_steps(self.ddim_steps)
        elif not 1 <= self.ddim_steps <= self.schedule.num_train_timesteps:
            raise ConfigError(f"ddim_steps must be in [1, {self.schedule.num_train_timesteps}], got {self.ddim_steps}")
        if not 1 <= self.finetune_steps:
            raise ConfigError(f"finetune_steps must be >= 1, got {self.finetune_steps}")
        if self.eta < 0 or self.min_std < 0:
            raise ConfigError(f"eta and min_std must be >= 0, got eta {self.eta}, min_std {self.min_std}")


class DiffusionPolicy(nn.Module):
    def __init__(self, config: DiffusionPolicyConfig | None = None):
        super().__init__()
        self.config = cfg = config or DiffusionPolicyConfig()
        cfg.unet.action_dim = cfg.action_dim
        cfg.unet.step_size_embedding = cfg.objective == "flow" and cfg.flow.shortcut
        self.encoder = MultimodalEncoder(cfg.fusion)
        self.unet = ConditionalUnet1D(cfg.fusion.dim, cfg.unet)
        # the sampler's maths: one interface (training loss, per-step times and step_mean columns) for both
        self.schedule = FlowSchedule(cfg.flow) if cfg.objective == "flow" else NoiseSchedule(cfg.schedule)
        self.action_norm = RangeNormalizer(cfg.action_dim)
        self._native_loop: NativeLoop | None = None  # explore(fast=True): the kernel's snapshot of the weights

    # ---------------------------------------------------------------- training
    def bc_loss(self, obs: dict, actions: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """The objective's loss (DDPM, or flow matching) on normalized action chunks [B, H, A]."""
        cond = self.encoder(obs) if cond is None else cond
        return self.schedule.training_loss(self.unet, self.action_norm.normalize(actions), cond)

    # ------------------------------------------------------- sampling: one loop (DDIM, or a flow's Euler steps)
    def draw_noise(
        self, batch: int, ddim_steps: int, stochastic: bool, generator: torch.Generator | None, device
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x_T [B, H, A] and, for a stochastic chain, every step's noise [K, B, H, A] — in this order, so any
        caller with the same generator state draws the same chain (training, evaluation, deployment)."""
        shape = (batch, self.config.horizon, self.config.action_dim)
        x_t = torch.randn(shape, generator=generator, device=device)
        steps = torch.randn((ddim_steps, *shape), generator=generator, device=device) if stochastic else None
        return x_t, steps

    def denoise(
        self,
        x_t: torch.Tensor,
        films: list,
        coefs: StepCoefficients,
        stds: torch.Tensor,
        step_noise: torch.Tensor | None,
        return_chain: bool = False,
        committed: Committed | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The sampling loop (eager, and traced by ``ChunkPredictor``; the native kernel is its C++ twin):
        x_T -> clipped normalized chunk, and the chain [x_T, ..., x_0] when asked. No host syncs inside."""
        x, chain = x_t, [x_t]
        for k in range(len(films)):
            x = self.schedule.step_mean(x, self.unet.forward_with_film(x, films[k]), coefs, k, committed)
            if step_noise is not None:
                x = x + stds[k] * step_noise[k]
            if return_chain:
                chain.append(x)
        return x.clamp(-1.0, 1.0), chain

    def sample(
        self,
        cond: torch.Tensor,
        ddim_steps: int | None = None,
        eta: float | None = None,
        min_std: float | None = None,
        return_chain: bool = False,
        generator: torch.Generator | None = None,
        noise: bool | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalized chunk [B, H, A]; with ``return_chain`` also the chain [B, K+1, H, A] (x_T first).

        Settings default to the policy config's. ``min_std`` (PPO exploration) floors the per-step std so
        every recorded step has a density. ``noise``: add the per-step noise (default: when eta > 0 or
        min_std); False follows the means.
        """
        steps = ddim_steps or self.config.ddim_steps
        eta = self.config.eta if eta is None else eta
        stochastic = (eta > 0 or bool(min_std)) if noise is None else noise
        x, chain, _, _ = self._draw_chain(cond, steps, eta, min_std, stochastic, generator, return_chain)
        return (x, torch.stack(chain, dim=1)) if return_chain else x

    def _draw_chain(
        self,
        cond: torch.Tensor,
        steps: int,
        eta: float,
        min_std: float | None,
        stochastic: bool,
        generator: torch.Generator | None,
        return_chain: bool,
        fast: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None, torch.Tensor]:
        """The one sampling path of ``sample`` and ``explore``: (chunk, chain, the per-step noise drawn, the
        per-step stds). ``fast``: the loop in the native kernel where it applies (see ``explore``)."""
        coefs = self.schedule.step_coefficients(steps, eta)
        stds = coefs.stds(min_std)
        x_t, step_noise = self.draw_noise(cond.shape[0], steps, stochastic, generator, cond.device)
        if fast and stochastic and self._native_chain_applies(cond):
            loop = self._native_chain(steps, eta, min_std)
            chain = loop(self.packed_step_films(steps, cond), x_t, step_noise, return_chain=True)
            return chain[-1].clamp(-1.0, 1.0), list(chain.unbind(0)), step_noise, stds
        films = self.step_films(steps, cond)
        x, chain = self.denoise(x_t, films, coefs, stds, step_noise, return_chain)
        return x, chain, step_noise, stds

    def step_films(self, steps: int, cond: torch.Tensor) -> list[list[torch.Tensor]]:
        """Every sampling step's FiLM parameters: the step's time (and, for a shortcut model, its size)."""
        sched = self.schedule
        return self.unet.film_for_steps(sched.sampling_timesteps(steps), cond, sched.sampling_step_sizes(steps))

    def packed_step_films(self, steps: int, cond: torch.Tensor) -> torch.Tensor:
        """:meth:`step_films` as the native kernel reads them: [K, B, F], each step's blocks concatenated."""
        return torch.stack([torch.cat(step, dim=1) for step in self.step_films(steps, cond)])

    @torch.inference_mode()
    def predict_chunk(
        self, obs: dict, ddim_steps: int | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Observation batch -> unnormalized action chunk [B, H, A] in m/s (the deployment sampler)."""
        cfg = self.config
        cond = self.encoder(obs)
        min_std = cfg.min_std if cfg.stochastic else None
        x = self.sample(cond, ddim_steps, min_std=min_std, noise=cfg.stochastic, generator=generator)
        return self.action_norm.unnormalize(x)

    # ---------------------------------------------------------------- the PPO head interface (models/heads.py)
    def finetuned_steps(self) -> list[int]:
        """Indices (into the sampling steps) of the last K' steps, the ones that carry the PPO likelihood."""
        steps = self.config.ddim_steps
        return list(range(steps - min(self.config.finetune_steps, steps), steps))

    def likelihood_terms(self) -> int:
        return len(self.finetuned_steps())

    def explore(
        self, cond: torch.Tensor, generator: torch.Generator | None = None, fast: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(normalized chunk, record = the whole chain [B, K+1, H, A], its log-densities [B, K', H]) drawn with
        the fine-tuning sampler. The densities come from the drawn noise itself: x_{k+1} = mu_k + std_k z_k,
        so log N(x_{k+1}; mu_k, std_k) = -z_k^2 / 2 - log std_k - log(2 pi) / 2 — the behaviour policy's own
        log-probabilities (as CleanRL records them while acting), with no second pass through the U-Net.

        ``fast`` (PPO's rollouts): where the chain needs no gradient and runs in fp32 on the CPU, the native
        kernel draws it (``models/native.py``), the same chain as the eager loop's from the same noise to
        float rounding; elsewhere, or without a C++ toolchain, the eager loop."""
        cfg = self.config
        x, chain, step_noise, stds = self._draw_chain(
            cond, cfg.ddim_steps, cfg.eta, cfg.min_std, True, generator, return_chain=True, fast=fast
        )
        ks = self.finetuned_steps()
        std = stds[ks].float().view(-1, 1, 1, 1)
        z = step_noise[ks].float()
        terms = gaussian_log_density(std * z, torch.zeros_like(z), std).sum(-1)  # [K', B, H]
        return x, torch.stack(chain, dim=1), terms.transpose(0, 1)

    def _native_chain_applies(self, cond: torch.Tensor) -> bool:
        return (
            cond.device.type == "cpu" and cond.dtype == torch.float32 and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu") and native_kernel() is not None
        )  # fmt: skip

    def _native_chain(self, steps: int, eta: float, min_std: float) -> NativeLoop:
        """The kernel's loop on the current weights: rebuilt (~4 ms) only after an update or a load changed them."""
        loop = self._native_loop
        if loop is None or loop.key != (steps, eta, min_std, True, weights_version(self.unet)):
            loop = self._native_loop = NativeLoop(self, steps, eta, min_std, stochastic=True)
        return loop

    def record_shape(self) -> tuple[int, ...]:
        return (self.config.ddim_steps + 1, self.config.horizon, self.config.action_dim)

    def record_action(self, record: torch.Tensor) -> torch.Tensor:
        return record[:, -1].clamp(-1.0, 1.0)

    def record_log_prob(
        self, cond: torch.Tensor, record: torch.Tensor, steps: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-densities of the recorded chain under the current weights, per fine-tuned step and chunk action
        (summed over the action's dimensions): [B, K', H]. ``steps`` ([B] indices into the K' fine-tuned steps):
        only that step of each row, [B, 1, H] — one U-Net pass per row (PPO minibatches over (decision,
        denoising step) pairs). Maths in ``models/scheduler.py``."""
        cfg = self.config
        coefs = self.schedule.step_coefficients(cfg.ddim_steps, cfg.eta)
        stds = coefs.stds(cfg.min_std).to(cond.device)
        timesteps = torch.tensor(self.schedule.sampling_timesteps(cfg.ddim_steps), device=cond.device)
        step_sizes = self.schedule.sampling_step_sizes(cfg.ddim_steps)
        step_sizes = None if step_sizes is None else torch.tensor(step_sizes, device=cond.device)
        batch = cond.shape[0]
        rows = torch.arange(batch, device=cond.device)
        ks = torch.tensor(self.finetuned_steps(), device=cond.device)
        if steps is None:  # all fine-tuned steps, in one batched U-Net call (step-major rows)
            k = ks.repeat_interleave(batch)
            rows, cond = rows.repeat(len(ks)), cond.repeat(len(ks), 1)
        else:
            k = ks[steps]
        x_t = record[rows, k]
        out = self.unet(x_t, timesteps[k], cond, None if step_sizes is None else step_sizes[k])
        mean = self.schedule.step_mean(x_t, out, coefs, k)
        # fp32 under AMP
        terms = gaussian_log_density(record[rows, k + 1].float(), mean.float(), stds[k].view(-1, 1, 1)).sum(-1)
        return terms.view(-1, batch, cfg.horizon).transpose(0, 1)
