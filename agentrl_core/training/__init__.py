"""Training: the SFT and GRPO stages, their policy updates, optimizer, metrics and sessions."""
