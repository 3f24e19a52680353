#!/usr/bin/env bash
# Exercise the ROS 2 distro route from the pip machine: build this package with colcon in a temporary
# workspace, check it is detected as ros.ament_python and that launch/, config/, sim/ and the console
# scripts land where launch_ros looks, then run `colcon test` on the quick test subset.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
VENV_BIN=${VENV_BIN:-$SRC/.venv/bin}
export PATH="$VENV_BIN:$PATH"
WS=$(mktemp -d /tmp/diffpolicy_colcon_ws.XXXXXX)
trap 'rm -rf "$WS"' EXIT
# The installed copy builds its own native kernel (one build folder per install): keep it in the workspace,
# so each check's temporary install leaves nothing behind in ~/.cache.
export TORCH_EXTENSIONS_DIR="$WS/torch_extensions"
mkdir -p "$WS/src/diffpolicy_ros"
# Copy the tracked and new-but-not-ignored files: exactly what a clone would have.
git ls-files -z --cached --others --exclude-standard | tar -C "$SRC" --null -T - -cf - | tar -C "$WS/src/diffpolicy_ros" -xf -
cd "$WS"

fail() { echo "colcon check: FAIL: $*" >&2; exit 1; }
colcon list --base-paths src | tee colcon_list.txt
grep -q 'diffpolicy_ros.*(ros.ament_python)' colcon_list.txt || fail "colcon does not see an ament_python package"

colcon build --base-paths src --event-handlers console_cohesion- summary+ >build.log 2>&1 || { cat build.log; fail "colcon build"; }
SHARE=install/diffpolicy_ros/share/diffpolicy_ros
for d in launch config sim; do
  [ -n "$(ls -A "$SHARE/$d" 2>/dev/null)" ] || fail "$SHARE/$d missing or empty"
done
[ -f "$SHARE/package.xml" ] || fail "package.xml not installed"
[ -f install/diffpolicy_ros/share/ament_index/resource_index/packages/diffpolicy_ros ] || fail "ament index marker missing"
for exe in diffpolicy sim_bridge camera_node proprio_node instruction_node policy_node chunk_executor trainer_node \
  safety_filter bag_player bag_recorder evaluator; do
  [ -x "install/diffpolicy_ros/lib/diffpolicy_ros/$exe" ] || fail "executable $exe not in lib/diffpolicy_ros"
done
for g in sim_train real_arm replay_eval; do
  [ -f "$SHARE/launch/$g.launch.py" ] || fail "launch/$g.launch.py not installed"
done

# The installed package must run from the install space alone (data files found through the ament index).
( cd /tmp && env -u DIFFPOLICY_SHARE_DIR \
    AMENT_PREFIX_PATH="$WS/install/diffpolicy_ros${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" \
    PYTHONPATH="$(ls -d "$WS"/install/diffpolicy_ros/lib/python3*/site-packages)" \
    "$WS/install/diffpolicy_ros/lib/diffpolicy_ros/diffpolicy" demo --episodes 2 --json ) || fail "installed diffpolicy demo"

colcon test --base-paths src --return-code-on-test-failure --event-handlers console_cohesion+ \
  --pytest-args -m quick || fail "colcon test"
colcon test-result --verbose | tee test_result.txt
# pytest exits 0 on "no tests collected" under colcon; an empty subset must not pass as green.
grep -Eq 'Summary: [1-9][0-9]* tests, 0 errors, 0 failures' test_result.txt || fail "colcon ran no tests"
echo "colcon check: ok"
