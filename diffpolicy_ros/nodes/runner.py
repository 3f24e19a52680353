"""``diffpolicy launch <graph> [name:=value ...]``: run a graph without launch_ros, one process per node.

Each node runs as ``python -m diffpolicy_ros.nodes.<executable> --ros-args -r __node:=<name> -p k:=v ...``.
Output lines are prefixed with the node name. A stop (Ctrl-C, SIGTERM) reaches every node as SIGTERM: a node that is
spinning stops cleanly (run_node), one still importing its libraries ends silently — SIGINT there would print a
KeyboardInterrupt traceback from inside the import. If a required
node exits the whole graph is stopped. The exit code is 0 after a requested stop, else the failed node's.
ROS traffic stays on this machine unless the caller set ROS_AUTOMATIC_DISCOVERY_RANGE itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from diffpolicy_ros.arguments import ArgumentError
from diffpolicy_ros.nodes.graph import NodeSpec, launch_graph

STOP_TIMEOUT_S = 10.0


def ros_args(spec: NodeSpec) -> list[str]:
    args = ["--ros-args", "-r", f"__node:={spec.name}"]
    for key, value in spec.parameters.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = json.dumps(value)  # quoted YAML: '0' stays the string "0", not the integer 0
        else:
            text = str(value)
        args += ["-p", f"{key}:={text}"]
    for src, dst in spec.remappings:
        args += ["-r", f"{src}:={dst}"]
    return args


def graph_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="diffpolicy_roslog_"))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _pump(name: str, stream, out) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"[{name}] {line}")
        out.flush()


def run_graph(name: str, overrides: dict[str, str], out=sys.stdout) -> int:
    specs = launch_graph(name, overrides)
    env = graph_environment()
    procs: dict[str, tuple[NodeSpec, subprocess.Popen]] = {}
    for spec in specs:
        cmd = [sys.executable, "-m", f"diffpolicy_ros.nodes.{spec.executable}", *ros_args(spec)]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        threading.Thread(target=_pump, args=(spec.name, proc.stdout, out), daemon=True).start()
        procs[spec.name] = (spec, proc)
    out.write(f"[launch] {name}: started {', '.join(procs)} (ROS_DOMAIN_ID={env.get('ROS_DOMAIN_ID', '0')})\n")

    stop_requested = threading.Event()

    def request_stop(signum, frame):
        stop_requested.set()

    old = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    exit_code = 0
    try:
        while not stop_requested.is_set():
            for node_name, (spec, proc) in list(procs.items()):
                code = proc.poll()
                if code is None:
                    continue
                if spec.required:  # exit 0: its job is done (the replay evaluator), the graph ends with it
                    out.write(f"[launch] required node {node_name} exited with {code}: stopping the graph\n")
                    exit_code = code
                    stop_requested.set()
                    break
                out.write(f"[launch] optional node {node_name} exited with {code}\n")
                del procs[node_name]
            time.sleep(0.1)
    finally:
        for _, proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for node_name, (_, proc) in procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                out.write(f"[launch] {node_name} did not stop in {STOP_TIMEOUT_S:.0f} s: its stacks, then killing it\n")
                proc.send_signal(signal.SIGUSR1)  # run_node prints where every thread is (faulthandler)
                time.sleep(1.0)
                proc.kill()
                proc.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
    out.write(f"[launch] {name} stopped (exit code {exit_code})\n")
    return exit_code


def spawn_graph(
    name: str, overrides: dict[str, str], env: dict[str, str] | None = None, stdout=None, cwd: str | None = None
) -> subprocess.Popen:
    """Start ``diffpolicy launch <name> k:=v ...`` in its own process group (for benchmarks and tests)."""
    args = [f"{k}:={v}" for k, v in overrides.items()]
    return subprocess.Popen(
        [sys.executable, "-m", "diffpolicy_ros.cli", "launch", name, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=subprocess.STDOUT if stdout is not None else subprocess.DEVNULL,
        start_new_session=True,
    )


def graph_node_pid(launch: subprocess.Popen, node_name: str) -> int:
    """The PID of node ``node_name`` in a graph this process started with :func:`spawn_graph`: a child of that
    launch process, found through /proc — never by a machine-wide search, which would also match another user's
    graph on the same robot PC."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid != launch.pid:
                continue
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):  # the process ended while we looked
            continue
        if f"__node:={node_name}".encode() in argv:
            return int(stat.parent.name)
    raise RuntimeError(f"no node {node_name!r} among the processes of graph {launch.pid}")


def stop_graph(proc: subprocess.Popen, timeout: float = 20.0) -> int | None:
    """Ctrl-C the whole launch; its exit code, or None if it had to be killed after ``timeout``."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def parse_overrides(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        key, sep, value = item.partition(":=")
        if not sep:
            raise ArgumentError(f"arguments are name:=value, got {item!r}")
        overrides[key] = value
    return overrides
