"""Household: a dependency-free, ALFWorld-style text game with generated, always-solvable tasks."""

from agentrl_core.envs.household.env import Household, normalize
from agentrl_core.envs.household.world import Action, Goal, Receptacle, Scene, State

__all__ = ["Action", "Goal", "Household", "Receptacle", "Scene", "State", "normalize"]
