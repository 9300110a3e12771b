"""agentrl_core: the library that does the work (environments, rollout, algorithms, training)."""

__version__ = "0.1.0"
