"""The README stays a guide within its budget, the docs build as a site in strict mode, and every relative link of
README.md and docs/*.md reaches a file (links that leave docs/ included, which MkDocs cannot see)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_LINES, MAX_CHARS = 300, 25_000
PAGES = sorted(DOCS.glob("*.md"))


def _links_module():
    """scripts/mkdocs_links.py, the MkDocs hook that checks relative links: the same check runs here."""
    spec = importlib.util.spec_from_file_location("mkdocs_links", ROOT / "scripts" / "mkdocs_links.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_stays_within_its_budget():
    text = README.read_text()
    lines, chars = len(text.splitlines()), len(text)
    assert lines <= MAX_LINES and chars <= MAX_CHARS, (
        f"README.md has {lines} lines and {chars:,} characters; its budget is {MAX_LINES} lines and {MAX_CHARS:,} "
        "characters. The README is the guide: experiment write-ups, new figure tables and details go to a page "
        "of docs/ (docs/experiments.md, docs/performance.md, ...), with a line in the README linking there.")


def test_the_readme_starts_with_the_two_set_up_commands():
    head = README.read_text().splitlines()[:6]
    assert head[2] == "```bash" and head[5] == "```"
    assert head[3].startswith("bash scripts/setup.sh && .venv/bin/agentrl run math_learn")
    assert head[4].startswith("bash scripts/setup.sh && .venv/bin/python -m pytest -q")


def test_the_prefect_commands_come_right_after_the_quick_start():
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    assert headings[:2] == ["Quick start", "Running the pipelines with Prefect"], headings


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(page: Path):
    broken = _links_module().broken_links(page, check_anchors=True)
    assert broken == [], f"{page.relative_to(ROOT)}: links that reach nothing:\n" + "\n".join(broken)


def test_the_checker_sees_a_broken_link_leaving_docs(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "here.txt").write_text("x")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n[ok](../bench/here.txt) [gone](../bench/nope.txt) [self](#page) [no](#nope)\n"
                    "`[in code](../bench/nope2.txt)`\n")
    broken = _links_module().broken_links(page, check_anchors=True)
    assert [b.split(":")[0] for b in broken] == ["../bench/nope.txt", "#nope"]


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = {next(iter(item.values())) if isinstance(item, dict) else item for item in config["nav"]}
    assert listed == {p.name for p in PAGES}
    assert config["strict"] is True and config["docs_dir"] == "docs"


def test_every_figure_table_is_in_one_place():
    names = []
    for page in [README, *PAGES]:
        text = page.read_text()
        opened = re.findall(r"^<!-- figures:([\w-]+) -->$", text, re.M)
        assert opened == re.findall(r"^<!-- /figures:([\w-]+) -->$", text, re.M), f"{page.name}: unpaired markers"
        names += opened
    assert len(names) == len(set(names)), f"a figure table appears twice: {sorted(names)}"


def test_the_docs_build_in_strict_mode(tmp_path: Path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed here (the test extra installs it): `pip install 'mkdocs>=1.6,<2'`")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                          "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (tmp_path / "site" / "extending" / "index.html").exists()


def test_the_readmes_recipe_excerpt_is_the_real_recipe():
    block = re.search(r"An excerpt of `(recipes/[\w.]+)`.*?```yaml\n(.*?)```", README.read_text(), re.S)
    assert block, "the README's annotated recipe: 'An excerpt of `recipes/NAME.yaml`' and a ```yaml block"
    recipe = yaml.safe_load((ROOT / block[1]).read_text())

    def within(excerpt: dict, full: dict, where: str) -> None:
        for key, value in excerpt.items():
            assert key in full, f"{where}{key} is not in {block[1]}"
            if isinstance(value, dict):
                within(value, full[key], f"{where}{key}.")
            else:
                assert value == full[key], f"{where}{key}: the README says {value!r}, {block[1]} {full[key]!r}"

    within(yaml.safe_load(block[2]), recipe, "")
