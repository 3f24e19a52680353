"""Episode datasets (sim demonstrations; rosbag2 conversion comes with the replay issue)."""
