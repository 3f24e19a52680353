"""Training recipes: what the ``sim_train`` trainer (and ``bench learn --start weak``) run when not told.

Plain data, no torch or MuJoCo: the launch graph reads it on a robot PC without a simulator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerRecipe:
    """The policy config and BC length, the demos, and a PPO budget that ends within the hour on a 2-core CPU
    (image PPO renders both cameras every step: several times slower than state PPO here)."""

    policy_config: str
    ppo_env_steps: int
    iters: int = 2000
    eval_every: int = 500
    demo_episodes: int = 100
    eval_episodes: int = 10
    ppo_config: str = "train/push.yaml"
    ppo_envs: int = 4


OBS_RECIPES = {
    "multimodal": TrainerRecipe("policy/diffusion.yaml", 50_000),  # cameras, proprio, instruction
    "state": TrainerRecipe("policy/diffusion_state.yaml", 200_000),
}
DEFAULT_RECIPE = OBS_RECIPES["multimodal"]
# start:=weak: DPPO's practice of fine-tuning an early BC start (few demos, BC stopped early: ~0.5 success), so
# PPO has room to show its gain; the push recipe `diffpolicy bench learn --start weak` measured
# (docs/experiments.md): the small state-only policy, 32 PPO workers to 300k env steps, 100 evaluation episodes
# per point
WEAK_START = TrainerRecipe(
    "policy/diffusion_state_small.yaml",
    307_200,
    iters=1100,
    eval_every=1100,
    demo_episodes=50,
    eval_episodes=100,
    ppo_config="train/push_weak.yaml",
    ppo_envs=32,
)
STARTS = ("full", "weak")
