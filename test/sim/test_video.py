"""Episode videos: both cameras side by side with the predicted path, readable back as MP4."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.video import SCALE, EpisodeVideo, project


@pytest.mark.quick
def test_projection_puts_a_point_on_the_optical_axis_at_the_image_centre():
    cam_pos, cam_mat = np.zeros(3), np.eye(3)  # looking along -z, y up
    uv = project(
        np.array([[0.0, 0.0, -1.0], [0.1, 0.0, -1.0], [0.0, 0.1, -1.0], [0.0, 0.0, 1.0]]), cam_pos, cam_mat, 90.0, 128
    )
    assert np.allclose(uv[0], [64, 64])
    assert uv[1, 0] > 64 and np.isclose(uv[1, 1], 64)  # +x is to the right
    assert uv[2, 1] < 64  # +y is up (smaller row)
    assert np.all(np.isnan(uv[3]))  # behind the camera


@pytest.mark.quick
def test_episode_video_draws_the_path_and_reads_back(tmp_path):
    env = make_env("push")
    env.reset(seed=0)
    video = EpisodeVideo(env, tmp_path / "ep.mp4", "test")
    video.add()
    still = video.frames[0].copy()
    video.predicted(np.tile([0.1, 0.1, 0.0], (16, 1)), executed=4)
    for _ in range(5):
        env.step(np.zeros(3))
        video.add(0.1)
    assert not np.array_equal(video.frames[-1], still)  # the path is drawn over the same scene
    info = video.write(success=True, fps=10)
    env.close()
    capture = cv2.VideoCapture(info["path"])
    frames = 0
    while capture.read()[0]:
        frames += 1
    assert frames == info["frames"] == 5 + 10  # the last frame held one second with the outcome
    assert video.frames[0].shape == (128 * SCALE, 2 * 128 * SCALE, 3)
