"""WebShop re-implemented offline: the Env ("webshop") over a generated catalogue and BM25 search.

The real WebShop (princeton-nlp/WebShop) needs its scraped product dumps, a pyserini/Lucene index
and spaCy's en_core_web_lg, none of which can be had offline. This keeps its protocol and reward:
the same pages, the same `search[...]` / `click[...]` actions, the same [SEP] text observations
and `available_actions`, the same reward formula (reward.py), over a seeded synthetic catalogue.

Differences in the protocol, on purpose: `search[...]` works only on the search page (WebShop's
text env accepts it anywhere); an invalid action returns "Invalid action: <why>" above the unchanged
page (WebShop silently returns the page); a purchase ends the episode with the reward, and
`max_steps` steps without one truncate it with reward 0.
"""

from __future__ import annotations

import re
from typing import Any

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.envs.registry import register
from agentrl_core.envs.webshop.catalog import (
    DEFAULT_SEED,
    DEFAULT_SIZE,
    Catalog,
    build_catalog,
)
from agentrl_core.envs.webshop.goals import (
    TEST_IDS,
    TRAIN_IDS,
    check_task_id,
    make_goal,
)
from agentrl_core.envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    Clickable,
    OptionChoice,
    ProductLink,
    Session,
    available_actions,
    clickables,
    render,
)
from agentrl_core.envs.webshop.reward import Goal, get_reward
from agentrl_core.envs.webshop.search import PRODUCT_WINDOW, get_index
from agentrl_core.errors import ResetNeededError

_ACTION = re.compile(r"^(search|click)\s*\[(.*)\]\s*\.?$", re.IGNORECASE | re.DOTALL)
_MARKER = "action:"


def parse_action(reply: str) -> tuple[str, str] | None:
    """(verb, argument) of a reply, or None when it holds no `search[...]` / `click[...]`.

    Text after the last "Action:" counts when there is one (so "Thought: ... Action: click[x]"
    works); of that, the first non-empty line, stripped of backticks. The verb is lower-cased.
    """
    text = reply.strip()
    marker = text.lower().rfind(_MARKER)
    if marker >= 0:
        text = text[marker + len(_MARKER):]
    for line in text.splitlines():
        line = line.strip().strip("`").strip()
        if line:
            match = _ACTION.match(line)
            return (match[1].lower(), match[2].strip()) if match else None
    return None


@register
class WebShop(Env):
    """WebShop re-implemented offline: find and buy the product an instruction describes.

    Reward on `Buy Now` (terminated): WebShop's get_reward in [0, 1]; success when it is 1.0.
    Truncated with reward 0 after `max_steps` steps without a purchase. A task id fixes the goal
    (the reset `seed` is unused); the catalogue depends on `num_products` and `catalog_seed`.
    """

    name = "webshop"
    agentgym_convention = "B"  # WebShop's server: env_idx, session_id
    splits = {"train": TRAIN_IDS, "test": TEST_IDS}  # train [0, 10000), test [10000, 10500)
    requires = ("rank_bm25",)
    action_format = (
        "One action per reply: search[keywords] on the search page, or click[text] with a clickable of "
        "the current page, e.g. click[b0abc12345], click[large], click[buy now]."
    )
    system_prompt = (
        "You are shopping in WebShop. Follow the instruction: search for the product, open it, choose "
        "the requested options, then buy it. Reply with exactly one action: search[keywords] (only on the "
        "search page) or click[value], where value is one of the clickables of the current page."
    )
    max_steps = 15  # the default; instances take theirs from the constructor

    def __init__(self, max_steps: int = 15, num_products: int = DEFAULT_SIZE, catalog_seed: int = DEFAULT_SEED) -> None:
        super().__init__()
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.catalog: Catalog = build_catalog(num_products, catalog_seed)
        self.index = get_index(self.catalog)
        self._goal: Goal | None = None
        self._session = Session()
        self._steps = 0
        self._reward_info: dict[str, Any] = {}

    # -- episode -------------------------------------------------------------------------------
    def _reset(self, *, task_id: int, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        check_task_id(int(task_id))
        self._goal = make_goal(int(task_id), self.catalog)
        self._session, self._steps, self._reward_info = Session(), 0, {}
        return self._observation(), self._info() | {"instruction": self._goal.instruction}

    def _step(self, action: str) -> StepResult:
        self._steps += 1
        problem = self._apply(action)
        text = self._observation()
        if problem:
            text = f"Invalid action: {problem}\n{text}"
        done = self._session.page == "done"
        reward = self._session.reward if done else 0.0
        truncated = not done and self._steps >= self.max_steps
        info = self._info()
        if done:
            info["reward_info"] = self._reward_info
        if truncated:
            text += "\nYou ran out of steps without buying anything."
        return StepResult(text, reward, done, truncated, info)

    # -- actions -------------------------------------------------------------------------------
    def _apply(self, action: str) -> str | None:
        """Carry out `action`; return why it is invalid, or None when it was carried out."""
        parsed = parse_action(action)
        if parsed is None:
            return "reply with search[keywords] or click[value]."
        verb, arg = parsed
        if verb == "search":
            if self._session.page != "search":
                return f"search is only available on the search page; click[{BACK_TO_SEARCH}] first."
            if not arg:
                return "search[...] needs keywords."
            self._search(arg)
            return None
        choices = clickables(self._session, self.catalog)
        target = choices.get(arg.lower())
        if target is None:
            listed = ", ".join(choices) or "none (use search[...])"
            return f"{arg!r} is not a clickable on this page; clickables: {listed}."
        self._click(target)
        return None

    def _search(self, keywords: str) -> None:
        self._session = Session(page="results", keywords=keywords, results=self.index.search(keywords))

    def _click(self, target: Clickable) -> None:
        s = self._session
        if isinstance(target, ProductLink):
            s.page, s.product, s.options = "item", target.index, {}
        elif isinstance(target, OptionChoice):
            s.options[target.name] = target.value
        elif target.label == BACK_TO_SEARCH:
            self._session = Session()
        elif target.label == NEXT_PAGE:
            s.page_no += 1
        elif target.label == PREV_PAGE:
            self._go_back()
        elif target.label == BUY_NOW:
            self._buy()
        else:  # Description, Features, Reviews
            s.page, s.sub_page = "sub", target.label

    def _go_back(self) -> None:
        """`< Prev`: results page -> the page before; item -> its results page; sub-page -> its item."""
        s = self._session
        if s.page == "results":
            s.page_no -= 1
        elif s.page == "item":
            s.page, s.product, s.options = "results", None, {}
        else:
            s.page = "item"

    def _buy(self) -> None:
        s = self._session
        if s.product is None:  # cannot happen: Buy Now is only on an item page
            raise RuntimeError("webshop: Buy Now without an open product")
        breakdown = get_reward(self.catalog.products[s.product], self.goal, s.options)
        self._reward_info = breakdown.as_info()
        s.page, s.reward = "done", breakdown.reward

    # -- expert --------------------------------------------------------------------------------
    def expert_action(self) -> str:
        """The next action of a perfect shopper: search the goal's keywords, page to the target,
        open it, choose each wanted option, buy."""
        s, goal = self._session, self.goal
        target = self.catalog.by_asin(goal.asin)
        if target is None:  # cannot happen: goals are drawn from the catalogue
            raise RuntimeError(f"webshop: the goal's product {goal.asin} is not in the catalogue")
        if s.page == "search":
            return f"search[{goal.keywords}]"
        if s.page == "results":
            if target.index not in s.results:
                return f"click[{BACK_TO_SEARCH}]"
            wanted_page = s.results.index(target.index) // PRODUCT_WINDOW + 1
            if wanted_page == s.page_no:
                return f"click[{target.asin.lower()}]"
            return f"click[{NEXT_PAGE if wanted_page > s.page_no else PREV_PAGE}]"
        if s.page == "sub" or (s.page == "item" and s.product != target.index):
            return f"click[{PREV_PAGE}]"
        for name, value in goal.options:
            if s.options.get(name) != value:
                return f"click[{value}]"
        return f"click[{BUY_NOW}]"

    # -- helpers -------------------------------------------------------------------------------
    @property
    def goal(self) -> Goal:
        """The current goal (after reset)."""
        if self._goal is None:
            raise ResetNeededError("webshop: call reset() first")
        return self._goal

    @property
    def session(self) -> Session:
        """The current browsing state (read it; do not change it)."""
        return self._session

    def _observation(self) -> str:
        return render(self._session, self.catalog, self.goal.instruction)

    def _info(self) -> dict[str, Any]:
        done = self._session.page == "done"
        return {
            "available_actions": available_actions(self._session, self.catalog),
            "page": self._session.page,
            "selected_options": dict(self._session.options),
            "steps": self._steps,
            "success": done and self._session.reward == 1.0,
        }
