"""The invented world behind SearchQA: countries, cities, organisations and people, with their facts.

One world for every task, generated from a fixed seed (so train and test questions read the same
corpus). All names are invented and unique, so every question has exactly one answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

SEED = "searchqa-world-v1"
NUM_COUNTRIES = 16
CITIES_PER_COUNTRY = 6
NUM_ORGS = 200
NUM_PEOPLE = 700
_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kr", "l", "m", "n", "p", "r", "s", "sh", "t", "th", "v",
           "z", "zh", "qu", "st", "h")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "ae")
_CODAS = ("", "", "", "l", "n", "r", "s", "th", "x", "k", "m", "nd", "rt")
OCCUPATIONS = ("painter", "engineer", "surgeon", "architect", "novelist", "chemist", "sculptor", "composer",
               "astronomer", "economist", "pilot", "botanist", "lawyer", "historian", "photographer", "chef")
INDUSTRIES = ("shipping", "textiles", "mining", "software", "publishing", "brewing", "banking", "aviation",
              "pharmaceuticals", "robotics", "glassmaking", "insurance")
ORG_SUFFIXES = ("Industries", "Holdings", "Works", "Guild", "Company", "Collective", "Foundry", "Labs",
                "Trading", "Institute", "Group", "Consortium")
CURRENCY_UNITS = ("mark", "crown", "florin", "dinar", "thaler", "shilling")


@dataclass(frozen=True)
class Country:
    name: str
    capital: str
    currency: str


@dataclass(frozen=True)
class City:
    name: str
    country: str
    population: int


@dataclass(frozen=True)
class Org:
    name: str
    founder: str
    founded: int
    headquarters: str
    industry: str
    employees: int


@dataclass(frozen=True)
class Person:
    name: str
    birthplace: str
    born: int
    occupation: str
    employer: str
    tenure: int


@dataclass(frozen=True)
class World:
    """Every entity, each tuple in generation order; names are unique across the whole world."""

    countries: tuple[Country, ...]
    cities: tuple[City, ...]
    orgs: tuple[Org, ...]
    people: tuple[Person, ...]


class _Names:
    """Unique invented capitalised words ("Velmora", "Thaikrest")."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: tuple[int, ...] = (2, 2, 3)) -> str:
        for _ in range(1000):
            n = self.rng.choice(syllables)
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(n)]
            word = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if word not in self.used:
                self.used.add(word)
                return word
        raise RuntimeError("searchqa: could not invent a fresh name in 1000 tries")


def _people_names(names: _Names, rng: random.Random) -> list[str]:
    """NUM_PEOPLE unique full names from shared pools, so first names and surnames repeat."""
    firsts = [names.word((2,)) for _ in range(150)]
    lasts = [names.word((2, 3)) for _ in range(300)]
    full: set[str] = set()
    while len(full) < NUM_PEOPLE:
        full.add(f"{rng.choice(firsts)} {rng.choice(lasts)}")
    return sorted(full, key=lambda _: rng.random())


@lru_cache(maxsize=1)
def make_world() -> World:
    """The one SearchQA world (deterministic; built once per process)."""
    rng = random.Random(SEED)
    names = _Names(rng)
    countries_cities = []
    cities = []
    for _ in range(NUM_COUNTRIES):
        country = names.word((2, 3))
        members = [
            City(names.word(), country, rng.randrange(5_000, 2_000_000, 1_000)) for _ in range(CITIES_PER_COUNTRY)
        ]
        cities += members
        currency = f"{names.word((2,)).lower()} {rng.choice(CURRENCY_UNITS)}"
        countries_cities.append(Country(country, rng.choice(members).name, currency))
    person_names = _people_names(names, rng)
    births = {p: rng.randint(1900, 1975) for p in person_names}  # founding years stay <= 2020
    orgs = []
    for _ in range(NUM_ORGS):
        founder = rng.choice(person_names)
        orgs.append(Org(
            f"{names.word()} {rng.choice(ORG_SUFFIXES)}", founder, births[founder] + rng.randint(22, 45),
            rng.choice(cities).name, rng.choice(INDUSTRIES), rng.randrange(20, 50_000, 10),
        ))
    people = tuple(
        Person(p, rng.choice(cities).name, births[p], rng.choice(OCCUPATIONS), rng.choice(orgs).name,
               rng.randint(1, 30))
        for p in person_names
    )
    return World(tuple(countries_cities), tuple(cities), tuple(orgs), people)
