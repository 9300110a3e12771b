"""The README's figure tables, rendered from the recorded results in `bench/results/` and nothing else.

`bench/figures.yaml` lists the tables: for each, its columns and rows; a row names the results file it
quotes (`result:`, a record name of `bench/recording.py`) and the text of each cell as a template whose
`{figure}` or `{figure|format}` fields are that file's figures (`format`: a Python format spec such as
`.1f`; `pct` for a fraction shown as a percentage with one decimal, `signed_pct` as signed points; a
text figure is put in as it is). A row's `flatten: [field, ...]` also offers those extra fields of the
results file as figures named by their path (`comparisons/gigpo-seed0-sft-seed0/low`,
`tests/sft-seed0/success_rate`; list items named as `bench/record_command.py` names them). Every table
also gets the CPU the row was measured on (column `CPU`; a GPU table names its card in column `card`) and the
command that printed it, both read from the results file.
In the README a table sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`.

    .venv/bin/python bench/readme_figures.py          # rewrite the README's tables from the results
    .venv/bin/python bench/readme_figures.py --check  # exit 1 and say what differs (the tests run this)
"""

from __future__ import annotations

import argparse
import difflib
import json
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
FIELD = re.compile(r"\{([^{}|]+)(?:\|([^{}]*))?\}")
SECTION = re.compile(r"(<!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.S)


class FiguresError(Exception):
    """The spec, a results file or the README is not what the generator needs; the message says which and why."""


def load_result(record: str, results: Path = RESULTS) -> dict[str, Any]:
    path = results / f"{record}.json"
    if not path.exists():
        raise FiguresError(f"no results file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: run "
                           f"the benchmark with --record {record} (or remove the row from bench/figures.yaml)")
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


def render_row(row: dict[str, Any], columns: list[str], results: Path) -> str:
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
            cells.append(f"`{command}` ([output](bench/results/{record}.txt))")
        else:
            cells.append(fill(str(row.get(col, "")), figures, f"row {row.get(columns[0], record)!r}, column {col!r}"))
    return "| " + " | ".join(c.replace("|", "\\|") if not c.startswith("`") else c for c in cells) + " |"


def render_table(table: dict[str, Any], results: Path = RESULTS) -> str:
    columns = list(table["columns"])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += [render_row(row, columns, results) for row in table["rows"]]
    return "\n".join(lines) + "\n"


def render_readme(text: str, spec: dict[str, Any], results: Path = RESULTS) -> str:
    """The README text with every figures section replaced by its table; every table of the spec must have one."""
    tables = spec.get("tables") or {}
    found = {m.group("name") for m in SECTION.finditer(text)}
    if missing := sorted(set(tables) - found):
        raise FiguresError(f"README has no section for table(s) {missing}: add <!-- figures:NAME --> and "
                           "<!-- /figures:NAME --> lines where each goes")
    if unknown := sorted(found - set(tables)):
        raise FiguresError(f"README sections {unknown} have no table in {SPEC.name}")
    return SECTION.sub(lambda m: m.group(1) + render_table(tables[m.group("name")], results) + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="exit 1 if the README differs from what the results give")
    args = p.parse_args(argv)
    text = README.read_text()
    try:
        new = render_readme(text, yaml.safe_load(SPEC.read_text()))
    except FiguresError as err:
        print(f"readme_figures: {err}", file=sys.stderr)
        return 1
    if new == text:
        print("README figures match bench/results/")
        return 0
    if args.check:
        diff = difflib.unified_diff(text.splitlines(), new.splitlines(), "README.md", "from bench/results", lineterm="")
        print("README figures differ from bench/results/ (run .venv/bin/python bench/readme_figures.py):\n"
              + "\n".join(diff), file=sys.stderr)
        return 1
    README.write_text(new)
    print("README figures rewritten from bench/results/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
