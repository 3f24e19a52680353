"""Bags as real cells record them: compressed cameras on ``.../image_raw/compressed``, the cell's own topic
names (a topic map), a corrupt frame — written here with rosbags' typestore, not with the package's writer —
score like the package's own bag of the same episodes."""

from __future__ import annotations

import numpy as np
import pytest

from diffpolicy_ros import contract as C
from diffpolicy_ros.bags.dataset import dataset_from_bags
from diffpolicy_ros.bags.evaluate import evaluate_bag
from diffpolicy_ros.bags.record import write_demo_bag
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.messages.observation import RawInputs
from diffpolicy_ros.messages.topic_map import TopicMap

CELL_TOPICS = {  # contract topic -> the cell's (as a UR cell with a RealSense names them)
    C.raw_camera_topic("top"): "/camera/color/image_raw/compressed",
    C.raw_camera_topic("side"): "/side_camera/image_raw/compressed",
    C.JOINT_STATES_TOPIC: "/ur/joint_states",
    C.CMD_TWIST_TOPIC: "/servo_node/delta_twist_cmds",
}
TOPIC_MAP = "image_top: /camera/color/image_raw/compressed\nimage_side: /side_camera/image_raw/compressed\n" \
            "joint_states: /ur/joint_states\ncommand: /servo_node/delta_twist_cmds\n"  # fmt: skip


def cell_bag(own, out, corrupt_frames: int = 1) -> None:
    """Re-record ``own`` as a cell would have: cameras JPEG-compressed under the cell's names, the cell's joint
    and command topics; the first ``corrupt_frames`` top-camera frames truncated. rosbags only (typestore)."""
    import cv2
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_JAZZY)
    compressed_type = "sensor_msgs/msg/CompressedImage"
    with Reader(own) as reader, Writer(out, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections, broken = {}, 0
        for conn, t_ns, raw in reader.messages():
            topic = CELL_TOPICS.get(conn.topic, conn.topic)
            msgtype, data = conn.msgtype, raw
            if conn.msgtype == "sensor_msgs/msg/Image":
                image = ts.deserialize_cdr(raw, conn.msgtype)
                rgb = np.asarray(image.data, np.uint8).reshape(image.height, image.width, 3)
                ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
                assert ok
                jpeg = jpeg.ravel()
                if topic == CELL_TOPICS[C.raw_camera_topic("top")] and broken < corrupt_frames:
                    jpeg, broken = jpeg[: len(jpeg) // 3], broken + 1  # a frame cut short on the wire
                msg = ts.types[compressed_type](header=image.header, format="rgb8; jpeg compressed bgr8", data=jpeg)
                msgtype, data = compressed_type, ts.serialize_cdr(msg, compressed_type)
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=ts)
            writer.write(connections[topic], t_ns, data)


@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("cell")
    own = root / "own"
    write_demo_bag(own, episodes=2, seed=7, progress=False)
    cell_bag(own, root / "cell")
    (root / "ur_cell.yaml").write_text(TOPIC_MAP)
    return own, root / "cell", TopicMap.load(root / "ur_cell.yaml")


@pytest.mark.slow
def test_a_cell_bag_scores_like_the_packages_own_bag_of_the_same_episodes(tmp_path, bags):
    from diffpolicy_ros.bench.safety import constant_velocity_checkpoint

    own, cell, topic_map = bags
    # a policy that reads both cameras (constant output: the score shows what the plumbing delivered)
    ckpt = constant_velocity_checkpoint(tmp_path / "policy.pt", (0.05, 0.02, 0.0))
    ours = evaluate_bag(own, ckpt)
    theirs = evaluate_bag(cell, ckpt, topic_map=topic_map)
    assert theirs["dropped_inputs"].get("image_top") == 1  # the corrupt frame: counted, skipped, no crash
    assert abs(theirs["chunks"] - ours["chunks"]) <= 1, (theirs["chunks"], ours["chunks"])
    for k in (0, 3, 15):
        assert abs(theirs["mae_by_step"][k] - ours["mae_by_step"][k]) < 0.005
    assert abs(theirs["coverage"] - ours["coverage"]) < 0.02
    # the same bag as demonstrations: the decoded JPEG frames are the raw ones within compression noise
    own_data, _ = dataset_from_bags(own)
    cell_data, summary = dataset_from_bags(cell, topic_map)
    assert cell_data.n_episodes == own_data.n_episodes and abs(cell_data.n_steps - own_data.n_steps) <= 1
    n = min(cell_data.n_steps, own_data.n_steps)
    np.testing.assert_allclose(cell_data.action[-n:], own_data.action[-n:], atol=1e-6)
    error = np.abs(cell_data.obs["image_side"][-n:].astype(int) - own_data.obs["image_side"][-n:].astype(int))
    assert error.mean() < 3.0, error.mean()  # JPEG at quality 95, resized like the live camera node


@pytest.mark.quick
def test_without_the_map_the_error_lists_what_the_bag_holds_and_a_bad_map_names_the_role(tmp_path, bags):
    from diffpolicy_ros.bench.safety import constant_velocity_checkpoint

    _, cell, _ = bags
    ckpt = constant_velocity_checkpoint(tmp_path / "policy.pt", (0.05, 0.02, 0.0))
    with pytest.raises(UserError, match=r"missing topic.*/joint_states.*holds:.*/ur/joint_states"):
        evaluate_bag(cell, ckpt)
    bad = tmp_path / "bad.yaml"
    bad.write_text("image_front: /camera/image\n")
    with pytest.raises(UserError, match=r"unknown role\(s\) \['image_front'\]; roles:"):
        TopicMap.load(bad)


@pytest.mark.quick
def test_raw_inputs_decode_compressed_frames_and_count_corrupt_ones():
    from builtin_interfaces.msg import Time

    from diffpolicy_ros.messages.conversions import rgb_to_compressed

    rgb = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    rgb[:] = rgb.mean(axis=(0, 1), dtype=np.uint8)  # smooth: JPEG keeps it
    inputs = RawInputs({"image_top": "/cam/compressed"})
    good = rgb_to_compressed(rgb, Time(sec=1), "cam", "png")
    assert inputs.offer("/cam/compressed", good) == ""
    stamp, frame = inputs.cache.latest["image_top"]
    assert frame.shape == C.IMAGE_SHAPE and stamp == 1.0
    broken = rgb_to_compressed(rgb, Time(sec=2), "cam", "jpeg")
    broken.data = bytes(broken.data)[:100]
    assert "corrupt" in inputs.offer("/cam/compressed", broken) and inputs.dropped == {"image_top": 1}
