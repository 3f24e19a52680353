"""The multimodal encoder's auxiliary task-state loss (vision policies: block and goal xy as BC labels only)."""

from __future__ import annotations

import pytest
import torch

from diffpolicy_ros.contract import PROPRIO_DIM, WORKSPACE_HIGH, WORKSPACE_LOW
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder

pytestmark = pytest.mark.quick


def _obs(batch: int, object_xy: tuple[float, float], goal_xy: tuple[float, float]) -> dict:
    proprio = torch.zeros(batch, PROPRIO_DIM)
    proprio[:, -4:] = torch.tensor([*object_xy, *goal_xy])
    images = torch.zeros(batch, 128, 128, 3, dtype=torch.uint8)
    return {"proprio": proprio, "image_top": images, "image_side": images}


def test_auxiliary_loss_targets_block_and_goal_scaled_to_the_workspace():
    torch.manual_seed(0)
    cfg = FusionConfig(dim=32, heads=2, layers=1, use_text=False, use_task_state=False, aux_task_state_weight=2.0)
    enc = MultimodalEncoder(cfg)
    low, high = WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2]
    obs = _obs(3, low, high)  # block at the workspace's low corner (-1, -1), goal at the high one (1, 1)
    cond = enc(obs)
    for p in enc.aux_task_state.parameters():  # a head that predicts 0: the loss is the mean squared target
        torch.nn.init.zeros_(p)
    assert enc.auxiliary_loss(obs, cond).item() == pytest.approx(2.0 * 1.0)
    # the block is never an input: the prediction cannot read it, so the encoder must learn it from the images
    moved = _obs(3, high, low)
    assert torch.equal(enc(moved), cond)


def test_auxiliary_loss_is_off_by_default_and_with_task_state_as_input():
    for cfg in (
        FusionConfig(use_text=False, use_task_state=False),
        FusionConfig(use_text=False, aux_task_state_weight=1),
    ):
        enc = MultimodalEncoder(cfg)
        assert enc.aux_task_state is None
        obs = _obs(2, (0.5, 0.0), (0.6, 0.1))
        assert enc.auxiliary_loss(obs, enc(obs)).item() == 0.0
