"""Every path a user gives, found by walking what takes one — each `diffpolicy` option and positional (through
its argparse type), each graph argument that names a file, each node parameter that does — and fed each kind of
bad file: missing, a folder for a file (or the reverse), empty, not parseable, parseable but wrong (an unknown
key, a value of the wrong type, a required key missing). Each must end in exit 2 (a node: its ParameterError)
and one line naming the file; none in a traceback. A new option of a known kind is covered without editing this
test; a new kind must say here what a wrong file of it looks like."""

from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from diffpolicy_ros import user_files as U
from diffpolicy_ros.errors import UserError

REPO = Path(__file__).resolve().parents[1]
GARBAGE = b"\x89PNG\r\n\x1a\n\x00\xff\xfe garbage: [not {closed"


def _text(text: str) -> Callable[[Path], Path]:
    def write(path: Path) -> Path:
        path.write_text(text)
        return path

    return write


def _torch_file(path: Path) -> Path:
    import torch

    torch.save({"weights": torch.zeros(3)}, path)
    return path


def _npz_without_episodes(path: Path) -> Path:
    with open(path, "wb") as f:  # np.savez would add .npz to a name without it
        np.savez(f, action=np.zeros((4, 3)))
    return path


def _folder_with(name: str, content: bytes | str) -> Callable[[Path], Path]:
    def write(path: Path) -> Path:
        path.mkdir()
        (path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return write


# kind -> what a file of it looks like when it parses but is wrong: (what is wrong, how to write one)
WRONG: dict[str, list[tuple[str, Callable[[Path], Path]]]] = {
    U.TASK_CONFIG.name: [
        ("unknown setting", _text("task: push\nenv: {max_sped: 0.2}\n")),
        ("wrong type", _text("task: push\nenv: {max_speed: fast}\n")),
        ("no task", _text("env: {max_speed: 0.2}\n")),
        ("unknown task", _text("task: stack\n")),
        ("a list", _text("- task\n- push\n")),
    ],
    U.POLICY_CONFIG.name: [
        ("unknown key", _text("policy:\n  kind: diffusion\n  diffusoin: {}\n")),
        ("wrong type", _text("train: {iters: many}\n")),
        ("a number for a section", _text("train: 5\n")),
        ("unknown policy kind", _text("policy: {kind: transformer}\n")),
        ("base is not a file", _text("base: 3\n")),
    ],
    U.TRAIN_CONFIG.name: [
        ("no task", _text("train: {seed: 1}\n")),
        ("wrong type", _text("task: push\ntrain: {gamma: high}\n")),
        ("unknown env setting", _text("task: push\nenv: {max_sped: 1.0}\n")),
        ("unknown task", _text("task: stack\n")),
    ],
    U.DEPLOYMENT.name: [
        ("unknown argument", _text("max_sped: 0.1\n")),
        ("wrong type", _text("max_speed: fast\n")),
    ],
    U.TOPIC_MAP.name: [
        ("unknown role", _text("camera: /camera/image_raw\n")),
        ("not a topic", _text("command: 5\n")),
    ],
    U.CHECKPOINT.name: [("another torch file", _torch_file)],
    U.DATASET.name: [("an npz without episodes", _npz_without_episodes)],
    U.BAG.name: [
        ("a folder without a bag", _folder_with("notes.txt", "not a bag")),
        ("metadata that is not a bag's", _folder_with("metadata.yaml", "rosbag2_bagfile_information: 5\n")),
    ],
    U.RUN_DIR.name: [
        ("no metrics", _folder_with("notes.txt", "not a run")),
        ("metrics without rows", _folder_with("metrics.csv", "iter,loss\n")),
    ],
    U.CELL_FILE.name: [
        ("unknown factor", _text("physics: {block_mas: [0.5, 2.0]}\n")),
        ("unknown camera", _text("cameras: {front: {shift_m: [0, 0.02]}}\n")),
        ("not a range", _text("lights: {key: 1.5}\n")),
        ("low above high", _text("physics: {block_mass: [2.0, 0.5]}\n")),
        ("out of bounds", _text("cameras: {top: {turn_deg: [0, 90]}}\n")),
    ],
    U.OPERATOR_FILE.name: [
        ("unknown field", _text("overshot: 0.5\n")),
        ("a rate above 1", _text("hesitation_rate: 1.5\n")),
        ("wrong type", _text("jitter_std: shaky\n")),
    ],
    U.CAMERA_CALIBRATION.name: [
        ("unknown key", _text("frame: world\n")),
        ("a camera missing", _text("cameras: {top: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}}\n")),
        ("a short position", _text(
            "cameras:\n  top: {position: [0, 1], orientation: [1, 0, 0, 0]}\n"
            "  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n")),
        ("a lens without its size", _text(
            "cameras:\n  top: {position: [0, 0, 1], orientation: [1, 0, 0, 0], camera_info: {k: [1, 0, 0, 0, 1, 0, "
            "0, 0, 1]}}\n  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n")),
        ("not a unit quaternion", _text(
            "cameras:\n  top: {position: [0, 0, 1], orientation: [1, 1, 0, 0]}\n"
            "  side: {position: [0, 0, 1], orientation: [1, 0, 0, 0]}\n")),
    ],
}


def bad_inputs(kind: U.FileKind, tmp: Path) -> Iterator[tuple[str, Path]]:
    """(what is wrong, a path to it) for each bad kind of input of ``kind``."""
    yield "missing", tmp / "missing" / "nothing.here"
    if kind.form == "folder":
        yield "a file for a folder", _text("a file\n")(tmp / "a_file")
        empty = tmp / "empty_folder"
        empty.mkdir()
        yield "an empty folder", empty
        yield "unparseable", _folder_with("metrics.csv", GARBAGE)(tmp / "garbage_run")
    else:
        yield "a folder for a file", _folder_with("notes.txt", "not it")(tmp / "a_folder")
        (tmp / "empty.yaml").write_bytes(b"")
        yield "empty", tmp / "empty.yaml"
        (tmp / "comments.yaml").write_text("# nothing but a comment\n")
        yield "only comments", tmp / "comments.yaml"
        (tmp / "garbage.mcap").write_bytes(GARBAGE)
        yield "unparseable", tmp / "garbage.mcap"
        (tmp / "bad_yaml.yaml").write_text("task: push\nenv: [1, 2\n")
        yield "bad YAML", tmp / "bad_yaml.yaml"
    for i, (what, write) in enumerate(WRONG[kind.name]):
        yield what, write(tmp / f"wrong_{i}.file")


def bad_outputs(form: str, tmp: Path) -> Iterator[tuple[str, Path]]:
    a_file = _text("a file\n")(tmp / "a_file")
    yield "under a file", a_file / "inside"
    if form in ("folder", "new folder"):
        yield "a file for a folder", a_file
    if form == "file":
        folder = tmp / "a_folder"
        folder.mkdir()
        yield "a folder for a file", folder
    if form == "new folder":
        exists = tmp / "exists"
        exists.mkdir()
        yield "a folder that exists", exists


# -- what a good input of each kind is (for the arguments besides the one under test) --------------------------
@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict[str, Path]:
    from diffpolicy_ros.bags.record import write_demo_bag
    from diffpolicy_ros.models.checkpoint import CheckpointMeta, make_payload, save_checkpoint
    from diffpolicy_ros.models.factory import build_policy, policy_spec
    from diffpolicy_ros.sim.demos import run_demos

    tmp = tmp_path_factory.mktemp("good")
    spec = policy_spec({"kind": "diffusion", "diffusion": {"unet": {"down_dims": [16, 32, 64]}}})
    meta = CheckpointMeta(source="test", task="push", obs_mode="state")
    checkpoint = save_checkpoint(tmp / "policy.pt", make_payload(spec, build_policy(spec), meta))
    run_demos(task="push", episodes=1, seed=0, obs_mode="state", out=tmp / "demos.npz", progress=False)
    write_demo_bag(tmp / "bag", "push", 1, 0, "mcap", 9, False)
    run = tmp / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("iter,loss\n1,0.5\n2,0.4\n")
    cell = tmp / "cell.yaml"
    cell.write_text("box_low: [0.2, -0.3, 0.0]\nbox_high: [0.8, 0.3, 0.4]\n")
    operator = tmp / "operator.yaml"
    operator.write_text("overshoot: 0.5\njitter_std: 0.01\n")
    return {
        U.TASK_CONFIG.name: REPO / "config/sim/push.yaml",
        U.POLICY_CONFIG.name: REPO / "config/policy/diffusion_state_small.yaml",
        U.TRAIN_CONFIG.name: REPO / "config/train/push_small.yaml",
        U.DEPLOYMENT.name: cell,
        U.TOPIC_MAP.name: REPO / "config/topic_maps/ur_cell.yaml",
        U.CHECKPOINT.name: checkpoint,
        U.DATASET.name: tmp / "demos.npz",
        U.BAG.name: tmp / "bag",
        U.RUN_DIR.name: run,
        U.CELL_FILE.name: REPO / "config/cells/train.yaml",
        U.CAMERA_CALIBRATION.name: REPO / "config/cells/sim_cameras.yaml",
        U.OPERATOR_FILE.name: operator,
    }


# -- the CLI ------------------------------------------------------------------------------------------------
def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple, list]]:
    """(the words naming a command, its actions), every leaf command of the parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser._actions
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, (*prefix, name))


def path_actions(actions: list) -> list[argparse.Action]:
    return [a for a in actions if isinstance(a.type, (U.InputPath, U.OutputPath))]


def argv_for(words: tuple, actions: list, tested: argparse.Action, value: Path, good: dict, tmp: Path) -> list[str]:
    """The command with ``value`` for ``tested``, good values for what else it requires, and small counts."""
    argv = [*words]
    for action in actions:
        given = value if action is tested else None
        needed = action.required or not action.option_strings or action.default is not None  # a default is checked
        if given is None and needed and isinstance(action.type, U.InputPath):
            given = good[action.type.kind.name]
        elif given is None and not action.option_strings and isinstance(action.type, U.OutputPath):
            given = tmp / "out_new"
        if given is None:
            continue
        argv += [str(given)] if not action.option_strings else [action.option_strings[0], str(given)]
    small = {"--episodes": "1", "--iters": "1", "--duration": "1", "--steps": "2", "--total-env-steps": "8"}
    known = {s for a in actions for s in a.option_strings}
    for option, count in small.items():
        if option in known and option not in argv:
            argv += [option, count]
    return argv


@contextlib.contextmanager
def deadline(seconds: int, what: str):
    """A bad input must be refused before any work: one that is not would run on; fail instead of waiting."""

    def expired(signum, frame):
        raise TimeoutError(f"{what}: still running after {seconds} s (the bad input was not refused)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    from diffpolicy_ros import cli

    capsys.readouterr()
    with deadline(60, " ".join(argv)):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's error: exit 2 after its usage line
            code = exc.code
        except Exception as exc:  # what `diffpolicy` would print as a traceback
            return "traceback", f"Traceback: {type(exc).__name__}: {exc}"
    return code, capsys.readouterr().err


# the options that take a word, not a path; a new untyped option must be added here or typed
NOT_PATHS = {
    "task", "storage", "device", "deploy_args", "topics", "command_topic", "graph", "arguments", "backend",
    "tasks", "variants", "start", "overrides",
}


@pytest.mark.quick
def test_every_option_that_takes_a_string_is_a_typed_path_or_a_known_word():
    """The walk below covers a path option by its type: an option added as a bare string escapes it."""
    from diffpolicy_ros.cli import build_parser

    untyped = set()
    for words, actions in commands(build_parser()):
        for action in actions:
            if action.nargs == 0 or action.type in (int, float) or isinstance(action.type, (U.InputPath, U.OutputPath)):
                continue
            if action.dest not in NOT_PATHS:
                untyped.add(f"{' '.join(words)} {action.option_strings or action.dest}")
    assert not untyped, f"options taking a string that is neither a typed path nor a known word: {sorted(untyped)}"


@pytest.mark.quick
def test_every_path_option_refuses_every_bad_file_in_one_line(good, tmp_path, capsys, monkeypatch):
    from diffpolicy_ros.cli import build_parser

    monkeypatch.delenv("DIFFPOLICY_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)  # a command that wrongly ran would write under here, not into the checkout
    failures, pairs, options, kinds = [], 0, 0, set()
    for words, actions in commands(build_parser()):
        for tested in path_actions(actions):
            options += 1
            case_dir = tmp_path / "_".join((*words, tested.dest))
            case_dir.mkdir()
            if isinstance(tested.type, U.InputPath):
                kinds.add(tested.type.kind.name)
                cases = bad_inputs(tested.type.kind, case_dir)
            else:
                cases = bad_outputs(tested.type.form, case_dir)
            for what, bad in cases:
                pairs += 1
                argv = argv_for(words, actions, tested, bad, good, case_dir)
                code, err = run_cli(argv, capsys)
                lines = [line for line in err.splitlines() if "error:" in line]
                if code != 2 or len(lines) != 1 or str(bad) not in lines[0] or "Traceback" in err:
                    failures.append(f"{' '.join(argv)} [{what}]: exit {code}: {err.strip()[-300:]}")
    print(f"{pairs} (path option x bad input) pairs over {options} path options of {len(kinds)} file kinds")
    from diffpolicy_ros.nodes.graph import KINDS as GRAPH_ARGUMENTS
    from diffpolicy_ros.nodes.graph import FileArgument

    launched = {a.kind.name for a in GRAPH_ARGUMENTS.values() if isinstance(a, FileArgument)}  # tested below
    assert kinds | launched == {kind.name for kind in U.KINDS}  # every kind of user file is given somewhere
    assert options >= 30 and not failures, "\n".join(failures)


# -- the graphs' file arguments -------------------------------------------------------------------------------
NOT_READ_AT_LAUNCH = ("missing", "empty")  # what the launcher sees of a file it does not read
@pytest.mark.quick
def test_every_file_argument_of_every_graph_refuses_every_bad_file_before_a_node_starts(good, tmp_path):
    """``diffpolicy launch`` and the launch files check the files their arguments name (nodes.graph.launch_graph)
    before starting a node: a bad one is one line naming ``name:=`` and the file."""
    from diffpolicy_ros.nodes.graph import ARGUMENTS, KINDS, FileArgument, OutputArgument, launch_graph

    box = {"box_low": "[0.2, -0.3, 0.0]", "box_high": "[0.8, 0.3, 0.4]"}
    failures, pairs = [], 0
    for graph_name, names in ARGUMENTS.items():
        base = {
            "sim_train": {},
            "real_arm": box,
            "replay_eval": {"bag": str(good[U.BAG.name]), "checkpoint": str(good[U.CHECKPOINT.name])},
        }[graph_name]
        for name in names:
            argument = KINDS[name]
            if not isinstance(argument, (FileArgument, OutputArgument)):
                continue
            case_dir = tmp_path / f"{graph_name}_{name}"
            case_dir.mkdir()
            reads = isinstance(argument, FileArgument) and argument.read is not None
            if isinstance(argument, FileArgument):
                cases = bad_inputs(argument.kind, case_dir)
            else:
                cases = bad_outputs(argument.form, case_dir)
            for what, bad in cases:
                if isinstance(argument, FileArgument) and not reads and what not in NOT_READ_AT_LAUNCH:
                    continue  # a dataset or a bag is read by its node (test below), not by the launcher
                pairs += 1
                try:
                    launch_graph(graph_name, {**base, name: str(bad)})
                    failures.append(f"{graph_name} {name}:={bad} [{what}]: accepted")
                except UserError as exc:
                    if "\n" in str(exc) or f"{name}:=" not in str(exc) or str(bad) not in str(exc):
                        failures.append(f"{graph_name} {name}:={bad} [{what}]: {exc}")
    print(f"{pairs} (graph file argument x bad input) pairs")
    assert pairs >= 40 and not failures, "\n".join(failures)


# -- the nodes' path parameters ---------------------------------------------------------------------------------
def nodes_with_file_parameters() -> Iterator[type]:
    """Every node class that names path parameters (``FILE_PARAMETERS``, read by nodes.common.file_parameter)."""
    import importlib

    for module_file in sorted((REPO / "diffpolicy_ros" / "nodes").glob("*.py")):
        module = importlib.import_module(f"diffpolicy_ros.nodes.{module_file.stem}")
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and hasattr(value, "FILE_PARAMETERS"):
                yield value


@pytest.mark.quick
def test_every_path_parameter_of_every_node_stops_it_with_one_line(tmp_path, monkeypatch):
    """A node given a bad file stops at start with a ParameterError (run_node prints it as one line, exit 2),
    before it trains, plays or publishes anything."""
    import rclpy

    from diffpolicy_ros.nodes.common import ParameterError

    monkeypatch.chdir(tmp_path)  # a node that wrongly started would write its run folder here
    failures, pairs, classes = [], 0, []
    for node_class in nodes_with_file_parameters():
        classes.append(node_class.__name__)
        for name, kind in node_class.FILE_PARAMETERS.items():
            case_dir = tmp_path / f"{node_class.__name__}_{name}"
            case_dir.mkdir()
            for what, bad in bad_inputs(kind, case_dir):
                pairs += 1
                rclpy.init(args=["node", "--ros-args", "-p", f"{name}:={bad}"])
                node = None
                try:
                    node = node_class()
                    failures.append(f"{node_class.__name__} {name}:={bad} [{what}]: started")
                except ParameterError as exc:
                    if "\n" in str(exc) or f"parameter '{name}'" not in str(exc) or str(bad) not in str(exc):
                        failures.append(f"{node_class.__name__} {name}:={bad} [{what}]: {exc}")
                except Exception as exc:  # what the node would print as a traceback
                    failures.append(f"{node_class.__name__} {name}:={bad} [{what}]: {type(exc).__name__}: {exc}")
                finally:
                    if node is not None:
                        node.destroy_node()
                    rclpy.shutdown()
    print(f"{pairs} (node path parameter x bad input) pairs over {classes}")
    assert {"TrainerNode", "BagPlayer"} <= set(classes) and not failures, "\n".join(failures)
