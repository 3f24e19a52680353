"""Locate the package's data folders (sim/, config/, launch/) in a source checkout or a colcon install."""

from __future__ import annotations

import os
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def share_dir() -> Path:
    """The folder holding sim/, config/ and launch/: the source tree, else the ament share directory."""
    override = os.environ.get("DIFFPOLICY_SHARE_DIR")
    if override:
        return Path(override)
    if (_SOURCE_ROOT / "sim").is_dir() and (_SOURCE_ROOT / "package.xml").is_file():
        return _SOURCE_ROOT
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory("diffpolicy_ros"))
    except Exception as exc:  # ament index missing or package not installed
        raise FileNotFoundError(
            "cannot find diffpolicy_ros data files: run from a source checkout, source a colcon install, "
            "or set DIFFPOLICY_SHARE_DIR"
        ) from exc


def sim_asset(name: str) -> Path:
    path = share_dir() / "sim" / name
    if not path.is_file():
        raise FileNotFoundError(f"MJCF asset not found: {path}")
    return path


def config_file(name: str) -> Path:
    path = share_dir() / "config" / name
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    return path
