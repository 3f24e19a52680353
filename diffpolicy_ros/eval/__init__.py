"""Closed-loop evaluation of policies in the sim (and, later, rosbag replay)."""
