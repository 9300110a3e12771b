"""WebShop's purchase reward (`web_agent_site/engine/goal.py: get_reward`), re-implemented.

    total = r_type · (n_attr + n_opt + r_price) / (|goal attributes| + |goal options| + 1)

- r_type (product type): 1.0, but 0.5 when neither the query matches, nor >= 2 breadcrumb levels
  match, nor title_score > 0.2; then 0.1 when title_score < 0.1; then 0.0 when title_score == 0.
  title_score = |nouns(bought title) ∩ nouns(goal title)| / |nouns(goal title)| (0.2 when the goal
  title has no nouns).
- n_attr: goal attributes matched, each either fuzzily by one of the product's attributes
  (token_set_ratio > 85) or as a substring of its title, features or description (lower case).
- n_opt: the *chosen* options that match, after `normalize_color` on both sides (a value that
  contains a colour word of WebShop's COLOR_SET becomes that word): a "size" value exactly equal to
  a goal option value, any other value fuzzily (token_set_ratio > 85) to one; failing that, a
  chosen value found as a substring of the title, features or description.
- r_price: 1 when price <= the goal's price bound, else 0.

Deviations from the original, on purpose:
- Nouns: WebShop tags parts of speech with spaCy `en_core_web_lg` (NOUN/PROPN). Here a noun is a
  lower-case word of >= 2 letters that is not a stopword and not a common adjective (`_NOT_NOUNS`).
- n_opt is capped at |goal options|, so the reward never exceeds 1 (the original can pass 1 when
  two chosen values fuzzily match one goal value).
- The price is the product's single price (WebShop draws one from a price range per product).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from agentrl_core.envs.webshop.catalog import Product
from agentrl_core.envs.webshop.fuzzy import token_set_ratio

FUZZY_THRESHOLD = 85  # a fuzzy match needs token_set_ratio strictly above this
EXACT_MATCH_OPTIONS = ("size",)
# WebShop's COLOR_SET (engine/normalize.py), in its order: the first one contained in a value wins.
COLORS = tuple(
    """alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown
    burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac
    copper coral cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite
    grape graphite grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light
    lilac lime magenta maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural navy
    nude olive orange peach pewter pink plum purple rainbow red rose royal rust sand sapphire seashell
    silver skull slate steel stone stonewash sunflower tan taupe teal tiger turquoise violet walnut
    wheat white wine yellow""".split()
)
_WORD = re.compile(r"[a-z][a-z']+")
_NOT_NOUNS = frozenset(
    """a an and the of for with in on to by from or at as is are be this that it its your our my
    new best premium quality everyday essentials value pack seller edition
    free long lasting natural dry sensitive soft super extra high low non fresh light dark deep large
    small medium slim relaxed short wide open quick durable lightweight breathable portable waterproof
    foldable dimmable sturdy organic certified friendly resistant proof insulated double single
    thick fast easy smooth warm cold fair whole full daily multi wireless protective
    men's women's""".split()
)


@dataclass(frozen=True)
class Goal:
    """What the shopper wants (WebShop's goal dict): the target's query, breadcrumb and title, the
    wanted attributes, the wanted option values by option name, and the price bound."""

    asin: str
    query: str
    product_category: str
    name: str  # the target product's title (WebShop's goal['name'])
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]  # (option name, wanted value)
    price_upper: float
    instruction: str = ""
    keywords: str = ""  # search keywords that find the target (what the expert types)

    @property
    def option_values(self) -> list[str]:
        """The wanted option values (what get_option_reward compares against)."""
        return [value for _, value in self.options]


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its parts (WebShop's verbose reward info)."""

    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attr_matches: int
    option_matches: int
    price_ok: bool

    def as_info(self) -> dict[str, float | int | bool]:
        """A JSON-friendly dict for info["reward_info"]."""
        return asdict(self)


def nouns(title: str) -> set[str]:
    """The noun-like words of a title (the stand-in for spaCy's NOUN/PROPN tags)."""
    return {w for w in _WORD.findall(title.lower()) if w not in _NOT_NOUNS}


def normalize_color(value: str) -> str:
    """The first of COLORS contained in `value` (as a substring), else `value` (WebShop's normalize_color)."""
    for color in COLORS:
        if color in value:
            return color
    return value


def _levels(breadcrumb: str) -> set[str]:
    """The levels of a " › "-joined breadcrumb."""
    return {level.strip() for level in breadcrumb.split("›")}


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score); see the module docstring."""
    query_match = product.query == goal.query
    category_match = len(_levels(product.product_category) & _levels(goal.product_category)) >= 2
    wanted, bought = nouns(goal.name), nouns(product.title)
    title_score = len(wanted & bought) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullet_points).lower(), product.description.lower()


def attribute_matches(product: Product, goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzy over its attributes, else in its text)."""
    texts = _product_text(product)
    count = 0
    for wanted in goal_attributes:
        fuzzy = any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes)
        if fuzzy or any(wanted in text for text in texts):  # else found in the title/features/description
            count += 1
    return count


def option_matches(product: Product, goal_values: Sequence[str], chosen: Mapping[str, str]) -> int:
    """How many chosen options match a goal option value (exact for size, else fuzzy), or appear
    in the product's text; capped at len(goal_values)."""
    goal_norm = [normalize_color(v) for v in goal_values]
    texts = _product_text(product)
    count = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in goal_norm
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_norm)
        if matched or any(value in text for text in texts):
            count += 1
    return min(count, len(goal_values))


def get_reward(product: Product, goal: Goal, chosen: Mapping[str, str]) -> RewardBreakdown:
    """The reward for buying `product` with the `chosen` options (option name -> value) for `goal`."""
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(product, goal.option_values, chosen)
    price_ok = product.price <= goal.price_upper
    total = (n_attr + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.options) + 1)
    return RewardBreakdown(
        reward=total * r_type, r_type=r_type, query_match=query_match, category_match=category_match,
        title_score=title_score, attr_matches=n_attr, option_matches=n_opt, price_ok=price_ok,
    )
