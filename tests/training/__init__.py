"""Tests of agentrl_core.training (a package, so test file names may repeat across folders)."""
