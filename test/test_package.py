"""The ament_python package metadata that colcon and rosdep read."""

from __future__ import annotations

from pathlib import Path

import pytest
from catkin_pkg.package import parse_package

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.quick
def test_package_xml_is_a_valid_format3_ament_python_package():
    pkg = parse_package(str(REPO / "package.xml"))  # raises on anything catkin_pkg rejects
    assert pkg.package_format == 3 and pkg.name == "diffpolicy_ros"
    assert pkg.get_build_type() == "ament_python"
    run = {d.name for d in pkg.exec_depends}
    for msg in ("rclpy", "sensor_msgs", "geometry_msgs", "trajectory_msgs", "diagnostic_msgs", "std_srvs"):
        assert msg in run


@pytest.mark.quick
def test_layout_and_install_settings():
    for folder in ("diffpolicy_ros", "launch", "config", "sim", "test", "resource"):
        assert (REPO / folder).is_dir(), folder
    assert (REPO / "resource" / "diffpolicy_ros").is_file()
    setup_cfg = (REPO / "setup.cfg").read_text()
    assert "install_scripts=$base/lib/diffpolicy_ros" in setup_cfg
    assert "script_dir=$base/lib/diffpolicy_ros" in setup_cfg
    assert "tests_require" not in (REPO / "setup.py").read_text()
