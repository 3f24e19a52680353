"""Instruction encoders: the pretrained all-MiniLM-L6-v2 (plain torch) and the learned hashed-word table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffpolicy_ros.models.checkpoint import load_policy, save_checkpoint
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicy, DiffusionPolicyConfig
from diffpolicy_ros.models.factory import PolicySpec, spec_dict
from diffpolicy_ros.models.fusion import FusionConfig
from diffpolicy_ros.models.inference import ChunkPredictor
from diffpolicy_ros.models.minilm import shared_minilm

RED = "push the block to the red goal"
BLUE = "Push the block to the BLUE goal, please!"


@pytest.mark.quick
def test_minilm_matches_the_reference_implementation():
    """Golden values from transformers 5.17.0 ``BertModel`` + mean pooling + L2 norm (the model's own
    sentence-transformers pipeline) on the same weights; ours agreed to 1.2e-7 when these were taken."""
    model = shared_minilm()
    ids, keep = model.token_ids([RED, BLUE])
    assert ids[0].tolist() == [101, 5245, 1996, 3796, 2000, 1996, 2417, 3125, 102, 0, 0, 0]
    assert ids[1].tolist() == [101, 5245, 1996, 3796, 2000, 1996, 2630, 3125, 1010, 3531, 999, 102]
    assert keep.sum(1).tolist() == [9, 12]
    emb = model([RED, BLUE])
    ref = torch.tensor(
        [
            [-0.013757, 0.050506, -0.110886, 0.010371, 0.035002, 0.06769, 0.032226, 0.039946],
            [-0.028581, 0.044017, -0.039517, -0.022649, 0.054485, 0.057546, 0.004978, 0.008578],
        ]
    )
    torch.testing.assert_close(emb[:, :8], ref, atol=2e-6, rtol=0)
    assert abs(float(emb[0] @ emb[1]) - 0.811926) < 1e-5
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2))
    # padding does not change a sentence's embedding
    torch.testing.assert_close(model([RED])[0], emb[0], atol=1e-6, rtol=0)


@pytest.mark.quick
def test_minilm_meaning_is_preserved():
    emb = shared_minilm()([RED, "move the cube onto the red target", "the weather is nice today"])
    assert float(emb[0] @ emb[1]) > 0.4 > 0.1 > float(emb[0] @ emb[2])


@pytest.mark.quick
def test_policy_with_minilm_text_saves_only_its_projection_and_runs_the_fast_path(tmp_path):
    cfg = DiffusionPolicyConfig(fusion=FusionConfig(use_images=False, text_encoder="minilm"))
    torch.manual_seed(0)
    policy = DiffusionPolicy(cfg).eval()
    text_keys = [k for k in policy.state_dict() if k.startswith("encoder.text.")]
    assert text_keys == ["encoder.text.proj.weight", "encoder.text.proj.bias"]  # frozen BERT not saved

    spec = spec_dict(PolicySpec(kind="diffusion", diffusion=cfg))
    path = save_checkpoint(tmp_path / "p.pt", {"policy_spec": spec, "model": policy.state_dict()})
    loaded, _ = load_policy(path)
    fast = ChunkPredictor(loaded, "cpu", ddim_steps=10, backend="fast")
    eager = ChunkPredictor(policy, "cpu", ddim_steps=10, backend="eager")
    proprio = np.zeros(16, np.float32)
    chunks = {}
    for text in (RED, BLUE, "an instruction no demo ever had"):  # one traced graph serves every string
        obs = {"proprio": proprio, "instruction": text}
        chunks[text] = fast(obs, torch.Generator().manual_seed(1))
        np.testing.assert_allclose(chunks[text], eager(obs, torch.Generator().manual_seed(1)), atol=1e-4)
    assert len(fast._graphs) == 1
    assert not np.allclose(chunks[RED], chunks[BLUE])  # the instruction reaches the action


@pytest.mark.quick
def test_unknown_text_encoder_is_a_clear_error():
    with pytest.raises(ValueError, match="text_encoder"):
        DiffusionPolicy(DiffusionPolicyConfig(fusion=FusionConfig(use_images=False, text_encoder="bert-large")))
