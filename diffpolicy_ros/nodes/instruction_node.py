"""instruction_node: publishes ``/task/instruction`` (latched) from its ``instruction`` parameter, which can
be changed at run time, or relays another topic (sim_bridge's per-episode instruction)."""

from __future__ import annotations

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from std_msgs.msg import String

from diffpolicy_ros.nodes.common import LATCHED_QOS, WARN_THROTTLE_S, run_node

MAX_INSTRUCTION_CHARS = 256


def check_instruction(text: str) -> str | None:
    """The reason an instruction is unusable, or None."""
    if not text.strip():
        return "empty instruction"
    if len(text) > MAX_INSTRUCTION_CHARS:
        return f"instruction longer than {MAX_INSTRUCTION_CHARS} characters"
    return None


class InstructionNode(Node):
    def __init__(self):
        super().__init__("instruction_node")
        self.declare_parameter("instruction", "push the block to the target")
        self.declare_parameter("relay_topic", "")  # e.g. /task/episode_instruction
        self.pub = self.create_publisher(String, "/task/instruction", LATCHED_QOS)
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
