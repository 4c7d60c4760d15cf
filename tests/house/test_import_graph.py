"""The package's modules import each other in no circle: the layering checker holds packages to their
floors, this holds files within a package, counting the imports made inside functions too (a local
import hides an arrow from a reader, not from the graph)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tool" / "imgquilt"


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in the file), by dotted name."""
    top = package.name

    def name_of(path: Path) -> str:
        parts = [top, *path.relative_to(package).with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name_of(p): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    deps.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in files else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    graph = import_graph(PACKAGE)
    found = circles(graph)
    assert not found, "\n".join(
        " <-> ".join(group) + ": " + "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(group)))}" for m in group)
        for group in found
    )


def test_a_circle_through_a_local_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "imgquilt"
    (pkg / "verbs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "verbs" / "__init__.py").write_text("")
    (pkg / "verbs" / "a.py").write_text("from .b import x\n")
    (pkg / "verbs" / "b.py").write_text("def x():\n    from . import a\n    return a\n")
    (pkg / "verbs" / "c.py").write_text("from ..verbs.a import x\n")
    assert circles(import_graph(pkg)) == [["imgquilt.verbs.a", "imgquilt.verbs.b"]]
