"""ament_python package definition (also pip-installable: ``pip install -e .``)."""

from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "diffpolicy_ros"
HERE = Path(__file__).parent
# every module of diffpolicy_ros/nodes/ with a main() is a node executable (lib/<package>/<node> for launch_ros)
NODES = sorted(p.stem for p in (HERE / PACKAGE / "nodes").glob("*.py") if "\ndef main(" in p.read_text())


def data_tree(folder: str) -> list[tuple[str, list[str]]]:
    """Install ``folder`` (launch/, config/, sim/) under share/<package>/, keeping its sub-folders."""
    entries: dict[str, list[str]] = {}
    for path in sorted((HERE / folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(HERE)
            entries.setdefault(str(Path("share") / PACKAGE / rel.parent), []).append(str(rel))
    return list(entries.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    package_data={PACKAGE: ["models/csrc/*.cpp"]},  # built on first use (models/native.py)
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *data_tree("launch"),
        *data_tree("config"),
        *data_tree("sim"),
    ],
    python_requires=">=3.10",
    install_requires=["setuptools"],
    extras_require={
        "test": ["pytest", "hypothesis"],
        # Ascend: torch_npu must match the installed torch and CANN versions exactly (see README).
        "npu": ["torch_npu"],
    },
    zip_safe=False,
    maintainer="diffpolicy_ros maintainers",
    maintainer_email="maintainers@diffpolicy-ros.dev",
    description="Diffusion-policy actor with PPO fine-tuning in MuJoCo, served over ROS 2.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "diffpolicy = diffpolicy_ros.cli:main",
            *(f"{node} = diffpolicy_ros.nodes.entry_points:{node}" for node in NODES),
        ],
    },
)
