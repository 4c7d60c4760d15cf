"""The bytecode judge on its own: pyc headers, CPython's keyed source hash, and every verdict.

The foreign interpreters' pycs in tests/data/pyc were written by real CPython 3.7-3.13 (see its README).
"""
from __future__ import annotations

import importlib.util
import marshal
import py_compile
import struct
import sys
from pathlib import Path

import pytest

from imgquilt.fs.pycache import Bytecode, pycache_names, source_dirs
from imgquilt.pycheck.bytecode import CURRENT, IGNORED, STALE, UNCHECKED, Seen, judge, read_header, siphash, source_hash

DATA = Path(__file__).parents[1] / "data" / "pyc"
SRC = (DATA / "mod.py").read_bytes()
TS_MTIME = 1796144216
VERSIONS = {"cpython-37": "3.7", "cpython-38": "3.8", "cpython-39": "3.9", "cpython-310": "3.10",
            "cpython-311": "3.11", "cpython-312": "3.12", "cpython-313": "3.13"}
OWN = sys.implementation.cache_tag


def seen(data: bytes, source: bytes | None = SRC, mtime: int | None = TS_MTIME, *, how: str = "pycache",
         optimize: int = 0) -> Seen:
    return Seen(Bytecode("x/__pycache__/mod.tag.pyc", "x/mod.py", how, optimize), data, source, mtime)


def verdict(*args, **kw) -> str:
    (v,) = judge([seen(*args, **kw)])
    return v.verdict


# --- the keyed source hash: CPython's own, for every release in the data --------------------------
@pytest.mark.parametrize("tag", sorted(VERSIONS))
def test_source_hash_matches_each_interpreters_pyc(tag: str) -> None:
    for kind in ("unchecked", "checked"):
        data = (DATA / f"mod.{tag}.{kind}.pyc").read_bytes()
        h = read_header(data)
        assert h is not None and h.version == VERSIONS[tag] and h.flags == (1 if kind == "unchecked" else 3)
        assert source_hash(h.magic, SRC) == h.source_hash
        assert source_hash(h.magic, SRC + b"#") != h.source_hash


def test_siphash_is_the_interpreters_own() -> None:
    key = int.from_bytes(importlib.util.MAGIC_NUMBER, "little")
    for data in (b"", b"a", b"abcdefg", b"abcdefgh", b"abcdefghi" * 100):
        assert siphash(key, 0, data, 1, 3).to_bytes(8, "little") == importlib.util.source_hash(data)
    # SipHash-2-4 of the reference paper (Aumasson & Bernstein, appendix A): key 00..0f, message 00..0e
    k0 = int.from_bytes(bytes(range(8)), "little")
    k1 = int.from_bytes(bytes(range(8, 16)), "little")
    assert siphash(k0, k1, bytes(range(15)), 2, 4) == 0xA129CA6149BE45E5


def test_unknown_magic_numbers_are_not_guessed() -> None:
    assert source_hash(3700, SRC) is None  # Python 3.16 starts at 3700: not known yet
    fake = struct.pack("<H", 3700) + b"\r\n" + struct.pack("<I", 1) + b"\0" * 8
    (v,) = judge([seen(fake)])
    assert v.verdict == UNCHECKED and "3700" in v.reason and "cannot compute" in v.reason
    checked = struct.pack("<H", 3700) + b"\r\n" + struct.pack("<I", 3) + b"\0" * 8
    assert verdict(checked) == IGNORED  # checked-hash: a mismatch is recompiled, whatever the hash


# --- verdicts ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tag", sorted(VERSIONS))
def test_hash_based_pycs_of_every_release(tag: str) -> None:
    unchecked = (DATA / f"mod.{tag}.unchecked.pyc").read_bytes()
    checked = (DATA / f"mod.{tag}.checked.pyc").read_bytes()
    other = SRC.replace(b"from the source", b"from elsewhere")
    assert verdict(unchecked) == CURRENT
    assert verdict(unchecked, other) == STALE  # loaded without looking: the old code runs
    assert verdict(checked) == CURRENT
    assert verdict(checked, other) == IGNORED  # its hash is compared: CPython recompiles


@pytest.mark.parametrize("tag", sorted(VERSIONS))
def test_timestamp_pycs_of_every_release(tag: str) -> None:
    data = (DATA / f"mod.{tag}.timestamp.pyc").read_bytes()
    assert verdict(data, mtime=TS_MTIME + 1) == IGNORED  # mtime differs: recompiled
    assert verdict(data, SRC + b"\n", mtime=TS_MTIME) == IGNORED  # size differs: recompiled
    if tag == OWN:
        assert verdict(data) == CURRENT  # loaded, and its code is this source's
        same_size = SRC.replace(b"source", b"SOURCE")
        assert verdict(data, same_size) == STALE  # loaded, but compiled from other bytes
    else:
        (v,) = judge([seen(data)])
        assert v.verdict == UNCHECKED and f"CPython {VERSIONS[tag]}" in v.reason


def test_optimisation_levels_are_compared_at_their_level(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_bytes(b'def f():\n    """doc"""\n    assert False\n    return 1\n')
    for opt in (0, 1, 2):
        out = tmp_path / f"m.{opt}.pyc"
        py_compile.compile(str(src), str(out), optimize=opt, doraise=True)
        data = out.read_bytes()
        mtime = int(src.stat().st_mtime)
        assert verdict(data, src.read_bytes(), mtime, optimize=opt) == CURRENT
        assert verdict(data, src.read_bytes(), mtime, optimize=(opt + 1) % 3) == STALE


def test_sourceless_and_orphaned_bytecode() -> None:
    ts = (DATA / f"mod.{OWN}.timestamp.pyc").read_bytes()
    assert verdict(ts, None, None, how="sourceless") == STALE  # NAME.pyc imports when NAME.py is gone
    assert verdict(ts, None, None, how="pycache") == IGNORED  # __pycache__ needs its source
    assert verdict(ts, how="sourceless") == IGNORED  # the source wins while it exists


def test_not_bytecode() -> None:
    assert verdict(b"") == IGNORED
    assert verdict(b"#!/bin/sh\necho not a pyc\n") == IGNORED
    bad_flags = importlib.util.MAGIC_NUMBER + struct.pack("<I", 4) + b"\0" * 8
    assert verdict(bad_flags) == IGNORED


def _own_timestamp(body: bytes, source: bytes) -> bytes:
    return importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, TS_MTIME, len(source)) + body


def test_hostile_bodies_are_judged_in_a_child() -> None:
    """A header that matches, over bytes that are no code object: CPython's import fails, so it is
    not the source that runs. Garbage never reaches marshal in this process."""
    garbage = _own_timestamp(b"\xff" * 64, SRC)
    not_code = _own_timestamp(marshal.dumps(42), SRC)
    truncated = _own_timestamp(marshal.dumps(compile(SRC, "m", "exec"))[:20], SRC)
    verdicts = judge([seen(garbage), seen(not_code), seen(truncated)])
    assert [v.verdict for v in verdicts] == [STALE, STALE, STALE]
    assert all("does not hold a code object" in v.reason for v in verdicts)


def test_a_source_that_does_not_compile_is_not_the_pycs() -> None:
    good = compile(SRC, "m", "exec")
    broken = b"VALUE = (\n" + b" " * (len(SRC) - 10) + b"\n"
    data = _own_timestamp(marshal.dumps(good), broken)
    assert verdict(data, broken) == STALE


def test_names_in_pycache() -> None:
    names = ["mod.cpython-311.pyc", "mod.cpython-311.opt-1.pyc", "mod.cpython-311.opt-2.pyc", "mod.pypy39.pyc",
             "mod.cpython-311.opt-3.pyc", "mod.pyc", "model.cpython-311.pyc", "mod..pyc", "mod.a.b.pyc", "mod.cpython-311.py"]
    assert pycache_names("mod", names) == [("mod.cpython-311.opt-1.pyc", 1), ("mod.cpython-311.opt-2.pyc", 2),
                                           ("mod.cpython-311.pyc", 0), ("mod.pypy39.pyc", 0)]
    assert source_dirs("lib/pkg/a.py", "usr/lib/pkg/a.py") == [("lib/pkg", "a"), ("usr/lib/pkg", "a")]
    assert source_dirs("a.py", "a.py") == [("", "a")]
