"""The figure tables of README.md and docs/, rendered from the recorded results in `bench/results/` and nothing else.

`bench/figures.yaml` lists the tables: for each, its columns and rows; a row names the results file it
quotes (`result:`, a record name of `bench/recording.py`) and the text of each cell as a template whose
`{figure}` or `{figure|format}` fields are that file's figures (`format`: a Python format spec such as
`.1f`; `pct` for a fraction shown as a percentage with one decimal, `signed_pct` as signed points; a
text figure is put in as it is). A row's `flatten: [field, ...]` also offers those extra fields of the
results file as figures named by their path (`comparisons/gigpo-seed0-sft-seed0/low`,
`tests/sft-seed0/success_rate`; list items named as `bench/record_command.py` names them). Every table
also gets the CPU the row was measured on (column `CPU`; a GPU table names its card in column `card`) and the
command that printed it, both read from the results file.
A table sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->` in README.md or in any page
docs/**/*.md, exactly once across them; its `[output](...)` links are relative to the page it sits in
(`bench/results/x.txt` in the README, `../bench/results/x.txt` in docs/page.md).

`--check` also checks what the tables do not cover (each a function the tests call):
- the figures in running text (`bench/prose_figures.py`): a number of a paragraph that links a results
  file must be in that file;
- the results behind the tables: one recorded from a modified working tree (`git_dirty: true`) backs no
  published row unless `bench/results/DIRTY_ALLOWED.txt` names it (record it at a commit, then take it off).

    .venv/bin/python bench/readme_figures.py          # rewrite the tables of README.md and docs/ from the results
    .venv/bin/python bench/readme_figures.py --check  # exit 1 and say what differs (the tests run this)
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.record_command import flatten  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "bench" / "figures.yaml"
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
DIRTY_ALLOWED = RESULTS / "DIRTY_ALLOWED.txt"
FIELD = re.compile(r"\{([^{}|]+)(?:\|([^{}]*))?\}")
SECTION = re.compile(r"(<!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.S)


class FiguresError(Exception):
    """The spec, a results file or a page is not what the generator needs; the message says which and why."""


def _shown(path: Path, root: Path = ROOT) -> str:
    """`path` relative to `root` when it is under it (as messages show it), else as it is."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def load_result(record: str, results: Path = RESULTS) -> dict[str, Any]:
    path = results / f"{record}.json"
    if not path.exists():
        raise FiguresError(f"no results file {_shown(path)}: run the benchmark with --record {record} "
                           "(or remove the row from bench/figures.yaml)")
    return json.loads(path.read_text())


def fill(template: str, figures: dict[str, Any], where: str) -> str:
    """`template` with each {name|format} replaced by that figure, formatted (a text figure: as it is)."""
    def one(match: re.Match) -> str:
        name, spec = match.group(1).strip(), (match.group(2) or "").strip()
        if isinstance(figures.get(name), str):
            return figures[name]
        if name not in figures:
            raise FiguresError(f"{where}: the results have no figure {name!r} (they have: "
                               f"{', '.join(sorted(figures)[:40])})")
        value = figures[name]
        if spec == "pct":
            return f"{100 * value:.1f}%"
        if spec == "int" or (not spec and float(value).is_integer()):
            return f"{int(round(value)):,}"
        if spec == "signed_pct":
            return f"{100 * value:+.1f}"
        return format(value, spec or ".4g")
    return FIELD.sub(one, template)


def short_cpu(result: dict[str, Any]) -> str:
    """"AMD EPYC (family 25 model 17), 2 cores, AVX512-BF16": the CPU of a results file in one cell."""
    m = result.get("machine") or {}
    flags = set(m.get("flags") or ())
    isa = "AMX" if "amx_bf16" in flags else "AVX512-BF16" if "avx512_bf16" in flags else \
        "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    name = f"{m.get('model', '?')} ({m['generation']})" if m.get("generation") else m.get("model", "?")
    return f"{name}, {m.get('usable_cores', m.get('cores', '?'))} cores, {isa}"


def short_card(result: dict[str, Any]) -> str:
    """"NVIDIA H200 (sm 9.0, 139.8 GiB), torch 2.11.0+cu130": the GPU of a device run's results in one cell."""
    d = result.get("device") or {}
    return f"{d.get('name', '?')} (sm {d.get('capability', '?')}, {d.get('memory_gib', '?')} GiB), torch {d.get('torch', '?')}"


def results_link(page: Path, root: Path = ROOT) -> str:
    """The prefix that reaches `root/bench/results/` from `page`: "bench/results/" from README.md,
    "../bench/results/" from docs/page.md (links in Markdown are relative to the page)."""
    return Path(os.path.relpath(root / "bench" / "results", page.parent)).as_posix() + "/"


def render_row(row: dict[str, Any], columns: list[str], results: Path, link: str = "bench/results/") -> str:
    """One table row from its results file; `link` is the prefix of its `[output]` link (`results_link`)."""
    record = row["result"]
    result = load_result(record, results)
    args = {f"args/{k}": str(v) for k, v in (result.get("args") or {}).items()}
    figures = {**args, **(result.get("texts") or {}), **(result.get("figures") or {})}
    for key in row.get("flatten", ()):  # extra fields of the results (e.g. "tests", "comparisons") as figures
        if key not in result:
            raise FiguresError(f"row {row.get(columns[0], record)!r}: the results {record} have no field {key!r}")
        figures |= flatten(result[key], key)
    cells = []
    for col in columns:
        if col == "CPU":
            cells.append(short_cpu(result))
        elif col == "card":
            cells.append(short_card(result))
        elif col == "command":
            command = result.get("recorded_command") or result["command"]
            cells.append(f"`{command}` ([output]({link}{record}.txt))")
        else:
            cells.append(fill(str(row.get(col, "")), figures, f"row {row.get(columns[0], record)!r}, column {col!r}"))
    return "| " + " | ".join(c.replace("|", "\\|") if not c.startswith("`") else c for c in cells) + " |"


def render_table(table: dict[str, Any], results: Path = RESULTS, link: str = "bench/results/") -> str:
    columns = list(table["columns"])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [render_row(row, columns, results, link) for row in table["rows"]]
    return "\n".join(lines) + "\n"


def page_files(root: Path = ROOT) -> list[Path]:
    """The pages that may hold figure tables and figures: README.md, then every docs/**/*.md, sorted."""
    readme = root / "README.md"
    return ([readme] if readme.exists() else []) + sorted((root / "docs").rglob("*.md"))


def section_pages(pages: dict[Path, str], tables: dict[str, Any], root: Path = ROOT) -> dict[str, Path]:
    """Which page holds each table's section; an error when a table has no section, two sections, or a
    section names no table of the spec."""
    where: dict[str, list[Path]] = {}
    for path, text in pages.items():
        for match in SECTION.finditer(text):
            where.setdefault(match.group("name"), []).append(path)
    if twice := {name: paths for name, paths in where.items() if len(paths) > 1}:
        raise FiguresError("each table has one section, but " + "; ".join(
            f"{name!r} is in {', '.join(_shown(p, root) for p in paths)}" for name, paths in sorted(twice.items()))
            + ": keep one <!-- figures:NAME --> section per table and link to it from elsewhere")
    if missing := sorted(set(tables) - set(where)):
        raise FiguresError(f"no section for table(s) {missing} of {SPEC.name} in README.md or docs/**/*.md: add "
                           "<!-- figures:NAME --> and <!-- /figures:NAME --> lines where each goes "
                           "(or remove the table)")
    if unknown := {name: paths[0] for name, paths in where.items() if name not in tables}:
        raise FiguresError("sections with no table in " + SPEC.name + ": " + ", ".join(
            f"{name!r} ({_shown(p, root)})" for name, p in sorted(unknown.items())))
    return {name: paths[0] for name, paths in where.items()}


def render_pages(pages: dict[Path, str], spec: dict[str, Any], results: Path = RESULTS,
                 root: Path = ROOT) -> dict[Path, str]:
    """Every page's text with each figures section replaced by its table; every table of the spec must have
    exactly one section across the pages (`section_pages`)."""
    tables = spec.get("tables") or {}
    section_pages(pages, tables, root)
    return {path: SECTION.sub(lambda m: m.group(1) + render_table(tables[m.group("name")], results,
                                                                  results_link(path, root)) + m.group(4), text)
            for path, text in pages.items()}


def render_readme(text: str, spec: dict[str, Any], results: Path = RESULTS) -> str:
    """One page (the README) rendered alone: `render_pages` with every table in it."""
    return render_pages({README: text}, spec, results)[README]


def dirty_allowed(path: Path = DIRTY_ALLOWED) -> set[str]:
    """The record names `bench/results/DIRTY_ALLOWED.txt` lets back published rows though recorded from a
    modified tree: one per line, `#` starts a comment (its reason)."""
    if not path.exists():
        return set()
    return {name for line in path.read_text().splitlines() if (name := line.split("#", 1)[0].strip())}


def dirty_published(spec: dict[str, Any], pages: dict[Path, str], results: Path = RESULTS,
                    root: Path = ROOT) -> dict[str, list[str]]:
    """{record: ["table demo", "README.md:242", ...]} for each results file that backs a published figure (a
    table row, or a paragraph that links it: `bench/prose_figures.py`) and says `git_dirty: true`: it was
    recorded from a working tree with uncommitted changes, so no commit reproduces it."""
    from bench.prose_figures import published_records

    where: dict[str, list[str]] = {}
    for name, table in (spec.get("tables") or {}).items():
        for row in table["rows"]:
            if f"table {name}" not in where.setdefault(row["result"], []):
                where[row["result"]].append(f"table {name}")
    for record, places in published_records(pages, root).items():
        where.setdefault(record, []).extend(places)
    return {record: places for record, places in sorted(where.items())
            if (results / f"{record}.json").exists() and load_result(record, results).get("git_dirty")}


def dirty_problems(dirty: dict[str, list[str]], allowed: set[str]) -> list[str]:
    """What is wrong with the dirty results behind published figures (`dirty_published`): one the allow-list
    does not name (an error: record it at a commit), and an allow-list entry that is no longer dirty or no
    longer published (stale: take it off the list)."""
    problems = [f"bench/results/{record}.json ({', '.join(places[:3])}{', ...' if len(places) > 3 else ''}) was "
                "recorded from a modified working tree (git_dirty: true), so no commit reproduces it: commit, record "
                "it again at that commit, and render" for record, places in dirty.items() if record not in allowed]
    problems += [f"{DIRTY_ALLOWED.name} names {record!r}, which backs no dirty published figure now: take it off "
                 "the list" for record in sorted(allowed - set(dirty))]
    return problems


def _diff(path: Path, old: str, new: str) -> str:
    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), _shown(path), "from bench/results",
                                          lineterm=""))


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a page differs from what the results give, or a prose figure or a dirty "
                        "results file is wrong")
    args = p.parse_args(argv)
    from bench.prose_figures import check_pages

    results, spec = root / "bench" / "results", yaml.safe_load((root / "bench" / "figures.yaml").read_text())
    pages = {path: path.read_text() for path in page_files(root)}
    try:
        new = render_pages(pages, spec, results, root)
        dirty = dirty_published(spec, new, results, root)
        problems = dirty_problems(dirty, dirty_allowed(results / DIRTY_ALLOWED.name)) + check_pages(new, root)
    except FiguresError as err:
        print(f"readme_figures: {err}", file=sys.stderr)
        return 1
    changed = [path for path in pages if new[path] != pages[path]]
    if args.check and changed:
        print("figure tables differ from bench/results/ (run .venv/bin/python bench/readme_figures.py):\n"
              + "\n".join(_diff(path, pages[path], new[path]) for path in changed), file=sys.stderr)
    elif changed:
        for path in changed:
            path.write_text(new[path])
        print(f"figure tables rewritten from bench/results/ in {', '.join(_shown(p, root) for p in changed)}")
    else:
        print(f"figure tables match bench/results/ ({len(pages)} pages)")
    for problem in problems:  # "file:line: ..." first, as editors and CI logs link it
        print(problem, file=sys.stderr)
    return 1 if problems or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
