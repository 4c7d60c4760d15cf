"""Which markers a test gets, keyed on what it uses (read from the source, not declared by hand).

A test `uses` a tool when its function, a fixture it requests, or any module-level function, class or
constant of the test modules it reaches by name (in its own module or imported from a helper module
under tests/) runs it: a call `run("umoci", ...)`, `Popen(["skopeo", ...])` or `shutil.which("strace")`,
or a list/tuple literal starting with the tool's name. Each tool puts `tools` on the test, strace also
`crash`, docker-registry, htpasswd and apt-get also `network`; a loopback server (socket, http.server)
puts `network`. A test that starts imgquilt processes (a list `[..., "-m", "imgquilt", ...]`, as
qtools.imgquilt runs the console script) is `slow`: each command costs a process start (0.2-0.5 s on 2
cores), and a CLI session runs a dozen; so is a test in the hand-kept table SLOW below (measured).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

from support.tools import EXTRA_MARK, TOOLS

TESTS = Path(__file__).resolve().parent.parent
# calls whose first argument names the program they run or look for
RUNNERS = {"run", "Popen", "check_output", "check_call", "call", "which", "needs", "execvp", "spawnvp"}
NETWORK_NAMES = {"socket", "HTTPServer", "ThreadingHTTPServer", "create_connection", "socketserver"}

# file::function (no parameters) -> why it is slow; measured with `pytest --durations` on 2 loaded cores;
# a slow unit test runs in `make test`, not in `make check`
SLOW: dict[str, str] = {}


@dataclass
class _Module:
    uses: dict[str, set[str]] = field(default_factory=dict)  # top-level name -> tools/keys it uses itself
    refs: dict[str, set[str]] = field(default_factory=dict)  # top-level name -> names it refers to
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)


def _first_tool(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        word = node.value.rsplit("/", 1)[-1]  # "/usr/bin/strace" too
        return word if word in TOOLS else None
    return None


def _runs_imgquilt(elts: list[ast.expr]) -> bool:
    """`[sys.executable, "-m", "imgquilt", ...]`: a new imgquilt process (0.2-0.5 s to start on 2 cores)."""
    words = [e.value for e in elts if isinstance(e, ast.Constant)]
    return any(a == "-m" and b == "imgquilt" for a, b in zip(words, words[1:]))


def _direct_uses(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in RUNNERS and (tool := _first_tool(node.args[0])):
                found.add(tool)
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts and (tool := _first_tool(node.elts[0])):
            found.add(tool)
        elif isinstance(node, (ast.List, ast.Tuple)) and _runs_imgquilt(node.elts):
            found.add("@cli")
        elif isinstance(node, ast.Name) and node.id in NETWORK_NAMES:
            found.add("@network")
        elif isinstance(node, ast.Attribute) and node.attr in NETWORK_NAMES:
            found.add("@network")
    return found


def _names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


_MODULES: dict[str, _Module | None] = {}


def _module(name: str) -> _Module | None:
    """The analysis of the test or helper module `name` (None for modules outside tests/)."""
    if name in _MODULES:
        return _MODULES[name]
    path = TESTS / (name.replace(".", "/") + ".py")
    if not path.is_file():
        _MODULES[name] = None
        return None
    m = _Module()
    _MODULES[name] = m
    tree = ast.parse(path.read_text(), str(path))
    for stmt in tree.body:
        targets: list[str] = []
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [stmt.name]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            tgts = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            targets = [n.id for t in tgts for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for a in stmt.names:
                m.imports[a.asname or a.name] = (stmt.module, a.name)
            continue
        else:
            continue
        for t in targets:
            m.uses.setdefault(t, set()).update(_direct_uses(stmt))
            m.refs.setdefault(t, set()).update(_names(stmt) - {t})
    return m


def uses(module: str, start: set[str]) -> set[str]:
    """Every tool (and "@network") reached from the names `start` of `module`, following names."""
    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [(module, s) for s in start]
    while todo:
        mod, name = todo.pop()
        if (mod, name) in seen:
            continue
        seen.add((mod, name))
        m = _module(mod)
        if m is None:
            continue
        if name in m.imports:
            todo.append(m.imports[name])
            continue
        found |= m.uses.get(name, set())
        todo.extend((mod, r) for r in m.refs.get(name, ()))
    return found


def marks_for(found: set[str]) -> set[str]:
    marks = {"network"} if "@network" in found else set()
    if "@cli" in found:
        marks.add("slow")  # a CLI session: every command a new process
    for tool in found - {"@network", "@cli"}:
        marks.add("tools")
        if tool in EXTRA_MARK:
            marks.add(EXTRA_MARK[tool])
    return marks


def item_uses(item) -> set[str]:  # item: pytest.Function
    """What a collected test uses: its function (or class), its module's pytestmark, its fixtures."""
    fn = getattr(item, "function", None)
    if fn is None:
        return set()
    mod = fn.__module__
    top = fn.__qualname__.split(".")[0]
    found = uses(mod, {top, "pytestmark"})
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fdef in info.name2fixturedefs.get(name, ()) if info else ():
            f = getattr(fdef, "func", None)
            fmod = getattr(f, "__module__", None)
            if f is not None and fmod and fmod in sys.modules:
                found |= uses(fmod, {f.__qualname__.split(".")[0]})
    return found
