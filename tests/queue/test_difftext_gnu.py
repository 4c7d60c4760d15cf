"""The diff writer gives the hunks GNU `diff -u` gives, byte for byte, and is fast on large files."""
from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest

from imgquilt.queue.difftext import diff_hunks, format_hunks

C = b"".join(b"def f%d(x):\n    if x:\n        return %d\n    return None\n\n" % (i, i) for i in range(40))
BIG = b"".join(b"line %d of a large file\n" % i for i in range(10_000))


def _scatter(data: bytes, seed: int, edits: int) -> bytes:
    rng = random.Random(seed)
    lines = data.splitlines(keepends=True)
    for _ in range(edits):
        i = rng.randrange(len(lines))
        op = rng.choice("edi")
        if op == "e":
            lines[i] = b"changed " + lines[i]
        elif op == "d":
            del lines[i]
        else:
            lines.insert(i, b"inserted %d\n" % rng.randrange(1000))
    return b"".join(lines)


CASES = {
    "one-line": (b"a\nb\nc\n", b"a\nB\nc\n"),
    "insert-top": (C, b"import os\n" + C),
    "append": (C, C + b"tail\n"),
    "delete-block": (C, C.replace(b"def f7(x):\n    if x:\n        return 7\n    return None\n\n", b"")),
    "repeated-lines": (C, C.replace(b"        return 12\n", b"        return 12\n    return None\n\n    return None\n")),
    "crlf": (b"[a]\r\nx = 1\r\ny = 2\r\n", b"[a]\r\nx = 3\r\ny = 2\r\nz = 4\r\n"),
    "lone-cr": (b"a\rb\nc\n", b"a\rB\nc\n"),
    "no-final-newline-old": (b"a\nb", b"a\nb\n"),
    "no-final-newline-new": (b"a\nb\n", b"a\nb"),
    "no-final-newline-both": (b"a\nb\nc", b"a\nB\nc"),
    "to-empty": (b"a\nb\n", b""),
    "from-empty": (b"", b"a\nb\n"),
    "non-utf8": (b"caf\xe9\nx\n", b"caf\xe9\ny\n"),
    "large-scattered": (BIG, _scatter(BIG, 1, 200)),
    "large-code": (C * 50, _scatter(C * 50, 2, 300)),
}


def _gnu(tmp: Path, a: bytes, b: bytes) -> bytes:
    (tmp / "a").write_bytes(a)
    (tmp / "b").write_bytes(b)
    p = subprocess.run(["diff", "-u", "a", "b"], cwd=tmp, capture_output=True, env={"LC_ALL": "C"})
    assert p.returncode in (0, 1), p.stderr
    out = p.stdout.split(b"\n", 2)[2] if p.stdout else b""  # drop the --- and +++ lines
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_hunks_as_gnu_diff(tmp_path: Path, name: str) -> None:
    a, b = CASES[name]
    assert format_hunks(diff_hunks(a, b)) == _gnu(tmp_path, a, b)


def test_fast_on_ten_thousand_lines() -> None:
    new = _scatter(BIG, 3, 500)
    t0 = time.perf_counter()
    hunks = diff_hunks(BIG, new)
    assert time.perf_counter() - t0 < 2.0  # about 0.05 s here (a generous bound: a shared machine)
    assert hunks
