"""What a Python module offers to its importers, read from its source without running it.

`interface(source)` walks a module's top level (into `if`/`try`/`with`/`for`/`while` blocks, never
into a function or class body) and records every name bound there, how (a `def`, a `class`, an
import, anything else), the module's static `__all__`, its `from X import *` lines, and what makes a
missing name impossible to judge: a module `__getattr__` (PEP 562), writes through `globals()`,
`vars()`, `exec` or `sys.modules`, and a `__path__` it changes. A `def`'s parameters are kept as a
`Signature` so a call can be bound against it as CPython would (`bind`).

Nothing here reads a filesystem: bytes in, values out (the cross-module check, crosscheck.py, reads).
"""
from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field

from .astwalk import nodes_of

# a binding of a top-level name
DEF, CLASS, IMPORT, OTHER = "def", "class", "import", "other"


@dataclass(frozen=True)
class Signature:
    """The parameters of a `def`, as CPython binds a call to them."""

    posonly: tuple[str, ...]
    args: tuple[str, ...]  # positional-or-keyword
    defaults: int  # how many of posonly + args (the last ones) have a default
    vararg: str | None
    kwonly: tuple[str, ...]
    kwonly_required: tuple[str, ...]
    kwarg: str | None

    def dropping_first(self) -> Signature:
        """The signature seen through an instance (`self` bound): for a class's `__init__`."""
        if self.posonly:
            return Signature(self.posonly[1:], self.args, self.defaults, self.vararg, self.kwonly, self.kwonly_required, self.kwarg)
        if self.args:
            return Signature((), self.args[1:], min(self.defaults, len(self.args) - 1), self.vararg, self.kwonly,
                             self.kwonly_required, self.kwarg)
        return self  # `def __init__(*args)`: the instance goes to *args

    def params(self) -> list[str]:
        """Every parameter name, in order, `*args` and `**kwargs` written so."""
        out = list(self.posonly) + list(self.args)
        if self.vararg:
            out.append("*" + self.vararg)
        out += list(self.kwonly)
        if self.kwarg:
            out.append("**" + self.kwarg)
        return out

    def text(self) -> str:
        positional = list(self.posonly) + list(self.args)
        first_default = len(positional) - self.defaults
        parts = [p + ("=…" if i >= first_default else "") for i, p in enumerate(positional)]
        if self.posonly:
            parts.insert(len(self.posonly), "/")
        if self.vararg:
            parts.append("*" + self.vararg)
        elif self.kwonly:
            parts.append("*")
        parts += [k + ("" if k in self.kwonly_required else "=…") for k in self.kwonly]
        if self.kwarg:
            parts.append("**" + self.kwarg)
        return "(" + ", ".join(parts) + ")"


def signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Signature:
    a = node.args
    required_kw = tuple(k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None)
    return Signature(tuple(x.arg for x in a.posonlyargs), tuple(x.arg for x in a.args), len(a.defaults),
                     a.vararg.arg if a.vararg else None, tuple(k.arg for k in a.kwonlyargs), required_kw,
                     a.kwarg.arg if a.kwarg else None)


def bind(sig: Signature, name: str, positional: int, keywords: list[str]) -> str | None:
    """The TypeError CPython raises when `name(<positional> arguments, <keywords>=...)` is bound to
    `sig`, worded as CPython words it and found in CPython's order (keywords, then too many
    positional arguments, then missing ones); None when the call fits."""
    params = list(sig.posonly) + list(sig.args)
    bound = set(params[:positional])
    for k in keywords:
        if k in sig.args or k in sig.kwonly:
            if k in bound:
                return f"{name}() got multiple values for argument '{k}'"
            bound.add(k)
        elif sig.kwarg is None:
            posonly_kw = [p for p in sig.posonly if p in keywords]
            if posonly_kw:
                return f"{name}() got some positional-only arguments passed as keyword arguments: '{', '.join(posonly_kw)}'"
            return f"{name}() got an unexpected keyword argument '{k}'"
    if positional > len(params) and sig.vararg is None:
        lo = len(params) - sig.defaults
        takes = f"{len(params)}" if lo == len(params) else f"from {lo} to {len(params)}"
        plural = "s" if len(params) != 1 or lo != len(params) else ""
        kwonly_given = sum(1 for k in sig.kwonly if k in bound)
        given = f"{positional}"
        if kwonly_given:
            given += (f" positional argument{'s' if positional != 1 else ''} (and {kwonly_given} keyword-only "
                      f"argument{'s' if kwonly_given != 1 else ''})")
        return f"{name}() takes {takes} positional argument{plural} but {given} {'was' if positional == 1 and not kwonly_given else 'were'} given"
    first_default = len(params) - sig.defaults
    missing = [p for i, p in enumerate(params) if i < first_default and p not in bound]
    if missing:
        return f"{name}() missing {len(missing)} required positional argument{'s' if len(missing) != 1 else ''}: {_and(missing)}"
    kw_missing = [k for k in sig.kwonly_required if k not in bound]
    if kw_missing:
        return (f"{name}() missing {len(kw_missing)} required keyword-only argument{'s' if len(kw_missing) != 1 else ''}: "
                f"{_and(kw_missing)}")
    return None


def _and(names: list[str]) -> str:
    """CPython's list of missing names: 'a', 'a' and 'b', 'a', 'b', and 'c'."""
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} and {quoted[1]}"
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


@dataclass(frozen=True)
class ClassInfo:
    """What decides how calling a class binds its arguments."""

    decorated: bool
    bases: tuple[ast.expr, ...] = field(compare=False)
    base_texts: tuple[str, ...]
    metaclass: bool  # a `metaclass=` keyword (its __call__ may take anything)
    has_new: bool  # `__new__` in the body
    init: Signature | None  # `__init__` in the body, undecorated (None: none there)
    init_decorated: bool
    init_line: int = 0
    decorators: tuple[ast.expr, ...] = field(default=(), compare=False)
    decorator_texts: tuple[str, ...] = ()
    # dataclass fields in order: (name, has a default, in __init__, kw_only: True/False/None = the class's);
    # None when one cannot be read (field(**x), a non-constant flag)
    fields: tuple[tuple[str, bool, bool, bool | None], ...] | None = ()
    kw_only_marker: bool = False  # a `_: KW_ONLY` pseudo-field (the fields after it are keyword-only)


@dataclass(frozen=True)
class Binding:
    """One top-level binding of a name."""

    kind: str  # DEF | CLASS | IMPORT | OTHER
    line: int
    signature: Signature | None = None  # DEF, undecorated
    decorated: bool = False
    cls: ClassInfo | None = None
    source: tuple[int, str, str] | None = None  # IMPORT: (level, module, name); name "" for `import m`
    end_line: int = 0


@dataclass(frozen=True)
class Interface:
    """A module's top level as its importers see it."""

    names: dict[str, tuple[Binding, ...]]
    all_names: tuple[str, ...] | None  # a static __all__ (list/tuple of strings, += included)
    stars: tuple[tuple[int, str], ...]  # `from X import *`: (level, module)
    getattr: bool  # a module-level __getattr__
    dynamic: str | None  # why names may appear that no statement binds (globals() writes, exec, ...)
    path_changed: bool  # `__path__` assigned or extended (pkgutil.extend_path and the like)
    deleted: frozenset[str]

    def defines(self, name: str) -> bool:
        return name in self.names or (self.all_names is not None and name in self.all_names)

    def key(self) -> tuple:
        """Everything an importer's check depends on (equal keys: the importers see the same module)."""
        names = tuple(sorted((n, tuple((b.kind, b.signature, b.decorated, b.cls, b.source) for b in bs))
                             for n, bs in self.names.items()))
        return (names, self.all_names, self.stars, self.getattr, self.dynamic, self.path_changed, tuple(sorted(self.deleted)))


class Unreadable(Exception):
    """The source does not parse with this Python (a newer grammar, or not Python at all)."""


def parse(source: bytes, filename: str) -> ast.Module:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source, filename)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise Unreadable(f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}") from None


def interface(source: bytes, filename: str = "<module>") -> Interface:
    return interface_of(parse(source, filename))


_DYNAMIC_CALLS = {"exec": "exec()", "globals": "globals()", "vars": "vars()", "setattr": "setattr()",
                  "__import__": "__import__()"}


_SEEN_ANYWHERE = (ast.Global, ast.NamedExpr, ast.Call, ast.Subscript)  # what interface_of looks for below the top level


def interface_of(tree: ast.Module) -> Interface:
    names: dict[str, list[Binding]] = {}
    all_names: list[str] | None = None
    all_static = True
    stars: list[tuple[int, str]] = []
    getattr_ = False
    path_changed = False
    deleted: set[str] = set()

    def add(name: str, b: Binding) -> None:
        names.setdefault(name, []).append(b)

    def targets(t: ast.expr, line: int) -> None:
        if isinstance(t, ast.Name):
            add(t.id, Binding(OTHER, line))
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                targets(e, line)
        elif isinstance(t, ast.Starred):
            targets(t.value, line)

    def strings(v: ast.expr) -> list[str] | None:
        if isinstance(v, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in v.elts):
            return [e.value for e in v.elts]  # type: ignore[attr-defined]
        return None

    def walk(body: list[ast.stmt]) -> None:
        nonlocal all_names, all_static, getattr_, path_changed
        for st in body:
            line = st.lineno
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                deco = bool(st.decorator_list)
                add(st.name, Binding(DEF, line, None if deco else signature_of(st), deco, end_line=st.end_lineno or line))
                if st.name == "__getattr__":
                    getattr_ = True
            elif isinstance(st, ast.ClassDef):
                add(st.name, Binding(CLASS, line, None, bool(st.decorator_list), _class_info(st), end_line=st.end_lineno or line))
            elif isinstance(st, ast.Import):
                for a in st.names:
                    if a.asname:
                        add(a.asname, Binding(IMPORT, line, source=(0, a.name, "")))
                    else:
                        top = a.name.split(".")[0]
                        add(top, Binding(IMPORT, line, source=(0, top, "")))
            elif isinstance(st, ast.ImportFrom):
                for a in st.names:
                    if a.name == "*":
                        stars.append((st.level, st.module or ""))
                    else:
                        add(a.asname or a.name, Binding(IMPORT, line, source=(st.level, st.module or "", a.name)))
            elif isinstance(st, ast.Assign):
                for t in st.targets:
                    targets(t, line)
                    if isinstance(t, ast.Name) and t.id == "__all__":
                        got = strings(st.value)
                        all_names, all_static = (got, all_static) if got is not None else (None, False)
                    if isinstance(t, ast.Name) and t.id == "__path__":
                        path_changed = True
            elif isinstance(st, ast.AnnAssign):
                if st.value is not None:
                    targets(st.target, line)
                    if isinstance(st.target, ast.Name) and st.target.id == "__all__":
                        got = strings(st.value)
                        all_names, all_static = (got, all_static) if got is not None else (None, False)
            elif isinstance(st, ast.AugAssign):
                targets(st.target, line)
                if isinstance(st.target, ast.Name) and st.target.id == "__all__":
                    got = strings(st.value)
                    if got is not None and all_names is not None:
                        all_names = all_names + got
                    else:
                        all_static = False
                if isinstance(st.target, ast.Name) and st.target.id == "__path__":
                    path_changed = True
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                targets(st.target, line)
                walk(st.body)
                walk(st.orelse)
            elif isinstance(st, (ast.While,)):
                walk(st.body)
                walk(st.orelse)
            elif isinstance(st, ast.If):
                walk(st.body)
                walk(st.orelse)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars, line)
                walk(st.body)
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                walk(st.body)  # type: ignore[attr-defined]
                for h in st.handlers:  # type: ignore[attr-defined]
                    if h.name:
                        deleted.add(h.name)  # unbound again when the handler ends
                    walk(h.body)
                walk(st.orelse)  # type: ignore[attr-defined]
                walk(st.finalbody)  # type: ignore[attr-defined]
            elif isinstance(st, ast.Delete):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        deleted.add(t.id)
            elif isinstance(st, ast.Match):
                for case in st.cases:
                    for n in ast.walk(case.pattern):
                        nm = getattr(n, "name", None) or getattr(n, "rest", None)
                        if isinstance(nm, str):
                            add(nm, Binding(OTHER, line))
                    walk(case.body)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                # __all__.extend([...]) / __all__.append("x") / __path__ = extend_path(...) handled above
                f = st.value.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "__all__":
                    args = st.value.args
                    if f.attr == "extend" and len(args) == 1 and strings(args[0]) is not None and all_names is not None:
                        all_names = all_names + strings(args[0])  # type: ignore[operator]
                    elif f.attr == "append" and len(args) == 1 and isinstance(args[0], ast.Constant) \
                            and isinstance(args[0].value, str) and all_names is not None:
                        all_names = all_names + [args[0].value]
                    else:
                        all_static = False
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "__path__":
                    path_changed = True

    walk(tree.body)
    # one pass over everything for what binds names no top-level statement shows: a name a function
    # declares `global` (bound once it runs), an assignment expression (bound where it runs; taken
    # as bound, the lenient side), a call that writes the module's namespace
    dynamic: str | None = None
    for node in nodes_of(tree):
        if not isinstance(node, _SEEN_ANYWHERE):  # most nodes: one test instead of four
            continue
        if isinstance(node, ast.Global):
            for n in node.names:
                names.setdefault(n, []).append(Binding(OTHER, node.lineno))
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.setdefault(node.target.id, []).append(Binding(OTHER, node.lineno))
        elif dynamic is None and isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _DYNAMIC_CALLS and (f.id != "setattr" or _targets_module(node)):
                dynamic = f"it calls {_DYNAMIC_CALLS[f.id]}"
        elif dynamic is None and isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Attribute) and node.value.attr == "modules" \
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "sys":
            dynamic = "it writes sys.modules"
    # deleted names that are bound again later stay judged as bound (lenient); a name only deleted is gone
    return Interface({k: tuple(v) for k, v in names.items()}, tuple(all_names) if all_names is not None and all_static else None,
                     tuple(stars), getattr_, dynamic, path_changed, frozenset(deleted - set(names)))


def _targets_module(call: ast.Call) -> bool:
    """setattr(sys.modules[__name__], ...) or setattr(<something named like a module>, ...)."""
    if not call.args:
        return False
    first = call.args[0]
    return isinstance(first, ast.Subscript) and isinstance(first.value, ast.Attribute) and first.value.attr == "modules"


def _class_info(node: ast.ClassDef) -> ClassInfo:
    init: Signature | None = None
    init_deco = False
    init_line = 0
    has_new = False
    for st in node.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if st.name == "__init__":
                init_deco = bool(st.decorator_list)
                init = None if init_deco else signature_of(st)
                init_line = st.lineno
            elif st.name == "__new__":
                has_new = True
        elif isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("__init__", "__new__") for t in st.targets):
            has_new = True  # assigned, not defined: nothing to bind against
    meta = any(k.arg == "metaclass" for k in node.keywords)
    return ClassInfo(bool(node.decorator_list), tuple(node.bases), tuple(ast.unparse(b) for b in node.bases), meta, has_new,
                     init, init_deco, init_line, tuple(node.decorator_list), tuple(ast.unparse(d) for d in node.decorator_list),
                     *_fields(node))


def _fields(node: ast.ClassDef) -> tuple[tuple[tuple[str, bool, bool, bool | None], ...] | None, bool]:
    """The fields `dataclasses.dataclass` would make of the class body (see ClassInfo.fields)."""
    out: list[tuple[str, bool, bool, bool | None]] = []
    after_marker = False
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = st.annotation.value if isinstance(st.annotation, ast.Constant) and isinstance(st.annotation.value, str) else ast.unparse(st.annotation)
        ann = ann.strip()
        if ann.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar")):
            continue
        if ann in ("KW_ONLY", "dataclasses.KW_ONLY"):
            after_marker = True
            continue
        v = st.value
        kw_only: bool | None = True if after_marker else None
        if v is None:
            out.append((st.target.id, False, True, kw_only))
            continue
        if isinstance(v, ast.Call) and ast.unparse(v.func) in ("field", "dataclasses.field"):
            if v.args or any(k.arg is None for k in v.keywords):
                return None, after_marker
            kws = {k.arg: k.value for k in v.keywords}
            flags: dict[str, bool | None] = {}
            for flag in ("init", "kw_only"):
                if flag in kws:
                    c = kws[flag]
                    if not (isinstance(c, ast.Constant) and isinstance(c.value, bool)):
                        return None, after_marker
                    flags[flag] = c.value
            out.append((st.target.id, "default" in kws or "default_factory" in kws, flags.get("init", True) is not False,
                        flags["kw_only"] if "kw_only" in flags else kw_only))
            continue
        out.append((st.target.id, True, True, kw_only))
    return tuple(out), after_marker
