"""real_arm: cameras on real drivers + proprio + instruction + policy + executor (twist to MoveIt
Servo); no sim, no trainer.

The graph is defined once in diffpolicy_ros.nodes.graph; `diffpolicy launch real_arm name:=value` runs the same
graph where launch_ros is not installed. Arguments: see ARGUMENTS["real_arm"] there.
"""

from diffpolicy_ros.nodes.launch_description import generate


def generate_launch_description():
    return generate("real_arm")
