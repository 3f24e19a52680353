"""replay_eval: cameras + proprio + instruction + policy on sim time, fed by `ros2 bag play --clock`.

The graph is defined once in diffpolicy_ros.nodes.graph; `diffpolicy launch replay_eval name:=value` runs the same
graph where launch_ros is not installed. Arguments: see ARGUMENTS["replay_eval"] there.
"""

from diffpolicy_ros.nodes.launch_description import generate


def generate_launch_description():
    return generate("replay_eval")
