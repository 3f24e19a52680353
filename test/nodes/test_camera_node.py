"""camera_node's calibration, across processes: a driver's CameraInfo comes out as the model image's (K cropped
and resized as the frames are) and a camera calibration file becomes the camera's latched optical-frame pose, so a
policy node that subscribes later still gets it."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def camera_node_and_probe(camera: str, calibration: Path):
    """camera_node for ``camera`` with ``calibration`` in its own process, and a probe node here; on leaving, the
    node is stopped and must have exited 0."""
    import rclpy
    from rclpy.node import Node

    params = ["-p", f"camera_name:={camera}", "-p", f"camera_calibration:={calibration}"]
    node_proc = subprocess.Popen(
        [sys.executable, "-m", "diffpolicy_ros.nodes.camera_node", "--ros-args", *params],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    rclpy.init()
    probe = Node(f"camera_{camera}_probe")
    try:
        yield probe, node_proc
    finally:
        probe.destroy_node()
        rclpy.try_shutdown()
        node_proc.terminate()
        node_proc.wait(timeout=20)
    assert node_proc.returncode == 0


def first_model_info(spin_until, probe, node_proc, camera: str, publish):
    """Call ``publish`` until camera_node's model-image CameraInfo arrives; return it."""
    from sensor_msgs.msg import CameraInfo

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.nodes.common import SENSOR_QOS

    infos = []
    probe.create_subscription(CameraInfo, C.policy_camera_info_topic(camera), infos.append, SENSOR_QOS)

    def publish_and_check() -> bool:
        publish()
        return bool(infos)

    assert spin_until(probe, publish_and_check, 60), node_proc.stderr.read() if node_proc.poll() else "no info"
    return infos[-1]


@pytest.mark.quick
def test_camera_node_publishes_the_model_images_camera_info_and_the_calibrated_pose(spin_until):
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import CameraInfo

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.calibration import load_camera_calibration, model_intrinsics
    from diffpolicy_ros.messages.conversions import camera_info
    from diffpolicy_ros.nodes.common import LATCHED_QOS, SENSOR_QOS

    poses = REPO / "config" / "cells" / "sim_cameras.yaml"
    with camera_node_and_probe("side", poses) as (probe, node_proc):
        driver = probe.create_publisher(CameraInfo, C.camera_info_topic("side"), SENSOR_QOS)
        k = [610.0, 0.0, 322.0, 0.0, 612.0, 244.0, 0.0, 0.0, 1.0]  # a 640x480 driver's calibration
        message = camera_info(k, 640, 480, probe.get_clock().now().to_msg(), "side_camera_optical")
        info = first_model_info(spin_until, probe, node_proc, "side", lambda: driver.publish(message))
        assert (info.width, info.height) == (C.IMAGE_SIZE, C.IMAGE_SIZE)
        np.testing.assert_allclose(np.reshape(info.k, (3, 3)), model_intrinsics(k, 640, 480, C.IMAGE_SIZE, True))

        # a late subscriber gets the pose (latched), as the file gives it
        seen_poses = []
        probe.create_subscription(PoseStamped, C.camera_pose_topic("side"), seen_poses.append, LATCHED_QOS)
        assert spin_until(probe, lambda: bool(seen_poses), 30)
        expected = load_camera_calibration(poses)["side"].pose
        got = seen_poses[-1].pose
        np.testing.assert_allclose([got.position.x, got.position.y, got.position.z], expected.position)
        q = got.orientation
        np.testing.assert_allclose([q.x, q.y, q.z, q.w], expected.orientation)
        assert seen_poses[-1].header.frame_id == expected.frame_id


@pytest.mark.quick
def test_a_lens_in_the_calibration_file_goes_out_with_every_frame(spin_until, tmp_path):
    """A camera whose driver (or OpenCV device) publishes no CameraInfo: the file's lens, for the model image."""
    import yaml
    from sensor_msgs.msg import Image

    from diffpolicy_ros import contract as C
    from diffpolicy_ros.calibration import model_intrinsics
    from diffpolicy_ros.messages.conversions import numpy_to_image
    from diffpolicy_ros.nodes.common import SENSOR_QOS

    data = yaml.safe_load((REPO / "config" / "cells" / "sim_cameras.yaml").read_text())
    k = [500.0, 0.0, 319.5, 0.0, 500.0, 239.5, 0.0, 0.0, 1.0]
    data["cameras"]["top"]["camera_info"] = {"k": k, "width": 640, "height": 480}
    path = tmp_path / "cameras.yaml"
    path.write_text(yaml.safe_dump(data))
    with camera_node_and_probe("top", path) as (probe, node_proc):
        driver = probe.create_publisher(Image, C.raw_camera_topic("top"), SENSOR_QOS)
        frame = numpy_to_image(np.zeros((480, 640, 3), np.uint8), probe.get_clock().now().to_msg(), "top_camera")
        info = first_model_info(spin_until, probe, node_proc, "top", lambda: driver.publish(frame))
        assert info.header.stamp == frame.header.stamp  # one CameraInfo per frame, with its stamp
        np.testing.assert_allclose(np.reshape(info.k, (3, 3)), model_intrinsics(k, 640, 480, C.IMAGE_SIZE, True))
