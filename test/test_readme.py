"""The README's commands are the ones that work: a README that drifts fails CI.

Every `diffpolicy` line in the README's shell blocks must parse (subcommand and options exist), name config
files that exist and graph arguments the graph has; every `make` target must exist. The cheap commands are
then run for real, in order, in a fresh folder, with small sizes (episodes, iterations) swapped in — the
same command lines a new user copies.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from diffpolicy_ros.cli import build_parser
from diffpolicy_ros.nodes.graph import graph, resolve_arguments

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
GUIDES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # the command lines a user copies


def shell_lines(text: str = README) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def cli_args(line: str) -> list[str] | None:
    words = shlex.split(line)
    if words[0] == ".venv/bin/diffpolicy":
        return words[1:]
    if words[0] == ".venv/bin/torchrun":
        return words[words.index("diffpolicy_ros.cli") + 1 :]
    return None


COMMANDS = [line for line in shell_lines() if cli_args(line) is not None]
GUIDE_COMMANDS = [line for path in GUIDES for line in shell_lines(path.read_text()) if cli_args(line) is not None]


@pytest.mark.quick
def test_the_readme_has_the_commands_a_user_needs_and_reads_in_ten_minutes():
    assert len(README.splitlines()) <= 200
    used = {cli_args(line)[0] for line in COMMANDS}
    assert {"demo", "train-bc", "eval", "train-ppo", "launch", "bench", "record", "eval-bag", "plot"} <= used


@pytest.mark.quick
@pytest.mark.parametrize("line", GUIDE_COMMANDS)
def test_every_guide_command_parses_and_names_what_exists(line):
    args = cli_args(line)
    parsed = build_parser().parse_args(args)  # an unknown option or subcommand exits here
    for key in ("config",):
        value = getattr(parsed, key, None)
        if value is not None:
            assert (REPO / value).exists(), f"{line}: {value} does not exist"
    if parsed.command == "launch":
        overrides = dict(a.split(":=", 1) for a in parsed.arguments)
        if parsed.graph == "replay_eval":  # its graph reads the bag's topics: here only the arguments are checked
            resolve_arguments(parsed.graph, overrides)
        else:
            graph(parsed.graph, overrides)  # unknown or malformed graph arguments raise
    if parsed.command == "bench" and parsed.bench in ("hil", "startup"):  # benchmarks that launch a graph
        overrides = dict(a.split(":=", 1) for a in parsed.overrides)
        box = {"box_low": "[0, 0, 0]", "box_high": "[1, 1, 1]"} if parsed.bench == "hil" else {}  # bench hil's own
        graph("real_arm" if parsed.bench == "hil" else "sim_train", {**box, **overrides})


@pytest.mark.quick
def test_every_make_target_in_the_guides_exists():
    makefile = (REPO / "Makefile").read_text()
    for line in (line for path in GUIDES for line in shell_lines(path.read_text())):
        if line.startswith("make "):
            target = line.split()[1]
            assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), line


SMALL = {"--episodes": "2", "--iters": "4", "--duration": "2", "--samples": "2"}
RUN_FOR_REAL = ("demo", "train-bc", "eval", "eval-bag", "plot")  # the cheap ones (the rest: their own tests)


def small(args: list[str]) -> list[str]:
    out = list(args)
    for i, word in enumerate(out[:-1]):
        if word in SMALL:
            out[i + 1] = SMALL[word]
    if out[0] == "train-bc":
        out += ["--iters", "4", "--eval-every", "4", "--final-eval-episodes", "1"]
    if out[0] == "demo" and "--config" in out:
        out[out.index("--config") + 1] = str(REPO / out[out.index("--config") + 1])
    if out[0] == "train-bc":
        out[out.index("--config") + 1] = str(REPO / out[out.index("--config") + 1])
    return out


@pytest.mark.slow
def test_the_cheap_readme_commands_run_in_order_in_a_fresh_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ran = []
    # a user follows one section at a time; in one fresh folder the data comes first, then what trains on it,
    # then what reads a checkpoint (the sim_train follow-ons have their own test, after a short sim_train run)
    stage = {"demo": 0, "train-bc": 1}
    for line in sorted(COMMANDS, key=lambda line: stage.get(cli_args(line)[0], 2)):
        args = cli_args(line)
        if args[0] not in RUN_FOR_REAL or "bench" in args:
            continue
        if "runs/vision/" in line:  # reads `make vision-policy`'s demos and checkpoint: test_estimator.py covers it
            continue
        if args[0] == "plot":  # needs a PPO run: plot the BC run the commands above made
            args = ["plot", "runs/latest"]
        result = subprocess.run(
            [sys.executable, "-m", "diffpolicy_ros.cli", *small(args)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"
        ran.append(args[0])
    assert {"demo", "train-bc", "eval", "eval-bag"} <= set(ran)
    assert (tmp_path / "videos").is_dir() and any((tmp_path / "videos").glob("*.mp4"))
    assert (tmp_path / "report" / "report.json").exists()
