"""The command path between a learned policy and the arm, free of ROS: the executor's chunk player, the safety
filter core and the description of a deployment. The nodes run it live; ``eval --deploy`` runs it in the sim."""
