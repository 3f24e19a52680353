"""rosbag2 files written and read without rosbag2: demo bags hold the whole topic contract and open in the
official MCAP reader; a bag becomes the same dataset `diffpolicy demo` records; eval-bag scores a trained
policy well above an untrained one; bad bags fail with a clear message."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from diffpolicy_ros import contract as C
from diffpolicy_ros.bags.dataset import dataset_from_bags
from diffpolicy_ros.bags.evaluate import evaluate_bag
from diffpolicy_ros.bags.record import write_demo_bag
from diffpolicy_ros.data.bag_io import BagError, bag_info, open_writer, read_messages

EPISODES = 3


@pytest.fixture(scope="module")
def demo_bag_summary(tmp_path_factory):
    path = tmp_path_factory.mktemp("bags") / "demo"
    return write_demo_bag(path, episodes=EPISODES, seed=0, progress=False)


@pytest.fixture(scope="module")
def demo_bag(demo_bag_summary):
    return Path(demo_bag_summary["bag"])


@pytest.mark.quick
def test_demo_bag_holds_the_topic_contract_and_opens_in_the_official_mcap_reader(demo_bag):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    info = bag_info(demo_bag)
    contract = {
        C.raw_camera_topic("top"), C.raw_camera_topic("side"), C.camera_info_topic("top"), C.JOINT_STATES_TOPIC,
        C.EE_POSE_TOPIC, C.OBJECT_POSE_TOPIC, C.GOAL_POSE_TOPIC, C.INSTRUCTION_TOPIC, C.CMD_TWIST_TOPIC,
        C.CLOCK_TOPIC, C.MARKERS_TOPIC, "/diffpolicy/episode",
    }  # fmt: skip
    assert contract <= set(info.topics)
    assert (demo_bag / "metadata.yaml").exists() and "version: 9" in (demo_bag / "metadata.yaml").read_text()
    with open(next(demo_bag.glob("*.mcap")), "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        decoded = [(channel.topic, msg) for _, channel, _, msg in reader.iter_decoded_messages()]
    assert len(decoded) == sum(info.counts.values())
    images = [m for t, m in decoded if t == C.raw_camera_topic("top")]
    assert images[0].encoding == "rgb8" and (images[0].height, images[0].width) == C.IMAGE_SHAPE[:2]


@pytest.mark.quick
def test_a_bag_is_the_same_dataset_as_demo_records(demo_bag):
    from diffpolicy_ros.sim.demos import run_demos

    from_bag, summary = dataset_from_bags(demo_bag)
    _, recorded = run_demos("push", EPISODES, seed=0, obs_mode="image", progress=False)
    assert summary["skipped"] == 0 and from_bag.n_episodes == EPISODES
    np.testing.assert_array_equal(from_bag.episode_ends, recorded.episode_ends)
    np.testing.assert_allclose(from_bag.action, recorded.action, atol=1e-6)
    np.testing.assert_allclose(from_bag.obs["proprio"], recorded.obs["proprio"], atol=1e-6)
    np.testing.assert_array_equal(from_bag.obs["image_side"], recorded.obs["image_side"])


@pytest.mark.quick
def test_sqlite3_humble_metadata_and_typestore_written_bags_read_the_same(tmp_path):
    from rclpy.serialization import serialize_message
    from rosbags.typesys import Stores, get_typestore

    from diffpolicy_ros.messages.conversions import make_twist, sec_to_stamp

    ts = get_typestore(Stores.ROS2_JAZZY)
    Twist = ts.types["geometry_msgs/msg/TwistStamped"]
    ours = make_twist((0.1, -0.2, 0.0), sec_to_stamp(5.25), "world")
    stamp = ts.types["builtin_interfaces/msg/Time"](sec=5, nanosec=250_000_000)
    theirs = Twist(
        header=ts.types["std_msgs/msg/Header"](stamp=stamp, frame_id="world"),
        twist=ts.types["geometry_msgs/msg/Twist"](
            linear=ts.types["geometry_msgs/msg/Vector3"](x=0.1, y=-0.2, z=0.0),
            angular=ts.types["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
        ),
    )  # fmt: skip
    # the same message both ways (compared as values: CDR alignment padding is not initialized by every writer)
    assert ts.deserialize_cdr(bytes(serialize_message(ours)), "geometry_msgs/msg/TwistStamped") == theirs
    with open_writer(tmp_path / "humble", storage="sqlite3", metadata_version=8) as bag:
        bag.write(C.CMD_TWIST_TOPIC, 5_250_000_000, ours)
        bag.write_raw(C.CMD_TWIST_TOPIC, "geometry_msgs/msg/TwistStamped", 5_350_000_000,
                      bytes(ts.serialize_cdr(theirs, "geometry_msgs/msg/TwistStamped")))  # fmt: skip
    assert "version: 8" in (tmp_path / "humble" / "metadata.yaml").read_text()
    msgs = list(read_messages(tmp_path / "humble"))
    assert [t for _, t, _ in msgs] == [5_250_000_000, 5_350_000_000] and msgs[0][2] == msgs[1][2] == ours


@pytest.mark.quick
def test_bad_bags_fail_with_a_reason(tmp_path, demo_bag):
    from std_msgs.msg import String

    with pytest.raises(BagError, match="no such file"):
        bag_info(tmp_path / "missing")
    with open_writer(tmp_path / "chatter") as bag:
        bag.write("/chatter", 1, String(data="hi"))
    with pytest.raises(BagError, match=r"missing topic.*/joint_states.*holds: /chatter \(std_msgs/msg/String\)"):
        dataset_from_bags(tmp_path / "chatter")
    truncated = tmp_path / "truncated"
    shutil.copytree(demo_bag, truncated)
    mcap = next(truncated.glob("*.mcap"))
    mcap.write_bytes(mcap.read_bytes()[: mcap.stat().st_size // 2])
    with pytest.raises(BagError):
        for _ in read_messages(truncated):
            pass
    warnings = []
    with open_writer(tmp_path / "unknown") as bag:
        bag.write_raw("/exotic", "exotic_msgs/msg/Thing", 1, b"\x00\x01\x00\x00")
        bag.write("/chatter", 2, String(data="hi"))
    assert [t for t, _, _ in read_messages(tmp_path / "unknown", warn=warnings.append)] == ["/chatter"]
    assert any("exotic_msgs/msg/Thing" in w for w in warnings)


@pytest.mark.slow
def test_eval_bag_scores_a_trained_policy_far_better_than_an_untrained_one(tmp_path, demo_bag, demo_bag_summary):
    import torch

    from diffpolicy_ros.models.checkpoint import CheckpointMeta, make_payload, save_checkpoint
    from diffpolicy_ros.models.factory import build_policy, policy_spec
    from diffpolicy_ros.rl.bc import BCRun, train_bc

    small = {"kind": "diffusion", "diffusion": {"unet": {"down_dims": [32, 64, 128]}, "ddim_steps": 10,
                                               "fusion": {"use_images": False}}}  # fmt: skip
    bags = tmp_path / "bags"
    write_demo_bag(bags / "a", episodes=20, seed=100, progress=False)
    dataset, _ = dataset_from_bags(bags)  # train from a folder of bags, through the live preprocessing
    run = BCRun(policy=small)
    run.train.iters, run.train.eval_every, run.train.final_eval_episodes, run.train.eval_episodes = 600, 600, 1, 1
    run.train.device = "cpu"
    trained = train_bc(run, dataset, tmp_path / "bc", progress=False)["checkpoint"]
    spec = policy_spec(small)
    untrained_policy = build_policy(spec)
    untrained_policy.action_norm.fit(torch.from_numpy(dataset.action))
    untrained = save_checkpoint(tmp_path / "untrained.pt", make_payload(spec, untrained_policy, CheckpointMeta()))

    good = evaluate_bag(demo_bag, trained, samples=2, out_dir=tmp_path / "report")
    bad = evaluate_bag(demo_bag, untrained, samples=2)
    assert good["mae_by_step"][0] < 0.5 * bad["mae_by_step"][0], (good["mae_by_step"][0], bad["mae_by_step"][0])
    assert good["best_of_n_mae"] <= np.nanmean(good["mae_by_step"]) + 1e-9
    assert good["coverage"] > 0.9 and good["chunks"] > 50
    assert (tmp_path / "report" / "report.json").exists() and (tmp_path / "report" / "actions.png").exists()
    # numbers that explain themselves: a clean expert bag has no stale inputs inside its episodes (the ticks in
    # the gaps between episodes are counted apart), and both tools give the bag's duration the same way
    assert good["stale_inputs"] == 0 and good["ticks_without_observation"]["between_episodes"] > 0, good
    assert good["episodes"] == EPISODES
    assert good["bag_duration_s"] == pytest.approx(demo_bag_summary["duration_s"], abs=0.01)
    again = evaluate_bag(demo_bag, trained, samples=2)  # deterministic for a seed
    assert again["mae_by_step"] == good["mae_by_step"] and again["best_of_n_mae"] == good["best_of_n_mae"]


@pytest.mark.slow
def test_train_bc_gives_a_vision_policy_the_bags_block_and_goal_poses_as_labels(tmp_path, demo_bag):
    """The vision policy reads no block or goal pose, but its estimator learns from them: `train-bc` on bags
    reads /task/object_pose and /task/goal_pose for it (its state normalizer is fitted on them)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from diffpolicy_ros.models.checkpoint import load_checkpoint

    repo = Path(__file__).resolve().parents[2]
    args = ["train-bc", "--data", demo_bag, "--config", repo / "config/policy/diffusion_vision.yaml", "--iters", "2",
            "--estimator-iters", "2", "--eval-every", "2", "--final-eval-episodes", "1", "--run-dir", tmp_path / "r",
            "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-m", "diffpolicy_ros.cli", *map(str, args)], env=env, timeout=300,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    model = load_checkpoint(next((tmp_path / "r").glob("*/checkpoints/last.pt")))["model"]
    dataset, _ = dataset_from_bags(demo_bag)
    task_state = slice(C.PROPRIO_SLICES["object_xy"].start, C.PROPRIO_SLICES["goal_xy"].stop)
    fitted = model["encoder.state_norm.mean"][task_state].numpy()
    np.testing.assert_allclose(fitted, dataset.obs["proprio"][:, task_state].mean(0), atol=1e-5)
    assert np.all(fitted[[0, 2]] > 0.3)  # block and goal x: real positions, not the zeros of a pose never read
    assert np.all(model["encoder.state_norm.std"][task_state].numpy() > 0.01)


@pytest.mark.quick
def test_a_bag_recorded_across_cells_carries_each_episodes_cell_into_the_dataset(tmp_path):
    """`demo --to-bag B --cells FILE`: each episode runs in its own sampled cell, the start mark says which, and
    `train-bc --data B` gets it back per episode as `demo --cells` records it."""
    import json

    from diffpolicy_ros.sim.cell import load_cell_ranges
    from diffpolicy_ros.sim.demos import run_demos

    ranges = load_cell_ranges(Path(__file__).resolve().parents[2] / "config/cells/train.yaml")
    write_demo_bag(tmp_path / "b", episodes=2, seed=3, progress=False, cells=ranges)
    marks = [json.loads(m.data) for _, _, m in read_messages(tmp_path / "b", ["/diffpolicy/episode"])]
    starts = [m for m in marks if m["event"] == "start"]
    assert len(starts) == 2 and starts[0]["cell"] != starts[1]["cell"]
    from_bag, _ = dataset_from_bags(tmp_path / "b")
    _, recorded = run_demos("push", 2, seed=3, obs_mode="image", progress=False, env_overrides={"cells": ranges})
    assert [json.loads(c) for c in from_bag.episode["cell"]] == [json.loads(c) for c in recorded.episode["cell"]]
    np.testing.assert_array_equal(from_bag.obs["image_top"], recorded.obs["image_top"])  # rendered in that cell
    # each camera's CameraInfo and optical pose in the bag give the projection a calibrated policy reads: the
    # cell's own (its cameras moved, turned, zoomed), as `demo --images` records it
    np.testing.assert_allclose(from_bag.obs["camera_projection"], recorded.obs["camera_projection"], atol=1e-3)


@pytest.mark.slow
def test_a_calibrated_policy_trains_on_bags_and_eval_bag_feeds_it_the_cameras_calibration(tmp_path, demo_bag):
    """A calibrated vision policy reads each camera's projection: `train-bc --data BAG` builds it from the bag's
    CameraInfo and optical-frame poses, `eval-bag` feeds the policy the same way at every tick, and a bag (or a
    topic map) without them is refused naming the topics it lacks."""
    import os
    import subprocess
    import sys

    from diffpolicy_ros.messages.topic_map import ROLES, TopicMap

    repo = Path(__file__).resolve().parents[2]
    args = ["train-bc", "--data", demo_bag, "--config", repo / "config/policy/diffusion_vision_calibrated.yaml",
            "--iters", "2", "--estimator-iters", "2", "--eval-every", "2", "--final-eval-episodes", "1",
            "--run-dir", tmp_path / "r", "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-m", "diffpolicy_ros.cli", *map(str, args)], env=env, timeout=300,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    checkpoint = next((tmp_path / "r").glob("*/checkpoints/last.pt"))
    report = evaluate_bag(demo_bag, checkpoint, samples=1, ddim_steps=2)
    assert report["stale_inputs"] == 0 and report["coverage"] > 0.9 and report["chunks"] > 50, report
    lens_elsewhere = TopicMap({**ROLES, "camera_info_top": "/nowhere/camera_info"})
    with pytest.raises(BagError, match="/nowhere/camera_info"):
        evaluate_bag(demo_bag, checkpoint, topic_map=lens_elsewhere)
