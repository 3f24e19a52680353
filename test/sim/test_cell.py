"""Cells that vary, on real MuJoCo: a nominal cell is the sim's world bit for bit; a sampled cell moves, turns,
lights, colours and weighs what its ranges say, is drawn from the episode's seed and recorded in info["cell"]; the
scene (block, goal, start) is the seed's in every cell file, so conditions differ only by the cell."""

from __future__ import annotations

import numpy as np
import pytest

from diffpolicy_ros.config import ConfigError
from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.cell import CellRanges, degrade_image, load_cell_ranges, sample_cell
from diffpolicy_ros.sim.expert import ScriptedPushExpert

TRAIN_CELLS = "config/cells/train.yaml"


def images_and_proprio(env, seed: int, steps: int = 4) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    out = [obs["proprio"], obs["image_top"], obs["image_side"]]
    for _ in range(steps):
        obs = env.step(np.array([0.05, 0.03, 0.0], dtype=np.float32))[0]
        out += [obs["proprio"], obs["image_top"], obs["image_side"]]
    return out


@pytest.mark.quick
def test_a_nominal_cell_is_the_sims_world_bit_for_bit():
    plain = make_env("push", obs_mode="image")
    nominal = make_env("push", obs_mode="image", cells=CellRanges())
    for seed in (0, 7):
        for a, b in zip(images_and_proprio(plain, seed), images_and_proprio(nominal, seed)):
            assert np.array_equal(a, b)
    varied = make_env("push", cells=load_cell_ranges(TRAIN_CELLS))
    varied.reset(seed=3)
    varied._layout.apply(sample_cell(CellRanges(), np.random.default_rng(0)))  # back to nominal: nothing left over
    for name in ("cam_pos", "cam_quat", "cam_fovy", "light_diffuse", "mat_rgba", "body_mass", "geom_friction",
                 "geom_size"):  # fmt: skip
        assert np.array_equal(getattr(varied.model, name), getattr(plain.model, name)), name


@pytest.mark.quick
def test_a_sampled_cell_is_the_seeds_recorded_and_leaves_the_scene_alone():
    ranges = load_cell_ranges(TRAIN_CELLS)
    env, again, plain = make_env("push", cells=ranges), make_env("push", cells=ranges), make_env("push")
    obs, info = env.reset(seed=11)
    obs2, info2 = again.reset(seed=11)
    assert info["cell"] == info2["cell"]  # the seed's cell
    assert env.reset(seed=12)[1]["cell"] != info["cell"]
    plain_obs, _ = plain.reset(seed=11)
    assert np.array_equal(obs["proprio"][12:], plain_obs["proprio"][12:])  # block and goal: the seed's
    # a reset without a seed draws the next cell from the stream the last seed started
    assert again.reset()[1]["cell"] != info["cell"]
    for name, (low, high) in ranges.factors().items():
        assert low <= info["cell"][name] <= high, name


@pytest.mark.quick
def test_each_factor_changes_the_model_by_what_it_says():
    edges = {"cameras.top.shift_m": (0.02, 0.02), "cameras.side.turn_deg": (3.0, 3.0),
             "cameras.top.fovy_deg": (2.0, 2.0), "physics.block_mass": (2.0, 2.0),
             "physics.block_friction": (0.5, 0.5), "physics.block_size": (1.1, 1.1), "colours.table": (0.2, 0.2),
             "lights.key": (1.5, 1.5)}  # fmt: skip
    plain, env = make_env("push"), make_env("push", cells=CellRanges().with_factors(edges))
    plain.reset(seed=0)
    env.reset(seed=0)
    m, m0 = env.model, plain.model
    top, side, block, table = m.camera("top").id, m.camera("side").id, m.body("block").id, m.geom("table").id
    assert np.linalg.norm(m.cam_pos[top] - m0.cam_pos[top]) == pytest.approx(0.02)
    turn = 2 * np.degrees(np.arccos(min(1.0, abs(float(np.dot(m.cam_quat[side], m0.cam_quat[side]))))))
    assert turn == pytest.approx(3.0, abs=1e-6)
    assert m.cam_fovy[top] == pytest.approx(m0.cam_fovy[top] + 2.0)
    assert m.body_mass[block] == pytest.approx(2.0 * m0.body_mass[block])
    assert m.geom_friction[table, 0] == pytest.approx(0.5 * m0.geom_friction[table, 0])
    assert env.block_half_size == pytest.approx(1.1 * plain.block_half_size)
    material = m.material("table").id
    assert np.linalg.norm(m.mat_rgba[material, :3] - m0.mat_rgba[material, :3]) == pytest.approx(0.2, abs=1e-6)
    key = m.light("key").id
    assert m.light_diffuse[key] == pytest.approx(1.5 * m0.light_diffuse[key])
    for _ in range(20):  # the larger block rests on the table, neither sunk nor dropped
        env.step(np.zeros(3, dtype=np.float32))
    assert env.block_pose[0][2] == pytest.approx(env.block_half_size[2], abs=2e-3)


@pytest.mark.quick
def test_what_the_cameras_see_changes_with_the_cell_and_degrades_like_a_real_camera():
    plain = make_env("push", obs_mode="image")
    moved = make_env("push", obs_mode="image", cells=CellRanges().with_factors({"cameras.top.shift_m": (0.02, 0.02)}))
    grey = make_env("push", obs_mode="image", cells=CellRanges().with_factors({"colours.table": (0.25, 0.25)}))
    base = plain.reset(seed=4)[0]
    shifted, recoloured = moved.reset(seed=4)[0], grey.reset(seed=4)[0]
    assert not np.array_equal(shifted["image_top"], base["image_top"])
    assert np.array_equal(shifted["image_side"], base["image_side"])  # only the top camera moved
    assert np.abs(recoloured["image_top"].astype(int) - base["image_top"]).mean() > 5  # the table fills the view
    cell = sample_cell(CellRanges().with_factors({"image.noise_std": (4.0, 4.0)}), np.random.default_rng(0))
    noisy = degrade_image(base["image_top"], cell, np.random.default_rng(1))
    assert noisy.dtype == np.uint8 and noisy.shape == base["image_top"].shape
    assert 2.0 < np.std(noisy.astype(float) - base["image_top"]) < 5.0
    cell = sample_cell(CellRanges().with_factors({"image.jpeg_quality": (30.0, 30.0)}), np.random.default_rng(0))
    assert not np.array_equal(degrade_image(base["image_top"], cell, np.random.default_rng(1)), base["image_top"])


@pytest.mark.quick
def test_the_expert_still_pushes_the_block_in_the_training_cells():
    """The physics factors at their widest keep the task solvable: demonstrations in sampled cells succeed."""
    env = make_env("push", cells=load_cell_ranges(TRAIN_CELLS))
    expert = ScriptedPushExpert(env)
    successes = 0
    for seed in range(20):
        env.reset(seed=seed)
        expert.reset(np.random.default_rng(seed))
        for _ in range(env.cfg.max_episode_steps):
            _, _, terminated, truncated, info = env.step(expert.act())
            if terminated or truncated:
                break
        successes += info["is_success"]
    assert successes >= 18, successes


@pytest.mark.quick
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("physics: {block_mas: [0.5, 2.0]}\n", "block_mas"),
        ("cameras: {front: {shift_m: [0, 0.02]}}\n", "unknown camera(s) ['front']"),
        ("cameras: {top: {shift: [0, 0.02]}}\n", "cameras.top: unknown factor(s) ['shift']"),
        ("lights: {key: 1.5}\n", "key = 1.5: expected a list"),
        ("physics: {block_mass: [2.0, 0.5]}\n", "physics.block_mass = (2.0, 0.5)"),
        ("cameras: {side: {turn_deg: [0, 90]}}\n", "cameras.side.turn_deg = (0, 90)"),
    ],
)
def test_a_wrong_cell_file_names_the_file_and_the_factor(tmp_path, text, message):
    path = tmp_path / "cell.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_cell_ranges(path)
    assert str(path) in str(error.value) and message in str(error.value), str(error.value)


@pytest.mark.quick
def test_demonstrations_record_their_cells_and_bc_evaluates_across_the_same_ranges(tmp_path):
    import json

    from diffpolicy_ros.assets import config_file
    from diffpolicy_ros.data.episodes import EpisodeDataset
    from diffpolicy_ros.rl.bc import load_bc_run, train_bc
    from diffpolicy_ros.sim.demos import run_demos

    ranges = load_cell_ranges(TRAIN_CELLS)
    run_demos("push", episodes=3, seed=0, out=tmp_path / "d.npz", progress=False, env_overrides={"cells": ranges})
    data = EpisodeDataset.load(tmp_path / "d.npz")
    cells = [json.loads(text) for text in data.episode["cell"]]
    env = make_env("push", cells=ranges)
    assert cells == [env.reset(seed=seed)[1]["cell"] for seed in range(3)]  # each episode's own, from its seed
    assert data.meta["env_config"]["cells"]["physics"]["block_mass"] == [0.5, 2.0]
    run = load_bc_run(config_file("policy/diffusion_state_small.yaml"))
    run.train.iters, run.train.eval_every, run.train.eval_episodes, run.train.final_eval_episodes = 2, 2, 1, 1
    assert train_bc(run, tmp_path / "d.npz", tmp_path / "bc", progress=False)["eval_cells"] is True
