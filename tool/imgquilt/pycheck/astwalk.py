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


_LEAF_KINDS = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)  # no fields at all
_MISSING = object()


class Visitor(ast.NodeVisitor):
    """ast.NodeVisitor's dispatch, its method found once per node class (per visitor class). A leaf
    the visitor has no method for (a context, an operator, a constant, a name) is not visited at all:
    its generic visit would find no node below it, so nothing differs but the calls."""

    _methods: dict[type, Callable[[Any, Any], Any] | None] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._methods = {}

    @classmethod
    def _method_for(cls, t: type) -> Callable[[Any, Any], Any] | None:
        """The method that visits a node of class `t`; None: a leaf nothing is done for."""
        fn = getattr(cls, "visit_" + t.__name__, None)
        if fn is ast.NodeVisitor.visit_Constant and not any(
                hasattr(cls, "visit_" + old) for old in ("Num", "Str", "Bytes", "NameConstant", "Ellipsis")):
            fn = None  # its dispatch to the deprecated names finds nothing: a generic visit
        if fn is not None:
            return fn
        if cls.generic_visit is Visitor.generic_visit and (
                issubclass(t, _LEAF_KINDS) or t is ast.Constant
                or (t is ast.Name and not any(hasattr(cls, "visit_" + c) for c in ("Load", "Store", "Del")))):
            return None
        return cls.generic_visit

    def visit(self, node: ast.AST) -> Any:
        fn = self._methods.get(type(node), _MISSING)
        if fn is _MISSING:
            fn = self._methods[type(node)] = self._method_for(type(node))
        return None if fn is None else fn(self, node)  # type: ignore[operator]

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
