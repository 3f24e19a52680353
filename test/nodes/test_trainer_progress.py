"""The trainer's console line: what a person watching `make sim-train` needs to see."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.quick


def test_progress_line_shows_the_interval_throughput_and_eta():
    from diffpolicy_ros.nodes.trainer_node import progress_line

    ppo = {"iter": 10, "iters_total": 100, "success_rate": 0.5, "success_ci95": (0.3, 0.7), "env_steps": 3200,
           "env_steps_per_s": 110.0, "rollout_success_rate": 0.75}  # fmt: skip
    line = progress_line(ppo, iters_per_s=0.5)
    assert "iter 10/100" in line and "eval success 0.50 [0.30, 0.70]" in line and "110/s" in line
    assert "rollout 0.75" in line  # the iteration's own episodes, apart from the evaluation and its interval
    assert "ETA 3 min" in line  # 90 iterations at 0.5 it/s
    bc = progress_line({"iter": 5, "iters_total": 2000, "loss": 0.25, "success_rate": -1.0}, iters_per_s=0.0)
    assert "loss 0.2500" in bc and "success" not in bc and "ETA" not in bc  # no evaluation yet, no rate yet
    # sim_train cells:=FILE evaluates on held-out cells, and says so
    assert "held-out-cell success 0.50 [0.30, 0.70]" in progress_line(ppo, 0.5, evaluated_on="held-out-cell")


def test_eta_rate_is_steady_when_an_iteration_outlasts_the_line_and_restarts_with_ppo():
    from diffpolicy_ros.nodes.trainer_node import PhaseRate

    rate = PhaseRate()
    assert rate.update(100, now=0.0) == 0.0  # the first line: nothing measured yet
    # PPO-like: one iteration every 20 s, a line every 10 s -> 0.05 it/s on every line, not 0.1 / 0
    rates = [rate.update(100 + t // 20, now=float(t)) for t in range(10, 201, 10)]
    assert all(r == pytest.approx(0.05, abs=0.02) for r in rates[1:]) and rates[-1] == pytest.approx(0.05)
    assert rate.update(2, now=210.0) == 0.0  # the PPO phase counts from 0 again: measured afresh
    assert rate.update(12, now=220.0) == pytest.approx(1.0)


def test_the_robot_gets_the_first_checkpoint_then_only_better_evaluated_ones():
    from diffpolicy_ros.nodes.trainer_node import BetterCheckpoints

    gate = BetterCheckpoints()
    assert gate.admit({})  # the early, unevaluated BC checkpoint: something to run
    assert not gate.admit({})  # a second unevaluated one (a ~/save) does not replace it
    assert gate.admit({"success_rate": 0.4})  # BC evaluations
    assert not gate.admit({"success_rate": 0.4}) and gate.admit({"success_rate": 0.7})
    # PPO: an iteration's checkpoint without an evaluation ({}: a lucky rollout included) does not count, only an
    # evaluation that beats BC's best
    assert not gate.admit({}) and not gate.admit({"success_rate": 0.6})
    assert gate.admit({"success_rate": 0.8}) and gate.best.success_rate == 0.8
