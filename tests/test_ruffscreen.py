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

import imgquilt.engine.pycheck as pycheck
from imgquilt.engine.plan import run_series
from imgquilt.engine.pycheck import errors_of_many, python_errors, syntax_errors
from imgquilt.fs.types import TargetFile
from imgquilt.queue.queue import load_queue
from imgquilt.util.ruffscreen import RuffScreen, ruff_screen
from qtools import write_patch

REPO = Path(__file__).resolve().parent.parent

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
    by_name = {name: screened[pycheck.hashlib.sha256(data).hexdigest()] for name, data in CASES.items()}
    assert by_name["clean.py"] == set() and by_name["builtins.py"] == set()
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
    _, problems = run_series(queue, {"app/w.py": TargetFile("app/w.py", "app/w.py", base)}, python_screen=screen)
    assert [(p.kind, p.patch, p.detail) for p in problems] == [
        ("python", "0002-typo.patch", "UndefinedName: undefined name 'undefined_thing'")]


def _big_module(i: int) -> bytes:
    return b"import os\n\n\n" + b"".join(b"def f%d_%d(x):\n    return os.path.join(str(x), '%d')\n\n\n" % (i, k, k)
                                          for k in range(120))


def _python_queue(tmp_path: Path, bad: bytes | None) -> tuple[Path, Path]:
    """40 modules (over FORK_MIN_BYTES of source, so the compile forks) patched in place; the last one
    gets `bad` appended when given."""
    from qtools import write_patch as wp

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
    from qtools import imgquilt, tree_hash

    root, q = _python_queue(tmp_path, bad)
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, check=3)
    assert "0002-more.patch" in r.err and said in r.err
    assert tree_hash(root) == before  # no staged file, backup or journal left behind


def test_in_place_apply_with_a_clean_check_writes_everything(tmp_path: Path) -> None:
    from qtools import imgquilt

    root, q = _python_queue(tmp_path, None)
    imgquilt("apply", "--root", str(root), cwd=q, check=0)
    assert all(b"'zero'" in (root / f"app/m{i:02d}.py").read_bytes() for i in range(40))


def test_the_gate_runs_between_staging_and_commit(tmp_path: Path) -> None:
    from imgquilt.engine.plan import plan_apply
    from imgquilt.errors import PythonCheckFailed
    from imgquilt.rootfs.inplace import write_in_place
    from imgquilt.rootfs.source import RootfsSource
    from qtools import tree_hash

    root, q = _python_queue(tmp_path, None)
    result = plan_apply(load_queue(q), RootfsSource(root, ref=f"rootfs:{root}"), None, python_check=False)
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
    assert ruff_screen() is None  # no ruff anywhere: pyflakes reads every file, as before ruff


def test_a_ruff_that_hangs_is_no_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import imgquilt.util.ruffscreen as rs

    slow = tmp_path / "ruff"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(rs, "TIMEOUT", 0.5)
    items = [(d, n) for n, d in CASES.items()]
    started = time.monotonic()
    assert errors_of_many(items, screen=RuffScreen(str(slow), "ruff0")) == _unscreened(items)
    assert time.monotonic() - started < 20
