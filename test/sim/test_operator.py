"""demo --operator: the scripted expert's plan played as a teleoperator plays it — imperfect, still within the
deployment's limits, the same episodes for the same seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffpolicy_ros.sim import make_env, make_expert
from diffpolicy_ros.sim.demos import run_demos
from diffpolicy_ros.sim.operator import OPERATOR_PRESETS, OperatorConfig

pytestmark = pytest.mark.quick
LIMITS = {"max_speed": 0.1, "max_accel": 0.5}  # config/real_arm.yaml's


def actions(operator: OperatorConfig | None, seed: int, steps: int = 120) -> np.ndarray:
    env = make_env("push")
    expert = make_expert("push", env, **LIMITS, operator=operator)
    env.reset(seed=seed)
    expert.reset(np.random.default_rng([0, seed]))
    out = []
    for _ in range(steps):
        out.append(expert.act())
        if any(env.step(out[-1])[2:4]):
            break
    env.close()
    return np.array(out)


def test_an_operator_with_nothing_set_is_the_expert():
    np.testing.assert_array_equal(actions(OperatorConfig(), 3), actions(None, 3))


def test_the_presets_play_imperfect_demonstrations_that_mostly_still_succeed():
    expert, _ = run_demos("push", episodes=20, seed=0, expert_limits=LIMITS, progress=False)
    teleop, data = run_demos("push", episodes=20, seed=0, expert_limits=LIMITS, progress=False,
                             operator=OPERATOR_PRESETS["teleop"])  # fmt: skip
    again, _ = run_demos("push", episodes=20, seed=0, expert_limits=LIMITS, progress=False,
                         operator=OPERATOR_PRESETS["teleop"])  # fmt: skip
    assert again.success_rate == teleop.success_rate and again.mean_return == teleop.mean_return  # seeded
    assert expert.success_rate == 1.0 and 0.6 <= teleop.success_rate < 1.0, teleop
    assert teleop.mean_length > expert.mean_length  # hesitations and detours take time
    assert teleop.left_fraction == expert.left_fraction  # the recorded side is the side it ends up on
    assert data.meta["operator"]["overshoot"] == OPERATOR_PRESETS["teleop"].overshoot


@settings(max_examples=8, deadline=None)
@given(st.floats(0, 0.3), st.floats(0, 2), st.floats(0, 0.1), st.floats(0, 1), st.integers(0, 2**16))
def test_whatever_the_operator_does_the_commands_stay_within_the_limits(hesitate, over, jitter, wrong, seed):
    operator = OperatorConfig(hesitation_rate=hesitate, overshoot=over, jitter_std=jitter, wrong_side_rate=wrong)
    sent = actions(operator, seed, steps=40)
    assert np.all(np.linalg.norm(sent, axis=1) <= LIMITS["max_speed"] + 1e-6)
    steps = np.diff(np.vstack([np.zeros(3), sent]), axis=0)
    assert np.all(np.linalg.norm(steps, axis=1) <= LIMITS["max_accel"] * 0.1 + 1e-6)


def test_the_clis_preset_names_are_the_presets():
    from diffpolicy_ros.cli import OPERATOR_PRESET_NAMES

    assert set(OPERATOR_PRESET_NAMES) == set(OPERATOR_PRESETS)
