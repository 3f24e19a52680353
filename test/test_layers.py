"""Imports run one way: every import in the package (function-level ones too) is an edge the table in
docs/architecture.md allows, and the table there is the one checked here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "diffpolicy_ros"
pytestmark = pytest.mark.quick


def allowed_imports() -> dict[str, set[str]]:
    """The import-rules table of docs/architecture.md: package -> the packages of ours it may import."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Import rules", 1)[1].split("\n## ", 1)[0]
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or p.is_dir()}
    units -= {"__init__", "__pycache__"}
    rules: dict[str, set[str]] = {}
    for row in re.findall(r"^\| (`.+?) \| (.+?) \|$", section, re.M):
        names = re.findall(r"`(\w+)`", row[0])
        targets = row[1]
        if targets.startswith("everything but"):
            allowed = units - set(re.findall(r"`(\w+)`", targets))
        elif targets == "everything":
            allowed = set(units)
        elif targets.startswith("nothing"):
            allowed = set()
        else:
            allowed = {t.strip() for t in targets.split(",")}
        for name in names:
            rules[name] = allowed
    return rules


def imports_by_unit() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if isinstance(node, ast.ImportFrom) and node.module == "diffpolicy_ros":
                modules = [f"diffpolicy_ros.{a.name}" for a in node.names]
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] == "diffpolicy_ros" and len(parts) > 1 and parts[1] != unit:
                    edges.setdefault(unit, set()).add(parts[1])
    return edges


def test_every_import_is_allowed_by_the_documented_table():
    rules = allowed_imports()
    edges = imports_by_unit()
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or p.is_dir()}
    missing = units - {"__init__", "__pycache__"} - set(rules)
    assert not missing, f"docs/architecture.md has no import rule for {sorted(missing)}"
    wrong = {f"{src} -> {dst}" for src, dsts in edges.items() if src in rules for dst in dsts - rules[src]}
    assert not wrong, f"imports the table does not allow: {sorted(wrong)}"


def test_the_table_itself_runs_one_way():
    rules = allowed_imports()
    for src, allowed in rules.items():
        for dst in allowed:
            assert src not in rules.get(dst, set()) or src == dst, f"{src} and {dst} may import each other"


def test_nodes_and_bags_never_import_each_other():
    edges = imports_by_unit()
    assert "bags" not in edges.get("nodes", set()) and "nodes" not in edges.get("bags", set())
    assert "cli" not in edges.get("bench", set())  # the cli <-> bench cycle is gone
