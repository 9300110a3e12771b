"""Generated databases: four invented domains, rows seeded by a db id, written once to a cache file.

A db id fixes everything: the domain is `DOMAINS[db_id % len(DOMAINS)]` and the rows come from
`random.Random(f"sql-v{GENERATOR_VERSION}:{db_id}")`. Names (people, products, titles, places)
are invented from syllables, unique within a table, so questions that list names are unambiguous.
Each database file is built once at `$AGENTRL_HOME/sql/v<GENERATOR_VERSION>/db-<id>.sqlite`
(written under a temporary name, then `os.replace`d; concurrent builders each write their own
temporary file and the last rename wins, so readers only ever see a complete file).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentrl_core.system.fsync import fsync_dir, fsync_file
from agentrl_core.system.home import agentrl_home

GENERATOR_VERSION = 1  # bump when generated rows or schemas change: old cache files are then ignored

_SYLLABLES = (
    "bra", "cel", "dor", "el", "fen", "gar", "hal", "ist", "jor", "kel", "lun", "mar", "nor", "ob",
    "pel", "quin", "ras", "sel", "tor", "ul", "val", "wen", "yr", "zan", "mi", "ta", "ko", "ri",
)
_CITIES = (
    "Brenmoor", "Calvette", "Dunmarsh", "Elsworth", "Farrowby", "Glenquist", "Harlowe", "Ivenbridge",
    "Jorvale", "Kestwick", "Lunmere", "Marrowgate",
)
_COUNTRIES = ("Velmaria", "Ostrand", "Quillora", "Tarvonia", "Zembria", "Norvale", "Castel", "Ombria")
_THING_NOUNS = ("Lamp", "Kettle", "Backpack", "Chair", "Scarf", "Mug", "Clock", "Blanket", "Vase", "Tent")
_COURSE_NOUNS = ("Studies", "Theory", "Lab", "Seminar", "Workshop", "Methods")
_BOOK_NOUNS = ("Tides", "Embers", "Gardens", "Shadows", "Letters", "Winters", "Roads", "Echoes")
_DEPARTMENTS = ("Research", "Sales", "Support", "Finance", "Logistics", "Design", "Legal", "Marketing")


@dataclass(frozen=True)
class Column:
    """One column. `kind` is one of: id, name, category, int, real, date, fk.

    `noun` is how questions refer to the column ("city", "price"); `low`/`high` bound int and real
    values (years, for dates); `choices` is a category's vocabulary (a few are used per db); `ref`
    names the table an fk points to; `naming` picks the name style (person, thing, course, book,
    project, department).
    """

    name: str
    kind: str
    noun: str = ""
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()
    ref: str = ""
    naming: str = "person"

    @property
    def sql_type(self) -> str:
        """The SQLite column type."""
        return {"real": "REAL", "int": "INTEGER", "id": "INTEGER", "fk": "INTEGER"}.get(self.kind, "TEXT")


@dataclass(frozen=True)
class Table:
    """One table: its name, how questions call one row and many rows, its columns and row-count range."""

    name: str
    singular: str
    plural: str
    columns: tuple[Column, ...]
    rows: tuple[int, int]

    def column(self, name: str) -> Column:
        """The column called `name` (KeyError when absent)."""
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name} has no column {name!r}")

    def of_kind(self, *kinds: str) -> list[Column]:
        """The columns whose kind is one of `kinds`, in table order."""
        return [c for c in self.columns if c.kind in kinds]

    @property
    def name_column(self) -> Column | None:
        """The column that names a row (None for event tables such as orders)."""
        names = self.of_kind("name")
        return names[0] if names else None


@dataclass(frozen=True)
class Domain:
    """A themed schema; tables are listed parents first (an fk only points to an earlier table)."""

    name: str
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table:
        """The table called `name` (KeyError when absent)."""
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f"domain {self.name} has no table {name!r}")


def _id() -> Column:
    return Column("id", "id", "id")


def _city() -> Column:
    return Column("city", "category", "city", choices=_CITIES)


DOMAINS: tuple[Domain, ...] = (
    Domain("school", (
        Table("students", "student", "students", (
            _id(), Column("name", "name", "name"), _city(),
            Column("year", "int", "year of study", 1, 4), Column("gpa", "real", "GPA", 1.5, 4.0),
        ), (30, 60)),
        Table("courses", "course", "courses", (
            _id(), Column("title", "name", "title", naming="course"),
            Column("department", "category", "department",
                   choices=("Mathematics", "History", "Biology", "Music", "Physics", "Literature")),
            Column("credits", "int", "number of credits", 1, 6),
        ), (10, 20)),
        Table("enrollments", "enrollment", "enrollments", (
            _id(), Column("student_id", "fk", "student", ref="students"),
            Column("course_id", "fk", "course", ref="courses"),
            Column("score", "int", "score", 40, 100),
            Column("term", "category", "term", choices=("spring", "summer", "autumn")),
        ), (80, 200)),
    )),
    Domain("shop", (
        Table("customers", "customer", "customers", (
            _id(), Column("name", "name", "name"), _city(),
            Column("signup_date", "date", "signup date", 2019, 2024),
        ), (25, 60)),
        Table("products", "product", "products", (
            _id(), Column("name", "name", "name", naming="thing"),
            Column("category", "category", "category",
                   choices=("kitchen", "garden", "toys", "clothing", "office", "sports")),
            Column("price", "real", "price", 2, 500),
        ), (15, 40)),
        Table("orders", "order", "orders", (
            _id(), Column("customer_id", "fk", "customer", ref="customers"),
            Column("product_id", "fk", "product", ref="products"),
            Column("quantity", "int", "quantity", 1, 10),
            Column("order_date", "date", "order date", 2021, 2024),
        ), (80, 250)),
    )),
    Domain("library", (
        Table("authors", "author", "authors", (
            _id(), Column("name", "name", "name"),
            Column("country", "category", "country", choices=_COUNTRIES),
            Column("birth_year", "int", "birth year", 1900, 1995),
        ), (12, 30)),
        Table("books", "book", "books", (
            _id(), Column("title", "name", "title", naming="book"),
            Column("author_id", "fk", "author", ref="authors"),
            Column("genre", "category", "genre",
                   choices=("mystery", "fantasy", "poetry", "history", "science", "romance")),
            Column("pages", "int", "number of pages", 80, 900),
            Column("published_year", "int", "publication year", 1950, 2024),
        ), (30, 80)),
        Table("members", "member", "members", (
            _id(), Column("name", "name", "name"), _city(),
        ), (20, 50)),
        Table("loans", "loan", "loans", (
            _id(), Column("book_id", "fk", "book", ref="books"),
            Column("member_id", "fk", "member", ref="members"),
            Column("loan_date", "date", "loan date", 2022, 2024),
            Column("days", "int", "loan length in days", 1, 60),
        ), (60, 200)),
    )),
    Domain("company", (
        Table("departments", "department", "departments", (
            _id(), Column("name", "name", "name", naming="department"), _city(),
        ), (5, 8)),
        Table("employees", "employee", "employees", (
            _id(), Column("name", "name", "name"),
            Column("department_id", "fk", "department", ref="departments"),
            Column("role", "category", "role", choices=("engineer", "analyst", "manager", "clerk", "designer")),
            Column("salary", "int", "salary", 30_000, 150_000),
            Column("hire_date", "date", "hire date", 2010, 2024),
        ), (40, 120)),
        Table("projects", "project", "projects", (
            _id(), Column("name", "name", "name", naming="project"),
            Column("department_id", "fk", "department", ref="departments"),
            Column("status", "category", "status", choices=("active", "paused", "finished")),
            Column("budget", "real", "budget", 10_000, 900_000),
        ), (10, 30)),
    )),
)


@dataclass(frozen=True)
class Database:
    """One generated database: its id, domain and rows (table name -> tuples in column order)."""

    db_id: int
    domain: Domain
    rows: dict[str, tuple[tuple[Any, ...], ...]]

    def values(self, table: str, column: str) -> list[Any]:
        """Every value of `table.column`, in row order."""
        index = [c.name for c in self.domain.table(table).columns].index(column)
        return [row[index] for row in self.rows[table]]

    def schema_sql(self) -> str:
        """The CREATE TABLE statements (what the model sees), one per table, parents first."""
        return "\n".join(create_table_sql(t) for t in self.domain.tables)


def create_table_sql(table: Table) -> str:
    """`CREATE TABLE` for one table, with its primary key and foreign keys."""
    lines = [f"  {c.name} {c.sql_type}" + (" PRIMARY KEY" if c.kind == "id" else " NOT NULL") for c in table.columns]
    lines += [f"  FOREIGN KEY ({c.name}) REFERENCES {c.ref}(id)" for c in table.of_kind("fk")]
    return f"CREATE TABLE {table.name} (\n" + ",\n".join(lines) + "\n);"


# -- row generation ------------------------------------------------------------------------------
def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize()


def _name(rng: random.Random, naming: str) -> str:
    """One invented name in the given style."""
    if naming == "thing":
        return f"{_word(rng, 2)} {rng.choice(_THING_NOUNS)}"
    if naming == "course":
        return f"{_word(rng, 2)} {rng.choice(_COURSE_NOUNS)}"
    if naming == "book":
        return f"{rng.choice(_BOOK_NOUNS)} of {_word(rng, 2)}"
    if naming == "project":
        return f"Project {_word(rng, 2)}"
    return f"{_word(rng, rng.randint(1, 2))} {_word(rng, 2)}"  # a person: first and last name


def _unique_names(rng: random.Random, naming: str, count: int) -> list[str]:
    """`count` distinct names (departments come from a fixed list of 8)."""
    if naming == "department":
        return rng.sample(_DEPARTMENTS, count)
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < count:  # 28^4 combinations per style: this ends after a few extra draws
        name = _name(rng, naming)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def _date(rng: random.Random, first_year: int, last_year: int) -> str:
    start = dt.date(first_year, 1, 1).toordinal()
    end = dt.date(last_year, 12, 31).toordinal()
    return dt.date.fromordinal(rng.randint(start, end)).isoformat()


def _column_values(rng: random.Random, col: Column, count: int, parents: dict[str, int]) -> list[Any]:
    """`count` values for one column; fks point to rows of already generated tables."""
    if col.kind == "id":
        return list(range(1, count + 1))
    if col.kind == "name":
        return _unique_names(rng, col.naming, count)
    if col.kind == "category":
        vocabulary = rng.sample(col.choices, min(len(col.choices), rng.randint(3, 5)))
        return [rng.choice(vocabulary) for _ in range(count)]
    if col.kind == "int":
        return [rng.randint(int(col.low), int(col.high)) for _ in range(count)]
    if col.kind == "real":
        return [round(rng.uniform(col.low, col.high), 2) for _ in range(count)]
    if col.kind == "date":
        return [_date(rng, int(col.low), int(col.high)) for _ in range(count)]
    if col.kind == "fk":
        # a skewed choice, so some parents have many children and some have none
        size = parents[col.ref]
        weights = [rng.random() ** 2 for _ in range(size)]
        return rng.choices(range(1, size + 1), weights=weights, k=count)
    raise ValueError(f"unknown column kind {col.kind!r} in column {col.name}")


@lru_cache(maxsize=64)
def generate(db_id: int) -> Database:
    """The database of `db_id` (pure: the same id always gives the same rows)."""
    if db_id < 0:
        raise ValueError(f"db ids are non-negative, got {db_id}")
    domain = DOMAINS[db_id % len(DOMAINS)]
    rng = random.Random(f"sql-v{GENERATOR_VERSION}:{db_id}")
    sizes: dict[str, int] = {}
    rows: dict[str, tuple[tuple[Any, ...], ...]] = {}
    for table in domain.tables:
        count = rng.randint(*table.rows)
        if table.name == "departments":
            count = min(count, len(_DEPARTMENTS))
        columns = [_column_values(rng, col, count, sizes) for col in table.columns]
        sizes[table.name] = count
        rows[table.name] = tuple(zip(*columns))
    return Database(db_id, domain, rows)


# -- the cache file ------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where this generator version keeps its database files: `$AGENTRL_HOME/sql/v<version>/`."""
    return agentrl_home() / "sql" / f"v{GENERATOR_VERSION}"


def db_path(db_id: int, folder: Path | None = None) -> Path:
    """The file of database `db_id` (built or not)."""
    return (folder or cache_dir()) / f"db-{db_id:05d}.sqlite"


def write_database(path: Path, db: Database) -> None:
    """Create `path` (must not exist) holding the schema and rows of `db`."""
    conn = sqlite3.connect(path)
    try:
        # a private temporary file: no journal, no syncs while writing; one fsync before the rename
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(db.schema_sql())
        for table in db.domain.tables:
            marks = ", ".join("?" for _ in table.columns)
            conn.executemany(f"INSERT INTO {table.name} VALUES ({marks})", db.rows[table.name])
        conn.commit()
    finally:
        conn.close()


def ensure_database(db_id: int, folder: Path | None = None) -> Path:
    """The path of database `db_id`, building the file first when it is missing.

    Safe when several processes build the same id at once: each writes its own temporary file in
    the same folder and renames it over the final name (atomic on POSIX); the contents are equal.
    """
    path = db_path(db_id, folder)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        write_database(tmp, generate(db_id))
        fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}-journal").unlink(missing_ok=True)
    fsync_dir(path.parent)
    return path
