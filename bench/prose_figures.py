"""The figures in running text: each number of a paragraph that links a results file must be in that file.

The figure tables are rendered (`bench/readme_figures.py`); a figure written in a sentence cannot be, so it
is checked. The rule, for README.md and every docs/**/*.md:

- A *paragraph* is a run of lines between blank lines; a table row, a list item (with its indented
  continuation lines) and a heading are each one paragraph of their own. Fenced code blocks and the
  rendered `<!-- figures:NAME -->` sections are skipped.
- A paragraph is checked when it links a results file: `bench/results/NAME.txt` or `NAME.json`, with any
  relative prefix (`../bench/results/...`), in a link or in code. Its figures are looked up in every
  results file it links (`NAME.json` and `NAME.txt` both, where they exist).
- A *figure* is a number written with a decimal point (`0.09`, `1.43x`, `−21.5`) or followed by a percent
  sign (`45%`, `32.0%`), outside inline code, link targets, URLs and HTML comments. Not figures: integers
  without `%` (years, step counts, list items, task counts), version-like numbers with two or more dots
  (`2.11.0`, `127.0.0.1`), numbers glued to a letter (`Qwen2.5`, `1.5B`, `5e-5`), and `128×2`-style grids.
- A figure is *backed* when, sign dropped, it equals a number the linked results hold, rounded to the
  figure's decimals, as it is or times 100 (a fraction written as a percentage: 0.425 -> `42.5%`, -0.215
  -> `−21.5` points). The numbers a results record holds: every numeric leaf of its JSON (its `figures`
  and extra fields), and every number written in its `.txt` console output or in a text of the JSON
  (`"63.0% [56.1, 69.4] n=200"`; `p = 0.0703` backs `p = 0.07`).

    .venv/bin/python bench/prose_figures.py   # list the unbacked figures (also run by readme_figures.py --check)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.record_command import flatten  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS_LINK = re.compile(r"(?:\.\./)*bench/results/([A-Za-z0-9][A-Za-z0-9._=-]*?)\.(txt|json)\b")
NUMBER = re.compile(r"(?<![\w.,])([+\-−]?)(\d[\d,]*(?:\.\d+)*)(%?)")
"""A run of digits, commas and dots not glued to a word on its left (`H200`, `Qwen2.5` are not numbers); a
letter right after it is checked apart (`1.43x` is a figure, `1.5B` and `5e-5` are not)."""
MASKED = re.compile(r"`[^`\n]*`|\]\([^)\n]*\)|https?://\S+|<!--.*?-->", re.S)
"""What holds numbers that are not figures: inline code, link targets, URLs, HTML comments."""
SECTION = re.compile(r"<!-- figures:(?P<name>[\w-]+) -->\n.*?<!-- /figures:(?P=name) -->", re.S)
NEW_BLOCK = re.compile(r"\s{0,3}(?:[-*+]\s|\d+[.)]\s|#|\|)")
"""A line that starts a paragraph of its own: a list item, a heading or a table row."""


@dataclass
class Paragraph:
    """Lines of one page taken together: `line` is the first one's number (1-based)."""

    line: int
    text: str


@dataclass
class Figure:
    """A number written in running text: as written (`−21.5`, `42.5%`), unsigned digits and decimals."""

    line: int
    written: str
    digits: str
    decimals: int


@dataclass
class Backing:
    """The numbers one results record holds: its JSON's numeric leaves and the numbers written in its texts."""

    values: set[float] = field(default_factory=set)


def _blank(match: re.Match) -> str:
    """The matched text as spaces, its newlines kept (so offsets and line numbers stay right)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def paragraphs(text: str) -> Iterator[Paragraph]:
    """The paragraphs of a Markdown page (module docstring), fenced code and figures sections left out."""
    lines = SECTION.sub(_blank, text).split("\n")
    block: list[str] = []
    start, fenced = 0, False

    def flush() -> Iterator[Paragraph]:
        if block:
            yield Paragraph(start + 1, "\n".join(block))
            block.clear()

    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            yield from flush()
            continue
        if fenced or not line.strip():
            yield from flush()
            continue
        if NEW_BLOCK.match(line) or (block and block[-1].lstrip().startswith(("|", "#"))):
            yield from flush()
        if not block:
            start = number
        block.append(line)
    yield from flush()


def linked_records(text: str) -> list[str]:
    """The results records a paragraph links, in order, each once (`bench/results/x.txt` -> "x")."""
    return list(dict.fromkeys(match.group(1) for match in RESULTS_LINK.finditer(text)))


def figures(paragraph: Paragraph) -> Iterator[Figure]:
    """The figures of a paragraph (module docstring: a decimal point or a percent sign)."""
    text = MASKED.sub(_blank, paragraph.text)
    for match in NUMBER.finditer(text):
        sign, digits, percent = match.groups()
        digits = digits.rstrip(".,")
        after = text[match.start(2) + len(digits):match.start(2) + len(digits) + 1]
        if digits.count(".") > 1 or (after.isalpha() and after != "x") or after.isdigit():
            continue
        if "." not in digits and not percent:
            continue
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        written = sign + digits + (percent or ("x" if after == "x" else ""))
        line = paragraph.line + text.count("\n", 0, match.start())
        yield Figure(line, written, digits.replace(",", ""), decimals)


def _numbers_in(text: str) -> set[float]:
    """Every number written in `text`, without its sign (`1,800` -> 1800.0; `2.11.0` is no number)."""
    written = (m.group(2).rstrip(".,").replace(",", "") for m in NUMBER.finditer(text))
    return {float(w) for w in written if w.count(".") <= 1}


@lru_cache(maxsize=None)
def backing(record: str, results: Path) -> Backing | None:
    """What results record `record` holds (its JSON and its .txt); None when neither file exists."""
    json_path, txt_path = results / f"{record}.json", results / f"{record}.txt"
    if not json_path.exists() and not txt_path.exists():
        return None
    out = Backing()
    if json_path.exists():
        for value in flatten(json.loads(json_path.read_text())).values():
            out.values |= _numbers_in(value) if isinstance(value, str) else {abs(float(value))}
    if txt_path.exists():
        out.values |= _numbers_in(txt_path.read_text(errors="replace"))
    return out


def is_backed(figure: Figure, backings: list[Backing]) -> bool:
    """Whether a results record holds the figure: one of its numbers v, rounded to the figure's decimals d,
    is the figure's digits as `f"{v:.{d}f}"` or `f"{100 * v:.{d}f}"` (module docstring)."""
    d = figure.decimals
    return any(figure.digits in (f"{value:.{d}f}", f"{100 * value:.{d}f}")
               for back in backings for value in back.values)


def check_text(text: str, where: str, results: Path, shown_results: str = "bench/results") -> list[str]:
    """Problems of one page: `where:line: 'figure' is in no linked results file (...)`, and links to results
    files that do not exist."""
    problems: list[str] = []
    for paragraph in paragraphs(text):
        records = linked_records(paragraph.text)
        found = {record: backing(record, results) for record in records}
        problems += [f"{where}:{paragraph.line}: links {shown_results}/{record}.txt/.json, which does not exist "
                     "(record it, or fix the link)" for record, back in found.items() if back is None]
        backings = [back for back in found.values() if back is not None]
        if not backings:
            continue
        named = ", ".join(f"{shown_results}/{record}.txt" for record in records)
        problems += [f"{where}:{fig.line}: {fig.written!r} is in no linked results file ({named})"
                     for fig in figures(paragraph) if not is_backed(fig, backings)]
    return problems


def check_pages(pages: dict[Path, str], root: Path = ROOT) -> list[str]:
    """`check_text` over pages (path -> text) of the repository at `root`, results under root/bench/results."""
    results = root / "bench" / "results"
    problems: list[str] = []
    for path, text in pages.items():
        where = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        problems += check_text(text, where, results)
    return problems


def published_records(pages: dict[Path, str], root: Path = ROOT) -> dict[str, list[str]]:
    """{record: ["README.md:12", ...]}: the results files the running text of the pages links."""
    out: dict[str, list[str]] = {}
    for path, text in pages.items():
        where = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        for paragraph in paragraphs(text):
            for record in linked_records(paragraph.text):
                out.setdefault(record, []).append(f"{where}:{paragraph.line}")
    return out


def main() -> int:
    from bench.readme_figures import page_files

    problems = check_pages({path: path.read_text() for path in page_files(ROOT)})
    print("\n".join(problems) or "every figure in running text is in a results file it links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
