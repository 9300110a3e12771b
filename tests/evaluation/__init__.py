"""Tests of agentrl_core.evaluation (a package, so test file names may repeat across folders)."""
