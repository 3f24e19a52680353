"""Values a user types are strict: a boolean is true/false (1/0, yes/no) and nothing else, numbers keep their
domain, choices are listed — in graph arguments, argument files and the converters the nodes share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diffpolicy_ros.arguments import ArgumentError, parse_bool, parse_number
from diffpolicy_ros.errors import UserError
from diffpolicy_ros.nodes.graph import ARGUMENTS, KINDS, graph, resolve_arguments

pytestmark = pytest.mark.quick
BOX = {"box_low": "[0.3, -0.2, 0.05]", "box_high": "[0.7, 0.2, 0.3]"}


@pytest.mark.parametrize("text", ["true", "True", "TRUE", "1", "yes", "Yes", True, 1])
def test_true_forms(text):
    assert parse_bool(text, "dry_run") is True


@pytest.mark.parametrize("text", ["false", "False", "0", "no", "NO", False, 0])
def test_false_forms(text):
    assert parse_bool(text, "dry_run") is False


@given(st.text(max_size=8).filter(lambda t: t.strip().lower() not in ("true", "1", "yes", "false", "0", "no")))
def test_anything_else_is_an_error_never_false(text):
    with pytest.raises(ArgumentError, match="argument dry_run"):
        parse_bool(text, "dry_run")


@pytest.mark.parametrize(
    ("graph_name", "overrides", "fragment"),
    [
        ("real_arm", {"dry_run": "ture"}, "dry_run:='ture': expected true or false"),
        ("real_arm", {"hil": "maybe"}, "hil:='maybe': expected true or false"),
        ("real_arm", {"max_speed": "-1"}, "max_speed:='-1': expected a number > 0"),
        ("real_arm", {"max_speed": "fast"}, "max_speed:='fast': expected a number > 0"),
        ("real_arm", {"max_accel": "nan"}, "max_accel:='nan'"),
        ("real_arm", {"hil_task_state": "2"}, "hil_task_state:='2'"),
        ("real_arm", {"device": "gpu"}, "device:='gpu': expected auto, cpu"),
        ("sim_train", {"trainer": "off?"}, "trainer:='off?'"),
        ("sim_train", {"iters": "1.5"}, "iters:='1.5': expected an integer >= 1"),
        ("sim_train", {"task": "pushh"}, "task:='pushh': expected one of push, push_two_goals, point_mass"),
        ("sim_train", {"seed": "-3"}, "seed:='-3'"),
        ("replay_eval", {"bag": "b", "checkpoint": "c", "rate": "0"}, "rate:='0': expected a number > 0"),
        ("real_arm", {"box_low": "[0.7, 0.3, 0.3]", "box_high": "[0.3, -0.3, 0.05]"}, "box_low must be below"),
        ("real_arm", {"min_success": "1.5"}, "min_success:='1.5': expected a number in"),
        ("real_arm", {"allow_unproven": "sure"}, "allow_unproven:='sure'"),
    ],
)
def test_a_malformed_argument_is_an_error_naming_it(graph_name, overrides, fragment):
    with pytest.raises(ArgumentError, match=fragment.replace("?", r"\?")):
        graph(graph_name, {**(BOX if graph_name == "real_arm" else {}), **overrides})


def test_every_argument_has_a_kind_and_its_default_is_of_that_kind():
    names = {name for arguments in ARGUMENTS.values() for name in arguments}
    assert names == set(KINDS)
    for graph_name in ("sim_train", "real_arm"):
        resolve_arguments(graph_name)  # every default converts
    values = resolve_arguments("real_arm", {"dry_run": "no", "hil": "1", "max_speed": "0.05"})
    assert values["dry_run"] is False and values["hil"] is True and values["max_speed"] == 0.05


def test_an_argument_file_is_as_strict_as_the_command_line(tmp_path):
    cell = tmp_path / "cell.yaml"
    cell.write_text("dry_run: ture\n")  # YAML gives the string 'ture'
    with pytest.raises(ArgumentError, match="dry_run:='ture'"):
        graph("real_arm", {"config": str(cell), **BOX})
    cell.write_text("dry_run: false\nmax_speed: 0.05\n")
    flt = {n.name: n for n in graph("real_arm", {"config": str(cell), **BOX})}["safety_filter"].parameters
    assert flt["dry_run"] is False and flt["max_speed"] == 0.05
    cell.write_text("dry_run: [true\n")
    with pytest.raises(UserError, match="argument config:=.*not valid YAML"):
        graph("real_arm", {"config": str(cell), **BOX})


def test_dry_run_typo_never_reaches_the_filter_as_false():
    """The defect this guards: an unknown string used to mean False, so the arm moved."""
    for typo in ("ture", "treu", "y", "on?", "tru"):
        with pytest.raises(UserError):
            graph("real_arm", {"dry_run": typo, **BOX})
    assert {n.name: n for n in graph("real_arm", BOX)}["safety_filter"].parameters["dry_run"] is True


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_positive_number_is_finite_and_above_zero(value):
    try:
        out = parse_number(str(value), "max_speed", low=0, low_open=True)
    except ArgumentError:
        assert not (value > 0 and value < float("inf"))
    else:
        assert 0 < out < float("inf")
