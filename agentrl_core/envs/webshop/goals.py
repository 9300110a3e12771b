"""Generated shopping instructions: task id -> a Goal (target product, attributes, options, price bound).

Task `t` draws from `random.Random(f"webshop-v1:goal:{seed}:{size}:{t}")` a target product (test
tasks only target products whose index is a multiple of 10, train tasks only the others, so no
test target is ever a train target), 1-3 of its attributes, one value of each of its options, and
the price bound the way WebShop's get_synthetic_goals does it: the bound is the larger of two of
the four multiples of 10 just above the price. The instruction reads like WebShop's, e.g.
"i am looking for long lasting eau de toilette spray with size: 3.4 fl oz, and price lower than
60.00 dollars". A draw whose target is not among the top 50 BM25 results of its own keywords is
redrawn, so every goal is findable by search.
"""

from __future__ import annotations

import random
from functools import lru_cache

from agentrl_core.envs.webshop.catalog import Catalog, Product
from agentrl_core.envs.webshop.reward import Goal
from agentrl_core.envs.webshop.search import get_index
from agentrl_core.envs.webshop.vocab import PRODUCT_TYPES
from agentrl_core.errors import TaskNotFoundError

TRAIN_IDS = range(0, 10_000)
TEST_IDS = range(10_000, 10_500)
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))  # WebShop's PRICE_RANGE
TEST_STRIDE = 10  # products 0, 10, 20, ... are test targets
MAX_DRAWS = 50
LEADS = ("i need", "i am looking for", "i want", "find me", "i would like", "show me")
_NOUNS = {t.key: t.noun.lower() for t in PRODUCT_TYPES}


def check_task_id(task_id: int) -> None:
    """Raise TaskNotFoundError unless `task_id` is in a split."""
    if task_id not in TRAIN_IDS and task_id not in TEST_IDS:
        raise TaskNotFoundError(
            f"webshop has no task {task_id}: train ids are [{TRAIN_IDS.start}, {TRAIN_IDS.stop}), "
            f"test ids are [{TEST_IDS.start}, {TEST_IDS.stop})"
        )


def _target_index(rng: random.Random, size: int, test: bool) -> int:
    """A product index of the split's target pool: multiples of TEST_STRIDE for test, others for train."""
    n_test = -(-size // TEST_STRIDE)
    if test:
        return rng.randrange(n_test) * TEST_STRIDE
    k = rng.randrange(size - n_test)
    return (k // (TEST_STRIDE - 1)) * TEST_STRIDE + 1 + k % (TEST_STRIDE - 1)


def price_bound(rng: random.Random, price: float) -> float | None:
    """The larger of two of the next four multiples of 10 above `price` (None: no bound possible)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return None
    return max(rng.sample(above, 2))


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def instruction_text(lead: str, attributes: tuple[str, ...], noun: str, options: tuple[tuple[str, str], ...],
                     price_upper: float | None) -> str:
    """WebShop-style instruction text (lower case, synthetic-goal option format)."""
    text = f"{lead} {_join(list(attributes))} {noun}"
    if options:
        text += " with " + ", and ".join(f"{name}: {value}" for name, value in options)
    if price_upper is not None:
        text += f", and price lower than {price_upper:.2f} dollars"
    return text


def _draw(rng: random.Random, product: Product) -> Goal:
    attributes = tuple(rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes)))))
    options = tuple((name, rng.choice(values)) for name, values in product.options)
    bound = price_bound(rng, product.price)
    noun = _NOUNS[product.type_key]
    text = instruction_text(rng.choice(LEADS), attributes, noun, options, bound)
    keywords = " ".join([*attributes, noun, *(v for _, v in options)])
    return Goal(
        asin=product.asin, query=product.query, product_category=product.product_category, name=product.title,
        attributes=attributes, options=options, price_upper=1_000_000.0 if bound is None else bound,
        instruction=text, keywords=keywords,
    )


@lru_cache(maxsize=16384)
def make_goal(task_id: int, catalog: Catalog) -> Goal:
    """The goal of task `task_id` over `catalog` (deterministic; see the module docstring)."""
    check_task_id(task_id)
    rng = random.Random(f"webshop-v1:goal:{catalog.seed}:{len(catalog)}:{task_id}")
    index = get_index(catalog)
    for _ in range(MAX_DRAWS):
        product = catalog.products[_target_index(rng, len(catalog), task_id in TEST_IDS)]
        goal = _draw(rng, product)
        if product.index in index.search(goal.keywords):
            return goal
    raise RuntimeError(f"webshop: no findable goal for task {task_id} in {MAX_DRAWS} draws")  # never seen
