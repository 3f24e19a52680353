"""Message conversions and the nodes' pure logic: bad input is refused with a reason, never passed on."""

from __future__ import annotations

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from diffpolicy_ros.messages.conversions import (
    MessageError,
    chunk_to_trajectory,
    image_to_rgb,
    joint_state_vectors,
    make_joint_state,
    numpy_to_image,
    sec_to_stamp,
    stamp_to_sec,
    trajectory_to_chunk,
)
from diffpolicy_ros.messages.observation import assemble_observation, prepare_image
from diffpolicy_ros.nodes.instruction_node import check_instruction
from diffpolicy_ros.safety.chunk_player import ChunkPlayer
from diffpolicy_ros.sim.push_env import ARM_JOINTS

pytestmark = pytest.mark.quick
RGB = np.random.default_rng(0).integers(0, 255, (6, 5, 3), dtype=np.uint8)


def raw(encoding: str, pixels: np.ndarray) -> Image:
    msg = Image(height=pixels.shape[0], width=pixels.shape[1], encoding=encoding)
    msg.step = pixels.shape[1] * (pixels.shape[2] if pixels.ndim == 3 else 1)
    msg.data = pixels.tobytes()
    return msg


@pytest.mark.parametrize(
    "encoding,pixels,expected",
    [
        ("rgb8", RGB, RGB),
        ("bgr8", RGB[:, :, ::-1].copy(), RGB),
        ("rgba8", np.dstack([RGB, np.full(RGB.shape[:2], 255, np.uint8)]), RGB),
        ("mono8", RGB[:, :, 0].copy(), np.repeat(RGB[:, :, :1], 3, axis=2)),
    ],
)
def test_image_encodings_convert_to_rgb(encoding, pixels, expected):
    np.testing.assert_array_equal(image_to_rgb(raw(encoding, pixels)), expected)


def test_bad_images_raise_message_error():
    with pytest.raises(MessageError, match="encoding"):
        image_to_rgb(raw("16UC1", RGB))
    with pytest.raises(MessageError, match="empty"):
        image_to_rgb(Image(encoding="rgb8"))
    short = raw("rgb8", RGB)
    short.data = short.data[:10]
    with pytest.raises(MessageError, match="too short"):
        image_to_rgb(short)


def test_image_round_trip_and_resize():
    msg = numpy_to_image(RGB, sec_to_stamp(1.5), "cam")
    np.testing.assert_array_equal(image_to_rgb(msg), RGB)
    assert stamp_to_sec(msg.header.stamp) == 1.5
    big = np.zeros((480, 640, 3), np.uint8)
    assert prepare_image(big, 128, crop_square=True).shape == (128, 128, 3)


def test_joint_states_are_reordered_and_validated():
    msg = JointState(name=list(reversed(ARM_JOINTS)), position=[6.0, 5, 4, 3, 2, 1], velocity=[0.0] * 6)
    pos, vel = joint_state_vectors(msg, ARM_JOINTS)
    np.testing.assert_array_equal(pos, [1, 2, 3, 4, 5, 6])
    with pytest.raises(MessageError, match="lacks"):
        joint_state_vectors(JointState(name=list(ARM_JOINTS[:5]), position=[0.0] * 5), ARM_JOINTS)
    with pytest.raises(MessageError, match="non-finite"):
        joint_state_vectors(JointState(name=list(ARM_JOINTS), position=[0.0] * 5 + [float("nan")]), ARM_JOINTS)
    no_vel = JointState(name=list(ARM_JOINTS), position=[0.0] * 6)
    assert joint_state_vectors(no_vel, ARM_JOINTS)[1] is None


def test_chunk_round_trip_and_validation():
    chunk = np.random.default_rng(1).uniform(-0.2, 0.2, (16, 3))
    msg = chunk_to_trajectory(chunk, sec_to_stamp(3.0), 0.1, "world")
    assert len(msg.points) == 16 and stamp_to_sec(msg.header.stamp) == 3.0
    np.testing.assert_allclose(trajectory_to_chunk(msg, 16, 0.1), chunk)
    with pytest.raises(MessageError, match="15 points"):
        trajectory_to_chunk(chunk_to_trajectory(chunk[:15], sec_to_stamp(0), 0.1, "w"), 16, 0.1)
    bad = chunk.copy()
    bad[4, 1] = np.inf
    with pytest.raises(MessageError, match="non-finite"):
        trajectory_to_chunk(chunk_to_trajectory(bad, sec_to_stamp(0), 0.1, "w"), 16, 0.1)
    with pytest.raises(MessageError, match="expected 0.100"):
        trajectory_to_chunk(chunk_to_trajectory(chunk, sec_to_stamp(0), 0.2, "w"), 16, 0.1)


def test_chunk_player_skips_elapsed_steps_replaces_and_stops():
    player = ChunkPlayer(dt=0.1)
    assert not player.command(0.0)[0].any()  # nothing yet: zero twist
    chunk = np.arange(48, dtype=float).reshape(16, 3)
    assert player.offer(chunk, stamp=10.0, now=10.25) is None
    v, k = player.command(10.25)  # 2.5 steps elapsed since the observation: play point 2
    assert k == 2 and np.array_equal(v, chunk[2])
    newer = -chunk
    assert player.offer(newer, stamp=10.3, now=10.35) is None
    assert np.array_equal(player.command(10.35)[0], newer[0])  # the new chunk replaces the rest
    assert player.offer(chunk, stamp=10.2, now=10.4) is not None  # out of order: refused
    assert player.offer(chunk, stamp=11.0, now=10.4) is not None  # from the future: refused
    v, k = player.command(10.3 + 1.6)  # past the end: stop
    assert k is None and not v.any()


def test_observation_assembly_refuses_missing_and_stale_parts():
    latest = {
        "joints": (10.0, (np.zeros(6), np.zeros(6))),
        "object": (10.0, np.array([0.5, 0.0])),
        "goal": (9.95, np.array([0.3, 0.1])),
        "instruction": (-np.inf, "push the block to the target"),
    }
    obs, stamp = assemble_observation(latest, now=10.05, max_age=0.3, need_images=False)
    assert obs["proprio"].shape == (16,) and stamp == 9.95
    np.testing.assert_allclose(obs["proprio"][12:], [0.5, 0.0, 0.3, 0.1])
    with pytest.raises(MessageError, match="image_top"):
        assemble_observation(latest, 10.05, 0.3, need_images=True)
    with pytest.raises(MessageError, match="stale"):
        assemble_observation(latest, 11.0, 0.3, need_images=False)


def test_instruction_checks():
    assert check_instruction("push the block to the red target") is None
    assert check_instruction("   ") is not None
    assert check_instruction("x" * 1000) is not None


def test_the_live_calibration_gives_the_policy_the_projection_the_env_gives_it():
    """The sim's CameraInfo and optical-frame pose (what sim_bridge publishes; camera_node passes a model-size
    CameraInfo on unchanged) through the policy node's cache: the observation's ``camera_projection`` is the env's,
    in a cell whose cameras moved; without them the policy waits, naming the topics."""
    from diffpolicy_ros import contract as C
    from diffpolicy_ros.messages.observation import MissingInputs, ObservationCache
    from diffpolicy_ros.messages.sim_messages import step_messages
    from diffpolicy_ros.sim.cell import CellRanges
    from diffpolicy_ros.sim.push_env import PushEnv

    moved = CellRanges().with_factors({"cameras.top.shift_m": (0.03, 0.03), "cameras.side.turn_deg": (4, 4)})
    env = PushEnv(obs_mode="image", cells=moved)
    try:
        obs, _ = env.reset(seed=3)
        messages = dict(step_messages(env, obs, Time(sec=1), C.WORLD_FRAME, images=True, task_state=False))
    finally:
        env.close()
    cache = ObservationCache()
    cache.on_joints(make_joint_state(C.ARM_JOINTS, np.zeros(6), np.zeros(6), Time(sec=1)))
    cache.on_instruction(String(data=C.DEFAULT_INSTRUCTION))
    with pytest.raises(MissingInputs, match="optical_pose"):
        assemble_observation(cache.latest, 1.0, 0.3, False, False, need_calibration=True)
    for cam in C.CAMERAS:
        assert cache.on_camera_info(cam, messages[C.camera_info_topic(cam)]) == ""
        assert cache.on_camera_pose(cam, messages[C.camera_pose_topic(cam)]) == ""
    live, _ = assemble_observation(cache.latest, 1.0, 0.3, False, False, need_calibration=True)
    np.testing.assert_allclose(live["camera_projection"], obs["camera_projection"], rtol=1e-5, atol=1e-4)
    bad = messages[C.camera_info_topic("top")]
    bad.k = [0.0] * 9  # an uncalibrated driver's
    assert "not a calibration" in cache.on_camera_info("top", bad)
