"""The push task on real MuJoCo, headless: determinism, ranges, IK tracking, clipping, chunks, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from diffpolicy_ros.sim import TASKS, ChunkStepEnv, PushConfig, make_env


def rollout(env, seed: int, actions: np.ndarray) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    trace = [obs["proprio"].copy()]
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        trace.append(np.append(obs["proprio"], reward))
        if terminated or truncated:
            break
    return trace


@pytest.mark.quick
def test_registered_ids_make_the_env():
    for task, env_id in TASKS.items():
        if task == "point_mass":  # not a push task: see test_point_mass.py
            continue
        env = gym.make(env_id)
        obs, _ = env.reset(seed=0)
        assert env.unwrapped.cfg.two_goals == (task == "push_two_goals")
        assert obs["proprio"].shape == (16,) and obs["proprio"].dtype == np.float32
        env.close()


@pytest.mark.quick
def test_same_seed_reproduces_trajectory_bit_for_bit():
    actions = np.random.default_rng(3).uniform(-0.25, 0.25, (40, 3))
    a = rollout(make_env("push"), 7, actions)
    b = rollout(make_env("push"), 7, actions)
    c = rollout(make_env("push"), 8, actions)
    assert len(a) == len(b)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


@pytest.mark.quick
def test_reset_ranges_follow_config():
    env = make_env("push")
    cfg = env.cfg
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        block, goal = obs["proprio"][12:14], obs["proprio"][14:16]
        assert cfg.block_x_range[0] <= block[0] <= cfg.block_x_range[1]
        assert cfg.block_y_range[0] <= block[1] <= cfg.block_y_range[1]
        dist = np.linalg.norm(goal - block)
        assert cfg.goal_distance_range[0] - 1e-6 <= dist <= cfg.goal_distance_range[1] + 1e-6
        # the goal is on the robot's side of the block, within the configured fan
        angle = np.arctan2(goal[1] - block[1], block[0] - goal[0])
        assert abs(angle) <= cfg.goal_angle_range + 1e-6
        tip = env.pusher_position
        assert np.all(np.abs(tip[:2] - np.array(cfg.pusher_start[:2])) <= cfg.pusher_start_noise + 1e-3)
        assert abs(tip[2] - cfg.pusher_start[2]) < 1e-3
        assert np.all(obs["proprio"][6:12] == 0.0)  # starts at rest


@pytest.mark.quick
@pytest.mark.parametrize("command", [(0.15, 0.0, 0.0), (0.0, -0.2, 0.0), (-0.1, 0.1, 0.0), (0.0, 0.0, 0.1)])
def test_ik_tracks_commanded_velocity_in_free_space(command):
    env = make_env("push", pusher_start=(0.35, 0.0, 0.06))
    env.reset(seed=0)
    command = np.asarray(command)
    for _ in range(2):  # settle
        env.step(command)
    start, t0 = env.pusher_position, env.time
    for _ in range(3):
        env.step(command)
    measured = (env.pusher_position - start) / (env.time - t0)
    assert np.linalg.norm(measured - command) <= 0.2 * np.linalg.norm(command), measured
    rot = env.data.site_xmat[env.model.site("pusher_tip").id].reshape(3, 3)
    assert rot[2, 2] < -0.999  # tool still points down


@pytest.mark.quick
def test_actions_are_clipped_to_max_speed():
    env = make_env("push", pusher_start=(0.30, 0.0, 0.10))
    env.reset(seed=0)
    env.step(np.array([5.0, 0.0, 0.0]))
    start, t0 = env.pusher_position, env.time
    env.step(np.array([5.0, 0.0, 0.0]))
    speed = (env.pusher_position[0] - start[0]) / (env.time - t0)
    assert speed == pytest.approx(env.cfg.max_speed, rel=0.2)


@pytest.mark.quick
def test_workspace_clip_keeps_pusher_above_the_table():
    env = make_env("push")
    env.reset(seed=1)
    lowest = np.inf
    for _ in range(20):  # drive straight down at full speed, then sideways off the workspace
        env.step(np.array([0.0, 0.0, -1.0]))
        lowest = min(lowest, env.pusher_position[2])
    for _ in range(30):
        env.step(np.array([0.0, 1.0, -1.0]))
        lowest = min(lowest, env.pusher_position[2])
    pusher_half_height = 0.02
    assert lowest - pusher_half_height > -0.003  # never through the table top (z = 0)
    assert env.pusher_position[1] <= env.cfg.workspace_high[1] + 0.01


@pytest.mark.quick
@pytest.mark.parametrize(
    "bad",
    [
        np.array([np.nan, 0.0, 0.0]),
        np.array([0.0, np.inf, 0.0]),
        np.zeros(2),
        np.zeros((1, 3)),
        np.zeros(3, dtype=np.int64),
        np.array(["a", "b", "c"]),
    ],
)
def test_bad_action_raises_and_leaves_state_unchanged(bad):
    env = make_env("push")
    env.reset(seed=2)
    env.step(np.array([0.1, 0.0, 0.0]))
    qpos, qvel, t = env.data.qpos.copy(), env.data.qvel.copy(), env.data.time
    with pytest.raises(ValueError):
        env.step(bad)
    assert np.array_equal(env.data.qpos, qpos) and np.array_equal(env.data.qvel, qvel) and env.data.time == t


@pytest.mark.quick
def test_bad_chunk_is_rejected_before_any_step():
    env = make_env("push")
    env.reset(seed=2)
    qpos = env.data.qpos.copy()
    chunk = np.zeros((16, 3))
    chunk[9, 1] = np.nan  # a late NaN must not let the first 9 steps run
    for bad in (chunk, np.zeros((16, 2)), np.zeros(3), np.zeros((0, 3))):
        with pytest.raises(ValueError):
            env.step_chunk(bad)
        assert np.array_equal(env.data.qpos, qpos)


@pytest.mark.quick
def test_step_chunk_matches_single_steps_and_respects_execute_horizon():
    chunk = np.random.default_rng(0).uniform(-0.2, 0.2, (16, 3))
    a, b = make_env("push", execute_horizon=8), make_env("push")
    a.reset(seed=4)
    b.reset(seed=4)
    obs_a, rewards, terminated, truncated, info = a.step_chunk(chunk)
    assert info["steps_executed"] == len(rewards) == 8
    expected = [b.step(x)[1] for x in chunk[:8]]
    np.testing.assert_allclose(rewards, expected, rtol=1e-6)
    assert np.array_equal(obs_a["proprio"], b.observation()["proprio"])


@pytest.mark.quick
def test_a_camera_env_renders_once_per_chunk_and_per_deployed_decision():
    """The steps inside a chunk (or a deployed decision's control periods) are not observed: the cameras render
    once, for the state the policy looks at next, and that observation is what rendering it then gives."""
    from diffpolicy_ros.safety.deployment import Deployment
    from diffpolicy_ros.sim.deployed import DeployedChunkEnv

    env = make_env("push", obs_mode="image")
    core = env.unwrapped
    renders = []
    real_render = core.render_camera
    core.render_camera = lambda cam: renders.append(cam) or real_render(cam)
    env.reset(seed=3)
    renders.clear()
    obs, rewards, *_ = core.step_chunk(np.full((16, 3), 0.05))
    assert len(rewards) == 4 and sorted(renders) == ["side", "top"]
    again = core.observation()
    assert all(np.array_equal(obs[f"image_{cam}"], again[f"image_{cam}"]) for cam in ("top", "side"))

    deployed = DeployedChunkEnv(env, Deployment(max_speed=0.1, max_accel=0.5, executor_rate_hz=30.0,
                                                latency_s=(0.15, 0.15)))  # fmt: skip
    deployed.reset(seed=3)
    renders.clear()
    obs, _, _, _, info = deployed.step(np.full((16, 3), 0.05))
    assert info["steps_executed"] == 2 and sorted(renders) == ["side", "top"]  # two periods, one look
    assert np.array_equal(obs["proprio"], core.observation()["proprio"])


@pytest.mark.quick
def test_step_chunk_stops_at_termination():
    env = make_env("push", max_episode_steps=5, execute_horizon=16)
    env.reset(seed=0)
    _, rewards, terminated, truncated, info = env.step_chunk(np.zeros((16, 3)))
    assert len(rewards) == 5 and truncated and not terminated
    assert info["elapsed_steps"] == 5


@pytest.mark.quick
def test_success_terminates_with_bonus():
    env = make_env("push")
    env.reset(seed=0)
    block_adr = env.model.joint("block_joint").qposadr[0]
    goal = env.target_goal
    env.data.qpos[block_adr : block_adr + 2] = goal + 0.01  # place the block on the goal
    _, reward, terminated, truncated, info = env.step(np.zeros(3))
    assert terminated and not truncated and info["is_success"]
    assert reward > env.cfg.success_bonus * 0.5


@pytest.mark.quick
def test_block_off_table_terminates():
    env = make_env("push")
    env.reset(seed=0)
    block_adr = env.model.joint("block_joint").qposadr[0]
    env.data.qpos[block_adr : block_adr + 3] = [0.55, 0.7, 0.02]  # beyond the table edge (|y| > 0.55)
    _, reward, terminated, _, info = env.step(np.zeros(3))
    assert terminated and info["off_table"] and not info["is_success"]
    assert reward < 0


@pytest.mark.quick
def test_reward_rewards_block_progress_toward_goal():
    env = make_env("push")
    env.reset(seed=0)
    block_adr = env.model.joint("block_joint").qposadr[0]
    block = env.data.qpos[block_adr : block_adr + 2].copy()
    toward = (env.target_goal - block) / np.linalg.norm(env.target_goal - block)
    env.data.qpos[block_adr : block_adr + 2] = block + 0.03 * toward
    _, reward, *_ = env.step(np.zeros(3))
    assert reward == pytest.approx(env.cfg.reward_push * 0.03, abs=0.05)


@pytest.mark.quick
def test_observation_modes():
    state = make_env("push", obs_mode="state")
    obs, _ = state.reset(seed=0)
    assert set(obs) == {"proprio", "instruction"} and obs["instruction"] == "push the block to the target"
    image = make_env("push", obs_mode="image")
    obs, _ = image.reset(seed=0)
    for cam in ("image_top", "image_side"):
        assert obs[cam].shape == (128, 128, 3) and obs[cam].dtype == np.uint8
        assert obs[cam].std() > 5  # a real picture, not a blank buffer
    assert not np.array_equal(obs["image_top"], obs["image_side"])
    image.close()
    with pytest.raises(ValueError):
        make_env("push", obs_mode="depth")


@pytest.mark.quick
def test_images_show_the_block_moving():
    env = make_env("push", obs_mode="image")
    env.reset(seed=0)
    before = env.render_camera("top").astype(int)
    block_adr = env.model.joint("block_joint").qposadr[0]
    env.data.qpos[block_adr + 1] += 0.08
    env.step(np.zeros(3))
    after = env.render_camera("top").astype(int)
    assert np.abs(after - before).sum(axis=-1).astype(bool).sum() > 50
    env.close()


@pytest.mark.quick
def test_two_goal_instruction_names_the_goal_that_counts():
    env = make_env("push_two_goals")
    colours = set()
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        colour = obs["instruction"].split()[-2]
        colours.add(colour)
        goals = obs["goals"]
        named = goals[("red", "blue").index(colour)]
        assert np.array_equal(env.target_goal.astype(np.float32), named)
        np.testing.assert_allclose(obs["proprio"][14:16], goals.mean(axis=0), atol=1e-6)  # no hint in proprio
        assert np.linalg.norm(goals[0] - goals[1]) >= env.cfg.two_goal_min_separation
    assert colours == {"red", "blue"}
    # success is judged against the named goal only
    obs, _ = env.reset(seed=3)
    other = obs["goals"][1 - ("red", "blue").index(obs["instruction"].split()[-2])]
    block_adr = env.model.joint("block_joint").qposadr[0]
    env.data.qpos[block_adr : block_adr + 2] = other
    _, _, terminated, _, info = env.step(np.zeros(3))
    assert not info["is_success"] and not terminated


@pytest.mark.quick
@pytest.mark.parametrize("task", ["push", "push_two_goals"])
@pytest.mark.parametrize("obs_mode", ["state", "image"])
def test_gymnasium_env_checker_passes(task, obs_mode):
    env = make_env(task, obs_mode=obs_mode)
    check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.quick
def test_chunk_wrapper_sums_rewards_and_keeps_boundaries():
    env = ChunkStepEnv(make_env("push", max_episode_steps=20, execute_horizon=16), horizon=16)
    env.reset(seed=0)
    chunk = np.full((16, 3), 0.05, np.float32)
    _, r1, _, _, info1 = env.step(chunk)
    assert info1["steps_executed"] == 16 and r1 == pytest.approx(info1["step_rewards"].sum(), abs=1e-5)
    _, r2, _, truncated, info2 = env.step(chunk)
    assert truncated and info2["steps_executed"] == 4
    assert np.all(info2["step_rewards"][4:] == 0)


@pytest.mark.quick
def test_unknown_option_is_an_error():
    with pytest.raises(TypeError):
        make_env("push", not_an_option=1)
    with pytest.raises(ValueError):
        make_env("pull")
    assert PushConfig().max_speed > 0


@pytest.mark.quick
def test_a_stop_while_the_renderer_makes_its_gl_context_leaves_nothing_to_print(monkeypatch):
    """Ctrl-C can land inside ``mujoco.Renderer.__init__`` (the sim bridge renders its first frame at start): the
    half-built renderer is collected later, and MuJoCo's ``__del__`` must not print a traceback then."""
    import gc
    import sys

    import mujoco.renderer

    from diffpolicy_ros.sim.push_env import Renderer

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mujoco.renderer.gl_context, "GLContext", interrupted)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    env = make_env("push", obs_mode="image")
    with pytest.raises(KeyboardInterrupt):
        env.unwrapped.render_camera("top")
    gc.collect()
    assert unraisable == [], [u.exc_value for u in unraisable]
    assert issubclass(Renderer, mujoco.Renderer)
    env.close()
