"""The camera-free stand-in for a staged policy's estimator: how far off its estimate is in an episode's cell."""

from __future__ import annotations

import numpy as np
import pytest

from diffpolicy_ros.contract import TASK_STATE_SLICE
from diffpolicy_ros.sim import make_env
from diffpolicy_ros.sim.cell import CellRanges, sample_cell
from diffpolicy_ros.sim.estimated_state import (
    MEDIAN_RADIUS_PER_SIGMA,
    EstimatedTaskState,
    EstimateErrorModel,
    FactorEdge,
)

pytestmark = pytest.mark.quick

MODEL = EstimateErrorModel(
    block_mm=2.0,
    goal_mm=3.0,
    edges=[
        FactorEdge("lights.headlight", 0.6, block_mm=8.0, goal_mm=3.0),  # a dim light: the block 4x worse
        FactorEdge("lights.headlight", 1.3, block_mm=4.0, goal_mm=6.0),
        FactorEdge("colours.table", 0.25, block_mm=1.0, goal_mm=12.0),  # "better" block: read as no change
    ],
)


def nominal_cell(**values: float) -> dict:
    cell = sample_cell(CellRanges(), np.random.default_rng(0))
    return {**cell, **values}


def test_the_sim_world_and_a_nominal_cell_err_as_measured_there():
    assert MODEL.medians_m(None) == pytest.approx((0.002, 0.003))
    assert MODEL.medians_m(nominal_cell()) == pytest.approx((0.002, 0.003))


def test_a_factor_at_its_edge_errs_as_measured_there_and_halfway_by_the_geometric_mean():
    assert MODEL.medians_m(nominal_cell(**{"lights.headlight": 0.6})) == pytest.approx((0.008, 0.003))
    assert MODEL.medians_m(nominal_cell(**{"lights.headlight": 0.8})) == pytest.approx((0.004, 0.003))
    # the factor's other side is scaled by that side's own edge
    assert MODEL.medians_m(nominal_cell(**{"lights.headlight": 1.3})) == pytest.approx((0.004, 0.006))


def test_the_factor_that_costs_most_sets_each_median_and_no_factor_is_taken_to_help():
    both = nominal_cell(**{"lights.headlight": 0.6, "colours.table": 0.25})
    assert MODEL.medians_m(both) == pytest.approx((0.008, 0.012))  # block: the light; goal: the table
    assert MODEL.medians_m(nominal_cell(**{"colours.table": 0.25}))[0] == pytest.approx(0.002)


def test_the_model_travels_as_plain_data():
    data = MODEL.to_dict()
    assert EstimateErrorModel.from_dict(data) == MODEL
    assert EstimateErrorModel.from_dict({"block_mm": 1.0, "goal_mm": 2.0}) == EstimateErrorModel(1.0, 2.0)


@pytest.mark.parametrize("headlight, block_median", [(1.0, 0.002), (0.6, 0.008)])
def test_each_episode_draws_its_estimates_with_its_own_cells_error(headlight, block_median):
    cells = CellRanges().with_factors({"lights.headlight": (headlight, headlight)})
    env = EstimatedTaskState(make_env("push", cells=cells), MODEL)
    errors = []
    for episode in range(40):
        obs, info = env.reset(seed=episode)
        assert info["cell"]["lights.headlight"] == headlight
        for _ in range(3):
            errors.append(obs["task_state_estimate"] - obs["proprio"][TASK_STATE_SLICE])
            obs, *_ = env.step(np.zeros(3, np.float32))
    radii = np.linalg.norm(np.array(errors)[:, :2], axis=1)
    assert np.median(radii) == pytest.approx(block_median, rel=0.25)
    sigma_goal = np.std(np.array(errors)[:, 2:])
    assert sigma_goal == pytest.approx(0.003 / MEDIAN_RADIUS_PER_SIGMA, rel=0.25)
