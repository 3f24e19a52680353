"""The `diffpolicy` command as a new user meets it: defaults in --help, one clear line for each mistake (exit 2,
no traceback, no empty run folder), a table for people and JSON for machines."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diffpolicy_ros.nodes.graph import ARGUMENTS

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DIFFPOLICY_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "diffpolicy_ros.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


@pytest.mark.quick
def test_help_shows_defaults_choices_and_every_graph_argument():
    ev = cli("eval", "--help").stdout
    assert "(default: 50)" in ev and "(default: 10000)" in ev and "--threads" in ev and "--video" in ev
    learn = cli("bench", "learn", "--help").stdout
    assert "diffusion,diffusion_ddim10,diffusion_ddim20,few_step,gaussian" in learn  # choices shown
    assert "{bc,weak}" in learn
    launch = cli("launch", "--help").stdout
    for graph, args in ARGUMENTS.items():
        assert f"  {graph}:" in launch
        assert all(f"{name}:=" in launch for name in args)


def subcommand_parsers(parser: argparse.ArgumentParser, name: str = "diffpolicy"):
    """Every (sub)command's parser, walked from the top: a new subcommand is covered without editing a test."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, sub_parser in action.choices.items():
                yield from subcommand_parsers(sub_parser, f"{name} {sub}")


@pytest.mark.quick
def test_every_option_of_every_command_shows_its_default_in_help():
    from diffpolicy_ros.cli import build_parser

    missing = []
    for name, parser in subcommand_parsers(build_parser()):
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            continue  # a group of subcommands: its subcommands have the options
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.required:
                continue  # flags are off unless given; a required option has no default
            if "default:" not in parser._get_formatter()._format_action(action):  # what --help prints for it
                missing.append(f"{name} {action.option_strings[-1]}")
    assert not missing, missing
    assert "--seed SEED episode i uses seed S + i (default: 0)" in " ".join(cli("demo", "--help").stdout.split())


@pytest.fixture
def tiny_checkpoint(tmp_path) -> Path:
    """An untrained small state policy recorded as trained on push."""
    from diffpolicy_ros.models.checkpoint import CheckpointMeta, make_payload, save_checkpoint
    from diffpolicy_ros.models.factory import build_policy, policy_spec

    spec = policy_spec({"kind": "diffusion", "diffusion": {"unet": {"down_dims": [16, 32, 64]}}})
    meta = CheckpointMeta(source="test", task="push", obs_mode="state")
    return save_checkpoint(tmp_path / "push.pt", make_payload(spec, build_policy(spec), meta))


def one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and all(f in lines[0] for f in fragments), result.stderr


@pytest.mark.quick
def test_user_mistakes_end_in_one_line_and_leave_no_run_folder(tmp_path, tiny_checkpoint):
    misspelt = tmp_path / "bad.yaml"
    misspelt.write_text("policy:\n  kind: diffusion\n  diffusoin: {}\n")
    demos = tmp_path / "demos.npz"
    assert cli("demo", "--episodes", "1", "--out", demos, "--json").returncode == 0
    missing = cli("train-bc", "--data", demos, "--config", "config/policy/nope.yaml", "--run-dir", tmp_path / "r")
    one_error_line(missing, "--config", "no such file", "nope.yaml")
    typo = cli("train-bc", "--data", demos, "--config", misspelt, "--iters", "1", "--run-dir", tmp_path / "r")
    one_error_line(typo, "diffusoin")
    assert not (tmp_path / "r").exists()  # the failed runs left nothing behind, not even runs/latest

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(tiny_checkpoint.read_bytes()[:2000])
    bad = cli("eval", "--checkpoint", corrupt, "--episodes", "1")
    one_error_line(bad, "corrupt or not a checkpoint")
    assert "weights_only" not in bad.stderr and "allow_pickle" not in bad.stderr
    wrong_task = cli("eval", "--checkpoint", tiny_checkpoint, "--episodes", "1", "--task", "push_two_goals")
    one_error_line(wrong_task, "trained on 'push'", "--any-task")


@pytest.mark.quick
def test_table_for_people_json_for_machines():
    import contextlib
    import io
    import json

    from diffpolicy_ros.cli import _print_json_or_table

    result = {"success_rate": 0.8512345, "success_ci95": (0.71, 0.9), "by": {"left": 3}, "steps": list(range(16))}
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        _print_json_or_table(result, as_json=False)
    assert "success_rate  0.8512" in table.getvalue() and "by.left" in table.getvalue()
    assert "16 values" in table.getvalue() and "{" not in table.getvalue()
    machine = io.StringIO()
    with contextlib.redirect_stdout(machine):
        _print_json_or_table(result, as_json=True)
    assert json.loads(machine.getvalue())["steps"] == list(range(16))


@pytest.mark.quick
def test_typed_mistakes_name_the_argument_before_anything_starts(tmp_path):
    unread = tmp_path / "d.npz"
    unread.write_bytes(b"not read: the config is refused first")
    for args, fragments in [
        (("launch", "real_arm", "dry_run:=ture"), ("dry_run:='ture'", "true or false")),
        (("launch", "real_arm", "max_speed:=fast"), ("max_speed:='fast'", "a number > 0")),
        (("launch", "real_arm", "hil:=maybe"), ("hil:='maybe'",)),
        (("train-bc", "--confg", "x.yaml", "--data", "d.npz"), ("--confg", "did you mean --config")),
        (("eval-bag", "bag", "--checkpoint", "c.pt", "--sample", "3"), ("--sample",)),
        (("eval", "--checkpoint", "c.pt", "--episode", "3"), ("--episode",)),
        (("train-bc", "--data", tmp_path / "missing.npz", "--config", "config/policy/diffusion_state.yaml",
          "--run-dir", tmp_path), ("--data", "missing.npz", "no such file")),
        (("train-bc", "--data", unread, "--config", "config/policy/diffusion_state.yaml",
          "--eval-every", "0", "--run-dir", tmp_path), ("BCConfig.eval_every = 0",)),  # before the data is read
    ]:  # fmt: skip
        result = cli(*args)
        assert "[launch]" not in result.stdout  # refused before any node started
        assert "Errno" not in result.stderr
        one_error_line(result, *fragments)


@pytest.mark.quick
def test_a_bug_keeps_its_traceback_only_user_errors_are_one_line(monkeypatch, capsys):
    from diffpolicy_ros import cli as cli_module
    from diffpolicy_ros.errors import UserError

    def bug(args):
        raise ValueError("an internal shape mismatch")

    def mistake(args):
        raise UserError("bag.mcap: no commands on /arm/cmd_twist")

    parser_args = ["plot", str(REPO / "config")]  # an existing folder: the command itself runs
    monkeypatch.setattr(cli_module, "build_parser", _parser_with(cli_module, bug))
    with pytest.raises(ValueError, match="internal shape mismatch"):
        cli_module.main(parser_args)
    monkeypatch.setattr(cli_module, "build_parser", _parser_with(cli_module, mistake))
    assert cli_module.main(parser_args) == 2
    assert capsys.readouterr().err.strip() == "diffpolicy plot: error: bag.mcap: no commands on /arm/cmd_twist"


def _parser_with(cli_module, func):
    original = cli_module.build_parser

    def build():
        parser = original()
        parser._subparsers._group_actions[0].choices["plot"].set_defaults(func=func)
        return parser

    return build


@pytest.mark.quick
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_training_run_stopped_by_a_signal_ends_quietly_with_its_workers(tmp_path, sig, code):
    """SIGTERM (a scheduler, `timeout`, `docker stop`) stops `train-ppo` as Ctrl-C does: its MuJoCo workers end
    with it, no traceback, the shell's exit code for that signal."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffpolicy_ros.cli", "train-ppo", "--config", "config/train/push.yaml",
         "--n-envs", "2", "--run-dir", str(tmp_path / "run"), "--total-env-steps", "1000000"],
        stderr=subprocess.PIPE, text=True, cwd=REPO, env=env, start_new_session=True,
    )  # fmt: skip
    seen = []
    for line in proc.stderr:  # the workers run once the first iteration is reported
        seen.append(line)
        if "iter " in line or "env_steps" in line:
            break
    workers = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    workers = [pid for pid in workers if pid != str(proc.pid)]  # its session: workers, forkserver, tracker
    assert workers, "".join(seen)
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=30) == code, rest
    assert "Traceback" not in rest and "Error" not in rest, rest
    deadline = time.monotonic() + 10  # the forkserver and the resource tracker see their parent gone
    while time.monotonic() < deadline and any(alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not [pid for pid in workers if alive(pid)], "left behind"


def alive(pid: str) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
