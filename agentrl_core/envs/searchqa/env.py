"""SearchQA: answer a question about an invented world by searching its corpus (Search-R1 style, offline)."""

from __future__ import annotations

import re
import string
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.envs.searchqa.corpus import corpus, format_results, index
from agentrl_core.envs.searchqa.questions import Question, all_questions
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

TRAIN_IDS = range(0, 5000)
TEST_IDS = range(5000, 6000)
MAX_QUERY_CHARS = 500
_TAG = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
FORMAT_MESSAGE = (
    "Your reply had no action. To search, put a query between <search> and </search>. "
    "To answer, put a short answer between <answer> and </answer>."
)


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lower case, drop punctuation, drop the articles a/an/the,
    collapse whitespace. "The  Velmora!" -> "velmora"."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """EM = [normalize_answer(prediction) == normalize_answer(gold)]."""
    return normalize_answer(prediction) == normalize_answer(gold)


def parse_action(reply: str) -> tuple[str, str] | None:
    """The first <search>...</search> or <answer>...</answer> in `reply` as (kind, content), else None."""
    match = _TAG.search(reply)
    return (match[1].lower(), match[2].strip()) if match else None


@register
class SearchQA(Env):
    """Search the corpus with <search>query</search>, then reply <answer>...</answer>.

    Reward (answer step): 1.0 if exact_match(answer, gold) else 0.0; the answer ends the episode
    (terminated). `max_searches` searches are allowed, so `max_steps = max_searches + 1`; a reply
    with neither tag is a step with a format message. A task id fixes the question (the reset `seed`
    is unused); every question reads the same corpus.
    """

    name = "searchqa"
    agentgym_convention = "B"  # AgentGym-style QA servers: env_idx, id
    requires = ("rank_bm25",)  # a core dependency (rank-bm25); named so a broken install says so
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 5000), test [5000, 6000)
    action_format = "Think, then either <search>query</search> or <answer>short answer</answer>."
    system_prompt = (
        "Answer the question. You can search a knowledge base: write <search>query</search> and the top results "
        "come back between <information> and </information>. Search as often as you need, then give a short "
        "final answer, without explanation, as <answer>answer</answer>."
    )
    max_steps = 5  # the default (4 searches + the answer); instances take theirs from the constructor

    def __init__(self, max_searches: int = 4, top_k: int = 3) -> None:
        super().__init__()
        if not 0 <= max_searches <= 20:
            raise ValueError(f"searchqa: max_searches must be in [0, 20], got {max_searches}")
        if not 1 <= top_k <= 20:
            raise ValueError(f"searchqa: top_k must be in [1, 20], got {top_k}")
        self.max_searches, self.top_k = max_searches, top_k
        self.max_steps = max_searches + 1
        self._question: Question | None = None
        self._steps = 0
        self._searches = 0

    @property
    def question(self) -> Question:
        """The current question (after reset)."""
        if self._question is None:
            raise ResetNeededError("searchqa: no question yet; call reset() first")
        return self._question

    @staticmethod
    def make_question(task_id: int) -> Question:
        """The question of `task_id`."""
        if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
            raise TaskNotFoundError(
                f"searchqa has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
                f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
            )
        return all_questions()[task_id]

    def search(self, query: str) -> str:
        """The formatted top-k passages for `query` (also usable outside an episode)."""
        passages = corpus()
        return format_results([passages[i] for i in index().search(query[:MAX_QUERY_CHARS], self.top_k)])

    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._question = self.make_question(int(task_id))
        index()  # build the index now, not inside the first step
        self._steps = self._searches = 0
        obs = f"Question: {self._question.text}\nYou may search up to {self.max_searches} times before answering."
        return obs, {"hops": len(self._question.hops), "template": self._question.template}

    def _step(self, action: str) -> StepResult:
        self._steps += 1
        parsed = parse_action(action)
        last = self._steps >= self.max_steps
        if parsed is not None and parsed[0] == "answer":
            won = exact_match(parsed[1], self.question.answer)
            info = {"success": won, "searches": self._searches, "answer": parsed[1]}
            return StepResult("Correct." if won else "Incorrect.", 1.0 if won else 0.0, True, False, info)
        info: dict[str, Any] = {"searches": self._searches}
        if parsed is None:
            observation = FORMAT_MESSAGE
        elif self._searches >= self.max_searches:
            observation = "No searches left. Give your answer as <answer>answer</answer>."
        elif not parsed[1]:
            observation = "Your search query was empty. Put a query between <search> and </search>."
        else:
            self._searches += 1
            info["searches"] = self._searches
            observation = self.search(parsed[1])
        if last:
            info["success"] = False
        elif self._steps == self.max_steps - 1:
            observation += "\nThis is your last turn: answer now as <answer>answer</answer>."
        return StepResult(observation, 0.0, False, last, info)

    def expert_action(self) -> str:
        """The gold query of the next hop (one per search made so far), then the gold answer."""
        question = self.question
        hop = self._searches
        if hop < len(question.hops) and hop < self.max_searches and self._steps < self.max_steps - 1:
            return f"<search>{question.hops[hop].query}</search>"
        return f"<answer>{question.answer}</answer>"
