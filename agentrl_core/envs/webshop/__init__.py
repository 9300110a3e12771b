"""WebShop re-implemented offline: a generated catalogue, BM25 search, WebShop's pages, actions and reward."""

from agentrl_core.envs.webshop.catalog import Catalog, Product, build_catalog
from agentrl_core.envs.webshop.env import WebShop, parse_action
from agentrl_core.envs.webshop.goals import TEST_IDS, TRAIN_IDS, make_goal
from agentrl_core.envs.webshop.reward import Goal, RewardBreakdown, get_reward

__all__ = [
    "TEST_IDS",
    "TRAIN_IDS",
    "Catalog",
    "Goal",
    "Product",
    "RewardBreakdown",
    "WebShop",
    "build_catalog",
    "get_reward",
    "make_goal",
    "parse_action",
]
