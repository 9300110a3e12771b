"""TextCraft: a Minecraft-style crafting game on synthetic recipe trees (or a folder of recipe JSON)."""

from agentrl_core.envs.textcraft.crafting import Book, Crafter, command_of
from agentrl_core.envs.textcraft.env import TEST_IDS, TRAIN_IDS, TextCraft, render_task
from agentrl_core.envs.textcraft.expert import plan
from agentrl_core.envs.textcraft.generate import Difficulty, Task, folder_task, synthetic_task, tree_recipes
from agentrl_core.envs.textcraft.recipe_book import (
    Recipe,
    display_name,
    load_recipe_folder,
    recipe_from_json,
    recipe_to_json,
    save_recipe_folder,
)

__all__ = [
    "TEST_IDS",
    "TRAIN_IDS",
    "Book",
    "Crafter",
    "Difficulty",
    "Recipe",
    "Task",
    "TextCraft",
    "command_of",
    "display_name",
    "folder_task",
    "load_recipe_folder",
    "plan",
    "recipe_from_json",
    "recipe_to_json",
    "render_task",
    "save_recipe_folder",
    "synthetic_task",
    "tree_recipes",
]
