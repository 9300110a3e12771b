"""The library never imports Prefect; orchestration lives in flows/ and tasks/."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "agentrl_core"


def test_agentrl_core_never_imports_prefect():
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "prefect" or n.startswith(("prefect.", "prefect_")) for n in names):
                offenders.append(f"{path.relative_to(CORE.parent)}:{node.lineno}")
    assert not offenders, f"agentrl_core imports prefect at {offenders}"


def test_no_eval_or_exec_calls():
    root = CORE.parent
    hits = []
    for folder in ("agentrl_core", "flows", "tasks", "agentrl"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                    hits.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not hits, hits
