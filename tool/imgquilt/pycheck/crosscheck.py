"""The cross-module Python check: a patched file's imports and calls against the modules of the
patched image.

For every `.py` file the series changes or creates, the check takes what the file uses from other
modules ("items"):
- `import a.b.c`: the module must exist (each package on the way too);
- `from M import N` (absolute or relative): M must exist, and N must be bound at M's top level (any
  binding, including inside `if`/`try`), be listed in a static `__all__`, or be a submodule of M;
- `import a.b` followed by `a.b.N`, and `from P import m` followed by `m.N` when m is a module: N
  must be in the module, as above;
- a call of a function or class imported so: it must bind to the callee's signature (positional
  count, required and unknown keywords, as CPython binds them; a class through its `__init__`).

It answers "cannot tell" (a note, never a refusal) when the module defines `__getattr__`, does a
`from X import *` that cannot be followed, writes its namespace dynamically, is a native extension
or sourceless bytecode, is too large, or does not parse; and for decorated callees, calls that
unpack `*args`/`**kwargs`, and classes whose construction it cannot follow (a metaclass, `__new__`,
a decorator, several bases, a base outside the searched directories). Modules of the standard
library, and top-level names found in no searched directory (they may come from PYTHONPATH or a
.pth file), are not looked at. An import inside a `try` that catches ImportError, or under
`if TYPE_CHECKING:`, is not reported.

Only what is new counts: an item whose same shape (same module, name, call shape) the file's base
also has gives the same answer, unless a patched module's interface changed, in which case such
items are checked against both the base image and the patched one. The base file is judged against
the image as it is, the final file against the image with every patched file's final bytes.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from ..fs.content import Data, held, held_or_none, sha256_of
from .astwalk import Visitor, nodes_of
from .pyiface import CLASS, DEF, IMPORT, Binding, Interface, Signature, Unreadable, bind, interface_of, parse
from .pysearch import (
    ABSENT, BYTECODE, FILE, LARGE, MISSING, NAMESPACE, NATIVE, UNKNOWN, Finder, Look, ModuleFiles, Place, Spec, is_stdlib, place_of,
)

MAX_FOLLOW = 12  # re-exports, star imports and base classes followed in a row

# item kinds
MODULE_ITEM, FROM_ITEM, ATTR_ITEM, CALL_ITEM = "import", "from", "attr", "call"

_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_TRIVIAL_BASES = {("abc", "ABC"), ("typing", "Generic"), ("typing_extensions", "Generic"), ("typing", "Protocol"),
                  ("typing_extensions", "Protocol")}
_EXCEPTIONS = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)}


@dataclass(frozen=True)
class Item:
    """One use of another module, at one place."""

    kind: str  # MODULE_ITEM | FROM_ITEM | ATTR_ITEM | CALL_ITEM
    module: str  # absolute dotted name
    name: str = ""  # FROM/ATTR/CALL: the name in `module`
    attr: str = ""  # `from P import m; m.attr`: module P, name m, attr
    positional: int = 0  # CALL
    keywords: tuple[str, ...] = ()
    unpacks: bool = False  # CALL: *args or **kwargs at the call
    line: int = 0
    col: int = 0

    @property
    def key(self) -> tuple:
        """The shape: what the answer depends on (never the place)."""
        return (self.kind, self.module, self.name, self.attr, self.positional, self.keywords, self.unpacks)

    @property
    def what(self) -> str:
        ref = f"{self.module}.{self.name}" + (f".{self.attr}" if self.attr else "") if self.name else self.module
        return ref


@dataclass(frozen=True)
class Finding:
    """A problem (or a "cannot tell") of one item shape, with every place the file has it."""

    key: tuple
    kind: str  # ModuleNotFoundError | ImportError | AttributeError | TypeError | cannot-tell
    message: str
    module: str  # the imported module's name
    module_path: str  # its file in the image ("" when there is none)
    why: str
    places: tuple[tuple[int, int], ...] = ()

    @property
    def cannot_tell(self) -> bool:
        return self.kind == "cannot-tell"

    def located(self, path: str) -> list[str]:
        """`path:line:col: kind: message (module_path: why)` for each place."""
        return [f"{path}:{line}:{col}: {self.text()}" for line, col in self.places]

    def text(self) -> str:
        """The finding without its place: `kind: message (module_path: why)`."""
        where = ": ".join(x for x in (self.module_path, self.why) if x)
        head = "cannot tell" if self.cannot_tell else self.kind
        return f"{head}: {self.message}" + (f" ({where})" if where else "")

    def to_json(self, path: str) -> list[dict]:
        return [{"path": path, "line": line, "col": col, "kind": self.kind, "message": self.message, "module": self.module,
                 "module_path": self.module_path, "why": self.why} for line, col in self.places]


# --- what a file uses --------------------------------------------------------------------------
def items_of(tree: ast.Module, place: Place) -> list[Item]:
    """Every use of another module in `tree`, a module at `place`."""
    loaded: dict[str, set[str]] = {}  # top name -> the dotted modules `import a.b.c` loads
    origins = _origins(tree, loaded)
    out: list[Item] = []
    _Collect(place, origins, loaded, out).visit(tree)
    return out


_BINDERS = (ast.Import, ast.ImportFrom, ast.Name, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.arg, ast.ExceptHandler,
            ast.MatchAs, ast.MatchStar, ast.MatchMapping, ast.Global, ast.Nonlocal)  # every kind _origins reads


def _origins(tree: ast.Module, loaded: dict[str, set[str]]) -> dict[str, set[tuple]]:
    """Every binding of every name in the file, any scope: ("module", dotted) for `import x.y [as n]`,
    ("from", module, name, level) for `from m import n`, ("other",) for anything else; and into
    `loaded`, the dotted modules each `import a.b.c` loads under its top name."""
    found: dict[str, set[tuple]] = {}

    def add(name: str, origin: tuple) -> None:
        found.setdefault(name, set()).add(origin)

    for node in nodes_of(tree):
        if not isinstance(node, _BINDERS):  # most nodes: one test instead of eleven
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    add(a.asname, ("alias", a.name))
                else:
                    parts = a.name.split(".")
                    add(parts[0], ("module", parts[0]))
                    loaded.setdefault(parts[0], set()).update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    add(a.asname or a.name, ("from", node.level, node.module or "", a.name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            add(node.id, ("other",))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(node.name, ("other",))
        elif isinstance(node, ast.arg):
            add(node.arg, ("other",))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            add(node.name, ("other",))
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            add(node.name, ("other",))
        elif isinstance(node, ast.MatchMapping) and node.rest:
            add(node.rest, ("other",))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                add(n, ("other",))
    return found


def absolute(place: Place, level: int, module: str) -> str | None:
    """The absolute name of a `from` import in the module at `place` (None: beyond the top package)."""
    if level == 0:
        return module
    package = place.module.split(".") if place.is_package else place.module.split(".")[:-1]
    if level - 1 >= len(package):
        return None
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


class _Collect(Visitor):
    def __init__(self, place: Place, origins: dict[str, set[tuple]], loaded: dict[str, set[str]], out: list[Item]) -> None:
        self.place, self.origins, self.loaded, self.out = place, origins, loaded, out
        self.guarded = 0

    # imports --------------------------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        catches = any(h.type is None or any(n in _GUARDS for n in _names_in(h.type)) for h in node.handlers)
        if catches:
            self.guarded += 1
        for st in node.body:
            self.visit(st)
        if catches:
            self.guarded -= 1
        for h in node.handlers:
            self.visit(h)
        for st in node.orelse + node.finalbody:
            self.visit(st)

    visit_TryStar = visit_Try

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            for st in node.orelse:
                self.visit(st)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        if self.guarded:
            return
        for a in node.names:
            self.out.append(Item(MODULE_ITEM, a.name, line=node.lineno, col=node.col_offset + 1))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.guarded:
            return
        mod = absolute(self.place, node.level, node.module or "")
        if mod is None:
            self.out.append(Item(MODULE_ITEM, "." * node.level + (node.module or ""), line=node.lineno, col=node.col_offset + 1))
            return
        for a in node.names:
            if a.name != "*":
                self.out.append(Item(FROM_ITEM, mod, a.name, line=node.lineno, col=node.col_offset + 1))

    # annotations are not evaluated at run time under `from __future__ import annotations`, and
    # are no calls: not looked at
    def visit_arg(self, node: ast.arg) -> None:
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for d in node.args.defaults + [x for x in node.args.kw_defaults if x is not None]:
            self.visit(d)
        for st in node.body:
            self.visit(st)

    visit_AsyncFunctionDef = visit_FunctionDef

    # uses --------------------------------------------------------------------------------------
    def _ref(self, node: ast.expr) -> tuple[str, str, str] | None:
        """(module, name, attr) that an expression names through the file's imports, or None."""
        chain: list[str] = []
        cur = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name):
            return None
        chain.reverse()
        origins = self.origins.get(cur.id)
        if not origins or len(origins) != 1:
            return None  # bound otherwise too, or by different imports: which one runs is not known
        (origin,) = origins
        if origin[0] == "other" or not chain and origin[0] != "from":
            return None
        if origin[0] == "module":  # import a.b.c: a, with a.b and a.b.c loaded
            loaded = self.loaded.get(cur.id, {cur.id})
            mod = cur.id
            i = 0
            while i < len(chain) - 1 and f"{mod}.{chain[i]}" in loaded:
                mod = f"{mod}.{chain[i]}"
                i += 1
            return (mod, chain[i], "") if not is_stdlib(cur.id) else None
        if origin[0] == "alias":  # import a.b as m
            return (origin[1], chain[0], "") if not is_stdlib(origin[1].split(".")[0]) else None
        level, module, name = origin[1], origin[2], origin[3]
        mod = absolute(self.place, level, module)
        if mod is None or is_stdlib(mod.split(".")[0]):
            return None
        return (mod, name, chain[0] if chain else "")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        ref = self._ref(node)
        if ref is not None and isinstance(node.ctx, ast.Load):
            mod, name, attr = ref
            self.out.append(Item(ATTR_ITEM, mod, name, attr, line=node.lineno, col=node.col_offset + 1))
            return  # the chain's inner attributes are the same reference, shorter
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        ref = self._ref(node.func)
        if ref is not None:
            mod, name, attr = ref
            unpacks = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            kws = tuple(k.arg for k in node.keywords if k.arg is not None)
            self.out.append(Item(CALL_ITEM, mod, name, attr, len([a for a in node.args if not isinstance(a, ast.Starred)]),
                                 kws, unpacks, node.lineno, node.col_offset + 1))
        if isinstance(node.func, ast.Attribute):
            self.visit(node.func)
        for a in node.args:
            self.visit(a)
        for k in node.keywords:
            self.visit(k.value)


def _names_in(e: ast.expr) -> list[str]:
    if isinstance(e, ast.Tuple):
        return [n for x in e.elts for n in _names_in(x)]
    if isinstance(e, ast.Name):
        return [e.id]
    if isinstance(e, ast.Attribute):
        return [e.attr]
    return []


# --- answering items against the image ------------------------------------------------------
@dataclass(frozen=True)
class _Res:
    """What a name in a module is."""

    kind: str  # "module" | "binding" | "missing" | "cannot" | "skip"
    spec: Spec | None = None
    bindings: tuple[Binding, ...] = ()
    why: str = ""
    settled: bool = True


class Resolver:
    """Answers items for one patched file, over one view of the image."""

    def __init__(self, finder: Finder, ifaces: dict | None = None, trees: Trees | None = None) -> None:
        self.finder = finder
        self._ifaces: dict[str, Interface | str] = ifaces if ifaces is not None else {}  # shared by one check
        self._trees = trees or Trees()

    def iface(self, spec: Spec) -> Interface | str:
        """The module's interface, or why there is none to read."""
        if spec.kind == NATIVE:
            return "a native extension: its names are not read"
        if spec.kind == BYTECODE:
            return "sourceless bytecode: its names are not read"
        if spec.kind == LARGE:
            return "larger than the check reads (8 MiB)"
        if spec.data is None:
            return "no source to read"
        face = self._trees.interface(spec.data, spec.file)
        return face if face is not None else "does not parse with this Python"

    def name_in(self, spec: Spec, name: str, seen: frozenset = frozenset()) -> _Res:
        settled = spec.settled
        if (spec.name, name) in seen or len(seen) > MAX_FOLLOW:
            return _Res("cannot", spec, why=f"{name} is re-exported in a cycle, or too deep to follow")
        seen = seen | {(spec.name, name)}
        if spec.kind == NAMESPACE:
            sub = self.finder.find(f"{spec.name}.{name}")
            if sub is not None and sub.kind != MISSING:
                return _Res("module", sub, settled=settled and sub.settled)
            return _Res("missing", spec, why=f"a namespace package ({', '.join(spec.path)}) with no submodule {name}",
                        settled=settled and (sub is None or sub.settled))
        face = self.iface(spec)
        if isinstance(face, str):
            return _Res("cannot", spec, why=face)
        if name in face.names:
            bs = face.names[name]
            if len(bs) == 1 and bs[0].kind == IMPORT and bs[0].source is not None:
                return self._follow_import(spec, bs[0], seen)
            return _Res("binding", spec, bs, settled=settled)
        if face.all_names is not None and name in face.all_names:
            return _Res("binding", spec, (), why="listed in __all__", settled=settled)
        # as CPython's `from M import N`: M's attributes first (its names, what it star-imports, its
        # __getattr__), then a submodule M.N (looked for last: deciding that there is none reads deep)
        if face.getattr:
            return _Res("cannot", spec, why="defines a module __getattr__")
        for level, module in face.stars:
            target = self._absolute_in(spec, level, module)
            tspec = self.finder.find(target) if target else None
            if tspec is None or tspec.kind == MISSING:
                return _Res("cannot", spec, why=f"does `from {'.' * level}{module} import *`, which cannot be followed")
            exported = self._exports(tspec, seen)
            if isinstance(exported, str):
                return _Res("cannot", spec, why=exported)
            if name in exported:
                return self.name_in(tspec, name, seen)
            settled = settled and tspec.settled
        if face.dynamic:
            return _Res("cannot", spec, why=f"may bind names no statement names: {face.dynamic}")
        if spec.path:
            sub = self.finder.find(f"{spec.name}.{name}")
            if sub is not None and sub.kind != MISSING:
                return _Res("module", sub, settled=settled and sub.settled)
            if sub is not None:
                settled = settled and sub.settled
            if face.path_changed:
                return _Res("cannot", spec, why="changes its __path__: submodules may be elsewhere")
        return _Res("missing", spec, why=f"binds no '{name}' at module level", settled=settled)

    def _exports(self, spec: Spec, seen: frozenset) -> set[str] | str:
        """The names `from spec import *` binds, or why they cannot be known (a star import that leads
        back to a module on the way, `from m import *` inside m or a ring of them: "cannot tell")."""
        if (spec.name, "*") in seen:
            return f"its `import *` of {spec.name} runs in a cycle of star imports"
        face = self.iface(spec)
        if isinstance(face, str):
            return face
        if face.all_names is not None:
            return set(face.all_names)
        if face.getattr or face.dynamic:
            return f"its `import *` of {spec.name} cannot be followed"
        names = {n for n in face.names if not n.startswith("_")}
        for level, module in face.stars:
            target = self._absolute_in(spec, level, module)
            tspec = self.finder.find(target) if target else None
            if tspec is None or tspec.kind == MISSING or len(seen) > MAX_FOLLOW:
                return f"`from {'.' * level}{module} import *` in {spec.name} cannot be followed"
            more = self._exports(tspec, seen | {(spec.name, "*")})
            if isinstance(more, str):
                return more
            names |= {n for n in more if not n.startswith("_")}
        return names

    def _absolute_in(self, spec: Spec, level: int, module: str) -> str | None:
        if level == 0:
            return module
        package = spec.name.split(".") if spec.path else spec.name.split(".")[:-1]
        base = package[: len(package) - (level - 1)] if level - 1 <= len(package) else []
        if not base:
            return None
        return ".".join(base + ([module] if module else []))

    def _follow_import(self, spec: Spec, b: Binding, seen: frozenset) -> _Res:
        level, module, name = b.source  # type: ignore[misc]
        target = self._absolute_in(spec, level, module)
        if target is None:
            return _Res("cannot", spec, why="imports it from beyond its top package")
        if not name:  # `import x` / `import x.y as n`
            tspec = self.finder.find(target)
            if tspec is None:
                return _Res("skip", spec)
            if tspec.kind == MISSING:
                return _Res("cannot", spec, why=f"imports {target}, which is not found ({tspec.why})")
            return _Res("module", tspec, settled=spec.settled and tspec.settled)
        tspec = self.finder.find(target)
        if tspec is None:
            return _Res("skip", spec)  # from the standard library or outside the searched directories
        if tspec.kind == MISSING:
            return _Res("cannot", spec, why=f"imports it from {target}, which is not found ({tspec.why})")
        got = self.name_in(tspec, name, seen)
        if got.kind == "missing":
            return _Res("cannot", spec, why=f"imports it from {target}, which does not bind it ({got.why})")
        return got

    # items ------------------------------------------------------------------------------------
    def answer(self, item: Item) -> tuple[Finding | None, bool]:
        """The finding for one item (None: fine, or not looked at) and whether every lookup behind it
        was settled."""
        f = self.finder
        if item.kind == MODULE_ITEM:
            if item.module.startswith("."):
                if not self.finder.place.site:
                    return None, True  # outside site-packages the top package is not known: never said
                return self._finding(item, "ImportError", "attempted relative import beyond top-level package", item.module, "", ""), True
            parts = item.module.split(".")
            for i in range(1, len(parts) + 1):
                spec = f.find(".".join(parts[:i]))
                if spec is None:
                    return None, True
                if spec.kind == MISSING:
                    return self._finding(item, "ModuleNotFoundError", f"No module named '{spec.name}'", spec.name, "", spec.why), spec.settled
            return None, True
        spec = f.find(item.module)
        if spec is None:
            return None, True
        if spec.kind == MISSING:
            if item.kind == FROM_ITEM:
                return self._finding(item, "ModuleNotFoundError", f"No module named '{spec.name}'", spec.name, "", spec.why), spec.settled
            return None, True  # its import item says it
        res = self.name_in(spec, item.name)
        if item.attr:  # `from P import m; m.attr`: only when m is a module
            if res.kind != "module" or res.spec is None:
                return None, True
            spec, res = res.spec, self.name_in(res.spec, item.attr)
            name, module = item.attr, spec.name
        else:
            name, module = item.name, item.module
        if res.kind == "skip":
            return None, True
        if res.kind == "missing":
            if item.kind == CALL_ITEM and not item.attr:
                return None, True  # the import or attribute item says it
            if item.kind == FROM_ITEM:
                return self._finding(item, "ImportError", f"cannot import name '{name}' from '{module}'", module, spec.file, res.why), res.settled
            return self._finding(item, "AttributeError", f"module '{module}' has no attribute '{name}'", module, spec.file, res.why), res.settled
        if res.kind == "cannot":
            if item.kind == CALL_ITEM:
                return self._finding(item, "cannot-tell", f"whether the call of {module}.{name}() fits", module, spec.file, res.why), True
            return self._finding(item, "cannot-tell", f"whether {module} has '{name}'", module, spec.file, res.why), True
        if item.kind != CALL_ITEM:
            return None, True
        return self._call(item, name, res)

    def _call(self, item: Item, name: str, res: _Res) -> tuple[Finding | None, bool]:
        spec = res.spec
        assert spec is not None
        if res.kind == "module":
            return self._finding(item, "TypeError", "'module' object is not callable", spec.name, spec.file, f"{name} is a module"), res.settled
        if item.unpacks:
            return self._finding(item, "cannot-tell", f"whether the call of {spec.name}.{name}() fits", spec.name, spec.file,
                                 "the call unpacks *args or **kwargs"), True
        if len(res.bindings) != 1:
            if not res.bindings:
                return None, True  # named in __all__ only: nothing to bind against
            return self._finding(item, "cannot-tell", f"whether the call of {spec.name}.{name}() fits", spec.name, spec.file,
                                 f"{name} is bound {len(res.bindings)} times at module level"), True
        b = res.bindings[0]
        if b.kind == DEF:
            if b.decorated or b.signature is None:
                return self._finding(item, "cannot-tell", f"whether the call of {spec.name}.{name}() fits", spec.name, spec.file,
                                     f"{name} is decorated (line {b.line})"), True
            problem = bind(b.signature, name, item.positional, list(item.keywords))
            if problem is None:
                return None, True
            why = f"line {b.line}: def {name}{b.signature.text()}"
            return self._finding(item, "TypeError", problem, spec.name, spec.file, why), res.settled
        if b.kind == CLASS:
            return self._class_call(item, name, spec, b, res.settled)
        return None, True  # a value bound otherwise (an alias, a partial, an instance): not judged

    def _class_call(self, item: Item, name: str, spec: Spec, b: Binding, settled: bool) -> tuple[Finding | None, bool]:
        def cannot(why: str) -> tuple[Finding | None, bool]:
            return self._finding(item, "cannot-tell", f"whether the call of {spec.name}.{name}() fits", spec.name, spec.file, why), True

        got = self._init_of(spec, b, name)
        if isinstance(got, str):
            return cannot(got)
        if got is None:
            return None, True  # a builtin exception's: any arguments
        init, owner, where, chain_settled = got
        settled = settled and chain_settled
        if init is None:
            if item.positional or item.keywords:
                return self._finding(item, "TypeError", f"{name}() takes no arguments", spec.name, spec.file,
                                     f"no class from {name} to object defines __init__"), settled
            return None, True
        # CPython binds the instance too: its messages count it among the positional arguments
        problem = bind(init, f"{owner}.__init__", item.positional + 1, list(item.keywords))
        if problem is None:
            return None, True
        return self._finding(item, "TypeError", problem, spec.name, spec.file, f"{where}: __init__{init.text()}"), settled

    def _init_of(self, spec: Spec, b: Binding, name: str):
        """The __init__ a call of the class binds to: (signature with self or None for object's, the class
        that has it, where, settled), None for a builtin exception's, or why it cannot be told."""
        cur_spec, cur, cur_name = spec, b, name
        settled = True
        for _ in range(MAX_FOLLOW):
            info = cur.cls
            assert info is not None
            at = f"class {cur_name} ({cur_spec.file}:{cur.line})"
            if info.metaclass:
                return f"{at} has a metaclass"
            if info.has_new:
                return f"{at} defines __new__"
            if info.init_decorated:
                return f"{at} has a decorated __init__"
            if info.init is not None:
                if cur.decorated and not self._dataclass(cur_spec, info):
                    return f"{at} is decorated"
                return self._checked_bases(cur_spec, cur, cur_name, info.init, settled, at)
            if cur.decorated:
                made = self._dataclass_init(cur_spec, cur, cur_name)
                if isinstance(made, str):
                    return f"{at} {made}"
                if made is not None:
                    return self._checked_bases(cur_spec, cur, cur_name, made, settled, at)
                return f"{at} is decorated"
            base = self._single_base(cur_spec, info)
            if base is None:
                return None, cur_name, at, settled  # object's __init__: no arguments
            if base == "exception":
                return None
            if isinstance(base, str):
                return base
            cur_spec, cur, cur_name = base
            settled = settled and cur_spec.settled
        return "too many base classes to follow"

    def _checked_bases(self, spec: Spec, b: Binding, name: str, init, settled: bool, at: str):
        """The __init__ found on `b`: still, no base above may have a metaclass or __new__."""
        cur_spec, cur = spec, b
        for _ in range(MAX_FOLLOW):
            info = cur.cls
            assert info is not None
            if info.metaclass or info.has_new:
                return f"class at {cur_spec.file}:{cur.line} has a metaclass or __new__"
            base = self._single_base(cur_spec, info)
            if base is None or base == "exception":
                return init, name, at, settled
            if isinstance(base, str):
                return base
            cur_spec, cur, _ = base
            settled = settled and cur_spec.settled
        return "too many base classes to follow"

    def _single_base(self, spec: Spec, info) -> tuple[Spec, Binding, str] | str | None:
        """The one base class that matters (None: only object and the like; "exception": a builtin
        exception), or why it cannot be followed."""
        bases = [x for x in info.bases if not self._trivial_base(spec, x)]
        if not bases:
            return None
        if len(bases) > 1:
            return "it has several base classes"
        got = self._base(spec, bases[0])
        if isinstance(got, tuple):
            return got[0], got[1], ast.unparse(bases[0]).split(".")[-1]
        return got

    def _dataclass(self, spec: Spec, info) -> bool:
        """Whether every decorator of the class is dataclasses.dataclass (and nothing else)."""
        if len(info.decorators) != 1:
            return False
        d = info.decorators[0]
        f = d.func if isinstance(d, ast.Call) else d
        face = self.iface(spec)
        if isinstance(face, str):
            return False
        if isinstance(f, ast.Name):
            bs = face.names.get(f.id, ())
            return len(bs) == 1 and bs[0].kind == IMPORT and bs[0].source == (0, "dataclasses", "dataclass")
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr == "dataclass":
            bs = face.names.get(f.value.id, ())
            return len(bs) == 1 and bs[0].kind == IMPORT and bs[0].source == (0, "dataclasses", "")
        return False

    def _dataclass_init(self, spec: Spec, b: Binding, name: str) -> Signature | str | None:
        """The __init__ @dataclass makes for the class (None: not a dataclass), or why it cannot be made."""
        info = b.cls
        assert info is not None
        if not self._dataclass(spec, info):
            return None
        opts = _dataclass_options(info)
        if isinstance(opts, str):
            return opts
        if not opts[0]:
            return "is a dataclass with init=False"
        fields = self._dataclass_fields(spec, b, 0)
        if isinstance(fields, str):
            return fields
        positional: list[tuple[str, bool]] = []
        kwonly: list[tuple[str, bool]] = []
        for fname, has_default, in_init, kw_only in fields.values():
            if in_init:
                (kwonly if kw_only else positional).append((fname, has_default))
        defaults = 0
        for _, has_default in reversed(positional):
            if not has_default:
                break
            defaults += 1
        return Signature((), ("self",) + tuple(n for n, _ in positional), defaults, None, tuple(n for n, _ in kwonly),
                         tuple(n for n, dflt in kwonly if not dflt), None)

    def _dataclass_fields(self, spec: Spec, b: Binding, depth: int) -> dict[str, tuple] | str:
        """The fields of a dataclass and of the dataclasses above it, in dataclasses' order, each
        (name, has a default, in __init__, keyword-only)."""
        info = b.cls
        assert info is not None
        opts = _dataclass_options(info)
        if isinstance(opts, str):
            return opts
        if info.fields is None:
            return "is a dataclass with a field imgquilt cannot read"
        if depth > MAX_FOLLOW:
            return "has too many base classes to follow"
        out: dict[str, tuple] = {}
        base = self._single_base(spec, info)
        if isinstance(base, str) and base != "exception":
            return base
        if isinstance(base, tuple):
            bspec, bb, _ = base
            if bb.cls is not None and bb.decorated:
                if not self._dataclass(bspec, bb.cls):
                    return "has a decorated base class"
                got = self._dataclass_fields(bspec, bb, depth + 1)
                if isinstance(got, str):
                    return got
                out.update(got)
            elif bb.cls is not None and (bb.cls.metaclass or bb.cls.has_new):
                return "has a base class with a metaclass or __new__"
        for fname, has_default, in_init, kw_only in info.fields:
            out[fname] = (fname, has_default, in_init, opts[1] if kw_only is None else kw_only)
        return out

    def _trivial_base(self, spec: Spec, e: ast.expr) -> bool:
        """object, and abc.ABC / typing.Generic[...] / typing.Protocol: they leave construction alone."""
        if isinstance(e, ast.Subscript):
            e = e.value
        if isinstance(e, ast.Name):
            if e.id == "object":
                return True
            face = self.iface(spec)
            bs = face.names.get(e.id, ()) if not isinstance(face, str) else ()
            return len(bs) == 1 and bs[0].kind == IMPORT and bs[0].source is not None and \
                (bs[0].source[1], bs[0].source[2]) in _TRIVIAL_BASES
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
            return (e.value.id, e.attr) in _TRIVIAL_BASES
        return False

    def _base(self, spec: Spec, e: ast.expr) -> tuple[Spec, Binding] | str:
        """The class a base expression names, "exception" for a builtin exception, or why it cannot be followed."""
        text = ast.unparse(e)
        if isinstance(e, ast.Name):
            face = self.iface(spec)
            if not isinstance(face, str) and e.id not in face.names and e.id in _EXCEPTIONS:
                return "exception"
            res = self.name_in(spec, e.id)
        elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
            head = self.name_in(spec, e.value.id)
            if head.kind != "module" or head.spec is None:
                return f"base class {text} is outside the modules imgquilt reads"
            res = self.name_in(head.spec, e.attr)
        else:
            return f"base class {text} is an expression imgquilt does not follow"
        if res.kind == "binding" and len(res.bindings) == 1 and res.bindings[0].kind == CLASS and res.spec is not None:
            return res.spec, res.bindings[0]
        return f"base class {text} is outside the modules imgquilt reads" if res.kind in ("skip", "cannot") else \
            f"base class {text} is not a plain class statement"

    def _finding(self, item: Item, kind: str, message: str, module: str, path: str, why: str) -> Finding:
        return Finding(item.key, kind, message, module, path, why)


# --- the check of a series ----------------------------------------------------------------------
@dataclass
class FileCheck:
    """One patched .py file: its base and final bytes, its resolved path and the path patches name."""

    path: str
    resolved: str
    base: bytes | None
    final: bytes
    steps: list[tuple[str, bytes | None]] = field(default_factory=list)  # (patch, bytes after it), in order


@dataclass(frozen=True)
class FileFindings:
    check: FileCheck
    place: Place
    findings: tuple[Finding, ...]  # new problems
    notes: tuple[Finding, ...]  # new "cannot tell"s


class Trees:
    """Parsed files of one check, each parsed once (None: it does not parse)."""

    def __init__(self) -> None:
        self._trees: dict[tuple[str, str], ast.Module | None] = {}
        self._faces: dict[tuple[str, str], Interface | None] = {}
        self._sha: dict[int, tuple[Data, str]] = {}
        # (name, sha256, place) -> items_of (None: it does not parse), computed ahead in worker processes
        self.items_ahead: dict[tuple[str, str, Place], list[Item] | None] = {}
        # (path, sha256 before, sha256 after) -> _module_names, computed ahead likewise
        self.names_ahead: dict[tuple[str, str, str], tuple[set[str], bool]] = {}
        # the names the changes may bind (pyscreen.bound_words), and sha256 -> those of them a version has
        # as words, computed ahead likewise: the words of a file are read once, by a worker
        self.bound: set[str] = set()
        self.words_ahead: dict[str, set[str]] = {}

    def sha(self, data: Data) -> str:
        """sha256 of `data`, once per object of one check (the keys of its rows and trees all ask)."""
        got = self._sha.get(id(data))
        if got is None or got[0] is not data:
            got = self._sha[id(data)] = (data, sha256_of(data))  # the object is held: its id stays its own
        return got[1]

    def interface(self, data: Data, name: str) -> Interface | None:
        """The module's interface (pyiface), once per content; None: it does not parse."""
        key = (name, self.sha(data))
        if key not in self._faces:
            tree = self.get(data, name)
            self._faces[key] = interface_of(tree) if tree is not None else None
        return self._faces[key]

    def get(self, data: Data, name: str) -> ast.Module | None:
        key = (name, self.sha(data))  # the name: a SyntaxError's text names the file
        if key not in self._trees:
            try:
                self._trees[key] = parse(held(data, name), name)
            except Unreadable:
                self._trees[key] = None
        return self._trees[key]


def _dataclass_options(info) -> tuple[bool, bool] | str:
    """(init, kw_only) of a class's @dataclass(...) decorator, or why they cannot be read."""
    d = info.decorators[0] if info.decorators else None
    init, kw_only = True, False
    if isinstance(d, ast.Call):
        if d.args or any(k.arg is None for k in d.keywords):
            return "is a dataclass with options imgquilt does not read"
        for k in d.keywords:
            if k.arg in ("init", "kw_only"):
                if not (isinstance(k.value, ast.Constant) and isinstance(k.value.value, bool)):
                    return f"is a dataclass whose {k.arg}= is not a constant"
                if k.arg == "init":
                    init = k.value.value
                else:
                    kw_only = k.value.value
    return init, kw_only


def _items(data: bytes | None, name: str, place: Place | None, trees: Trees) -> list[Item] | None:
    if data is None or place is None:
        return [] if data is None else None
    key = (name, trees.sha(data), place)
    if key in trees.items_ahead:
        return trees.items_ahead[key]
    tree = trees.get(data, name)
    return None if tree is None else items_of(tree, place)  # None: the syntax check names it


def _items_job(job: tuple[bytes, str, Place]) -> list[Item] | None:
    """A worker's part of _items: a function of the bytes, the name and the place only."""
    data, name, place = job
    return _items(data, name, place, Trees())


def _items_in_workers(files: list[FileCheck], final_view: ModuleFiles, base_view: ModuleFiles, trees: Trees) -> None:
    """The items of each file's final and base bytes, computed ahead by worker processes (workers.py)
    when there is enough source: check_files then finds them in `trees`. Each is keyed by the Place
    found here (lazily, as check_files finds it); a file whose Place is another by then is parsed there."""
    from .workers import mapped, worth_workers

    if not worth_workers(sum(len(fc.final) + len(fc.base or b"") for fc in files)):
        return
    jobs: list[tuple[bytes, str, Place]] = []
    for fc in files:
        place = place_of(fc.resolved, final_view, settle=False)
        if place is None:
            continue
        jobs.append((fc.final, fc.resolved, place))
        base_place = place_of(fc.resolved, base_view, settle=False) if fc.base is not None else None
        if fc.base is not None and base_place is not None:
            jobs.append((fc.base, fc.resolved, base_place))
    # those the names pass computed already (its workers parsed these versions once for both)
    jobs = [j for j in jobs if (j[1], trees.sha(j[0]), j[2]) not in trees.items_ahead]
    if not worth_workers(sum(len(j[0]) for j in jobs)):
        return
    for (data, name, place), got in zip(jobs, mapped(_items_job, jobs, sum(len(j[0]) for j in jobs))):
        trees.items_ahead[(name, trees.sha(data), place)] = got




def interfaces_differ(changed: Iterable[tuple[str, bytes | None, bytes | None]], trees: Trees | None = None) -> bool:
    """Whether any patched module offers its importers something else than before (then items the
    base shares must be judged against both images)."""
    for path, before, after in changed:
        if path.endswith((".so", ".pyc", ".pyd")):
            return True
        if not path.endswith(".py"):
            continue
        if before is None or after is None:
            return True
        trees = trees or Trees()
        old, new = trees.interface(before, path), trees.interface(after, path)
        if old is None or new is None or old.key() != new.key():
            return True
    return False


def check_files(files: list[FileCheck], final_view: ModuleFiles, base_view: ModuleFiles, *, views_differ: bool,
                trees: Trees | None = None, recheck: set[str] | None = None,
                names: set[str] | None = None) -> list[FileFindings]:
    """The new findings of each file: of its final bytes against `final_view` that its base bytes
    against `base_view` did not have. Lazy lookups first; each finding confirmed settled."""
    trees = trees or Trees()
    caches: tuple[dict, dict, Trees] = ({}, {}, trees)
    out: list[FileFindings] = []
    for fc in files:
        place = place_of(fc.resolved, final_view, settle=False)
        if place is None:
            continue
        final_items = _items(fc.final, fc.resolved, place, trees)
        if final_items is None:
            continue
        base_place = place_of(fc.resolved, base_view, settle=False) if fc.base is not None else None
        base_items = _items(fc.base, fc.resolved, base_place, trees) or []
        base_keys = {i.key for i in base_items}
        new = [i for i in final_items if i.key not in base_keys]
        rejudge = views_differ and (recheck is None or fc.resolved in recheck)
        # shared shapes judged anew: those naming a name whose binding a patched module changed (all, when
        # that is not known)
        shared = [i for i in final_items if i.key in base_keys and (names is None or _names_one(i, names))] if rejudge else []
        if not new and not shared:
            continue
        findings = _answer_all(new, place, final_view, caches)
        if shared:
            now = _answer_all(shared, place, final_view, caches)
            before_keys = {(x.key, x.kind, x.message) for x in _answer_all(shared, base_place or place, base_view, caches).values()} if now else set()
            findings.update({k: v for k, v in now.items() if (v.key, v.kind, v.message) not in before_keys})
        problems = tuple(v for v in findings.values() if not v.cannot_tell)
        notes = tuple(v for v in findings.values() if v.cannot_tell)
        if problems or notes:
            out.append(FileFindings(fc, place, problems, notes))
    return out


def _answer_all(items: list[Item], place: Place, view: ModuleFiles, caches: tuple[dict, dict, Trees]) -> dict[tuple, Finding]:
    """Each item shape's finding, with the places of every item of that shape; a finding that rests
    on a lazy lookup is confirmed by answering again with every lookup settled. `caches`: what was
    found and read, shared by every file of one check."""
    specs, ifaces, trees = caches
    lazy = Resolver(Finder(view, place, settle=False, cache=specs), ifaces, trees)
    settled_resolver: Resolver | None = None
    by_key: dict[tuple, list[Item]] = {}
    for i in items:
        by_key.setdefault(i.key, []).append(i)
    out: dict[tuple, Finding] = {}
    for key, group in by_key.items():
        got, settled = lazy.answer(group[0])
        if got is not None and not got.cannot_tell and not settled:
            if settled_resolver is None:
                settled_place = place_of_settled(place, view)
                settled_resolver = Resolver(Finder(view, settled_place, settle=True, cache=specs), ifaces, trees)
            got, _ = settled_resolver.answer(group[0])
        if got is not None:
            places = tuple(sorted({(i.line, i.col) for i in group}))
            out[key] = Finding(got.key, got.kind, got.message, got.module, got.module_path, got.why, places)
    return out


def place_of_settled(place: Place, view: ModuleFiles) -> Place:
    """The same file's Place with every lookup settled (a package tree's top may be lower down)."""
    if place.site:
        return place
    path = place.module.replace(".", "/") + ("/__init__.py" if place.is_package else ".py")
    return place_of(path, view, settle=True) or place


MEMO_VERSION = "imgquilt-crosscheck-6"


def cross_check(files: list[FileCheck], changed: list[tuple[str, bytes | None, bytes | None]], final_view: ModuleFiles,
                base_view: ModuleFiles, changed_lines: dict[str, list[bytes]] | None = None, memo=None) -> list[FileFindings]:
    """check_files, after deciding whether the patched modules changed what they offer. With
    `changed_lines` (resolved path -> the lines its patches add and remove), only the files whose
    changes may matter are parsed (pyscreen.py).

    With `memo` (pycheck.Memo), each file's answer is kept on its own, by content: the key holds the
    file's base and final bytes, its changed lines and what the screen decided for it (whether its
    shared shapes are judged again, and which of the names a patched module changed it names); the
    row holds every path the file's check looked up, in both views, and what it saw there (a file's
    sha256, nothing, or a native/bytecode file's presence). A later run takes the answer when every
    one of those paths still holds the same; one changed module re-checks the files that looked it
    up (those importing it), and nothing else. The rows of all files are asked for in one query.

    A patched .py file may come spooled (larger than IMGQUILT_SPOOL_AT): it is held whole here, once
    (within IMGQUILT_IN_MEMORY_MAX), as every other reader of a module's text needs it; the other
    files changed (an extension module, data) are only compared and hashed, never read whole."""
    files = [replace(fc, base=held_or_none(fc.base, fc.path), final=held(fc.final, fc.path)) for fc in files]
    changed = [(p, held_or_none(b, p), held_or_none(a, p)) if p.endswith(".py") else (p, b, a) for p, b, a in changed]
    trees = Trees()
    names: set[str] | None = None
    recheck: set[str] | None = None
    named: dict[str, list[str]] = {}  # resolved -> the changed names the file names
    if changed_lines is None:
        todo, views_differ = files, interfaces_differ(changed, trees)
    else:
        from .pyscreen import may_add_items

        # the Places are looked up only when workers run (a lookup may read a layer a serial check never reads)
        found, everything = changed_names(changed, changed_lines, trees, memo,
                                          items_for=lambda: _places(files, final_view, base_view))
        names = None if everything else found
        todo, recheck = [], set()
        if found and not everything:
            named = _named_in(files, found, memo, trees)
        for fc in files:
            again = everything or bool(named.get(fc.resolved))
            if again:
                recheck.add(fc.resolved)
            if again or fc.base is None or may_add_items(changed_lines.get(fc.resolved, ()), (fc.final, fc.base)):
                todo.append(fc)
        views_differ = bool(recheck)
    keys: dict[str, str] = {}
    if memo is not None and todo:
        platform = final_view.platform()
        for fc in todo:
            rejudge = views_differ and (recheck is None or fc.resolved in recheck)
            keys[fc.resolved] = _file_key(fc, platform, changed_lines, rejudge, None if names is None else named.get(fc.resolved, []),
                                          trees.sha)
    kept = memo.get_many(list(keys.values())) if keys else {}
    docs = {r: _memo_doc(kept.get(k)) for r, k in keys.items()}
    fresh = _still_seen([d for d in docs.values() if d is not None], final_view, base_view)
    misses = [fc for fc in todo if not ((doc := docs.get(fc.resolved)) is not None and fresh.issuperset(doc["seen"]))]
    _items_in_workers(misses, final_view, base_view, trees)
    out: list[FileFindings] = []
    store: dict[str, list[str]] = {}
    shared: tuple[dict, dict] = ({}, {})
    for fc in todo:
        doc = docs.get(fc.resolved)
        if doc is not None and fresh.issuperset(doc["seen"]):
            out += _decoded(doc, [fc])
            continue
        final_rec, base_rec = _Recorder(final_view, "f", shared[0]), _Recorder(base_view, "b", shared[1])
        got = check_files([fc], final_rec, base_rec, views_differ=views_differ, trees=trees, recheck=recheck, names=names)
        out += got
        if fc.resolved in keys:
            seen = [*final_rec.entries(), *base_rec.entries()]
            store[keys[fc.resolved]] = [json.dumps({"seen": seen, "files": _encoded(got)})]
    if store:
        memo.put_many(store)
    return out


def _named_in(files: list[FileCheck], found: set[str], memo, trees: Trees) -> dict[str, list[str]]:
    """The changed names each file may have an item naming (resolved -> sorted names; pyscreen.names_used:
    a module's own new name it only binds is not one). Reading every word of a thousand files is most
    of a warm screen: with `memo`, each answer is kept by the file's path and bytes and the set of
    changed names, all asked for at once."""
    from .pyscreen import names_used, words_of

    digest = hashlib.sha256("\0".join(sorted(found)).encode()).hexdigest()
    keys = {fc.resolved: hashlib.sha256(f"{MEMO_VERSION}\0named\0{digest}\0{fc.resolved}\0{trees.sha(fc.final)}".encode()).hexdigest()
            for fc in files} if memo is not None else {}
    kept = memo.get_many(list(keys.values())) if keys else {}
    out: dict[str, list[str]] = {}
    store: dict[str, list[str]] = {}
    for fc in files:
        got = kept.get(keys.get(fc.resolved, ""))
        if got is not None and all(n in found for n in got):
            out[fc.resolved] = got
            continue
        ahead = trees.words_ahead.get(trees.sha(fc.final)) if found <= trees.bound else None
        words = ahead if ahead is not None else words_of(fc.final)
        out[fc.resolved] = sorted(names_used(fc.final, found & words, fc.resolved))
        if fc.resolved in keys:
            store[keys[fc.resolved]] = out[fc.resolved]
    if store:
        memo.put_many(store)
    return out


def _file_key(fc: FileCheck, platform: str | None, changed_lines: dict[str, list[bytes]] | None, rejudge: bool,
              names: list[str] | None, digest=sha256_of) -> str:
    """The memo key of one file's check: all it depends on but the modules it looks up (those are
    kept in the row and checked again). `names`: the changed names the file names (None: all may have
    changed)."""
    h = hashlib.sha256(f"{MEMO_VERSION}\0{platform}\0".encode())
    sha = lambda d: b"-" if d is None else digest(d).encode()  # noqa: E731  (a large file: spooled)
    h.update(fc.path.encode() + b"\0" + fc.resolved.encode() + b"\0" + sha(fc.base) + sha(fc.final))
    if changed_lines is None:
        h.update(b"all")
    else:
        h.update(b"screen" + hashlib.sha256(b"\n".join(changed_lines.get(fc.resolved, ()))).digest())
    h.update(b"rejudge" if rejudge else b"new only")
    if rejudge:
        if names is None:
            h.update(b"\0*")
        else:
            for n in names:
                h.update(b"\0" + n.encode())
    return h.hexdigest()


class _Recorder:
    """A ModuleFiles that notes what each lookup saw (a file's memo row holds them). `shared`: the
    decided lookups of one view, shared by the recorders of every file (a Look is made once)."""

    def __init__(self, view: ModuleFiles, tag: str, shared: dict) -> None:
        self.view, self.tag, self.shared = view, tag, shared
        self.seen: dict[str, str] = {}
        # the paths of `seen` found ABSENT -> ((directory, resolved directory, directories on the way), name)
        self.absent: dict[str, tuple[tuple[str, str, tuple[str, ...]], str]] = {}

    def entries(self) -> list[str]:
        """What the row holds: one entry per path looked up, but the paths found absent, which are
        held by directory (`_absent_entry`): a module search tries dozens of names in a directory
        (an extension module under each platform's suffixes, a package, a module, a pyc), and a later
        run checks a directory's names against one listing instead of each name on its own."""
        out: list[str] = []
        groups: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
        absent = self.absent
        for p, state in self.seen.items():
            g = absent.get(p)
            if g is None:
                out.append(state)
            else:
                groups.setdefault(g[0], []).append(g[1])
        out += [_absent_entry(self.tag, parent, rparent, dirs, names) for (parent, rparent, dirs), names in groups.items()]
        return out

    def platform(self) -> str | None:
        return self.view.platform()

    def look(self, paths, *, settle: bool):
        got: dict[str, Look] = {}
        rest = []
        for p in paths:
            known = self.shared.get(p)
            if known is not None:
                got[p] = known[0]
                self._saw(p, known[1], known[2])
            else:
                rest.append(p)
        if rest:
            for p, lk in self.view.look(rest, settle=settle).items():
                got[p] = lk
                state, group = _entry(self.tag, p, lk), _absent_group_of(p, lk)
                if lk.kind != UNKNOWN:  # decided: the same for every file of this run
                    self.shared[p] = (lk, state, group)
                self._saw(p, state, group)
        return got

    def _saw(self, path: str, state: str, group: tuple[tuple[str, str, tuple[str, ...]], str] | None) -> None:
        if path not in self.seen:  # the first look is what the row holds (a later settled one adds nothing)
            self.seen[path] = state
            if group is not None:
                self.absent[path] = group


def _absent_group_of(path: str, lk: Look) -> tuple[tuple[str, str, tuple[str, ...]], str] | None:
    """((directory, resolved directory, directories on the way), name) of a path found ABSENT under its
    own name (a row holds those by directory); None for any other look."""
    if lk.kind != ABSENT:
        return None
    parent, _, name = path.rpartition("/")
    rparent, _, rname = lk.resolved.rpartition("/")
    return ((parent, rparent, lk.dirs), name) if rname == name else None


def _entry(tag: str, path: str, lk: Look) -> str:
    """What one lookup saw, as one string of a row ("tag NUL path NUL kind NUL digest"; a row holds
    hundreds): the digest of a module's sha256 (or that it is too large to read), of a file whose
    bytes are never read (an extension module, a pyc), or of nothing; where it resolved and the
    directories on its way."""
    if lk.kind == FILE:
        what = "large" if lk.too_large else ("present" if lk.data is None else sha256_of(lk.data))
    else:
        what = ""
    raw = "\0".join([lk.kind, what, lk.resolved, *lk.dirs])
    return f"{tag}\0{path}\0{lk.kind}\0" + hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _absent_entry(tag: str, parent: str, rparent: str, dirs: tuple[str, ...], names: list[str]) -> str:
    """The names looked up in directory `parent` and found absent, at `rparent`/NAME with `dirs` on
    their way, as one string of a row ("g" tag NUL parent NUL rparent NUL len(dirs) NUL dirs... NUL
    names...; no path holds a NUL): it stands for each name's own entry, which says no more."""
    return "\0".join([f"g{tag}", parent, rparent, str(len(dirs)), *dirs, *names])


def _absent_group(entry: str) -> tuple[str, str, str, tuple[str, ...], frozenset[str]] | None:
    """(tag, parent, rparent, dirs, names) of an `_absent_entry`; None: not one (any other row entry)."""
    if not entry.startswith("g"):
        return None
    parts = entry.split("\0")
    try:
        n = int(parts[3])
    except (IndexError, ValueError):
        return None
    names = parts[4 + n:]
    if n < 0 or not names:
        return None
    return parts[0][1:], parts[1], parts[2], tuple(parts[4:4 + n]), frozenset(names)


def _still_seen(docs: list[dict], final_view: ModuleFiles, base_view: ModuleFiles) -> set[str]:
    """The entries of the rows that still hold, every path looked up once (settled: as deep as it
    takes) in one batch per view. A path that was not decided then must hold no file now. The names
    a row holds by directory (`_absent_entry`) hold while the directory's listing has none of them;
    where a view cannot tell that at once, each is looked up as the other paths are."""
    wanted: dict[str, dict[str, list[str]]] = {"f": {}, "b": {}}
    groups: dict[str, list[tuple[str, str, str, tuple[str, ...], frozenset[str]]]] = {"f": [], "b": []}
    for entry in {x for doc in docs for x in doc["seen"] if isinstance(x, str)}:
        group = _absent_group(entry)
        if group is not None:
            if group[0] in groups:
                groups[group[0]].append((entry, *group[1:]))
            continue
        tag, path, kind, _ = (entry.split("\0") + ["", "", ""])[:4]
        if tag in wanted and path:
            wanted[tag].setdefault(path, []).append(entry)
    good: set[str] = set()
    for tag, view in (("f", final_view), ("b", base_view)):
        paths = wanted[tag]
        at_once = getattr(view, "absent_as", None)
        one_by_one: list[tuple[str, str, str, tuple[str, ...], frozenset[str]]] = []
        for g in groups[tag]:
            entry, parent, rparent, dirs, names = g
            where = at_once(parent, names) if at_once is not None else None
            if where is None:
                one_by_one.append(g)
                for n in names:
                    paths.setdefault(f"{parent}/{n}" if parent else n, [])
            elif where == (rparent, dirs):
                good.add(entry)
        if not paths:
            continue
        now = view.look(list(paths), settle=True)
        for p, olds in paths.items():
            lk = now.get(p)
            if lk is None:
                continue
            current = _entry(tag, p, lk)  # once per path, however many rows name it
            for old in olds:
                if old == current or (old.split("\0")[2] == UNKNOWN and lk.kind != FILE):
                    good.add(old)
        for entry, parent, rparent, dirs, names in one_by_one:
            if all((lk := now.get(f"{parent}/{n}" if parent else n)) is not None and lk.kind == ABSENT
                   and lk.resolved == (f"{rparent}/{n}" if rparent else n) and lk.dirs == dirs for n in names):
                good.add(entry)
    return good


def _memo_doc(kept: list[str] | None) -> dict | None:
    try:
        doc = json.loads(kept[0]) if kept else None
        ok = isinstance(doc, dict) and isinstance(doc.get("seen"), list) and isinstance(doc.get("files"), list) \
            and all(isinstance(x, str) for x in doc["seen"])
        return doc if ok else None
    except (ValueError, TypeError):
        return None


def _encoded(results: list[FileFindings]) -> list[dict]:
    def finding(f: Finding) -> list:
        return [list(f.key), f.kind, f.message, f.module, f.module_path, f.why, [list(p) for p in f.places]]

    return [{"resolved": ff.check.resolved, "place": [list(ff.place.entries), ff.place.module, ff.place.is_package,
                                                      ff.place.version, ff.place.site],
             "findings": [finding(f) for f in ff.findings], "notes": [finding(f) for f in ff.notes]} for ff in results]


def _decoded(doc: dict, files: list[FileCheck]) -> list[FileFindings]:
    by_resolved = {fc.resolved: fc for fc in files}

    def finding(x: list) -> Finding:
        k = x[0]
        key = (k[0], k[1], k[2], k[3], k[4], tuple(k[5]), k[6])
        return Finding(key, x[1], x[2], x[3], x[4], x[5], tuple((a, b) for a, b in x[6]))

    out = []
    for d in doc["files"]:
        entries, module, is_package, version, site = d["place"]
        out.append(FileFindings(by_resolved[d["resolved"]], Place(tuple(entries), module, is_package, version, site),
                                tuple(finding(x) for x in d["findings"]), tuple(finding(x) for x in d["notes"])))
    return out


def _names_one(item: Item, names: set[str]) -> bool:
    return item.name in names or item.attr in names or item.module.rsplit(".", 1)[-1] in names


def _places(files: list[FileCheck], final_view: ModuleFiles, base_view: ModuleFiles) -> dict[str, tuple[FileCheck, Place, Place | None]]:
    """Each checked file's Place in both views (as check_files finds them), for the names pass to
    compute its items ahead; a file that is no importable module has none."""
    out: dict[str, tuple[FileCheck, Place, Place | None]] = {}
    for fc in files:
        place = place_of(fc.resolved, final_view, settle=False)
        if place is not None:
            out[fc.resolved] = (fc, place, place_of(fc.resolved, base_view, settle=False) if fc.base is not None else None)
    return out


def changed_names(changed: list[tuple[str, bytes | None, bytes | None]], changed_lines: dict[str, list[bytes]],
                  trees: Trees, memo=None,
                  items_for: Callable[[], dict[str, tuple[FileCheck, Place, Place | None]]] | None = None) -> tuple[set[str], bool]:
    """The names whose binding a patched module changed (a module it creates or deletes: its own
    name and all its names), and whether anything may have changed (a __getattr__, a star import,
    an extension module...). With `memo`, each module's part is kept by its path and both its
    contents (parsing a thousand modules twice is most of a warm check), all asked for at once.
    `items_for` (gives resolved -> the checked file and its Places): when worker processes parse a module
    here that is also a checked file, they compute its items too (_names_job), so each version is
    parsed once."""
    from .pyscreen import may_change_interface

    todo: list[tuple[str, bytes | None, bytes | None]] = []
    for path, before, after in changed:
        if path.endswith((".so", ".pyc", ".pyd")):
            return set(), True
        if not path.endswith(".py"):
            continue
        if before is not None and after is not None and not may_change_interface(changed_lines.get(path, ())):
            continue
        todo.append((path, before, after))
    keys = {}
    if memo is not None:
        for path, before, after in todo:
            h = hashlib.sha256(f"{MEMO_VERSION}\0names\0".encode() + path.encode())
            for d in (before, after):
                h.update(b"\0-" if d is None else b"\0" + trees.sha(d).encode())
            keys[path] = h.hexdigest()
    kept = memo.get_many(list(keys.values())) if keys else {}
    _names_in_workers([t for t in todo if _names_doc(kept.get(keys.get(t[0], ""))) is None], trees, items_for or dict, changed_lines)
    names: set[str] = set()
    store: dict[str, list[str]] = {}
    everything = False
    for path, before, after in todo:
        got = _names_doc(kept.get(keys.get(path, "")))
        if got is None:
            ahead = (path, "-" if before is None else trees.sha(before), "-" if after is None else trees.sha(after))
            got = trees.names_ahead.get(ahead) or _module_names(path, before, after, trees)
            if path in keys:
                store[keys[path]] = [json.dumps({"all": got[1], "names": sorted(got[0])})]
        names |= got[0]
        if got[1]:
            everything = True
            break
    if store:
        memo.put_many(store)
    return names, everything


_NamesJob = tuple[str, bytes | None, bytes | None, "tuple[Place, Place | None] | None", bool, "set[str]"]


def _names_job(job: _NamesJob) -> tuple[tuple[set[str], bool], tuple[list[Item] | None, list[Item] | None] | None, set[str] | None]:
    """A worker's part of changed_names: one module's, a function of its path and bytes only; with
    the file's Places, also the items of both its versions, from the trees parsed for the names, when
    the file is likely to be checked: `checked` (the screen takes it: a new file, changed lines that
    may add items, or a patched module's shape that may change), or it may have an item naming one of
    the names it changed or that the patches' changed lines may bind (`bound`, pyscreen.bound_words;
    pyscreen.names_used), or anything may have changed. A file checked that was not expected to be
    (a guess missed, a module no longer parses) has its items computed later (_items_in_workers):
    a second parse, the same answer."""
    from .pyscreen import names_used, words_of

    path, before, after, want, checked, bound = job
    trees = Trees()
    got = _module_names(path, before, after, trees)
    words = bound & words_of(after) if after is not None else None  # for _named_in too
    if want is None or after is None or not (checked or got[1] or names_used(after, got[0] | (words or set()), path)):
        return got, None, words
    place, base_place = want
    return got, (_items(after, path, place, trees), _items(before, path, base_place, trees)), words


def _names_in_workers(todo: list[tuple[str, bytes | None, bytes | None]], trees: Trees,
                      places: Callable[[], dict[str, tuple[FileCheck, Place, Place | None]]],
                      changed_lines: dict[str, list[bytes]]) -> None:
    """_module_names of each patched module, computed ahead by worker processes when there is enough
    source, with the items of the checked files among them that are likely to be checked (_names_job;
    keyed as _items_in_workers keys them)."""
    from .pyscreen import bound_words, may_add_items, may_change_shape
    from .workers import mapped, worth_workers

    size = sum(len(b or b"") + len(a or b"") for _, b, a in todo)
    if not worth_workers(size):
        return
    items_for = places()
    every = any(may_change_shape(changed_lines.get(path, ())) for path, _, _ in todo)  # then all are checked
    bound: set[str] = set()  # the names the changes may bind: files naming one are likely checked again
    for path, _, _ in todo:
        bound |= bound_words(changed_lines.get(path, ()))
    jobs: list[_NamesJob] = []
    for path, before, after in todo:
        fc_places = items_for.get(path)
        want = None
        if fc_places is not None and after is not None:
            fc, place, base_place = fc_places
            if trees.sha(fc.final) == trees.sha(after) and (fc.base is None) == (before is None) \
                    and (before is None or trees.sha(fc.base) == trees.sha(before)):  # type: ignore[arg-type]
                want = (place, base_place)
        checked = want is not None and (every or before is None
                                        or may_add_items(changed_lines.get(path, ()), (after, before)))
        jobs.append((path, before, after, want, checked, bound))  # `bound`: one set, inherited at the fork
    trees.bound = bound
    for (path, before, after, want, _, _), (got, items, words) in zip(jobs, mapped(_names_job, jobs, size)):
        if words is not None and after is not None:
            trees.words_ahead[trees.sha(after)] = words
        trees.names_ahead[(path, "-" if before is None else trees.sha(before), "-" if after is None else trees.sha(after))] = got
        if items is not None and want is not None and after is not None:
            trees.items_ahead[(path, trees.sha(after), want[0])] = items[0]
            if before is not None and want[1] is not None:
                trees.items_ahead[(path, trees.sha(before), want[1])] = items[1]


def _names_doc(kept: list[str] | None) -> tuple[set[str], bool] | None:
    try:
        doc = json.loads(kept[0]) if kept else None
    except (ValueError, TypeError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("all"), bool) and isinstance(doc.get("names"), list) \
            and all(isinstance(n, str) for n in doc["names"]):
        return set(doc["names"]), doc["all"]
    return None


def _module_names(path: str, before: bytes | None, after: bytes | None, trees: Trees) -> tuple[set[str], bool]:
    """One patched module's part of changed_names."""
    faces = []
    for data in (before, after):
        face = trees.interface(data, path) if data is not None else None
        if data is not None and face is None:
            return set(), True
        faces.append(face)
    old, new = faces
    stem = path.rsplit("/", 1)[-1][:-3]
    if old is None or new is None:
        names = {path.rsplit("/", 2)[-2] if stem == "__init__" and "/" in path else stem}
        names.update((old or new).names)  # type: ignore[union-attr]
        return names, False
    if (old.all_names, old.stars, old.getattr, old.dynamic, old.path_changed) != \
            (new.all_names, new.stars, new.getattr, new.dynamic, new.path_changed):
        return set(), True
    return {n for n in set(old.names) | set(new.names) | set(old.deleted) | set(new.deleted)
            if _bindings(old, n) != _bindings(new, n)}, False


def _bindings(face: Interface, name: str) -> tuple:
    return tuple((b.kind, b.signature, b.decorated, b.cls, b.source) for b in face.names.get(name, ())), name in face.deleted


def culprit(steps: list[tuple[str, bytes | None]], resolved: str, finding: Finding, place: Place,
            patched_modules: dict[str, str]) -> str:
    """The patch that brought a finding: the first step of the file (patch, bytes after it) whose bytes
    have an item of its shape; else (an item the base had, judged anew because a patched module
    changed) the patch that last changed the module it names."""
    trees = Trees()
    for name, data in steps:
        tree = trees.get(data, resolved) if data is not None else None
        if tree is not None and finding.key in {i.key for i in items_of(tree, place)}:
            return name
    if finding.module_path in patched_modules:
        return patched_modules[finding.module_path]
    return steps[-1][0] if steps else "-"
