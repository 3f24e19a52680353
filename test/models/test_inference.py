"""The one inference call: shapes, units, and the fast path equal to the eager reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.flow import FlowConfig
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.gaussian_policy import GaussianPolicy
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.native import has_cxx_compiler
from diffpolicy_ros.models.obs import obs_to_torch
from diffpolicy_ros.models.scheduler import NoiseScheduleConfig
from diffpolicy_ros.models.unet1d import UNetConfig
from diffpolicy_ros.sim import make_env


@pytest.fixture(scope="module")
def image_obs():
    env = make_env("push", obs_mode="image")
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


HAS_COMPILER = has_cxx_compiler()


@pytest.mark.quick
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the native kernel cannot be built here")
def test_fast_resolves_to_the_native_kernel_on_cpu():
    assert ChunkPredictor(DiffusionPolicy().eval(), "cpu", backend="fast").backend == "native"
    assert ChunkPredictor(DiffusionPolicy().eval(), "cpu").backend == "native"


VISION_ESTIMATE = FusionConfig(use_task_state=False, aux_task_state_weight=1.0, estimate_task_state=True)
VISION_STAGED = FusionConfig(  # the default vision policy: the cameras feed only the estimator
    use_task_state=False, aux_task_state_weight=1.0, estimate_task_state=True, image_tokens_per_camera=0
)


@pytest.mark.quick
@pytest.mark.parametrize(
    "fusion", [FusionConfig(), VISION_ESTIMATE, VISION_STAGED], ids=["multimodal", "vision_estimate", "vision_staged"]
)
@pytest.mark.parametrize("backend", ["native", "traced"])
def test_fast_paths_equal_eager_and_return_chunks_in_m_per_s(image_obs, backend, fusion):
    if backend == "native" and not HAS_COMPILER:
        pytest.skip("no C++ compiler: the native kernel cannot be built here")
    torch.manual_seed(0)
    policy = DiffusionPolicy(DiffusionPolicyConfig(fusion=fusion)).eval()
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.1], [0.25, 0.25, 0.1]]))
    fast = ChunkPredictor(policy, "cpu", ddim_steps=10, backend=backend)
    assert fast.backend == backend
    eager = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="eager")
    a = fast(image_obs, torch.Generator().manual_seed(3))
    b = eager(image_obs, torch.Generator().manual_seed(3))
    assert a.shape == (1, 16, 3) and a.dtype == np.float32
    np.testing.assert_allclose(a, b, atol=1e-4)
    assert np.all(np.abs(a) <= np.array([0.25, 0.25, 0.1]) + 1e-5)  # unnormalized into the data range
    assert fast.max_abs_diff_vs_eager(image_obs) < 1e-4


@pytest.mark.quick
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the native kernel cannot be built here")
def test_native_kernel_follows_the_unet_config(image_obs):
    """The C++ loop reads the layout from the config: other widths, depth, kernel, groups, schedule, DDIM-20."""
    unet = UNetConfig(down_dims=[32, 48, 64, 96], kernel_size=3, n_groups=4, timestep_embed_dim=64)
    schedule = NoiseScheduleConfig(num_train_timesteps=50, beta_schedule="linear", clip_sample=False)
    cfg = DiffusionPolicyConfig(fusion=FusionConfig(use_images=False), unet=unet, schedule=schedule, horizon=8)
    torch.manual_seed(1)
    policy = DiffusionPolicy(cfg).eval()
    for param in policy.unet.parameters():  # away from the near-identity init, so every layer matters
        param.data.add_(0.05 * torch.randn_like(param))
    native = ChunkPredictor(policy, "cpu", ddim_steps=20, backend="native")
    eager = ChunkPredictor(policy, "cpu", ddim_steps=20, backend="eager")
    batch = {"proprio": np.stack([image_obs["proprio"]] * 3), "instruction": [image_obs["instruction"]] * 3}
    a = native(batch, torch.Generator().manual_seed(2))
    assert a.shape == (3, 8, 3)
    np.testing.assert_allclose(a, eager(batch, torch.Generator().manual_seed(2)), atol=1e-4)


@pytest.mark.quick
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the native kernel cannot be built here")
def test_native_kernel_propagates_nan_and_rejects_a_wrong_layout(image_obs):
    """A broken network must not come out as a finite (clipped) action, and a wrong weight list is an error."""
    policy = DiffusionPolicy(DiffusionPolicyConfig(fusion=FusionConfig(use_images=False))).eval()
    policy.unet.final[1].bias.data[0] = float("nan")
    native = ChunkPredictor(policy, "cpu", backend="native")
    out = native(image_obs)
    assert np.isnan(out[..., 0]).all() and np.isnan(ChunkPredictor(policy, "cpu", backend="eager")(image_obs)).any()
    loop = native._native
    lay = loop.layout
    films = torch.zeros(loop.coefs.shape[0], 1, 10)

    def call(weights=lay.weights, convs=lay.convs, norms=lay.norms, films=films):
        loop.kernel.unet_ddim(
            torch.zeros(1, 16, 3),
            films,
            loop.coefs,
            loop.stds,
            torch.zeros(0),
            torch.zeros(1, 16, 3),
            torch.zeros(16),
            weights,
            loop.dims,
            convs,
            norms,
            True,
            False,
            False,
        )

    with pytest.raises(RuntimeError, match="weight"):
        call(weights=lay.weights[:-1])
    with pytest.raises(RuntimeError, match="layout"):
        call(convs=lay.convs[:-4])
    with pytest.raises(RuntimeError, match="layout"):
        call(convs=[*lay.convs[:-4], 3, 1, 1, 0])  # the 1x1 output conv described as kernel 3
    with pytest.raises(RuntimeError, match="films"):
        call()


@pytest.mark.quick
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the native kernel cannot be built here")
def test_native_kernel_reads_the_coefficients_by_the_python_names():
    from diffpolicy_ros.models.native import native_kernel
    from diffpolicy_ros.models.scheduler import StepCoefficients

    assert list(native_kernel().coef_names()) == list(StepCoefficients._fields)


@pytest.mark.quick
def test_batched_call_and_new_instruction(image_obs):
    policy = DiffusionPolicy(DiffusionPolicyConfig(fusion=FusionConfig(use_images=False))).eval()
    predictor = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="fast")
    batch = {"proprio": np.stack([image_obs["proprio"]] * 4), "instruction": ["push the block"] * 4}
    assert predictor(batch).shape == (4, 16, 3)
    single = {"proprio": image_obs["proprio"], "instruction": "push the block to the red target"}
    out = predictor(single, torch.Generator().manual_seed(0))
    ref = ChunkPredictor(policy, "cpu", backend="eager")(single, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(out, ref, atol=1e-4)


@pytest.mark.quick
@pytest.mark.parametrize("stochastic", [False, True], ids=["bc_deterministic", "ppo_stochastic"])
def test_deployed_predictor_is_the_training_sampler_on_the_same_noise(image_obs, stochastic):
    """``DiffusionPolicy.sample`` (what training and evaluation use) and the deployed ``ChunkPredictor`` (every
    backend) draw the same noise in the same order and run the same loop: equal chunks, for the deterministic
    DDIM chain of a BC policy and the stochastic chain (eta 1, min_std) a PPO-fine-tuned policy deploys."""
    cfg = DiffusionPolicyConfig(fusion=FusionConfig(use_images=False), eta=float(stochastic), stochastic=stochastic)
    torch.manual_seed(0)
    policy = DiffusionPolicy(cfg).eval()
    for param in policy.unet.parameters():  # away from the near-identity init, so every layer matters
        param.data.add_(0.05 * torch.randn_like(param))
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.1], [0.25, 0.25, 0.1]]))
    batch = {"proprio": np.stack([image_obs["proprio"]] * 3), "instruction": [image_obs["instruction"]] * 3}
    with torch.inference_mode():
        reference = policy.predict_chunk(obs_to_torch(batch, "cpu"), generator=torch.Generator().manual_seed(5))
    backends = ["eager", "traced"] + (["native"] if HAS_COMPILER else [])
    for backend in backends:
        predictor = ChunkPredictor(policy, "cpu", backend=backend)
        out = predictor(batch, torch.Generator().manual_seed(5))
        np.testing.assert_allclose(out, reference.numpy(), atol=1e-5, err_msg=backend)
        if stochastic:  # and the noise matters
            assert not np.allclose(out, predictor(batch, torch.Generator().manual_seed(6)), atol=1e-3)


@pytest.mark.quick
@pytest.mark.parametrize("stochastic", [False, True], ids=["bc_deterministic", "ppo_stochastic"])
@pytest.mark.parametrize(
    ("shortcut", "steps"), [(True, 1), (True, 4), (False, 2)], ids=["shortcut_1", "shortcut_4", "flow_2"]
)
def test_few_step_actor_runs_the_one_sampler_in_every_backend(image_obs, shortcut, steps, stochastic):
    """The few-step actor (config/policy/few_step.yaml) is sampled by the same loop as DDIM — eager, traced and
    native — on the default multimodal observation: equal chunks on the same noise, and the training sampler's."""
    cfg = DiffusionPolicyConfig(
        objective="flow", ddim_steps=steps, flow=FlowConfig(shortcut=shortcut), stochastic=stochastic
    )
    torch.manual_seed(0)
    policy = DiffusionPolicy(cfg).eval()
    assert (policy.unet.step_mlp is not None) == shortcut
    for param in policy.unet.parameters():
        param.data.add_(0.05 * torch.randn_like(param))
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.1], [0.25, 0.25, 0.1]]))
    with torch.inference_mode():
        reference = policy.predict_chunk(obs_to_torch(image_obs, "cpu"), generator=torch.Generator().manual_seed(5))
    for backend in ["eager", "traced"] + (["native"] if HAS_COMPILER else []):
        predictor = ChunkPredictor(policy, "cpu", backend=backend)
        np.testing.assert_allclose(
            predictor(image_obs, torch.Generator().manual_seed(5)), reference.numpy(), atol=1e-5, err_msg=backend
        )


@pytest.mark.quick
def test_gaussian_policy_uses_eager_and_works(image_obs):
    predictor = ChunkPredictor(GaussianPolicy().eval(), "cpu")
    assert predictor.backend == "eager"
    assert predictor(image_obs).shape == (1, 16, 3)


@pytest.mark.quick
def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="backend"):
        ChunkPredictor(DiffusionPolicy().eval(), "cpu", backend="onnx")


@pytest.mark.quick
def test_mismatched_instruction_batch_is_an_error(image_obs):
    predictor = ChunkPredictor(DiffusionPolicy().eval(), "cpu", backend="eager")
    batch = {k: np.stack([v] * 2) for k, v in image_obs.items() if k != "instruction"}
    batch["instruction"] = ["one instruction only"]
    with pytest.raises(ValueError, match="instruction"):
        predictor(batch)


@pytest.mark.quick
@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler: the native kernel cannot be built here")
@pytest.mark.parametrize("objective", ["ddpm", "flow"])
def test_ppo_rollout_chain_from_the_native_kernel_is_the_eager_chain_and_follows_the_weights(objective):
    """PPO's rollouts draw the recorded chain in the C++ kernel: the same chain, chunk and log-densities as the
    eager loop from the same generator, and after an update (weights written in place) the new weights' chain."""
    flow = FlowConfig(shortcut=True) if objective == "flow" else FlowConfig()
    cfg = DiffusionPolicyConfig(fusion=FusionConfig(use_images=False, use_text=False), objective=objective,
                                flow=flow, ddim_steps=4 if objective == "flow" else 10, eta=1.0, min_std=0.1,
                                stochastic=True, finetune_steps=3)  # fmt: skip
    torch.manual_seed(4)
    policy = DiffusionPolicy(cfg).eval()
    for param in policy.unet.parameters():  # away from the near-identity init, so every layer matters
        param.data.add_(0.05 * torch.randn_like(param))
    cond = torch.randn(6, cfg.fusion.dim)

    def both() -> tuple:
        with torch.no_grad():
            fast = policy.explore(cond, torch.Generator().manual_seed(3), fast=True)
            eager = policy.explore(cond, torch.Generator().manual_seed(3))
        for a, b in zip(fast, eager, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)
        return fast

    before = both()
    assert before[1].shape == (6, cfg.ddim_steps + 1, 16, 3) and policy._native_loop is not None
    with torch.no_grad():
        policy.unet.final[1].weight.mul_(1.5)  # an update writes the weights in place
    after = both()
    assert (after[1][:, -1] - before[1][:, -1]).abs().max() > 1e-3  # the chain follows the new weights
