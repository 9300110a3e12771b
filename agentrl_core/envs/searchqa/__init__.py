"""SearchQA: Search-R1-style question answering over a generated corpus with BM25, fully offline."""

from agentrl_core.envs.searchqa.corpus import Index, Passage, corpus, format_results, index, tokenize
from agentrl_core.envs.searchqa.env import TEST_IDS, TRAIN_IDS, SearchQA, exact_match, normalize_answer, parse_action
from agentrl_core.envs.searchqa.questions import TEMPLATES, Hop, Question, all_questions
from agentrl_core.envs.searchqa.world import World, make_world

__all__ = [
    "TEMPLATES",
    "TEST_IDS",
    "TRAIN_IDS",
    "Hop",
    "Index",
    "Passage",
    "Question",
    "SearchQA",
    "World",
    "all_questions",
    "corpus",
    "exact_match",
    "format_results",
    "index",
    "make_world",
    "normalize_answer",
    "parse_action",
    "tokenize",
]
