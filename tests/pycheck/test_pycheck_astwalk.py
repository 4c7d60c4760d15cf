"""The Python checks' whole-tree passes (pycheck/astwalk.py) see what the standard library's see: the
same nodes in ast.walk's order, the same visits as ast.NodeVisitor, on real modules (the standard
library's own, every construct in it), so interfaces and items are unchanged."""
from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

from imgquilt.pycheck import crosscheck
from imgquilt.pycheck.astwalk import nodes_of
from imgquilt.pycheck.pysearch import Place


def _modules(n: int) -> list[tuple[str, ast.Module]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        if "test" in p.parts or "lib2to3" in p.parts:
            continue
        try:
            out.append((str(p), ast.parse(p.read_bytes())))
        except (SyntaxError, ValueError):
            continue
        if len(out) == n:
            break
    return out


def test_nodes_of_is_ast_walk_in_its_order_and_kept_on_the_tree() -> None:
    for name, tree in _modules(150):
        got = nodes_of(tree)
        assert [id(x) for x in got] == [id(x) for x in ast.walk(tree)], name
        assert nodes_of(tree) is got  # walked once per tree


def test_the_items_are_those_of_ast_node_visitor() -> None:
    ns = {k: v for k, v in vars(crosscheck._Collect).items() if k not in ("__dict__", "__weakref__")}
    Standard = type("Standard", (ast.NodeVisitor,), ns)  # the same visit_ methods, the standard dispatch
    place = Place(("usr/lib/python3.11",), "pkg.mod", False, "311", False)
    seen = 0
    for name, tree in _modules(150):
        loaded: dict[str, set[str]] = {}
        origins = crosscheck._origins(tree, loaded)
        mine: list = []
        crosscheck._Collect(place, origins, loaded, mine).visit(tree)
        theirs: list = []
        Standard(place, origins, loaded, theirs).visit(tree)
        assert mine == theirs, name
        assert crosscheck.items_of(tree, place) == theirs, name
        seen += len(theirs)
    assert seen > 100  # the modules do use other modules
