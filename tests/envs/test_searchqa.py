"""SearchQA: answer normalisation, actions and rewards, the generated world and corpus, BM25 retrieval."""

from __future__ import annotations

import re
from collections import Counter

import pytest

pytest.importorskip("rank_bm25")

from agentrl_core.envs import check_env, env_class, make
from agentrl_core.envs.searchqa import (
    TEMPLATES,
    TEST_IDS,
    TRAIN_IDS,
    Question,
    SearchQA,
    all_questions,
    corpus,
    exact_match,
    index,
    make_world,
    normalize_answer,
    parse_action,
    tokenize,
)
from agentrl_core.envs.searchqa.env import FORMAT_MESSAGE
from agentrl_core.envs.searchqa.questions import Hop
from agentrl_core.errors import ResetNeededError, TaskNotFoundError

_DOC = re.compile(r"^Doc (\d)\(Title: ([^)]+)\) (.+)$")


def _passage_index() -> dict[tuple[str, str], int]:
    return {p.key: i for i, p in enumerate(corpus())}


def _env_on(question: Question, **kwargs: int) -> SearchQA:
    env = SearchQA(**kwargs)
    env.reset(task_id=0)
    env._question = question
    return env


GOLD = Question(
    "Who founded Acme?", "Sugou Luru", (Hop("Acme founded", ("org-founded", "Acme"), "Sugou Luru"),), "founder"
)


# -- contract ---------------------------------------------------------------------------------------
def test_registered_and_conforms() -> None:
    assert env_class("searchqa") is SearchQA
    check_env(make("searchqa"), tasks_per_split=5)
    check_env(SearchQA(max_searches=2, top_k=1))


def test_splits_are_disjoint_and_fit_the_questions() -> None:
    env = SearchQA()
    assert env.task_ids("train") == range(0, 5000) and env.task_ids("test") == range(5000, 6000)
    questions = all_questions()
    assert len(questions) >= TEST_IDS.stop
    train = {questions[i].text for i in TRAIN_IDS}
    test = {questions[i].text for i in TEST_IDS}
    assert len(train) == len(TRAIN_IDS) and len(test) == len(TEST_IDS) and not train & test
    for ids in (TRAIN_IDS, TEST_IDS):  # both hop counts in both splits
        assert set(Counter(len(questions[i].hops) for i in ids)) == {1, 2}


@pytest.mark.parametrize("task_id", [-1, 6000, 10**9])
def test_unknown_task(task_id: int) -> None:
    with pytest.raises(TaskNotFoundError, match=r"\[0, 5000\)"):
        SearchQA().reset(task_id=task_id)


def test_bad_settings_and_expert_before_reset() -> None:
    with pytest.raises(ValueError, match="top_k"):
        SearchQA(top_k=0)
    with pytest.raises(ValueError, match="max_searches"):
        SearchQA(max_searches=-1)
    with pytest.raises(ResetNeededError):
        SearchQA().expert_action()


def test_deterministic() -> None:
    assert make_world.__wrapped__() == make_world()
    assert all_questions.__wrapped__() == all_questions()
    first = SearchQA().reset(task_id=17)
    assert SearchQA().reset(task_id=17, seed=5) == first
    assert first[0] == f"Question: {all_questions()[17].text}\nYou may search up to 4 times before answering."


# -- answers and actions ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The  Velmora!", "velmora"),
        ("  Sugou   Luru. ", "sugou luru"),
        ("an Apple a day", "apple day"),
        ("Theodore Anderson", "theodore anderson"),  # articles only as whole words
        ("1,962", "1962"),
        ("maesai-florin", "maesaiflorin"),  # punctuation is dropped, not turned into a space
        ("A", ""),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, normal: str) -> None:
    assert normalize_answer(text) == normal


def test_exact_match() -> None:
    assert exact_match("the Maesai Florin.", "maesai florin")
    assert exact_match("GUDRO", "Gudro")
    assert not exact_match("Gudro city", "Gudro")
    assert not exact_match("1961", "1962")


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ("<think>hmm</think><search> Acme founded </search>", ("search", "Acme founded")),
        ("<ANSWER>Gudro</ANSWER>", ("answer", "Gudro")),
        ("<search>a</search> then <answer>b</answer>", ("search", "a")),  # the first tag counts
        ("<answer>two\nlines</answer>", ("answer", "two\nlines")),
        ("<search>unclosed", None),
        ("<search>x</answer>", None),
        ("just text", None),
    ],
)
def test_parse_action(reply: str, parsed: tuple[str, str] | None) -> None:
    assert parse_action(reply) == parsed


def test_correct_answer_rewards_one() -> None:
    env = _env_on(GOLD)
    result = env.step("I think <answer>the sugou luru</answer>")
    assert (result.observation, result.reward, result.terminated, result.truncated) == ("Correct.", 1.0, True, False)
    assert result.info == {"success": True, "searches": 0, "answer": "the sugou luru"}
    with pytest.raises(ResetNeededError):
        env.step("<answer>x</answer>")


def test_wrong_answer_ends_with_zero() -> None:
    env = _env_on(GOLD)
    result = env.step("<answer>Sugou</answer>")
    assert (result.observation, result.reward, result.terminated, result.truncated) == ("Incorrect.", 0.0, True, False)
    assert result.info["success"] is False


def test_format_errors_and_limits() -> None:
    env = _env_on(GOLD, max_searches=2)
    assert env.max_steps == 3
    first = env.step("no tags here")
    assert (first.observation, first.reward, first.terminated, first.truncated) == (FORMAT_MESSAGE, 0.0, False, False)
    empty = env.step("<search>   </search>")
    assert empty.observation.startswith("Your search query was empty.")
    assert empty.observation.endswith("\nThis is your last turn: answer now as <answer>answer</answer>.")
    last = env.step("<search>more</search>")
    assert (last.reward, last.terminated, last.truncated, last.info["success"]) == (0.0, False, True, False)


def test_no_searches_left() -> None:
    env = _env_on(GOLD, max_searches=0)
    result = env.step("<search>Acme</search>")
    assert result.observation.startswith("No searches left.") and result.truncated and result.info["searches"] == 0


def test_search_observation_format() -> None:
    env = _env_on(all_questions()[0], top_k=5)
    obs = env.step("<search>" + all_questions()[0].hops[0].query + "</search>").observation
    assert obs.startswith("<information>Doc 1(Title: ") and obs.endswith("\n</information>")
    lines = obs.removeprefix("<information>").removesuffix("\n</information>").split("\n")
    assert [int(_DOC.match(line)[1]) for line in lines] == [1, 2, 3, 4, 5]
    titles = {p.title for p in corpus()}
    assert all(_DOC.match(line)[2] in titles for line in lines)
    assert env.search("the of and") == "<information></information>"  # only stop words: nothing found


# -- world, corpus, retrieval -----------------------------------------------------------------------
def test_world_names_are_unique_and_facts_consistent() -> None:
    world = make_world()
    names = [e.name for group in (world.countries, world.cities, world.orgs, world.people) for e in group]
    assert len(names) == len(set(names)) == 16 + 96 + 200 + 700
    cities = {c.name: c for c in world.cities}
    born = {p.name: p.born for p in world.people}
    for country in world.countries:
        assert cities[country.capital].country == country.name
    for org in world.orgs:
        assert org.headquarters in cities and born[org.founder] + 22 <= org.founded <= 2020
    assert len(corpus()) == 2 * 700 + 2 * 200 + 96 + 16


def test_corpus_holds_every_fact_every_question_needs() -> None:
    keys = _passage_index()
    passages = corpus()
    for question in all_questions():
        subject = question.hops[0].query.rsplit(" ", 1)[0]
        assert subject in question.text and len(question.hops) == len(TEMPLATES[question.template][1])
        for hop, after in zip(question.hops, question.hops[1:] + (None,)):
            passage = passages[keys[hop.passage]]
            assert hop.passage[1] in passage.text and hop.value in passage.text
            assert hop.query.rsplit(" ", 1)[1] in tokenize(passage.text)  # the query word is in the passage
            if after is not None:
                assert after.passage[1] == hop.value  # hops chain: a value is the next subject
        assert question.answer == question.hops[-1].value


def test_bm25_finds_the_gold_passage_in_the_top_k() -> None:
    keys = _passage_index()
    ranks = Counter()
    for question in all_questions()[::3]:
        for hop in question.hops:
            top = index().search(hop.query, 3)
            assert keys[hop.passage] in top, hop.query
            ranks[top.index(keys[hop.passage])] += 1
    assert ranks[0] > 2 * ranks[1]  # mostly first


def test_expert_solves_both_splits() -> None:
    env = SearchQA()
    for task_id in list(TRAIN_IDS[:150]) + list(TEST_IDS[:150]):
        env.reset(task_id=task_id)
        question = env.question
        actions = []
        for _ in range(env.max_steps):
            actions.append(env.expert_action())
            result = env.step(actions[-1])
            if result.terminated or result.truncated:
                break
        assert result.reward == 1.0 and result.info["success"] is True
        searches = [f"<search>{h.query}</search>" for h in question.hops]
        assert actions == [*searches, f"<answer>{question.answer}</answer>"]


def test_expert_answers_when_out_of_turns() -> None:
    env = SearchQA(max_searches=1)
    two_hop = next(i for i in TRAIN_IDS if len(all_questions()[i].hops) == 2)
    env.reset(task_id=two_hop)
    env.step(env.expert_action())
    assert env.expert_action().startswith("<answer>")  # one turn left: answer, even if it is a guess
