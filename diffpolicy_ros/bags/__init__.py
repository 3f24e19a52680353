"""rosbag2 files: write, read, evaluate against, and train from (no rosbag2 install needed)."""
