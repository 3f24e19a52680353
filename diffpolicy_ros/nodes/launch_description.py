"""Translate a graph from :mod:`diffpolicy_ros.nodes.graph` into a launch_ros LaunchDescription.

Used by ``launch/<graph>.launch.py`` on a ROS 2 distro machine (launch and launch_ros are imported here,
lazily, because the pip route has neither).
"""

from __future__ import annotations

from diffpolicy_ros.nodes.graph import ARGUMENTS, launch_graph


def generate(graph_name: str):
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable, Shutdown
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node
    from launch_ros.parameter_descriptions import ParameterValue

    from launch import LaunchDescription

    def nodes(context):
        overrides = {key: LaunchConfiguration(key).perform(context) for key in ARGUMENTS[graph_name]}
        return [
            Node(
                package="diffpolicy_ros",
                executable=spec.executable,
                name=spec.name,
                # strings stay strings ('0' is a device name, not the integer 0)
                parameters=[
                    {
                        k: ParameterValue(v, value_type=str) if isinstance(v, str) else v
                        for k, v in spec.parameters.items()
                    }
                ],  # fmt: skip
                remappings=spec.remappings,
                output="screen",
                on_exit=Shutdown(reason=f"required node {spec.name} exited") if spec.required else None,
            )
            for spec in launch_graph(graph_name, overrides)
        ]

    actions = [DeclareLaunchArgument(key, default_value=value) for key, value in ARGUMENTS[graph_name].items()]
    if graph_name == "sim_train":  # the simulation never needs traffic off this machine
        actions.append(SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST"))
    actions.append(OpaqueFunction(function=nodes))
    return LaunchDescription(actions)
