"""instruction_node: publishes ``/task/instruction`` (latched) from its ``instruction`` parameter, which can
be changed at run time, or relays another topic (sim_bridge's per-episode instruction)."""

from __future__ import annotations

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from std_msgs.msg import String

from diffpolicy_ros.contract import DEFAULT_INSTRUCTION, INSTRUCTION_TOPIC, check_instruction
from diffpolicy_ros.nodes.common import LATCHED_QOS, WARN_THROTTLE_S, run_node


class InstructionNode(Node):
    def __init__(self):
        super().__init__("instruction_node")
        self.declare_parameter("instruction", DEFAULT_INSTRUCTION)
        self.declare_parameter("relay_topic", "")  # e.g. /task/episode_instruction
        self.pub = self.create_publisher(String, INSTRUCTION_TOPIC, LATCHED_QOS)
        relay = self.get_parameter("relay_topic").value
        if relay:
            self.create_subscription(String, relay, lambda m: self.publish(m.data), LATCHED_QOS)
        else:
            self.publish(self.get_parameter("instruction").value)
            self.add_on_set_parameters_callback(self.on_set_parameters)

    def on_set_parameters(self, params) -> SetParametersResult:
        for p in params:
            if p.name == "instruction":
                reason = check_instruction(str(p.value))
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
                self.publish(str(p.value))
        return SetParametersResult(successful=True)

    def publish(self, text: str) -> None:
        reason = check_instruction(text)
        if reason:
            self.get_logger().warn(f"not publishing: {reason}", throttle_duration_sec=WARN_THROTTLE_S)
            return
        self.pub.publish(String(data=text))


def main(args: list[str] | None = None) -> int:
    return run_node(InstructionNode, args, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
