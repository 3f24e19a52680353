"""The message layer: ROS messages <-> numpy, observation preprocessing, a sim step -> the messages a robot
publishes. Below both ``nodes/`` (live topics) and ``bags/`` (recorded ones), so the two read inputs the same
way and never import each other."""
