# diffpolicy_ros — the two commands a user needs:
#   make sim-train   the main job (sets up if needed)
#   make test        every test, plus the colcon build/test of the distro route (sets up if needed)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
# Loopback-only ROS 2 traffic, a fresh domain per run, logs in a temp dir.
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_DOMAIN_ID ?= $(shell python3 -c 'import random; print(random.randint(1, 101))')
export ROS_LOG_DIR ?= $(shell mktemp -d /tmp/diffpolicy_roslog.XXXXXX)

.PHONY: setup test lint sim-train demo bench-sim clean

setup: $(STAMP)

$(STAMP): scripts/setup.sh requirements/base.txt requirements/test.txt requirements/ros-jazzy-pypi.txt setup.py package.xml
	bash scripts/setup.sh
	touch $@

test: setup lint
	$(PY) -m pytest
	bash scripts/colcon_check.sh

lint: setup
	$(VENV)/bin/ruff check diffpolicy_ros test launch scripts setup.py

# Until the ROS 2 node graph lands, the main job runs the scripted expert in the sim and records the
# episodes to runs/<timestamp>/demos.npz (the dataset behaviour cloning trains on).
sim-train: setup
	$(VENV)/bin/diffpolicy demo --episodes 50 --seed 0 --run-dir runs

demo: setup
	$(VENV)/bin/diffpolicy demo --episodes 200 --seed 0 --json

bench-sim: setup
	$(VENV)/bin/diffpolicy bench sim --json

clean:
	rm -rf build install log .pytest_cache .ruff_cache
