"""agentrl_core's import graph has no cycle: every import counts (module level, inside functions, under TYPE_CHECKING)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()
"""Edges left out of the cycle search on purpose, each with the reason; one that no longer exists fails the test."""


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of `package` under `root` (packages by their __init__)."""
    found = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    """The modules of `modules` an import statement names: `from pkg import sub` is pkg.sub when that is a module."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: strip the module (or package) and level - 1 more parts
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    resolved = []
    for name in names:
        while name and name not in modules and "." in name:  # agentrl_core.x.y.Class -> agentrl_core.x.y
            name = name.rpartition(".")[0]
        if name in modules:
            resolved.append(name)
    return resolved


def import_graph(root: Path = ROOT, package: str = "agentrl_core") -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its file (ast.walk sees every statement)."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in _targets(module, is_package, node, modules) if t != module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(graph: dict[str, set[str]], component: list[str]) -> str:
    members = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_agentrl_core_has_no_import_cycle():
    graph = import_graph()
    stale = [edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in graph.get(edge[0], set())]
    assert not stale, f"these known cycle edges are gone: delete them from KNOWN_CYCLE_EDGES: {stale}"
    for source, target in KNOWN_CYCLE_EDGES:
        graph[source] = graph[source] - {target}
    found = cycles(graph)
    assert not found, "import cycles (module -> the members of its cycle it imports):\n" + "\n\n".join(
        _describe(graph, c) for c in found)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path):
    """A cycle closed only by a function-level import, one closed only under TYPE_CHECKING, and a
    relative import are all found; a tree is not a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    import pkg.a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import d\n")
    (pkg / "sub" / "c.py").write_text("from ..c import x\n")
    (pkg / "sub" / "d.py").write_text("from pkg.sub.c import y\n")
    (pkg / "tree.py").write_text("import pkg.a\nfrom pkg import sub\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.c"] == {"pkg.c"} and graph["pkg.b"] == {"pkg.a"}
    assert sorted(cycles(graph)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.c", "pkg.sub.d"]]


def test_the_former_cycles_stay_broken():
    """The three import cycles once found: algorithms and config, the two storage backends, and the GRPO stage
    and the Ray side (the one loop, grpo/, now sits above the executors: the Ray executor and its trainer
    worker never import it back). Their fixes keep these edges out of the graph."""
    graph = import_graph()
    algorithms = [m for m in graph if m.startswith("agentrl_core.algorithms")]
    assert {"agentrl_core.config", "agentrl_core.config_checks"}.isdisjoint(set().union(*(graph[m] for m in algorithms)))
    assert "agentrl_core.config" not in graph["agentrl_core.config_checks"]
    assert "agentrl_core.checkpoints.storage" not in graph["agentrl_core.checkpoints.storage_s3"]
    assert "agentrl_core.algorithms.registry" in graph["agentrl_core.algorithms.advantages"]  # the graph is real
    ray_side = [m for m in graph if m.startswith("agentrl_core.distributed")]
    assert not {m for r in ray_side for m in graph[r] if m.startswith("agentrl_core.grpo")}
    training = [m for m in graph if m.startswith("agentrl_core.training")]
    assert not {m for t in training for m in graph[t] if m.startswith(("agentrl_core.grpo", "agentrl_core.distributed"))}


def test_the_layers_point_one_way():
    """Environments know nothing of the service that hosts them; the HTTP layer knows none of its servers;
    generic rollout code never reaches into one engine's implementation."""
    graph = import_graph()

    def imports_of(prefix: str) -> set[str]:
        return set().union(*(graph[m] for m in graph if m == prefix or m.startswith(prefix + ".")))

    assert not {m for m in imports_of("agentrl_core.envs") if m.startswith("agentrl_core.env_service")}
    servers = ("agentrl_core.env_service", "agentrl_core.experience", "agentrl_core.serving", "agentrl_core.envs")
    assert not {m for m in imports_of("agentrl_core.web") if m.startswith(servers)}
    native = "agentrl_core.rollout.native"
    generic = [m for m in graph if m.startswith("agentrl_core.rollout.") and not m.startswith(native)
               and m != "agentrl_core.rollout.engine_factory"]
    reaching = {m: sorted(t for t in graph[m] if t.startswith(native)) for m in generic}
    assert not {m: t for m, t in reaching.items() if t}, reaching


def _package_graph() -> dict[str, set[str]]:
    """agentrl_core's folders (and top-level modules) as nodes, an edge where some module of one imports the other."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for a, targets in import_graph().items():
        for b in targets:
            if a.startswith("agentrl_core.") and b.startswith("agentrl_core.") and package(a) != package(b):
                out.setdefault(package(a), set()).add(package(b))
    return out


def test_the_packages_of_the_core_form_no_cycle():
    """Folders import one way: a topological order of agentrl_core's packages exists (the layout says who is above)."""
    graph, done, stack = _package_graph(), set(), []

    def visit(node: str) -> None:
        if node in stack:
            raise AssertionError("import cycle between packages: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in done:
            return
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        stack.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert len(done) > 15  # the graph is real


def test_the_system_plumbing_imports_nothing_above_it():
    graph = _package_graph()
    assert graph.get("agentrl_core.system", set()) <= {"agentrl_core.errors"}, graph.get("agentrl_core.system")
