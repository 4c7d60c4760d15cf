"""The Python check of a series: one pass over final states, the culprit named, findings memoized."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from imgquilt.pycheck.rows import PyCheckResults
from imgquilt.engine.plan import run_series
from imgquilt.pycheck import Checks
from imgquilt.pycheck.names import checker_version
from imgquilt.fs.types import TargetFile
from imgquilt.queue.queue import Queue, load_queue
from support.qtools import write_patch

BASE = b"import os\n\n\ndef workers():\n    return int(os.environ.get('W', '2'))\n"
QUIRKY = b"def f():\n    return stock_undefined\n"


def _queue(tmp_path: Path, steps: list[tuple[str, list[tuple[str, bytes | None, bytes | None]]]]) -> Queue:
    q = tmp_path / "q"
    q.mkdir()
    for name, changes in steps:
        write_patch(q, name, changes)
    return load_queue(q)


class CountingMemo:
    def __init__(self) -> None:
        self.saved: dict[str, list[str]] = {}
        self.puts = 0

    def get_many(self, keys) -> dict[str, list[str]]:
        return {k: self.saved[k] for k in keys if k in self.saved}

    def put_many(self, entries: dict[str, list[str]]) -> None:
        self.puts += len(entries)
        self.saved.update(entries)


def _targets(files: dict[str, bytes | None]) -> dict[str, TargetFile]:
    return {p: TargetFile(p, p, d) for p, d in files.items()}


def test_the_patch_that_brought_the_error_is_named(tmp_path: Path) -> None:
    v1 = BASE + b"\n\ndef a():\n    return 1\n"
    v2 = v1.replace(b"return 1", b"return undefined_thing")
    v3 = v2 + b"\n\ndef b():\n    return 2\n"
    q = _queue(tmp_path, [("0001-a.patch", [("app/w.py", BASE, v1), ("app/q.py", QUIRKY, QUIRKY + b"x = 1\n")]),
                          ("0002-typo.patch", [("app/w.py", v1, v2)]),
                          ("0003-more.patch", [("app/w.py", v2, v3)])])
    memo = CountingMemo()
    _, problems = run_series(q, _targets({"app/w.py": BASE, "app/q.py": QUIRKY}), python=Checks(memo))
    assert [(p.kind, p.patch, p.path) for p in problems] == [("python", "0002-typo.patch", "app/w.py")]
    assert problems[0].detail == "UndefinedName: undefined name 'undefined_thing'"
    # the stock quirk of q.py is not the queue's fault
    _, again = run_series(q, _targets({"app/w.py": BASE, "app/q.py": QUIRKY}), python=Checks(memo))
    assert again == problems


def test_one_pass_over_final_states_and_memoized(tmp_path: Path) -> None:
    steps, data = [], BASE
    for i in range(6):
        new = data + f"\n\ndef f{i}():\n    return {i}\n".encode()
        steps.append((f"{i:04d}-step.patch", [("app/w.py", data, new)]))
        data = new
    q = _queue(tmp_path, steps)
    memo = CountingMemo()
    states, problems = run_series(q, _targets({"app/w.py": BASE}), python=Checks(memo))
    assert problems == [] and states["app/w.py"].data == data
    assert memo.puts == 1  # the final state only: no base, no intermediate state
    run_series(q, _targets({"app/w.py": BASE}), python=Checks(memo))
    assert memo.puts == 1  # the second run checks nothing


def test_new_file_with_a_syntax_error_is_refused(tmp_path: Path) -> None:
    q = _queue(tmp_path, [("0001-new.patch", [("app/n.py", None, b"def broken(:\n")])])
    _, problems = run_series(q, _targets({"app/n.py": None}), python=Checks())
    assert [(p.patch, p.detail.split(":")[0]) for p in problems] == [("0001-new.patch", "SyntaxError")]


def test_shared_cache_results_are_checked(tmp_path: Path) -> None:
    store = PyCheckResults(checker_version(), tmp_path / "cache")
    key = "a" * 64
    store.put_many({key: ["UndefinedName: undefined name 'x'"]})
    assert PyCheckResults(checker_version(), tmp_path / "cache").get_many([key]).get(key) == ["UndefinedName: undefined name 'x'"]
    db = sqlite3.connect(store.path)  # tamper with the row behind the store's back
    db.execute("UPDATE findings SET errors = replace(errors, \"'x'\", \"'y'\")")
    db.commit()
    assert db.execute("SELECT count(*) FROM findings").fetchone() == (1,)
    assert store.get_many([key]).get(key) is None  # tampered: dropped, checked again
    assert db.execute("SELECT count(*) FROM findings").fetchone() == (0,)
    db.close()
    store.put_many({key: []})
    assert PyCheckResults("another-version", tmp_path / "cache").get_many([key]).get(key) is None
    assert PyCheckResults(checker_version(), tmp_path / "cache").get_many([key]).get(key) == []


def test_a_damaged_or_linked_findings_file_is_replaced_never_followed(tmp_path: Path) -> None:
    key = "b" * 64
    cache = tmp_path / "cache"
    path = PyCheckResults(checker_version(), cache).path  # (makes the pycheck part, mode 0700)
    path.write_bytes(b"not a database at all" * 100)
    store = PyCheckResults(checker_version(), cache)
    assert store.get_many([key]).get(key) is None
    store.put_many({key: ["x"]})
    assert PyCheckResults(checker_version(), cache).get_many([key]).get(key) == ["x"]
    path.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"precious")
    path.symlink_to(elsewhere)
    store = PyCheckResults(checker_version(), cache)
    store.put_many({key: ["y"]})
    assert elsewhere.read_bytes() == b"precious" and not path.is_symlink()
    assert PyCheckResults(checker_version(), cache).get_many([key]).get(key) == ["y"]
