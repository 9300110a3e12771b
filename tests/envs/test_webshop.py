"""WebShop re-implemented offline: catalogue, goals, BM25 search, pages and actions, reward, expert."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

import pytest

from agentrl_core.envs import check_env, env_class, make
from agentrl_core.envs.webshop import WebShop, build_catalog, make_goal, parse_action
from agentrl_core.envs.webshop.catalog import Product, Review
from agentrl_core.envs.webshop.fuzzy import ratio, token_set_ratio
from agentrl_core.envs.webshop.goals import TEST_IDS, TEST_STRIDE, TRAIN_IDS
from agentrl_core.envs.webshop.reward import Goal, get_reward, normalize_color, nouns
from agentrl_core.envs.webshop.search import SEARCH_RETURN_N, get_index
from agentrl_core.envs.webshop.vocab import PRODUCT_TYPES
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

SAMPLE_TRAIN = list(range(0, 10_000, 50))
SAMPLE_TEST = list(TEST_IDS[::5])


@pytest.fixture(scope="module")
def env() -> WebShop:
    return WebShop()


# -- registration, splits -----------------------------------------------------------------------
def test_registered_and_conforms() -> None:
    assert env_class("webshop") is WebShop and env_class("webshop-v1") is WebShop
    check_env(make("webshop"), tasks_per_split=4)
    check_env(WebShop(max_steps=10))


def test_splits_and_unknown_tasks(env: WebShop) -> None:
    assert env.task_ids("train") == range(0, 10_000) and env.task_ids("test") == range(10_000, 10_500)
    for task_id in (-1, 10_500, 10**9):
        with pytest.raises(TaskNotFoundError, match=r"\[0, 10000\)"):
            env.reset(task_id=task_id)


def test_import_does_not_load_rank_bm25() -> None:
    code = "import sys, agentrl_core.envs.webshop; print('rank_bm25' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- catalogue ----------------------------------------------------------------------------------
def test_catalog_is_deterministic_and_well_formed() -> None:
    first, again = build_catalog.__wrapped__(400, 0), build_catalog.__wrapped__(400, 0)
    assert first.products == again.products
    assert build_catalog.__wrapped__(400, 1).products != first.products
    big = build_catalog()
    assert big is build_catalog() and len(big) == 3000  # cached: built once per process
    assert big.products[:400] == first.products  # product i does not depend on the catalogue size
    asins = [p.asin for p in big.products]
    assert len(set(asins)) == len(asins) and all(re.fullmatch(r"B0[0-9A-Z]{8}", a) for a in asins)
    assert {p.type_key for p in big.products} == {t.key for t in PRODUCT_TYPES}
    for p in big.products:
        assert p.index == big.by_asin(p.asin.lower()).index
        assert 2 <= len(p.attributes) and set(p.attributes) <= set(_ptype(p).attributes)
        assert all(len(values) >= 2 for _, values in p.options)
        assert _ptype(p).price[0] <= p.price <= _ptype(p).price[1]
    with pytest.raises(ValueError, match="catalogue size"):
        build_catalog(3)


def _ptype(product: Product):
    return next(t for t in PRODUCT_TYPES if t.key == product.type_key)


def test_vocabulary_keeps_option_credit_honest() -> None:
    """No (colour-normalised) option value appears in its product's own text, and no two values of
    a non-size option are fuzzy-equal: otherwise WebShop's option reward would credit wrong choices."""
    for p in build_catalog().products:
        texts = (p.title.lower(), " ".join(p.bullet_points).lower(), p.description.lower())
        for name, values in p.options:
            for value in values:
                assert not any(normalize_color(value) in t for t in texts), (p.asin, value)
            if name != "size":
                for a in values:
                    for b in values:
                        assert a == b or token_set_ratio(normalize_color(a), normalize_color(b)) <= 85, (a, b)


# -- goals --------------------------------------------------------------------------------------
_INSTRUCTION = re.compile(
    r"^(i need|i am looking for|i want|find me|i would like|show me) .+?"
    r"( with [a-z]+: .+)?, and price lower than \d+\.00 dollars$"
)


def test_goals_are_deterministic_and_consistent(env: WebShop) -> None:
    catalog = env.catalog
    for task_id in SAMPLE_TRAIN + SAMPLE_TEST:
        goal = make_goal(task_id, catalog)
        assert goal == make_goal.__wrapped__(task_id, catalog)
        target = catalog.by_asin(goal.asin)
        assert _INSTRUCTION.match(goal.instruction), goal.instruction
        assert 1 <= len(goal.attributes) <= 3 and set(goal.attributes) <= set(target.attributes)
        assert [n for n, _ in goal.options] == [n for n, _ in target.options]
        assert all(v in target.option_values(n) for n, v in goal.options)
        assert all(f"{n}: {v}" in goal.instruction for n, v in goal.options)
        assert goal.price_upper % 10 == 0 and target.price < goal.price_upper <= target.price + 40
        assert (goal.query, goal.name) == (target.query, target.title)
    assert len({make_goal(t, catalog).instruction for t in SAMPLE_TRAIN}) > 0.95 * len(SAMPLE_TRAIN)


def test_train_and_test_targets_are_disjoint(env: WebShop) -> None:
    train = {env.catalog.by_asin(make_goal(t, env.catalog).asin).index for t in SAMPLE_TRAIN}
    test = {env.catalog.by_asin(make_goal(t, env.catalog).asin).index for t in SAMPLE_TEST}
    assert all(i % TEST_STRIDE == 0 for i in test) and all(i % TEST_STRIDE != 0 for i in train)
    assert TRAIN_IDS.stop <= TEST_IDS.start


# -- search -------------------------------------------------------------------------------------
def test_bm25_finds_every_sampled_target_in_the_first_pages(env: WebShop) -> None:
    index = get_index(env.catalog)
    ranks = []
    for task_id in SAMPLE_TRAIN + SAMPLE_TEST:
        goal = make_goal(task_id, env.catalog)
        results = index.search(goal.keywords)
        assert len(results) == SEARCH_RETURN_N
        ranks.append(results.index(env.catalog.by_asin(goal.asin).index))
    assert sum(r < 10 for r in ranks) > 0.5 * len(ranks)  # mostly on the first page
    assert index.search("") == () and index.search("asdf qwerty") == ()


def test_bm25_scores_equal_rank_bm25(env: WebShop) -> None:
    index = get_index(env.catalog)
    words = ["long", "lasting", "eau", "toilette", "zzz", "long"]
    assert (index.scores(words) == index._bm25.get_scores(words)).all()


# -- pages and actions --------------------------------------------------------------------------
def _to_results(env: WebShop, task_id: int = 3, query: str = "") -> str:
    env.reset(task_id=task_id)
    return env.step(f"search[{query or env.goal.keywords}]").observation


def test_search_page_and_available_actions(env: WebShop) -> None:
    obs, info = env.reset(task_id=7)
    assert obs == f"WebShop [SEP] Instruction: [SEP] {env.goal.instruction} [SEP] Search"
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}
    assert info["instruction"] == env.goal.instruction and info["page"] == "search"


def test_results_pagination(env: WebShop) -> None:
    obs = _to_results(env)
    results = env.session.results
    assert len(results) == 50
    first_asin = env.catalog.products[results[0]].asin
    assert obs.startswith(f"Instruction: [SEP] {env.goal.instruction} [SEP] Back to Search [SEP] "
                          f"Page 1 (Total results: 50) [SEP] Next > [SEP] {first_asin} [SEP] ")
    actions = env.step("click[Next >]").info["available_actions"]
    assert actions["has_search_bar"] is False
    assert actions["clickables"][:3] == ["back to search", "< prev", "next >"]
    assert actions["clickables"][3:] == [env.catalog.products[i].asin.lower() for i in results[10:20]]
    for page in (3, 4, 5):
        obs = env.step("click[next >]").observation
        assert f"Page {page} (Total results: 50)" in obs
    assert "Next >" not in obs and "< Prev" in obs
    assert env.step("click[Next >]").observation.startswith("Invalid action:")
    assert "Page 4 (Total results: 50)" in env.step("click[< Prev]").observation


def test_item_page_options_sub_pages_and_back(env: WebShop) -> None:
    _to_results(env, task_id=11)
    product = env.catalog.products[env.session.results[0]]
    result = env.step(f"click[{product.asin}]")  # upper case works: clicks are case-insensitive
    option_texts = [t for name, values in product.options for t in (name, *values)]
    expected = " [SEP] ".join(["Back to Search", "< Prev", *option_texts, product.title,
                               f"Price: {product.price_tag}", f"Rating: {product.rating}",
                               "Description", "Features", "Reviews", "Buy Now"])
    assert result.observation == f"Instruction: [SEP] {env.goal.instruction} [SEP] {expected}"
    values = [v for _, vs in product.options for v in vs]
    assert result.info["available_actions"]["clickables"] == [
        "back to search", "< prev", *values, "description", "features", "reviews", "buy now"]
    name, value = product.options[0][0], product.options[0][1][-1]
    assert env.step(f"click[{value.upper()}]").info["selected_options"] == {name: value}
    assert env.step("click[Features]").observation.endswith(" [SEP] ".join(product.bullet_points))
    back = env.step("click[< Prev]")
    assert back.info["page"] == "item" and back.info["selected_options"] == {name: value}
    assert env.step("click[description]").observation.endswith(f"< Prev [SEP] {product.description}")
    env.step("click[< prev]")
    reviews = env.step("click[Reviews]").observation
    assert reviews.endswith("No reviews found") or f'"{product.reviews[-1].title}"' in reviews
    env.step("click[< prev]")
    assert env.step("click[< Prev]").info["page"] == "results" and env.session.page_no == 1
    assert env.step("click[Back to Search]").observation.startswith("WebShop [SEP] Instruction:")


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("search[other things]", "only available on the search page"),
        ("click[not a button]", "is not a clickable on this page"),
        ("buy it now please", "reply with search[keywords] or click[value]"),
        ("", "reply with search[keywords] or click[value]"),
    ],
)
def test_invalid_actions_keep_the_page(env: WebShop, action: str, why: str) -> None:
    page = _to_results(env, task_id=5)
    result = env.step(action)
    message, rest = result.observation.split("\n", 1)
    assert message.startswith("Invalid action: ") and why in message and rest == page
    assert (result.reward, result.terminated, result.truncated, result.info["page"]) == (0.0, False, False, "results")


def test_invalid_on_the_search_page(env: WebShop) -> None:
    obs, _ = env.reset(task_id=5)
    for action in ("click[search]", "search[]", "click[buy now]"):
        result = env.step(action)
        assert result.observation.startswith("Invalid action:") and result.observation.endswith(obs)
        assert result.info["page"] == "search"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("search[red shoes]", ("search", "red shoes")),
        ("Thought: the second one fits.\nAction: click[B0ABC12345]", ("click", "B0ABC12345")),
        ("Action:\n`CLICK[ < Prev ]`", ("click", "< Prev")),
        ("click[Buy Now].", ("click", "Buy Now")),
        ("I would buy it", None),
        ("click Buy Now", None),
    ],
)
def test_parse_action(reply: str, expected: tuple[str, str] | None) -> None:
    assert parse_action(reply) == expected


# -- episodes -----------------------------------------------------------------------------------
def _play_expert(env: WebShop, task_id: int) -> tuple[float, int, dict]:
    env.reset(task_id=task_id)
    for steps in range(1, env.max_steps + 1):
        result = env.step(env.expert_action())
        if result.terminated or result.truncated:
            return result.reward, steps, result.info
    raise AssertionError("the episode did not end")


def test_expert_wins_every_sampled_task(env: WebShop) -> None:
    for task_id in SAMPLE_TRAIN[::4] + SAMPLE_TEST[::4]:
        reward, steps, info = _play_expert(env, task_id)
        assert (reward, info["success"]) == (1.0, True) and steps <= 10
        assert info["reward_info"]["r_type"] == 1.0


def test_expert_recovers_from_a_detour(env: WebShop) -> None:
    env.reset(task_id=21)
    env.step("search[zzz nothing matches this]")
    assert env.expert_action() == "click[Back to Search]"
    env.step("click[back to search]")
    env.step(env.expert_action())
    wrong = next(i for i in env.session.results[:10] if env.catalog.products[i].asin != env.goal.asin)
    env.step(f"click[{env.catalog.products[wrong].asin}]")
    env.step("click[features]")
    assert env.expert_action() == "click[< Prev]"
    for _ in range(8):
        result = env.step(env.expert_action())
        if result.terminated:
            break
    assert result.reward == 1.0 and result.info["success"] is True


def test_buying_without_options_and_the_done_page(env: WebShop) -> None:
    env.reset(task_id=42)
    goal = env.goal
    info = env.step(f"search[{goal.keywords}]").info
    for _ in range(4):
        if goal.asin.lower() in info["available_actions"]["clickables"]:
            break
        info = env.step("click[next >]").info
    env.step(f"click[{goal.asin}]")
    result = env.step("click[buy now]")
    n_attr, n_opt = len(goal.attributes), len(goal.options)
    assert result.reward == pytest.approx((n_attr + 0 + 1) / (n_attr + n_opt + 1))
    assert (result.terminated, result.truncated, result.info["success"]) == (True, False, False)
    assert result.observation.startswith(f"Thank you for shopping with us! [SEP] Purchased [SEP] asin [SEP] {goal.asin}")
    assert result.observation.endswith(f"Your score (min 0.0, max 1.0) [SEP] {result.reward:g}")
    with pytest.raises(ResetNeededError):
        env.step("click[buy now]")


def test_truncation_after_max_steps() -> None:
    env = WebShop(max_steps=3)
    env.reset(task_id=1)
    assert env.step("search[anything]").truncated is False
    assert env.step("click[next >]").truncated is False
    last = env.step("click[next >]")
    assert (last.reward, last.terminated, last.truncated, last.info["success"]) == (0.0, False, True, False)


# -- fuzzy matching -----------------------------------------------------------------------------
def test_ratio_and_token_set_ratio_by_hand() -> None:
    assert ratio("abc", "abd") == 67  # LCS 2: 100 * 4 / 6
    assert ratio("", "") == 100 and ratio("abc", "") == 0
    assert token_set_ratio("Gluten-Free", "gluten free") == 100
    assert token_set_ratio("red", "red stripe") == 100  # one word set contains the other
    assert token_set_ratio("", "red") == 0 and token_set_ratio("!!", "red") == 0
    # {dark, roast} vs {light, roast}: I = "roast"; max(ratio(I, "roast dark") = 67,
    # ratio(I, "roast light") = 62.5 -> 62, ratio("roast dark", "roast light") = 12/21 -> 57)
    assert token_set_ratio("dark roast", "light roast") == 67
    assert token_set_ratio("jet", "teal") == ratio("jet", "teal") == 29  # no shared word: LCS 1, 200/7


def test_token_set_ratio_equals_rapidfuzz_on_the_vocabulary() -> None:
    fuzz = pytest.importorskip("rapidfuzz.fuzz")
    utils = pytest.importorskip("rapidfuzz.utils")
    words = sorted({a for t in PRODUCT_TYPES for a in t.attributes} | {v for t in PRODUCT_TYPES for _, vs in t.options for v in vs})
    for a in words:
        for b in words:
            assert token_set_ratio(a, b) == round(fuzz.token_set_ratio(a, b, processor=utils.default_process)), (a, b)


# -- reward, hand-computed ----------------------------------------------------------------------
PERFUME = Product(
    index=0, asin="B0PERFUME1", type_key="perfume", category="Beauty & Personal Care",
    product_category="Beauty & Personal Care › Fragrance › Women's › Eau de Toilette", query="eau de toilette",
    title="Acme Long Lasting Eau de Toilette Spray", attributes=("long lasting", "floral notes"),
    options=(("size", ("1.7 fl oz", "3.4 fl oz")), ("scent", ("citrus", "vanilla"))), price=45.0,
    description="A gift for every season.", bullet_points=("Travel size bottle",), reviews=(Review(5, "t", "b"),),
)
GOAL = Goal(
    asin=PERFUME.asin, query=PERFUME.query, product_category=PERFUME.product_category, name=PERFUME.title,
    attributes=("long lasting", "travel size"), options=(("size", "3.4 fl oz"), ("scent", "citrus")), price_upper=50.0,
)
FULL = {"size": "3.4 fl oz", "scent": "citrus"}


def test_nouns_stand_in_for_spacy() -> None:
    assert nouns(PERFUME.title) == {"acme", "eau", "de", "toilette", "spray"}


def test_reward_full_match_is_one() -> None:
    # "long lasting" is an attribute; "travel size" is found in the features text (the fallback)
    r = get_reward(PERFUME, GOAL, FULL)
    assert (r.reward, r.r_type, r.attr_matches, r.option_matches, r.price_ok) == (1.0, 1.0, 2, 2, True)
    assert (r.query_match, r.category_match, r.title_score) == (True, True, 1.0)


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        ({"size": "3.4 fl oz"}, 4 / 5),  # a missing option
        ({"size": "1.7 fl oz", "scent": "citrus"}, 4 / 5),  # size is matched exactly
        ({"size": "3.4 fl oz", "scent": "vanilla"}, 4 / 5),  # wrong scent, no fuzzy match
        ({}, 3 / 5),
    ],
)
def test_reward_options(chosen: dict[str, str], expected: float) -> None:
    assert get_reward(PERFUME, GOAL, chosen).reward == pytest.approx(expected)


def test_reward_wrong_price_and_missing_attribute() -> None:
    assert get_reward(PERFUME, replace(GOAL, price_upper=40.0), FULL).reward == pytest.approx(4 / 5)
    goal = replace(GOAL, attributes=("long lasting", "travel size", "alcohol free"))
    assert get_reward(PERFUME, goal, FULL).reward == pytest.approx(5 / 6)


def test_reward_option_quirks_of_webshop() -> None:
    # a chosen value found in the product's text counts, even if the goal did not ask for it
    gift = replace(PERFUME, options=(("size", ("1.7 fl oz", "3.4 fl oz")), ("scent", ("citrus", "gift"))))
    assert get_reward(gift, GOAL, {"size": "3.4 fl oz", "scent": "gift"}).option_matches == 2
    # colours are normalised to WebShop's COLOR_SET: "royal blue" and "navy blue" are both "blue"
    goal = replace(GOAL, options=(("color", "navy blue"),))
    assert get_reward(PERFUME, goal, {"color": "royal blue"}).option_matches == 1
    assert get_reward(PERFUME, goal, {"color": "dusty rose"}).option_matches == 0
    # the count is capped at the number of goal options (the original could exceed 1)
    assert get_reward(PERFUME, goal, {"color": "navy blue", "trim": "sky blue"}).reward == pytest.approx(1.0)


def test_reward_wrong_type() -> None:
    earbuds = replace(PERFUME, asin="B0EARBUDS1", type_key="earbuds", query="wireless earbuds", title="Bolt Wireless Earbuds",
                      product_category="Electronics › Headphones › Earbud Headphones", attributes=("noise cancelling",),
                      bullet_points=(), price=30.0)
    r = get_reward(earbuds, GOAL, FULL)
    assert (r.title_score, r.r_type, r.reward) == (0.0, 0.0, 0.0)
    # one shared noun of five (0.2, not > 0.2), another query and one shared breadcrumb level: 0.5
    hair_spray = replace(earbuds, title="Zenith Hair Spray", query="hair spray", attributes=("long lasting",),
                         product_category="Beauty & Personal Care › Hair Care › Styling Products")
    r = get_reward(hair_spray, GOAL, {})
    assert (r.title_score, r.r_type, r.attr_matches, r.option_matches, r.price_ok) == (0.2, 0.5, 1, 0, True)
    assert r.reward == pytest.approx(0.5 * (1 + 0 + 1) / 5)


def test_one_wrong_option_costs_exactly_one_match(env: WebShop) -> None:
    for task_id in SAMPLE_TRAIN[::2]:
        goal = make_goal(task_id, env.catalog)
        target = env.catalog.by_asin(goal.asin)
        right = dict(goal.options)
        assert get_reward(target, goal, right).reward == 1.0
        for name, value in goal.options:
            for other in target.option_values(name):
                if other != value:
                    r = get_reward(target, goal, right | {name: other})
                    assert r.option_matches == len(goal.options) - 1, (goal.instruction, name, other)
