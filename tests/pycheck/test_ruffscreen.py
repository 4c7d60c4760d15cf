"""The ruff screen of the Python check: it only decides which files pyflakes reads, never the findings.

Real ruff (a dependency) against real pyflakes: the findings of a screened check equal the findings of
a check that reads every file with pyflakes, on crafted cases and on this repository's own files; a
screen that fails steps aside; the forked compile equals the serial one.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import imgquilt.pycheck.names as pycheck
from imgquilt.engine.plan import run_series
from imgquilt.pycheck import Checks
from imgquilt.pycheck.names import errors_of_many, python_errors, syntax_errors
from imgquilt.fs.types import TargetFile
from imgquilt.queue.queue import load_queue
from imgquilt.pycheck.ruffscreen import RuffScreen, ruff_screen
from support.qtools import write_patch

REPO = Path(__file__).resolve().parents[2]

CASES = {
    "clean.py": b"import os\n\n\ndef f():\n    return os.sep\n",
    "undefined.py": b"def f():\n    return not_defined_anywhere\n",
    "undefined_noqa.py": b"x = also_undefined  # noqa: F821\n",  # pyflakes ignores noqa: so must the screen
    "local.py": b"import os\n\n\ndef f():\n    print(os)\n    os = 1\n",
    "export.py": b"__all__ = ['nothing_here']\n",
    "use_before_def.py": b"print(later)\nlater = 1\n",
    "syntax.py": b"def broken(:\n",
    "return_outside.py": b"return 1\n",  # compile() refuses it; ruff's F8 codes say nothing
    "crlf.py": b"import sys\r\nprint(sys.argv, missing_name)\r\n",
    "latin1.py": b"# -*- coding: latin-1 -*-\nname = '\xe9'\nprint(nom)\n",
    "builtins.py": b"print(len(__file__), __name__, ExceptionGroup, aiter)\n",
    "annotations.py": b"from __future__ import annotations\n\n\ndef f(x: Undefined) -> None:\n    pass\n",
    "fstring.py": b"print(f'{absent_in_fstring}')\n",
    "comprehension.py": b"print([y for y in range(3)], y)\n",
    # names ruff takes as defined and pyflakes does not: the screen must not hide pyflakes' finding
    "ruff_lenient.py": b"print(__warningregistry__, __cached__)\n",
    "ruff_lenient_class.py": b"class C:\n    x = __warningregistry__\n",
    "sentinel.py": b"def f():\n    return sentinel\n",
}


@pytest.fixture(scope="module")
def screen() -> RuffScreen:
    s = ruff_screen()
    assert s is not None, "ruff is a dependency of imgquilt (pyproject.toml): install it"
    return s


def _unscreened(items: list[tuple[bytes, str]]) -> dict[str, set[str]]:
    return errors_of_many(items)


def test_screened_findings_equal_pyflakes_on_crafted_cases(screen: RuffScreen) -> None:
    items = [(data, name) for name, data in CASES.items()]
    screened = errors_of_many(items, screen=screen)
    assert screened == _unscreened(items)
    by_name = {name: screened[pycheck.check_key(data, name)] for name, data in CASES.items()}
    assert by_name["clean.py"] == set() and by_name["builtins.py"] == set()
    assert by_name["ruff_lenient.py"] == {"UndefinedName: undefined name '__warningregistry__'",
                                          "UndefinedName: undefined name '__cached__'"}
    assert by_name["undefined_noqa.py"] == {"UndefinedName: undefined name 'also_undefined'"}
    assert by_name["return_outside.py"] == {"SyntaxError: 'return' outside function"}
    assert by_name["latin1.py"] == {"UndefinedName: undefined name 'nom'"}


def test_the_screen_flags_what_pyflakes_finds_on_this_repository(screen: RuffScreen) -> None:
    # every file with a finding must be flagged (a file the screen passes is never read by pyflakes)
    files = sorted(p for d in ("tool", "tests", "bench") for p in (REPO / d).rglob("*.py"))
    items = [(p.read_bytes(), str(p)) for p in files] + [(d, n) for n, d in CASES.items()]
    flagged = screen.start(items)()
    assert flagged is not None
    missed = [name for i, (data, name) in enumerate(items) if python_errors(data, name) - syntax_errors(data, name)
              and i not in flagged]
    assert missed == []


def test_a_failing_screen_steps_aside() -> None:
    items = [(d, n) for n, d in CASES.items()]
    broken = RuffScreen("/nonexistent/ruff", "ruff0")
    assert broken.start(items)() is None
    assert errors_of_many(items, screen=broken) == _unscreened(items)
    liar = RuffScreen("/bin/false", "ruff0")  # exits 1: not trusted, every file read
    assert errors_of_many(items, screen=liar) == _unscreened(items)
    silent = RuffScreen("/bin/true", "ruff0")  # exits 0 with no JSON: not trusted either
    assert errors_of_many(items, screen=silent) == _unscreened(items)


def test_forked_compile_equals_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [(d, n) for n, d in CASES.items()] * 20
    serial = [sorted(syntax_errors(*i)) for i in items]
    monkeypatch.setattr(pycheck, "FORK_MIN_BYTES", 0)
    # the child from the first item up, this process from the last down
    assert pycheck._start_compile(items).result() == serial
    started = pycheck._start_compile(items)
    time.sleep(0.5)  # the child has done everything: nothing is left for this process
    assert started.result() == serial
    started = pycheck._start_compile(items)
    assert started.child is not None
    os.kill(started.child[0], signal.SIGKILL)  # a child that dies: this process does its share
    assert started.result() == serial
    started = pycheck._start_compile(items)
    pid = started.child[0]
    started.cancel()  # given up: the child is stopped and reaped
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)


def test_a_screened_series_still_names_the_patch_that_brought_the_name_error(tmp_path: Path, screen: RuffScreen) -> None:
    base = b"import os\n\n\ndef workers():\n    return int(os.environ.get('W', '2'))\n"
    v1 = base + b"\n\ndef a():\n    return 1\n"
    v2 = v1.replace(b"return 1", b"return undefined_thing")
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-a.patch", [("app/w.py", base, v1)])
    write_patch(q, "0002-typo.patch", [("app/w.py", v1, v2)])
    queue = load_queue(q)
    _, problems = run_series(queue, {"app/w.py": TargetFile("app/w.py", "app/w.py", base)}, python=Checks(screen=screen))
    assert [(p.kind, p.patch, p.detail) for p in problems] == [
        ("python", "0002-typo.patch", "UndefinedName: undefined name 'undefined_thing'")]


def _big_module(i: int) -> bytes:
    return b"import os\n\n\n" + b"".join(b"def f%d_%d(x):\n    return os.path.join(str(x), '%d')\n\n\n" % (i, k, k)
                                          for k in range(120))


def _python_queue(tmp_path: Path, bad: bytes | None) -> tuple[Path, Path]:
    """40 modules (over FORK_MIN_BYTES of source, so the compile forks) patched in place; the last one
    gets `bad` appended when given."""
    from support.qtools import write_patch as wp

    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    changes = []
    for i in range(40):
        base = _big_module(i)
        (root / f"app/m{i:02d}.py").write_bytes(base)
        new = base.replace(b"'0'", b"'zero'") + (bad if bad is not None and i == 39 else b"")
        changes.append((f"app/m{i:02d}.py", base, new))
    q = tmp_path / "q"
    q.mkdir()
    wp(q, "0001-many.patch", changes[:20])
    wp(q, "0002-more.patch", changes[20:])
    assert sum(len(c[2]) for c in changes) > pycheck.FORK_MIN_BYTES
    return root, q


@pytest.mark.parametrize("bad, said", [
    (b"\ndef g():\n    return undefined_after_staging\n", "undefined_after_staging"),
    (b"\ndef g(:\n", "SyntaxError"),
    (b"\nreturn 1\n", "'return' outside function"),
])
def test_in_place_apply_refused_by_the_check_after_staging_leaves_the_root_exactly_old(tmp_path: Path, bad: bytes,
                                                                                    said: str) -> None:
    from support.qtools import imgquilt, tree_hash

    root, q = _python_queue(tmp_path, bad)
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, check=3)
    assert "0002-more.patch" in r.err and said in r.err
    assert tree_hash(root) == before  # no staged file, backup or journal left behind


def test_in_place_apply_with_a_clean_check_writes_everything(tmp_path: Path) -> None:
    from support.qtools import imgquilt

    root, q = _python_queue(tmp_path, None)
    imgquilt("apply", "--root", str(root), cwd=q, check=0)
    assert all(b"'zero'" in (root / f"app/m{i:02d}.py").read_bytes() for i in range(40))


def test_the_gate_runs_between_staging_and_commit(tmp_path: Path) -> None:
    from imgquilt.engine.plan import plan_apply
    from imgquilt.errors import PythonCheckFailed
    from imgquilt.rootfs.inplace import write_in_place
    from imgquilt.rootfs.source import RootfsSource
    from support.qtools import tree_hash

    root, q = _python_queue(tmp_path, None)
    result = plan_apply(load_queue(q), RootfsSource(root, ref=f"rootfs:{root}"), None)
    before = tree_hash(root)
    seen = []

    def gate() -> None:
        seen.append(sorted(p.name for p in root.iterdir()))  # the journal is there: files are staged
        raise PythonCheckFailed("refused at the gate")

    with pytest.raises(PythonCheckFailed):
        write_in_place(root, result, gate=gate)
    assert ".imgquilt-journal.json" in seen[0]
    assert tree_hash(root) == before


def test_no_ruff_turns_the_screen_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMGQUILT_NO_RUFF", "1")
    assert ruff_screen() is None
    monkeypatch.delenv("IMGQUILT_NO_RUFF")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("sys.executable", "/nonexistent/python")

    def missing() -> str:
        raise FileNotFoundError("no ruff")

    monkeypatch.setattr("ruff.find_ruff_bin", missing)
    assert ruff_screen() is None  # no ruff anywhere: pyflakes reads every file, as before ruff


def test_a_ruff_that_hangs_is_no_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import imgquilt.pycheck.ruffscreen as rs

    slow = tmp_path / "ruff"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(rs, "TIMEOUT", 0.5)
    items = [(d, n) for n, d in CASES.items()]
    started = time.monotonic()
    assert errors_of_many(items, screen=RuffScreen(str(slow), "ruff0")) == _unscreened(items)
    assert time.monotonic() - started < 20


# --- where ruff is more lenient than pyflakes ----------------------------------------------------
def _names_in_ruff_binary() -> set[str]:
    """Every identifier-like string in the installed ruff binary (its builtin tables among them)."""
    import keyword
    import re

    from imgquilt.pycheck.ruffscreen import find_ruff

    exe = find_ruff()
    assert exe is not None
    data = Path(exe).read_bytes()
    dunders = {m.decode() for m in re.findall(rb"__[a-z][a-z0-9_]*?__", data)}  # glued tables split here
    words = {m.decode() for m in re.findall(rb"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]{1,40}(?![A-Za-z0-9_])", data)}
    return {w for w in dunders | words if w.isidentifier() and not keyword.iskeyword(w)}


def test_the_names_ruff_defines_and_pyflakes_does_not_are_all_screened(tmp_path: Path) -> None:
    """Every candidate name (the running Python's builtins, pyflakes', and every identifier in the ruff
    binary) used at module, class and function scope: where the installed ruff reports no undefined name
    and the installed pyflakes does, the name must be in RUFF_ONLY_NAMES, which flags any file using it."""
    import builtins
    import json
    import subprocess
    import sys

    from pyflakes import checker
    from pyflakes.checker import builtin_vars

    from imgquilt.pycheck.ruffscreen import RUFF_ONLY_NAMES, find_ruff

    names = sorted(_names_in_ruff_binary() | set(dir(builtins)) | set(builtin_vars)
                   | {"WindowsError", "display", "get_ipython", "__IPYTHON__", "_", "__module__", "__qualname__"})
    sources = {
        "module.py": "".join(f"{n}\n" for n in names),
        "klass.py": "class K:\n" + "".join(f"    {n}\n" for n in names),
        "function.py": "def f():\n" + "".join(f"    {n}\n" for n in names),
    }
    lenient: set[str] = set()
    for fname, src in sources.items():
        (tmp_path / fname).write_text(src)
        out = subprocess.run([find_ruff(), "check", "--isolated", "--no-cache", "--exit-zero", "--select", "F821",
                              "--output-format", "json", "--target-version",
                              f"py{sys.version_info[0]}{sys.version_info[1]}", fname],
                             cwd=tmp_path, capture_output=True, check=True).stdout
        by_ruff = {d["message"].split("`")[1] for d in json.loads(out)}
        flakes = checker.Checker(compile(src, fname, "exec", 0x400), filename=fname)
        by_pyflakes = {m.message_args[0] for m in flakes.messages if type(m).__name__ == "UndefinedName"}
        assert len(by_pyflakes) > 1000  # the candidates really went through both
        lenient |= by_pyflakes - by_ruff
    assert lenient <= set(RUFF_ONLY_NAMES), f"ruff takes these as defined, pyflakes does not: {sorted(lenient)}"
    assert {"__warningregistry__", "__cached__"} <= lenient


def test_a_ruff_earlier_on_path_is_never_used(tmp_path: Path) -> None:
    """A `ruff` on PATH that answers only the probe (so every file looks clean) must not be the screen:
    the check takes the ruff package's own binary. Run by an interpreter with no ruff beside it."""
    import subprocess
    import sys

    from support.qtools import TOOL, empty_queue

    fake = tmp_path / "fakebin" / "ruff"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1\" = version ] && { echo 'ruff 0.17.6'; exit 0; }\n"
                    "printf '['; sep=''; for f in \"$@\"; do case \"$f\" in *.py) printf '%s{\"filename\": \"%s\", '"
                    "'\"code\": \"F821\", \"message\": \"Undefined name `__imgquilt_screen_probe__`\"}' \"$sep\" \"$f\"; "
                    "sep=',';; esac; done; echo ']'\n")
    fake.chmod(0o755)
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(os.path.realpath(sys.executable))  # the base interpreter: nothing beside it
    site = next(p for p in sys.path if p.endswith("site-packages"))
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app/w.py").write_bytes(b"X = 1\n")
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-typo.patch", [("app/w.py", b"X = 1\n", b"X = undefined_thing\n")])
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=f"{TOOL}{os.pathsep}{site}",
               IMGQUILT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("VIRTUAL_ENV", None)
    p = subprocess.run([str(python), "-m", "imgquilt", "apply", "--root", str(root)], cwd=q, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 3 and "undefined_thing" in p.stderr, p.stdout + p.stderr
    assert (root / "app/w.py").read_bytes() == b"X = 1\n"


def test_findings_depend_on_the_file_name_too(tmp_path: Path) -> None:
    """`__path__` is defined in a package's __init__.py only: the same bytes are clean there and an
    undefined name elsewhere, in one run and across runs (the shared cache keys by name and bytes)."""
    from support.qtools import empty_queue, imgquilt

    src = b"print(__path__)\n"
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "lib").mkdir()
    env = dict(os.environ, IMGQUILT_CACHE_DIR=str(tmp_path / "cache"))
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-init.patch", [("pkg/__init__.py", None, src)])
    imgquilt("apply", "--root", str(root), cwd=q, env=env, check=0)  # clean, and cached as clean
    q2 = empty_queue(tmp_path / "q2")
    write_patch(q2, "0001-mod.patch", [("lib/mod.py", None, src)])
    r = imgquilt("apply", "--root", str(root), cwd=q2, env=env, check=3)
    assert "undefined name '__path__'" in r.err and not (root / "lib/mod.py").exists()
    both = empty_queue(tmp_path / "q3")  # one run, both names: each checked as itself
    write_patch(both, "0001-both.patch", [("a/__init__.py", None, src), ("b/mod.py", None, src)])
    r = imgquilt("apply", "--root", str(root), cwd=both, env={**env, "IMGQUILT_NO_CACHE": "1"}, check=3)
    assert "b/mod.py" in r.err and "a/__init__.py" not in r.err
