"""Configs: YAML files with a base, unknown keys, settings validated where they are defined, and PPO's one
mechanism for changing the policy's sampler."""

from __future__ import annotations

import pytest

from diffpolicy_ros.assets import config_file
from diffpolicy_ros.config import ConfigError, load_yaml
from diffpolicy_ros.models.diffusion_policy import DiffusionPolicyConfig
from diffpolicy_ros.models.gaussian_policy import GaussianPolicyConfig
from diffpolicy_ros.models.heads import apply_sampler
from diffpolicy_ros.models.unet1d import UNetConfig
from diffpolicy_ros.rl.ppo import load_ppo_run
from diffpolicy_ros.user_files import TRAIN_CONFIG


@pytest.mark.quick
def test_a_variant_states_only_what_differs_from_its_base(tmp_path):
    (tmp_path / "base.yaml").write_text("task: push\ntrain:\n  n_envs: 16\n  sampler: {eta: 1.0, min_std: 0.1}\n")
    (tmp_path / "variant.yaml").write_text("base: base.yaml\ntrain:\n  sampler: {min_std: 0.05}\n")
    assert load_yaml(tmp_path / "variant.yaml", TRAIN_CONFIG) == {
        "task": "push",
        "train": {"n_envs": 16, "sampler": {"eta": 1.0, "min_std": 0.05}},
    }


@pytest.mark.quick
def test_base_cycles_and_missing_files_are_clear_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        load_yaml(tmp_path / "a.yaml", TRAIN_CONFIG)
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_yaml(tmp_path / "missing.yaml", TRAIN_CONFIG)


@pytest.mark.quick
def test_shipped_two_goal_config_is_push_plus_its_differences():
    push, two = load_ppo_run(config_file("train/push.yaml")), load_ppo_run(config_file("train/push_two_goals.yaml"))
    assert two.task == "push_two_goals" and two.train.n_envs == 32 and two.train.eval_episodes == 100
    assert (two.train.sampler.finetune_steps, two.train.sampler.min_std) == (5, 0.05)
    assert two.train.sampler.eta == push.train.sampler.eta == 1.0  # inherited
    assert two.train.actor_lr == push.train.actor_lr and two.train.likelihood_executed_only


@pytest.mark.quick
def test_policy_config_rejects_what_the_network_cannot_run():
    with pytest.raises(ValueError, match="horizon 10 cannot be downsampled"):
        DiffusionPolicyConfig(horizon=10, unet=UNetConfig(down_dims=[64, 128, 256]))
    DiffusionPolicyConfig(horizon=12, unet=UNetConfig(down_dims=[64, 128]))  # one downsampling: even is enough
    with pytest.raises(ValueError, match="ddim_steps"):
        DiffusionPolicyConfig(ddim_steps=0)


@pytest.mark.quick
def test_apply_sampler_is_the_one_way_ppo_changes_the_policy_sampler():
    bc = DiffusionPolicyConfig()
    tuned = apply_sampler(bc, {"ddim_steps": 20, "eta": 1.0, "min_std": 0.05, "finetune_steps": None})
    assert (tuned.ddim_steps, tuned.eta, tuned.min_std, tuned.stochastic) == (20, 1.0, 0.05, True)
    assert tuned.finetune_steps == bc.finetune_steps  # None keeps the policy's
    assert (bc.ddim_steps, bc.eta, bc.stochastic) == (10, 0.0, False)  # a copy: the BC config is untouched
    gaussian = apply_sampler(GaussianPolicyConfig(), {"ddim_steps": 20, "min_std": 0.05, "eta": 1.0})
    assert gaussian.min_std == 0.05  # keys the head does not have are skipped
    with pytest.raises(ValueError, match="unknown setting"):
        apply_sampler(bc, {"temperature": 2.0})
