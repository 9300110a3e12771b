"""Tests of agentrl_core.checkpoints (a package, so test file names may repeat across folders)."""
