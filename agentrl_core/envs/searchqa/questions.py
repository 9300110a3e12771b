"""SearchQA questions: single-hop and two-hop templates over the world, with gold queries per hop.

Each question lists its hops: the gold query (subject name + a word of the fact's passage) and
the passage that answers it. Every (template, subject) pair is one question; all of them are
enumerated in a fixed order and shuffled with a fixed seed, so task id i is question i. Train and
test take disjoint id ranges of that list, so no test question is a train question.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from agentrl_core.envs.searchqa.world import World, make_world

SEED = "searchqa-questions-v1"


@dataclass(frozen=True)
class Hop:
    """One retrieval step: the query that finds the fact, the passage key holding it, and its value."""

    query: str
    passage: tuple[str, str]
    value: str


@dataclass(frozen=True)
class Question:
    """A question, its short answer, and the hops from the subject to the answer (1 or 2)."""

    text: str
    answer: str
    hops: tuple[Hop, ...]
    template: str


class _Facts:
    """Lookups by name, and one Hop per relation (relation name -> (query word, passage kind, getter))."""

    def __init__(self, world: World) -> None:
        self.person = {p.name: p for p in world.people}
        self.org = {o.name: o for o in world.orgs}
        self.city = {c.name: c for c in world.cities}
        self.country = {k.name: k for k in world.countries}

    def hop(self, relation: str, subject: str) -> Hop:
        word, kind, get = _RELATIONS[relation]
        return Hop(f"{subject} {word}", (kind, subject), str(get(self, subject)))


_RELATIONS: dict[str, tuple[str, str, Callable[[_Facts, str], object]]] = {
    "birthplace": ("born", "person-born", lambda f, s: f.person[s].birthplace),
    "born": ("born", "person-born", lambda f, s: f.person[s].born),
    "occupation": ("profession", "person-born", lambda f, s: f.person[s].occupation),
    "employer": ("employed", "person-employer", lambda f, s: f.person[s].employer),
    "founder": ("founded", "org-founded", lambda f, s: f.org[s].founder),
    "founded": ("founded", "org-founded", lambda f, s: f.org[s].founded),
    "headquarters": ("headquartered", "org-headquarters", lambda f, s: f.org[s].headquarters),
    "country": ("country", "city", lambda f, s: f.city[s].country),
    "capital": ("capital", "country", lambda f, s: f.country[s].capital),
    "currency": ("currency", "country", lambda f, s: f.country[s].currency),
}

# template name -> (subject kind, relations in hop order, question text with {s} for the subject)
TEMPLATES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "birthplace": ("person", ("birthplace",), "Where was {s} born?"),
    "birth_year": ("person", ("born",), "In which year was {s} born?"),
    "occupation": ("person", ("occupation",), "What is the occupation of {s}?"),
    "employer": ("person", ("employer",), "Which organisation employs {s}?"),
    "founder": ("org", ("founder",), "Who founded {s}?"),
    "founded_year": ("org", ("founded",), "In which year was {s} founded?"),
    "headquarters": ("org", ("headquarters",), "In which city is {s} headquartered?"),
    "city_country": ("city", ("country",), "In which country is the city of {s}?"),
    "capital": ("country", ("capital",), "What is the capital of {s}?"),
    "currency": ("country", ("currency",), "What is the currency of {s}?"),
    "birth_country": ("person", ("birthplace", "country"), "In which country is the city where {s} was born?"),
    "founder_birthplace": ("org", ("founder", "birthplace"), "Where was the founder of {s} born?"),
    "founder_birth_year": ("org", ("founder", "born"), "In which year was the founder of {s} born?"),
    "hq_country": ("org", ("headquarters", "country"), "In which country is {s} headquartered?"),
    "employer_founder": ("person", ("employer", "founder"), "Who founded the organisation that employs {s}?"),
    "employer_hq": ("person", ("employer", "headquarters"), "In which city is the employer of {s} headquartered?"),
    "capital_of_country": ("city", ("country", "capital"), "What is the capital of the country in which {s} lies?"),
}


def _subjects(world: World, kind: str) -> list[str]:
    source = {"person": world.people, "org": world.orgs, "city": world.cities, "country": world.countries}[kind]
    return [e.name for e in source]


def make_question(facts: _Facts, template: str, subject: str) -> Question:
    """Chain the template's relations from `subject`: each hop's value is the next hop's subject."""
    _, relations, text = TEMPLATES[template]
    hops, current = [], subject
    for relation in relations:
        hops.append(facts.hop(relation, current))
        current = hops[-1].value
    return Question(text.format(s=subject), current, tuple(hops), template)


def _all_questions(world: World) -> Iterator[Question]:
    facts = _Facts(world)
    for template, (kind, _, _) in TEMPLATES.items():
        for subject in _subjects(world, kind):
            yield make_question(facts, template, subject)


@lru_cache(maxsize=1)
def all_questions() -> tuple[Question, ...]:
    """Every question of the world, shuffled with a fixed seed (task id i is entry i)."""
    questions = list(_all_questions(make_world()))
    random.Random(SEED).shuffle(questions)
    return tuple(questions)
