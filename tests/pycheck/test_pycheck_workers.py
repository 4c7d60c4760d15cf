"""Independent files are checked in parallel on the machine's cores (issue 37, point 1): the Python
check's pure steps (the changed names of patched modules, the items of each file) run in forked
workers (pycheck/workers.py) when a run has enough source, and give exactly what the serial path gives,
in the same order; a worker that fails, dies or cannot be started leaves its work to the parent (the
same value, or the same error); nothing is left running, ^C included; the cache rows are the parent's."""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from support.imagetools import build_oci, file
from support.qtools import imgquilt, write_patch
from imgquilt.pycheck import workers
from imgquilt.pycheck.crosscheck import FileCheck, cross_check
from imgquilt.pycheck.pysearch import SourceModules
from imgquilt.rootfs.source import RootfsSource

SITE = "usr/local/lib/python3.11/site-packages"


def _lib() -> dict[str, bytes]:
    """An installed package: functions and classes other modules call."""
    return {
        f"{SITE}/lib/__init__.py": b"from .core import run\n",
        f"{SITE}/lib/core.py": b"def run(a, b=1):\n    pass\n\ndef gone(x):\n    pass\n\nclass Box:\n    def __init__(self, size):\n        pass\n",
        f"{SITE}/lib/util.py": b"VALUE = 1\n\ndef helper(*, key):\n    pass\n",
    }


def _padding(i: int) -> bytes:
    """Enough body that a few dozen files are worth workers (WORKERS_MIN_BYTES), each its own."""
    return "".join(f"def pad_{i}_{k}(v):\n    return v + {k}\n\n" for k in range(220)).encode()


# (added line, what it brings): each patched file gets one of these; a mix of findings and clean ones
ADDS = [
    b"from lib.core import run\nrun(1, 2, 3)\n",  # TypeError: too many arguments
    b"from lib.core import missing_name\n",  # ImportError
    b"import lib.nothere\n",  # ModuleNotFoundError
    b"from lib import util\nutil.absent\n",  # AttributeError
    b"from lib.core import Box\nBox()\n",  # TypeError: a class's __init__
    b"from lib.util import helper\nhelper(key=1)\n",  # fits
    b"from lib.core import gone\ngone(1)\n",  # the patched core no longer has it
    b"undefined_thing()\n",  # the name check's, not the cross-module check's
    b"def broken(:\n",  # does not parse
    b"X = 1\n",  # a new name, nothing imported
]


def _tree(n: int, adds: list[bytes] = ADDS) -> tuple[dict[str, bytes], list[tuple[str, bytes, bytes]]]:
    base = _lib()
    changes = []
    for i in range(n):
        path = f"{SITE}/app/m{i:02d}.py"
        old = b"import lib\n" + _padding(i)
        base[path] = old
        changes.append((path, old, old + adds[i % len(adds)]))
    base[f"{SITE}/app/__init__.py"] = b""
    core = f"{SITE}/lib/core.py"
    changes.append((core, base[core], base[core].replace(b"def gone(x):\n    pass\n", b"")))  # an interface change
    return base, changes


def _changed_lines(old: bytes, new: bytes) -> list[bytes]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    return [line[2:].encode() for line in difflib.ndiff([x.decode() for x in a], [x.decode() for x in b])
            if line[:2] in ("+ ", "- ")]


def _render(found) -> list[str]:
    return [json.dumps([ff.check.resolved, ff.place.module, [x for f in ff.findings + ff.notes for x in f.located(ff.check.path)]])
            for ff in found]


def _cross_check(root: Path, changes) -> list[str]:
    files = SourceModules(RootfsSource(root))
    overlay = {p: new for p, _, new in changes}
    fcs = [FileCheck(p, p, old, new) for p, old, new in changes]
    lines = {p: _changed_lines(old, new) for p, old, new in changes}
    return _render(cross_check(fcs, [(p, old, new) for p, old, new in changes], files.view(overlay), files.view(), lines))


@pytest.fixture
def forks(monkeypatch):
    """The pids of the workers the pool forks (each must be gone when the pool returns)."""
    pids: list[int] = []
    real = os.fork

    def counting() -> int:
        pid = real()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(workers.os, "fork", counting)
    return pids


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)  # reaped: no such process
        except ProcessLookupError:
            continue
        return False
    return True


def test_the_workers_find_what_the_serial_check_finds_in_the_same_order(tmp_path: Path, monkeypatch, forks) -> None:
    base, changes = _tree(40)
    for rel, data in base.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "1")
    serial = _cross_check(tmp_path, changes)
    assert forks == []
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "3")
    parallel = _cross_check(tmp_path, changes)
    assert len(forks) >= 2 and _gone(forks)  # the changed names and the items, each in workers
    assert parallel == serial
    text = "\n".join(serial)
    for want in ("TypeError", "ImportError", "ModuleNotFoundError", "AttributeError", "gone"):
        assert want in text
    # and with a worker per file's chunk of one (the most hand-offs), still the same
    monkeypatch.setattr(workers, "CHUNKS_PER_WORKER", 1000)
    assert _cross_check(tmp_path, changes) == serial


def test_a_queue_with_errors_says_the_same_with_workers_and_the_rows_are_the_parent_s(tmp_path: Path, cli_env) -> None:
    """The user's view: the same refusal, findings and exit code with one process or three; a warm run
    (the rows the parent stored) says it again, and the findings rows are sealed as ever."""
    base, changes = _tree(30)
    layout = tmp_path / "img"
    build_oci(layout, [[file(p, d) for p, d in base.items()]], tag="v1")
    q = tmp_path / "q"
    q.mkdir()
    for i, (path, old, new) in enumerate(changes):
        write_patch(q, f"{i:04d}.patch", [(path, old, new)])
    assert sum(len(o) + len(n) for _, o, n in changes) >= workers.WORKERS_MIN_BYTES
    runs = {}
    for label, n in (("serial", "1"), ("workers", "3"), ("warm", "3")):
        env = dict(cli_env, IMGQUILT_PYCHECK_WORKERS=n,
                   IMGQUILT_CACHE_DIR=str(tmp_path / ("cache-serial" if label == "serial" else "cache-workers")))
        runs[label] = imgquilt("--json", "apply", "--image", f"oci:{layout}:v1", "--layer", str(tmp_path / "l.tar.gz"),
                               cwd=q, env=env)
    assert runs["serial"].code == runs["workers"].code == runs["warm"].code != 0
    assert runs["serial"].out == runs["workers"].out == runs["warm"].out
    assert runs["serial"].err == runs["workers"].err == runs["warm"].err
    assert "run(1, 2, 3)" not in runs["serial"].out  # findings are said, not the source
    assert "lib.core.missing_name" in runs["serial"].out or "missing_name" in runs["serial"].out
    db = tmp_path / "cache-workers" / "pycheck" / "findings.sqlite"
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM findings").fetchone()[0]
    assert rows >= len(changes)


def _twice(x: int) -> int:
    return 2 * x


def _fails_on_7(x: int) -> int:
    if x == 7:
        raise ValueError(f"bad item {x}")
    return 2 * x


def test_mapped_equals_the_serial_map_and_leaves_nothing_running(forks) -> None:
    items = list(range(200))
    assert workers.mapped(_twice, items, 1 << 30, workers=3) == [2 * x for x in items]
    assert len(forks) == 3 and _gone(forks)
    forks.clear()
    assert workers.mapped(_twice, items, 10, workers=3) == [2 * x for x in items] and forks == []  # too little work


def test_an_error_in_a_worker_is_the_serial_path_s_error(forks) -> None:
    with pytest.raises(ValueError, match="bad item 7"):
        workers.mapped(_fails_on_7, list(range(100)), 1 << 30, workers=2)
    assert forks and _gone(forks)


def _dies_on_13(x: int) -> int:
    if x == 13 and os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return x + 1


PARENT = os.getpid()


def test_a_worker_that_dies_leaves_its_chunk_to_the_parent(forks) -> None:
    global PARENT
    PARENT = os.getpid()
    assert workers.mapped(_dies_on_13, list(range(100)), 1 << 30, workers=2) == [x + 1 for x in range(100)]
    assert forks and _gone(forks)


def test_no_fork_means_the_serial_path(monkeypatch) -> None:
    def refuse() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(workers.os, "fork", refuse)
    assert workers.mapped(_twice, list(range(50)), 1 << 30, workers=4) == [2 * x for x in range(50)]


def _interrupts(x: int) -> int:
    if os.getpid() != PARENT:
        time.sleep(0.5)  # every worker started: the ^C comes while the parent waits for them
        if x == 0:  # one ^C (two, one from each worker, could land after mapped raised: a second user ^C)
            os.kill(PARENT, signal.SIGINT)
        time.sleep(30)
    return x


def test_a_keyboard_interrupt_leaves_no_worker_behind(forks) -> None:
    global PARENT
    PARENT = os.getpid()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        workers.mapped(_interrupts, list(range(40)), 1 << 30, workers=2)
    assert forks and _gone(forks)
    assert time.monotonic() - started < 20  # the sleeping workers were killed, not waited for


def test_the_setting_says_how_many(monkeypatch) -> None:
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "1")
    assert workers.workers_wanted() == 1 and not workers.worth_workers(1 << 30)
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "5")
    assert workers.workers_wanted() == 5
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "zero")
    assert workers.workers_wanted() == (os.cpu_count() or 1)


def test_the_name_check_of_many_files_in_workers_equals_the_serial_one(monkeypatch, forks) -> None:
    from imgquilt.pycheck.names import PARALLEL_MIN, errors_of_many

    files = [(f"import os\nvalue_{i} = os.sep\n".encode() + (b"print(nowhere)\n" if i % 3 == 0 else b"")
              + (b"def f(:\n" if i == 5 else b""), f"m{i}.py") for i in range(PARALLEL_MIN + 4)]
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "1")
    serial = errors_of_many(files)
    assert forks == []
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "2")
    assert errors_of_many(files) == serial
    assert len(forks) == 2 and _gone(forks)
    assert sum(1 for errs in serial.values() if any("nowhere" in e for e in errs)) == 4
    assert any(e.startswith("SyntaxError") for errs in serial.values() for e in errs)


def test_each_version_is_parsed_once_with_workers_too(tmp_path: Path, monkeypatch, forks) -> None:
    """The workers that read a patched module's changed names keep its trees for the file's items (one
    parse per version across all processes, as the serial path), with the same findings. (A module that
    no longer parses makes every file be checked again: the files the workers did not expect to be
    checked are parsed a second time then, with the same findings: the other tests here.)"""
    from imgquilt.pycheck import crosscheck

    base, changes = _tree(40, [a for a in ADDS if not a.startswith(b"def broken")])
    for rel, data in base.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    log = tmp_path / "parsed.log"
    real = crosscheck.parse

    def logged(source: bytes, filename: str):
        with open(log, "a") as f:  # the workers inherit this at the fork: one line per parse, any process
            f.write(f"{filename} {hashlib.sha256(source).hexdigest()}\n")
        return real(source, filename)

    monkeypatch.setattr(crosscheck, "parse", logged)
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "1")
    serial = _cross_check(tmp_path, changes)
    serial_parses = log.read_text().splitlines()
    log.unlink()
    monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", "3")
    assert _cross_check(tmp_path, changes) == serial
    parses = log.read_text().splitlines()
    assert len(forks) >= 2 and _gone(forks)
    # every version of every patched file parsed once in all (names and items from one tree), as in the
    # serial path; the patched lib/core.py the others import is read again by the parent to answer
    # them (its interface), where the serial path had its tree already
    own = [x for x in parses if "/app/" in x]
    assert len(own) == len(set(own)) == 2 * 40
    assert set(own) >= {x for x in serial_parses if "/app/" in x}


def test_a_module_s_own_new_name_does_not_make_it_checked(tmp_path: Path, monkeypatch, forks) -> None:
    """A patch that only binds a new name in its module (`X = 1`, `def added`) changes what the module
    offers, but the module itself has no item naming it (items name imports and attributes): it is not
    checked again, and its items are never computed, in workers or not. One that uses the name through
    an import of itself, or as an attribute, is; the findings are the serial path's."""
    from imgquilt.pycheck import crosscheck

    base = _lib()
    changes = []
    for i in range(30):
        path = f"{SITE}/app/m{i:02d}.py"
        old = b"import lib\n" + _padding(i)
        base[path] = old
        add = [b"X_%d = 1\n" % i, b"def added_%d():\n    pass\n" % i, b"class Added_%d:\n    pass\n" % i][i % 3]
        if i == 4:  # uses its own new name through an import of its own package: checked
            add = b"def added_4():\n    pass\nfrom app import m04\nm04.added_4(1)\n"
        changes.append((path, old, old + add))
    for rel, data in base.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / SITE / "app" / "__init__.py").write_bytes(b"")
    log = tmp_path / "items.log"
    real = crosscheck.items_of

    def logged(tree, place):
        with open(log, "a") as f:  # the workers inherit this at the fork
            f.write(place.module + "\n")
        return real(tree, place)

    monkeypatch.setattr(crosscheck, "items_of", logged)
    got = {}
    for workers_ in ("1", "3"):
        monkeypatch.setenv("IMGQUILT_PYCHECK_WORKERS", workers_)
        log.unlink(missing_ok=True)
        got[workers_] = _cross_check(tmp_path, changes)
        assert sorted(set(log.read_text().split())) == ["app.m04"], workers_  # both versions of m04 only
    assert got["1"] == got["3"]
    pad = _padding(4).count(b"\n")
    assert got["1"] == [json.dumps([f"{SITE}/app/m04.py", "app.m04", [
        f"{SITE}/app/m04.py:{5 + pad}:1: TypeError: added_4() takes 0 positional arguments but 1 was given "
        f"({SITE}/app/m04.py: line {2 + pad}: def added_4())"]])]
