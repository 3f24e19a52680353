"""sim_train: sim_bridge + cameras + proprio + instruction + policy + executor + trainer (hot checkpoint reload).

The graph is defined once in diffpolicy_ros.nodes.graph; `diffpolicy launch sim_train name:=value` runs the same
graph where launch_ros is not installed. Arguments: see ARGUMENTS["sim_train"] there.
"""

from diffpolicy_ros.nodes.launch_description import generate


def generate_launch_description():
    return generate("sim_train")
