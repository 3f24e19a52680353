"""Layer 3: behaviour cloning, PPO fine-tuning, checkpoints."""
