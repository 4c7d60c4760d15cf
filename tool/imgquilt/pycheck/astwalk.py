"""The whole-tree passes of the Python checks, without the standard library's per-node generators.

`nodes_of(tree)` is `list(ast.walk(tree))`, the same nodes in the same (breadth-first) order, and
`Visitor` is `ast.NodeVisitor` with the same dispatch (`visit_<Class>`, else `generic_visit`, children
in field order): each reads a node's fields directly where the standard ones go through three nested
generators per node (iter_fields, iter_child_nodes, walk's deque) and build a method name per visit.
On the 2000 module versions of a 1000-patch lock these passes were most of the check's CPU.
The node list is kept on the tree, so the module's interface and its items walk it once.
"""
from __future__ import annotations

import ast
from typing import Any, Callable

_AST = ast.AST
_NODES = "_imgquilt_nodes"  # where nodes_of keeps a tree's list (an AST node takes any attribute)


def nodes_of(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree`, `tree` first, in ast.walk's order; computed once per tree."""
    got = tree.__dict__.get(_NODES)
    if got is not None:
        return got
    out: list[ast.AST] = [tree]
    append = out.append
    i = 0
    while i < len(out):  # the list is its own queue: breadth-first, as ast.walk's deque
        node = out[i]
        i += 1
        for name in node._fields:
            v = getattr(node, name, None)
            if isinstance(v, _AST):
                append(v)
            elif isinstance(v, list):
                for x in v:
                    if isinstance(x, _AST):
                        append(x)
    tree.__dict__[_NODES] = out
    return out


class Visitor(ast.NodeVisitor):
    """ast.NodeVisitor's dispatch, its method found once per node class (per visitor class)."""

    _methods: dict[type, Callable[[Any, Any], Any]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._methods = {}

    def visit(self, node: ast.AST) -> Any:
        fn = self._methods.get(type(node))
        if fn is None:
            fn = getattr(type(self), "visit_" + node.__class__.__name__, None) or type(self).generic_visit
            self._methods[type(node)] = fn
        return fn(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        visit = self.visit
        for name in node._fields:
            v = getattr(node, name, None)
            if isinstance(v, list):
                for x in v:
                    if isinstance(x, _AST):
                        visit(x)
            elif isinstance(v, _AST):
                visit(v)
