"""The one inference call: shapes, units, and the fast path equal to the eager reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.gaussian_policy import GaussianPolicy
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.obs import obs_to_torch
from diffpolicy_ros.sim import make_env


@pytest.fixture(scope="module")
def image_obs():
    env = make_env("push", obs_mode="image")
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


@pytest.mark.quick
def test_fast_path_equals_eager_and_returns_chunks_in_m_per_s(image_obs):
    torch.manual_seed(0)
    policy = DiffusionPolicy().eval()
    policy.action_norm.fit(torch.tensor([[-0.25, -0.25, -0.1], [0.25, 0.25, 0.1]]))
    fast = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="fast")
    eager = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="eager")
    a = fast(image_obs, torch.Generator().manual_seed(3))
    b = eager(image_obs, torch.Generator().manual_seed(3))
    assert a.shape == (1, 16, 3) and a.dtype == np.float32
    np.testing.assert_allclose(a, b, atol=1e-4)
    assert np.all(np.abs(a) <= np.array([0.25, 0.25, 0.1]) + 1e-5)  # unnormalized into the data range
    assert fast.max_abs_diff_vs_eager(image_obs) < 1e-4


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
def test_stochastic_policy_fast_path_equals_eager_and_matches_predict_chunk(image_obs):
    """A PPO-fine-tuned policy deploys its stochastic chain: the fast path draws the same per-step noise."""
    cfg = DiffusionPolicyConfig(fusion=FusionConfig(use_images=False), eta=1.0, min_std=0.1, stochastic=True)
    torch.manual_seed(0)
    policy = DiffusionPolicy(cfg).eval()
    fast = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="fast")
    eager = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="eager")
    a = fast(image_obs, torch.Generator().manual_seed(5))
    np.testing.assert_allclose(a, eager(image_obs, torch.Generator().manual_seed(5)), atol=1e-4)
    assert not np.allclose(a, fast(image_obs, torch.Generator().manual_seed(6)), atol=1e-3)  # it is stochastic
    # the same distribution as the training-side sampler: compare the spread of many samples
    batch = {"proprio": np.stack([image_obs["proprio"]] * 256), "instruction": [image_obs["instruction"]] * 256}
    spread_fast = fast(batch, torch.Generator().manual_seed(7)).std(0).mean()
    torch.manual_seed(8)
    with torch.inference_mode():
        spread_ref = policy.predict_chunk(obs_to_torch(batch, "cpu")).std(0).mean().item()
    assert abs(spread_fast - spread_ref) < 0.2 * spread_ref


@pytest.mark.quick
def test_gaussian_policy_uses_eager_and_works(image_obs):
    predictor = ChunkPredictor(GaussianPolicy().eval(), "cpu")
    assert predictor.backend == "eager"
    assert predictor(image_obs).shape == (1, 16, 3)


@pytest.mark.quick
def test_mismatched_instruction_batch_is_an_error(image_obs):
    predictor = ChunkPredictor(DiffusionPolicy().eval(), "cpu", backend="eager")
    batch = {k: np.stack([v] * 2) for k, v in image_obs.items() if k != "instruction"}
    batch["instruction"] = ["one instruction only"]
    with pytest.raises(ValueError, match="instruction"):
        predictor(batch)
