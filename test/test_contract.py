"""The robot/task contract: one module, no simulator, and the only place the chunk / action / image shapes
are written down."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from diffpolicy_ros import contract as C

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "diffpolicy_ros"


@pytest.mark.quick
def test_contract_imports_neither_ros_mujoco_nor_torch():
    tree = ast.parse((PACKAGE / "contract.py").read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__"}, imported


@pytest.mark.quick
def test_proprio_layout_covers_every_slot_once():
    covered = sorted(i for s in C.PROPRIO_SLICES.values() for i in range(C.PROPRIO_DIM)[s])
    assert covered == list(range(C.PROPRIO_DIM))
    assert set(C.JOINT_STATE_SLOTS) | set(C.TASK_STATE_SLOTS) == set(C.PROPRIO_SLICES)
    assert C.PROPRIO_SLICES["joint_positions"].stop - C.PROPRIO_SLICES["joint_positions"].start == len(C.ARM_JOINTS)


@pytest.mark.quick
def test_every_node_module_imports_without_a_simulator():
    """The real-arm route must not need MuJoCo or gymnasium installed: every node module imports with both
    made unimportable (the sim bridge and the trainer load the simulator only when they are started)."""
    nodes = sorted(p.stem for p in (PACKAGE / "nodes").glob("*.py") if p.stem != "__init__")
    script = f"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('mujoco', 'gymnasium'):
            raise ImportError(f'{{name}} is blocked: no simulator on this machine')
sys.meta_path.insert(0, Block())
for name in {nodes!r}:
    importlib.import_module('diffpolicy_ros.nodes.' + name)
assert 'mujoco' not in sys.modules and 'gymnasium' not in sys.modules
print('ok', len({nodes!r}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok") and len(nodes) >= 8


# Literal chunk / action / image shapes: (16, 3), [16, 3], 128x128 images, a 16-wide proprio vector, and
# dataclass defaults of those sizes. Configs (YAML) and the contract itself may state them.
SHAPE_LITERALS = re.compile(
    r"\(16, ?3\)|\[16, ?3\]|\b128, ?128\b|zeros\(16\b|shape=\(16,\)|"
    r"(horizon|action_dim|image_size|proprio_dim): int = (16|3|128)\b"
)


@pytest.mark.quick
def test_no_literal_chunk_action_or_image_shape_outside_the_contract():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "contract.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if SHAPE_LITERALS.search(code) and not code.strip().startswith(("``", '"', "'")):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
