"""The multimodal encoder's auxiliary task-state loss and estimate (vision policies: block and goal xy as BC labels
only, never an input)."""

from __future__ import annotations

import pytest
import torch

from diffpolicy_ros.contract import PROPRIO_DIM, WORKSPACE_HIGH, WORKSPACE_LOW
from diffpolicy_ros.models.encoders import KeypointCNN
from diffpolicy_ros.models.fusion import FusionConfig, MultimodalEncoder, table_point

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
    for p in enc.aux_task_state.parameters():  # a head that predicts 0: the loss is the mean squared target
        torch.nn.init.zeros_(p)
    cond, prediction = enc.features(obs)
    assert enc.auxiliary_loss(obs, prediction).item() == pytest.approx(2.0 * 1.0)
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
        assert enc.auxiliary_loss(obs, enc.features(obs)[1]).item() == 0.0


def _estimating_encoder() -> MultimodalEncoder:
    torch.manual_seed(0)
    cfg = FusionConfig(
        dim=32, heads=2, layers=1, use_text=False, use_task_state=False, aux_task_state_weight=1.0,
        estimate_task_state=True,
    )  # fmt: skip
    return MultimodalEncoder(cfg)


def test_estimated_block_and_goal_fill_the_state_token_in_metres():
    enc = _estimating_encoder()
    last = enc.aux_task_state[-1]
    torch.nn.init.zeros_(last.weight)
    with torch.no_grad():
        last.bias.copy_(torch.tensor([-1.0, 1.0, 0.0, 0.5]))  # workspace units: corners, centre, 3/4
    seen = {}
    enc.proprio.register_forward_hook(lambda m, inputs, out: seen.update(state=inputs[0]))
    obs = _obs(2, (0.5, 0.0), (0.6, 0.1))
    obs["proprio"][:, 0] = 0.3  # a joint position: passed through as read
    enc(obs)
    (lx, ly), (hx, hy) = WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2]
    expected = torch.tensor([lx, hy, (lx + hx) / 2, ly + 0.75 * (hy - ly)])
    assert seen["state"].shape == (2, PROPRIO_DIM)  # the state policy's layout (the normalizer is the identity)
    assert torch.allclose(seen["state"][:, -4:], expected.expand(2, 4), atol=1e-6)
    assert torch.all(seen["state"][:, 0] == 0.3)


def test_estimating_encoder_never_reads_the_true_block_and_goal_and_its_estimate_learns_from_its_loss_only():
    enc = _estimating_encoder()
    obs = _obs(2, WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2])
    cond, prediction = enc.features(obs)
    moved = _obs(2, WORKSPACE_HIGH[:2], WORKSPACE_LOW[:2])
    assert torch.equal(enc(moved), cond)
    cond.square().sum().backward(retain_graph=True)  # an action loss: it trains the encoder but not the estimate's head
    assert all(p.grad is None or not p.grad.any() for p in enc.aux_task_state.parameters())
    assert any(p.grad is not None and p.grad.any() for p in enc.images.parameters())
    enc.zero_grad()
    enc.auxiliary_loss(obs, prediction).backward()  # the auxiliary loss does, through the image path
    assert all(p.grad is not None and p.grad.any() for p in enc.aux_task_state.parameters())


def test_estimate_task_state_needs_its_loss():
    with pytest.raises(ValueError, match="aux_task_state_weight"):
        MultimodalEncoder(FusionConfig(use_text=False, use_task_state=False, estimate_task_state=True))


def test_keypoint_soft_argmax_returns_the_expected_image_coordinates():
    kp = KeypointCNN(keypoints=2)
    kp.net = torch.nn.Identity()  # feed the logits directly: [B, K, h, w]
    logits = torch.zeros(1, 2, 32, 32)
    logits[0, 0, 8, 24] = 50.0  # keypoint 0: one sharp peak at row 8, column 24
    grid = torch.linspace(-1, 1, 32)
    out = kp(logits)  # [x0, x1, y0, y1]
    assert out[0, 0].item() == pytest.approx(grid[24].item(), abs=1e-4)
    assert out[0, 2].item() == pytest.approx(grid[8].item(), abs=1e-4)
    assert out[0, 1].item() == pytest.approx(0.0, abs=1e-6) and out[0, 3].item() == pytest.approx(0.0, abs=1e-6)
    _, spread = kp.attend(logits)
    assert spread[0, 0].item() == pytest.approx(0.0, abs=1e-3)  # one sharp peak: certain
    logits[0, 0, 8, 25] = 50.0  # two equal peaks: the expectation lies between them, finer than a cell
    keypoints, spread = kp.attend(logits)
    assert keypoints[0, 0].item() == pytest.approx((grid[24] + grid[25]).item() / 2, abs=1e-4)
    assert spread[0, 0].item() == pytest.approx((grid[25] - grid[24]).item() / 2, abs=1e-4)  # half their distance
    assert spread[0, 1].item() > 0.5  # an even map over the image: as uncertain as it gets


def test_the_calibrated_estimator_trusts_the_camera_whose_attention_is_sharp():
    """The sim's two calibrated cameras, each keypoint's attention given as logits: the top camera's is one sharp
    peak per point, the side camera's is split between two far cells (a block it cannot see). The estimate is
    the top camera's back-projected points; the cameras' plain mean would be centimetres off."""
    from diffpolicy_ros.sim.push_env import PushEnv

    env = PushEnv(obs_mode="image")
    obs, _ = env.reset(seed=0)
    env.close()
    projection = torch.from_numpy(obs["camera_projection"])[None].float()  # [1, cameras, 3, 4]
    cfg = FusionConfig(
        dim=32, heads=2, layers=1, use_text=False, use_task_state=False, aux_task_state_weight=1.0,
        estimate_task_state=True, image_tokens_per_camera=0, task_state_estimator="calibrated",
    )  # fmt: skip
    enc = MultimodalEncoder(cfg)
    sharp, split = torch.full((1, 2, 32, 32), -50.0), torch.full((1, 2, 32, 32), -50.0)
    sharp[0, 0, 12, 14] = sharp[0, 1, 20, 9] = 50.0  # block, goal: one cell each
    split[0, :, 3, 3] = split[0, :, 28, 28] = 50.0  # both points: half their attention in each of two corners

    class GivenLogits(torch.nn.Module):  # stands in for the CNN: the camera is told by its image
        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return sharp if image[0, 0, 0, 0] == 0 else split

    enc.keypoints.net = GivenLogits()
    images = [torch.zeros(1, 3, 128, 128), torch.ones(1, 3, 128, 128)]  # top, side
    estimate = enc.estimate_task_state(images, projection)[0]
    top, side = (
        table_point(projection[:, i], (enc.point_keypoints(image) + 1) / 2 * 127, enc.point_heights)[0, :, :2].flatten()
        for i, image in enumerate(images)
    )
    assert torch.allclose(estimate, top, atol=1e-3)  # within a millimetre of the camera that sees the points
    assert (torch.linalg.norm((top - side).view(2, 2), dim=1) > 0.02).all()  # the mean would have moved them cm


def _estimator_only_encoder() -> MultimodalEncoder:
    torch.manual_seed(0)
    cfg = FusionConfig(
        dim=32, heads=2, layers=1, use_text=False, use_task_state=False, aux_task_state_weight=1.0,
        estimate_task_state=True, image_tokens_per_camera=0,
    )  # fmt: skip
    return MultimodalEncoder(cfg)


def test_cameras_that_feed_only_the_estimator_give_no_image_tokens_and_a_given_estimate_skips_them():
    enc = _estimator_only_encoder()
    assert not hasattr(enc, "images") and not hasattr(enc, "pools")  # no image-token weights at all
    seen = {}
    enc.proprio.register_forward_hook(lambda m, inputs, out: seen.update(state=inputs[0]))
    obs = _obs(2, (0.5, 0.0), (0.6, 0.1))
    cond, prediction = enc.features(obs)  # deployed: the estimate comes from the cameras
    assert prediction.shape == (2, 4) and cond.shape == (2, 32)
    from_cameras = seen["state"][:, -4:].clone()
    given = torch.tensor([[0.45, -0.05, 0.62, 0.12]] * 2)
    no_images = {"proprio": obs["proprio"], "task_state_estimate": given}  # staged BC's actor batches: no pixels
    cond_given, prediction_given = enc.features(no_images)
    assert prediction_given is None and torch.equal(seen["state"][:, -4:], given)
    assert not torch.equal(cond_given, cond) and not torch.equal(from_cameras, given)
    assert list(enc.estimator_parameters()) == [*enc.keypoints.parameters(), *enc.aux_task_state.parameters()]


def test_no_image_tokens_without_the_estimator_is_a_config_error():
    with pytest.raises(ValueError, match="image_tokens_per_camera 0 needs estimate_task_state"):
        MultimodalEncoder(FusionConfig(use_text=False, image_tokens_per_camera=0))
