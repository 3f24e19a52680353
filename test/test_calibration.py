"""Calibrated cameras: the sim's calibration is exact in every cell, the conventions are ROS's and OpenCV's, and the
back-projection a calibrated estimator uses inverts the projection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffpolicy_ros.calibration import (
    BLOCK_CENTRE_Z,
    GOAL_Z,
    CameraCalibration,
    CameraPose,
    load_camera_calibration,
    matrix_quaternion,
    model_intrinsics,
    quaternion_matrix,
)
from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.contract import CAMERAS
from diffpolicy_ros.data.augmentation import random_shift_with_offsets, shifted_projection
from diffpolicy_ros.messages.observation import prepare_image
from diffpolicy_ros.models.fusion import project_points, table_point

from .conftest import REPO

pytestmark = pytest.mark.quick

QUATERNIONS = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(lambda q: np.linalg.norm(q) > 0.1)


def pixel(projection: np.ndarray, point) -> tuple[int, int]:
    """The nearest pixel (u, v) of a world point through a 3x4 projection."""
    uv = project_points(torch.from_numpy(projection)[None].double(), torch.tensor([[point]], dtype=torch.float64))
    return tuple(int(x) for x in uv[0, 0].round())


def test_the_sims_calibration_puts_the_block_and_the_goal_on_their_pixels_in_cameras_a_cell_moved():
    """Cameras shifted 3 cm, turned 4 degrees and zoomed 2 degrees (a cell's bounds): the block's centre projects onto
    a block-coloured pixel and the goal onto a goal-coloured one, in both cameras, every episode."""
    from diffpolicy_ros.sim.cell import CellRanges
    from diffpolicy_ros.sim.push_env import PushEnv

    moved = CellRanges().with_factors({
        f"cameras.{cam}.{factor}": bound for cam in CAMERAS
        for factor, bound in (("shift_m", (0.03, 0.03)), ("turn_deg", (4, 4)), ("fovy_deg", (2, 2)))
    })  # fmt: skip
    env = PushEnv(obs_mode="image", cells=moved)
    nominal = PushEnv(obs_mode="image")
    try:
        for seed in range(4):
            obs, _ = env.reset(seed=seed)
            assert not np.allclose(obs["camera_projection"], nominal.reset(seed=seed)[0]["camera_projection"])
            block, goal = obs["proprio"][12:14], obs["proprio"][14:16]
            for i, cam in enumerate(CAMERAS):
                image = obs[f"image_{cam}"].astype(int)
                u, v = pixel(obs["camera_projection"][i], [*block, BLOCK_CENTRE_Z])
                r, g, b = image[v, u]
                assert r > 150 and r > b + 80, (seed, cam, image[v, u])  # the orange block
                u, v = pixel(obs["camera_projection"][i], [*goal, GOAL_Z])
                r, g, b = image[v, u]
                assert g > r + 60 and g > b + 60, (seed, cam, image[v, u])  # the green goal
    finally:
        env.close()
        nominal.close()


def test_the_shipped_sim_camera_calibration_are_the_mjcf_cameras():
    from diffpolicy_ros.sim.push_env import PushEnv

    env = PushEnv(obs_mode="state")
    env.reset(seed=0)
    for cam, entry in load_camera_calibration(REPO / "config/cells/sim_cameras.yaml").items():
        exact, pose = env.camera_calibrations[cam].pose, entry.pose
        assert entry.intrinsics is None  # the sim publishes its lens as a driver does
        np.testing.assert_allclose(pose.position, exact.position, atol=1e-6)
        np.testing.assert_allclose(quaternion_matrix(pose.orientation), quaternion_matrix(exact.orientation), atol=1e-5)


@settings(max_examples=200, deadline=None)
@given(QUATERNIONS)
def test_quaternion_and_matrix_convert_both_ways(q):
    r = quaternion_matrix(q)
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-9)
    np.testing.assert_allclose(quaternion_matrix(matrix_quaternion(r)), r, atol=1e-9)


@pytest.mark.parametrize("axis", [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, -1, 0)])
def test_half_turns_convert_back(axis):
    """w = 0: where a formula that takes the signs from w gets the axis wrong (the sim's top camera is one)."""
    q = (*np.asarray(axis, float) / np.linalg.norm(axis), 0.0)
    r = quaternion_matrix(q)
    np.testing.assert_allclose(quaternion_matrix(matrix_quaternion(r)), r, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    QUATERNIONS,
    st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3),
    st.lists(st.floats(-0.3, 0.3), min_size=2, max_size=2),
    st.floats(0.0, 0.05),
)
def test_back_projection_onto_the_points_plane_finds_the_point(q, offset, xy, height):
    """A camera 1 m from a table point, looking at it from any direction above the table: the point's pixel,
    back-projected onto the plane at its height, is the point."""
    target = np.array([0.55 + xy[0], xy[1], height])
    look = np.array([offset[0], offset[1], 1.0])  # from above the table
    z = -look / np.linalg.norm(look)
    x = np.cross(quaternion_matrix(q)[:, 0], z)
    if np.linalg.norm(x) < 1e-3:
        return
    x /= np.linalg.norm(x)
    r = np.stack([x, np.cross(z, x), z], axis=1)
    k = (300.0, 0.0, 319.5, 0.0, 300.0, 239.5, 0.0, 0.0, 1.0)
    camera = CameraCalibration(k, 640, 480, CameraPose(tuple(target - z), matrix_quaternion(r)))
    projection = torch.tensor(camera.projection(128), dtype=torch.float64)[None]
    pixels = project_points(projection, torch.tensor(target)[None, None])
    found = table_point(projection, pixels, torch.tensor([height], dtype=torch.float64))
    np.testing.assert_allclose(found[0, 0].numpy(), target, atol=1e-7)


def test_a_drivers_camera_info_maps_onto_the_model_image_as_the_frames_are_cropped_and_resized():
    """A 640x480 camera's point, drawn as a small bright square, lands after ``prepare_image`` (centre crop,
    resize to 128) where ``model_intrinsics`` puts it."""
    k = np.array([[600.0, 0, 330.0], [0, 600.0, 250.0], [0, 0, 1]])
    for crop in (True, False):
        for u, v in ((200.0, 150.0), (400.0, 300.0)):
            image = np.zeros((480, 640, 3), np.uint8)
            image[int(v) - 5 : int(v) + 6, int(u) - 5 : int(u) + 6] = 255  # centred on (u, v)
            small = prepare_image(image, 128, crop).astype(float)[..., 0]
            rows, cols = np.indices(small.shape)
            seen = np.array([(cols * small).sum(), (rows * small).sum()]) / small.sum()
            point = np.linalg.solve(k, [u, v, 1.0])  # the ray through (u, v)
            expected = model_intrinsics(k, 640, 480, 128, crop) @ point
            np.testing.assert_allclose(seen, expected[:2] / expected[2], atol=0.1)


def test_a_random_shift_moves_the_projection_with_the_pixels():
    image = torch.zeros(8, 32, 32, 3, dtype=torch.uint8)
    image[:, 16, 10] = 255  # one bright pixel at (u, v) = (10, 16)
    shifted, offsets = random_shift_with_offsets(image, 4, torch.Generator().manual_seed(0))
    projection = torch.tensor([[1.0, 0, 0, 10], [0, 1, 0, 16], [0, 0, 0, 1]]).repeat(8, 1, 1)  # every point -> it
    moved = project_points(shifted_projection(projection, offsets), torch.zeros(8, 1, 3))[:, 0]
    for b in range(8):
        v, u = np.argwhere(shifted[b, ..., 0].numpy() == 255)[0]
        assert (u, v) == tuple(moved[b].round().int().tolist())
    assert offsets.abs().max() > 0


@pytest.mark.parametrize(
    "text, key",
    [
        ("cameras: {top: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}}\n", "cameras must map each of"),
        ("frame_id: 5\ncameras: {}\n", "frame_id"),
        ("cameras:\n  top: {position: [0, 0, .nan], orientation: [1, 0, 0, 0]}\n"
         "  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n", "cameras.top.position"),
        ("cameras:\n  top: {position: [0, 0, 1], orientation: [1, 0, 0, 0], fovy: 45}\n"
         "  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n", "cameras.top: expected position"),
        ("cameras:\n  top: {position: [0, 0, 1], orientation: [1, 0, 0, 0], camera_info: {k: [1, 0, 0], "
         "width: 640, height: 480}}\n  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n",
         "cameras.top.camera_info.k"),
        ("cameras:\n  top: {position: [0, 0, 1], orientation: [1, 0, 0, 0], camera_info: {k: [600, 0, 320, 0, 600, "
         "240, 0, 0, 1], width: 0, height: 480}}\n  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n",
         "expected all > 0"),
    ],
)  # fmt: skip
def test_a_bad_camera_calibration_file_is_one_line_naming_the_key(tmp_path, text, key):
    path = tmp_path / "poses.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key) as caught:
        load_camera_calibration(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)
