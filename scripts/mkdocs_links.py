"""MkDocs hook: every relative link of a page must reach a file, inside docs/ or out of it.

MkDocs checks the links between pages, but a link that leaves docs/ (`../bench/results/x.txt`, `../recipes/`)
never reaches one of its documentation files, so MkDocs reports every such link as "not found", whether its
file exists or not. mkdocs.yml therefore keeps those reports at `info` (`validation.links.not_found`) and this
hook warns, which fails `mkdocs build --strict`, on each relative link whose file is missing, inside docs/ or out
of it. `tests/test_docs.py` runs the same check over README.md and docs/*.md without MkDocs.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

try:
    from mkdocs.plugins import get_plugin_logger

    log = get_plugin_logger("relative-links")
except ImportError:  # the test imports this file without MkDocs
    log = None

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading; GitHub's agrees for plain headings."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def broken_links(page: Path, *, check_anchors: bool = False) -> list[str]:
    """The relative links of the Markdown file `page` that reach no file (or, with check_anchors, no heading of
    the Markdown file they name), each as `target: why`. Links in code are not links."""
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    broken = []
    for target in LINK.findall(text):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or target.startswith("/"):
            continue  # a URL or a site-absolute path: not a file of the repository
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            broken.append(f"{target}: no file {path}")
        elif check_anchors and parts.fragment and path.suffix == ".md" and parts.fragment not in anchors(path):
            broken.append(f"{target}: {path.name} has no heading with the anchor #{parts.fragment}")
    return broken


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - MkDocs' hook signature
    source = Path(page.file.abs_src_path)
    for problem in broken_links(source):
        log.warning("%s: a relative link reaches no file: %s", page.file.src_uri, problem)
    return markdown
