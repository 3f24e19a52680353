"""replay_eval: bag_player (/clock + the recorded topics) -> cameras + proprio + policy on sim time -> evaluator
(report.json + PNGs when the bag ends). `diffpolicy launch replay_eval bag:=BAG checkpoint:=CKPT [out:=DIR]`.

The graph is defined once in diffpolicy_ros.nodes.graph; `diffpolicy launch replay_eval name:=value` runs the same
graph where launch_ros is not installed. Arguments: see ARGUMENTS["replay_eval"] there.
"""

from diffpolicy_ros.nodes.launch_description import generate


def generate_launch_description():
    return generate("replay_eval")
