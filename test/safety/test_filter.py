"""Property-based tests of the safety filter core over random and adversarial command, pose and timing
streams: no output above the speed cap or the acceleration cap, no command that leaves the box, zero within
one tick of a deadman expiry, e-stop latched until reset, nothing non-finite ever out."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffpolicy_ros.safety.filter import SafetyFilter, SafetyLimits

LOW, HIGH = (0.2, -0.3, 0.03), (0.8, 0.3, 0.3)
DT = 0.1

finite = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False)
anything = st.one_of(finite, st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.floats(-1e9, 1e9))
plausible = st.tuples(*[st.floats(-0.6, 0.6)] * 3)  # what a policy sends, often over the cap
vec = st.tuples(anything, anything, anything)
inside = st.tuples(st.floats(0.2, 0.8), st.floats(-0.3, 0.3), st.floats(0.03, 0.3))
position = st.tuples(st.floats(0.0, 1.0), st.floats(-0.5, 0.5), st.floats(-0.05, 0.4))

# One event per tick: a command and/or a pose arrive (or not), with a timing jitter, a frame, a stamp offset.
# Mostly plausible streams (so the filter is active and its caps are exercised), with adversarial values mixed in.
event = st.fixed_dictionaries(
    {
        "command": st.one_of(plausible, plausible, plausible, st.none(), vec),
        "pose": st.one_of(inside, inside, position, st.none(), vec),
        "gap": st.one_of(st.just(DT), st.just(DT), st.floats(0.001, 0.15), st.floats(0.001, 0.6)),
        "frame": st.sampled_from(["world"] * 8 + ["base_link", ""]),
        "stamp_offset": st.sampled_from([0.0] * 8 + [-0.05, 0.2, 5.0, -math.inf, math.nan]),
        "estop": st.sampled_from([None] * 20 + [True, False]),
        "reset": st.sampled_from([False] * 10 + [True]),
    }
)


def limits(**overrides) -> SafetyLimits:
    return SafetyLimits(box_low=LOW, box_high=HIGH, max_speed=0.25, max_accel=1.0, **overrides)


def run(events, lim: SafetyLimits, start_pose=(0.5, 0.0, 0.1)):
    """Drive the filter with ``events``; yields (event, result, pose, dt, previous output) per tick."""
    f = SafetyFilter(lim)
    now = 100.0
    pose = np.array(start_pose)
    f.offer_pose(pose, now, "world", now, now)
    prev, first = np.zeros(3), True
    for e in events:
        if e["estop"] is not None:
            f.set_estop(e["estop"])
        if e["reset"]:
            f.reset()
        stamp = now + e["stamp_offset"]
        if e["command"] is not None:
            f.offer_command(e["command"], stamp, e["frame"], now, now)
        if e["pose"] is not None and f.offer_pose(e["pose"], stamp, e["frame"], now, now) == "":
            pose = np.asarray(e["pose"], float)
        now += e["gap"]
        result = f.tick(now)
        # the box is kept against the filter's estimate of the tool: the newest pose plus what was sent since
        # (an arm that follows the output: test_an_arm_that_follows_the_output_stays_in_the_box_...)
        estimate = f.position.copy() if f.pose is not None else pose.copy()
        yield f, e, result, estimate, DT if first else min(e["gap"], DT), prev
        prev, first = result.last_output if hasattr(result, "last_output") else f.last_output.copy(), False


@pytest.mark.quick
@settings(max_examples=300, deadline=None)
@given(st.lists(event, min_size=1, max_size=60))
def test_output_is_finite_capped_and_never_leaves_the_box(events):
    lim = limits()
    for _filter, _, result, pose, dt, prev in run(events, lim):
        out = result.command
        assert out.shape == (3,) and np.all(np.isfinite(out)) and np.all(np.isfinite(result.would_send))
        assert np.linalg.norm(out) <= lim.max_speed + 1e-9
        if np.any(out):
            # the command, held for the lookahead, keeps the tool in the box (or moves it back toward it)
            nxt = pose + out * lim.box_lookahead_s
            low, high = np.array(LOW), np.array(HIGH)
            assert np.all((nxt <= high + 1e-9) | (out <= 0)) and np.all((nxt >= low - 1e-9) | (out >= 0))
            if "box" not in result.limited:  # braking for the box may exceed the acceleration cap
                assert np.linalg.norm(out - prev) <= lim.max_accel * dt + 1e-9


@pytest.mark.quick
@settings(max_examples=200, deadline=None)
@given(st.lists(event, min_size=1, max_size=40), st.floats(0.26, 3.0))
def test_zero_within_one_tick_of_a_deadman_expiry(events, silence):
    """After the last valid command, the first tick later than command_timeout_s sends zero."""
    lim = limits()
    f = None
    for step in run(events, lim):
        f = step[0]
    last = f.command.received if f.command is not None else None
    if last is None:
        return
    result = f.tick(last + silence)  # no command for longer than the timeout
    assert not np.any(result.command) and result.state in ("waiting", "estop", "timeout")


@pytest.mark.quick
@settings(max_examples=200, deadline=None)
@given(st.lists(event, min_size=1, max_size=40))
def test_estop_latches_until_a_reset_with_the_button_released(events):
    lim = limits()
    f = SafetyFilter(lim)
    now = 0.0
    f.offer_pose((0.5, 0.0, 0.1), now, "world", now, now)
    f.set_estop(True)
    f.set_estop(False)  # released, but the latch holds
    for e in events:
        f.offer_command(e["command"] or (0.1, 0.0, 0.0), now, "world", now, now)
        f.offer_pose((0.5, 0.0, 0.1), now, "world", now, now)
        now += DT
        result = f.tick(now)
        assert result.state == "estop" and not np.any(result.command)
    assert f.reset()[0]
    f.offer_command((0.1, 0.0, 0.0), now, "world", now, now)
    f.offer_pose((0.5, 0.0, 0.1), now, "world", now, now)
    assert f.tick(now + DT).state == "active"


@pytest.mark.quick
def test_reset_is_refused_while_the_estop_or_a_zero_speed_scaling_holds():
    f = SafetyFilter(limits())
    f.set_estop(True)
    ok, reason = f.reset()
    assert not ok and "e-stop" in reason
    f.set_estop(False)
    f.set_speed_scaling(0.0)
    ok, reason = f.reset()
    assert not ok and "speed scaling" in reason
    f.set_speed_scaling(1.0)
    assert f.reset()[0] and f.latched is None


def drive(f: SafetyFilter, velocity, ticks: int, t0: float = 0.0, pose=(0.5, 0.0, 0.1)) -> list:
    out, now = [], t0
    for _ in range(ticks):
        f.offer_command(velocity, now, "world", now, now)
        f.offer_pose(pose, now, "world", now, now)
        now += DT
        out.append(f.tick(now))
    return out


@pytest.mark.quick
def test_speed_cap_keeps_the_direction_and_acceleration_ramps():
    f = SafetyFilter(limits())
    results = drive(f, (3.0, 4.0, 0.0), 10)
    assert np.allclose(results[0].command, [0.06, 0.08, 0.0])  # 0.1 m/s change per tick at 1 m/s^2
    final = results[-1].command
    assert np.isclose(np.linalg.norm(final), 0.25) and np.isclose(final[1] / final[0], 4 / 3)


@pytest.mark.quick
def test_refuses_to_start_outside_the_box_and_brakes_at_a_face():
    f = SafetyFilter(limits())
    assert drive(f, (0.1, 0.0, 0.0), 3, pose=(0.9, 0.0, 0.1))[-1].state == "waiting"
    f = SafetyFilter(limits())
    drive(f, (0.2, 0.0, 0.0), 5)
    at_face = drive(f, (0.2, 0.0, 0.0), 1, t0=1.0, pose=(0.79, 0.0, 0.1))[0]
    assert at_face.command[0] <= (0.8 - 0.79) / 0.1 + 1e-9 and "box" in at_face.limited


@pytest.mark.quick
def test_bad_inputs_are_rejected_and_counted():
    f = SafetyFilter(limits())
    assert "non-finite" in f.offer_command((math.nan, 0, 0), 0.0, "world", 0.0, 0.0)
    assert "frame_id" in f.offer_command((0.1, 0, 0), 0.0, "tool0", 0.0, 0.0)
    assert "future" in f.offer_command((0.1, 0, 0), 1.0, "world", 0.0, 0.0)
    assert "3 values" in f.offer_command((0.1, 0), 0.0, "world", 0.0, 0.0)
    c = f.counts
    assert (c["rejected_nonfinite"], c["rejected_frame"], c["rejected_future"], c["rejected_shape"]) == (1, 1, 1, 1)
    assert f.command is None


@pytest.mark.quick
def test_dry_run_reports_what_it_would_send_and_sends_zero():
    f = SafetyFilter(limits(dry_run=True))
    result = drive(f, (0.05, 0.0, 0.0), 3)[-1]
    assert result.state == "dry_run" and not np.any(result.command) and result.would_send[0] == pytest.approx(0.05)


@pytest.mark.quick
def test_maximum_run_time_latches_a_timeout():
    f = SafetyFilter(limits(max_run_time_s=0.5))
    results = drive(f, (0.05, 0.0, 0.0), 10)
    assert results[0].state == "active" and results[-1].state == "timeout" and not np.any(results[-1].command)


@pytest.mark.quick
@pytest.mark.parametrize(
    "bad",
    [
        {"max_speed": 0.0},
        {"max_accel": math.nan},
        {"box_low": (0, 0, 0), "box_high": None},
        {"box_high": (0.1, 0.5, 0.5)},
    ],
)
def test_limits_that_cannot_protect_are_errors(bad):
    kwargs = {"box_low": LOW, "box_high": HIGH, **bad}
    with pytest.raises(ValueError):
        SafetyLimits(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(plausible, st.booleans(), st.sampled_from([DT / 3] * 3 + [0.001, 0.05, DT])), min_size=1, max_size=80
    ),
    inside,
)
@pytest.mark.quick
def test_an_arm_that_follows_the_output_stays_in_the_box_when_poses_arrive_late_or_not_at_all(stream, start):
    """The box is checked against the newest pose plus the commands sent since (dead reckoning): a pose that
    is a few ticks old (within the deadman) must not let the tool cross a face."""
    lim = limits(tick_period_s=DT / 3)
    f = SafetyFilter(lim)
    now, pose, out = 0.0, np.array(start), np.zeros(3)
    low, high = np.array(LOW), np.array(HIGH)
    for command, pose_arrives, gap in stream:
        pose = pose + out * gap  # the arm follows the last output until the next tick (gaps <= lookahead)
        assert np.all(pose <= high + 1e-9) and np.all(pose >= low - 1e-9), pose
        now += gap
        f.offer_command(command, now, "world", now, now)
        if pose_arrives:
            f.offer_pose(pose, now, "world", now, now)
        out = f.tick(now).command


@pytest.mark.quick
def test_a_pose_that_teleports_is_a_glitch_until_the_pose_deadman_expires():
    f = SafetyFilter(limits())
    assert f.offer_pose((0.5, 0.0, 0.1), 0.0, "world", 0.0, 0.0) == ""
    assert "jumped" in f.offer_pose((-1.4, 1.1, 0.3), 0.01, "world", 0.01, 0.01)  # 2.3 m in 10 ms
    assert f.offer_pose((0.505, 0.0, 0.1), 0.02, "world", 0.02, 0.02) == ""  # 5 mm in 20 ms: a motion
    assert f.counts["rejected_jump"] == 1
    # the deadman stops the arm (no valid pose for longer than pose_timeout_s); then a new pose is taken as is
    assert f.offer_pose((0.3, 0.2, 0.1), 0.4, "world", 0.4, 0.4) == ""


@pytest.mark.quick
def test_bench_safety_offline_streams_break_no_limit():
    from diffpolicy_ros.bench.safety import bench_safety

    r = bench_safety(streams=20, ticks=300, hil=False)
    assert r["nonfinite_out"] == 0 and r["box_violations"] == 0 and r["deadman_stops"] > 0
    assert r["max_speed"] <= r["max_speed_cap"] + 1e-9 and r["max_accel"] <= r["max_accel_cap"] + 1e-9
    assert r["deadman_stop_ms_p99"] <= 100.0  # the first tick after expiry (ticks here jitter up to 100 ms)
