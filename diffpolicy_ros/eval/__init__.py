"""Evaluation: closed-loop episodes in the sim (rollout.py), open-loop scores of chunks against recorded commands
(chunk_scores.py), plots and statistics."""
