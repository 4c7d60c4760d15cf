"""Hostile bytecode beside a patched source: judged where the kernel finds it, one pyc at a time, and
removed by apply even when it is a link; a pyc that cannot be judged is "cannot tell" (exit 5 with
--strict), never silently live.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import py_compile
import struct
import sys
from pathlib import Path

import pytest

from support.hostile import canary_dir, unchanged
from support.imagetools import build_oci
from support.qtools import empty_queue, imgquilt, write_patch

TAG = sys.implementation.cache_tag
OLD = b'VALUE = "old"\n'
NEW = b'VALUE = "new"\n'  # the same size: a timestamp pyc of OLD stays valid for NEW at mtime 0
PKG = "opt/app/pkg"
DEEP_LINK = "../../../../../../../../other/a." + TAG + ".pyc"  # more `..` than the path is deep


def stale_pyc(tmp: Path) -> bytes:
    """A timestamp pyc of OLD (mtime 0): CPython loads it for NEW at mtime 0 and runs OLD's code."""
    src = tmp / "old-src" / "a.py"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(OLD)
    os.utime(src, (0, 0))
    out = tmp / "old-src" / "a.pyc"
    py_compile.compile(str(src), str(out), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return out.read_bytes()


def queue(tmp: Path) -> Path:
    q = empty_queue(tmp / "q")
    write_patch(q, "0001-value.patch", [(f"{PKG}/a.py", OLD, NEW)])
    return q


def open_in_root(root: Path, path: str) -> bytes:
    """The kernel's own resolution of `path` with `root` as the root (openat2 RESOLVE_IN_ROOT): what a
    process chrooted there (a container) opens."""
    libc = ctypes.CDLL(None, use_errno=True)

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    how = OpenHow(os.O_RDONLY | os.O_CLOEXEC, 0, 0x10)  # RESOLVE_IN_ROOT
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.syscall(437, dfd, path.encode(), ctypes.byref(how), ctypes.sizeof(how))  # openat2 (x86_64, arm64)
        if fd < 0:
            pytest.skip(f"openat2 is not available here ({os.strerror(ctypes.get_errno())})")
        with os.fdopen(fd, "rb") as f:
            return f.read()
    finally:
        os.close(dfd)


def linked_root(tmp: Path) -> Path:
    """NEW at mtime 0, and its __pycache__ pyc a link climbing past the root to other/: the kernel stops
    `..` at the root, so CPython in the container loads the root's other/a.TAG.pyc, which is stale."""
    root = tmp / "root"
    (root / PKG / "__pycache__").mkdir(parents=True)
    (root / "other").mkdir()
    (root / PKG / "a.py").write_bytes(NEW)
    os.utime(root / PKG / "a.py", (0, 0))
    (root / "other" / f"a.{TAG}.pyc").write_bytes(stale_pyc(tmp))
    os.symlink(DEEP_LINK, root / PKG / "__pycache__" / f"a.{TAG}.pyc")
    return root


# --- `..` stops at the root, as the kernel resolves it ------------------------------------------------
def test_a_pyc_link_climbing_past_the_root_is_judged_where_the_kernel_finds_it(tmp_path: Path, cli_env) -> None:
    root = linked_root(tmp_path)
    assert open_in_root(root, f"{PKG}/__pycache__/a.{TAG}.pyc") == (root / "other" / f"a.{TAG}.pyc").read_bytes()
    q = queue(tmp_path)
    home = canary_dir(tmp_path)
    with unchanged(root, home):
        r = imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=5)
    (f,) = json.loads(r.out)["patches"][0]["files"]
    assert f["state"] == "shadowed", f
    assert f["bytecode"] == [{"path": f"{PKG}/__pycache__/a.{TAG}.pyc", "verdict": "stale", "reason": f["bytecode"][0]["reason"]}]
    assert "mtime (0)" in f["detail"]


def test_the_same_link_in_an_image(tmp_path: Path, cli_env) -> None:
    layout = build_oci(tmp_path / "img", [linked_root(tmp_path)])  # mtimes kept: a.py's is 0
    q = queue(tmp_path)
    doc = json.loads(imgquilt("audit", "--image", f"oci:{layout}:latest", "--json", cwd=q, env=cli_env, check=5).out)
    assert doc["patches"][0]["files"][0]["state"] == "shadowed"


def test_a_symlink_out_of_the_root_reads_nothing_outside(tmp_path: Path, cli_env) -> None:
    """A target behind such a link resolves inside the root too: `etc/evil -> ../../victim` is the
    root's victim (absent here), never the file beside the root."""
    (tmp_path / "victim").write_bytes(OLD)
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink("../../victim", root / "etc" / "evil")
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001.patch", [("etc/evil", OLD, NEW)])
    f = json.loads(imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=5).out)["patches"][0]["files"][0]
    assert (f["state"], f["resolved"], f["actual"]) == ("missing", "victim", "absent")


# --- apply removes a linked pyc (the link, never its target) ----------------------------------------
def test_apply_removes_a_linked_pyc_itself(tmp_path: Path, cli_env) -> None:
    root = tmp_path / "root"
    (root / PKG / "__pycache__").mkdir(parents=True)
    (root / "other").mkdir()
    (root / PKG / "a.py").write_bytes(OLD)
    os.utime(root / PKG / "a.py", (0, 0))
    target = root / "other" / f"a.{TAG}.pyc"
    target.write_bytes(stale_pyc(tmp_path))
    link = root / PKG / "__pycache__" / f"a.{TAG}.pyc"
    os.symlink(f"../../../../other/a.{TAG}.pyc", link)
    q = queue(tmp_path)
    layout = build_oci(tmp_path / "img", [root], tag="base")
    r = imgquilt("--json", "apply", "--root", str(root), cwd=q, env=cli_env, check=0)
    assert json.loads(r.out)["bytecode"] == [{"path": f"{PKG}/__pycache__/a.{TAG}.pyc", "source": f"{PKG}/a.py", "action": "removed"}]
    assert not os.path.lexists(link) and target.read_bytes() == stale_pyc(tmp_path)  # the link went, not its target
    os.utime(root / PKG / "a.py", (0, 0))  # as a layer would leave it: the stale pyc would still match
    imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)
    # an image output: a whiteout of the link hides it
    out = tmp_path / "out"
    imgquilt("apply", "--image", f"oci:{layout}:base", "--output-image", f"oci:{out}:fixed", cwd=q, env=cli_env, check=0)
    imgquilt("audit", "--image", f"oci:{out}:fixed", cwd=q, env=cli_env, check=0)


# --- each pyc judged alone ----------------------------------------------------------------------------
_M61 = (1 << 61) - 1


def quadratic_body(n: int) -> bytes:
    """marshal bytes of a frozenset of n ints that all hash alike: unmarshalling it takes time in n²."""
    def long(v: int) -> bytes:
        digits = []
        while v:
            digits.append(v & 0x7FFF)
            v >>= 15
        return b"l" + struct.pack("<i", len(digits)) + b"".join(struct.pack("<H", d) for d in digits)
    return b">" + struct.pack("<i", n) + b"".join(long(k * _M61) for k in range(1, n + 1))


def timestamp_pyc(body: bytes, source: bytes, mtime: int = 0) -> bytes:
    return importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, mtime, len(source)) + body


def test_each_pyc_is_judged_in_its_own_bounded_child(monkeypatch) -> None:
    from imgquilt.pycheck import bytecode as bc

    monkeypatch.setenv(bc.CODE_CPU_ENV, "1")
    src = NEW
    hostile = bc.Seen(bc.Bytecode(f"x/__pycache__/a.{TAG}.opt-1.pyc", "x/a.py", "pycache", 1),
                      timestamp_pyc(quadratic_body(40_000), src), src, 0)
    stale = bc.Seen(bc.Bytecode(f"x/__pycache__/a.{TAG}.pyc", "x/a.py", "pycache", 0),
                    timestamp_pyc(__import__("marshal").dumps(compile(OLD, "/x/a.py", "exec")), src), src, 0)
    big = bc.Seen(bc.Bytecode(f"x/__pycache__/b.{TAG}.pyc", "x/b.py", "pycache", 0),
                  timestamp_pyc(b"\0" * (bc.CODE_MAX_BODY + 1), src), src, 0)
    got = bc.judge([hostile, stale, big])
    assert [v.verdict for v in got] == [bc.CANNOT_TELL, bc.STALE, bc.CANNOT_TELL]
    assert "s of CPU" in got[0].reason and "more than imgquilt unmarshals" in got[2].reason


def test_a_hostile_second_pyc_does_not_hide_the_stale_one(tmp_path: Path, cli_env) -> None:
    """a.TAG.opt-1.pyc (which plain python3 never reads) unmarshals in quadratic time: it alone is
    "cannot tell"; a.TAG.pyc, stale, is still found: shadowed, exit 5."""
    root = tmp_path / "root"
    (root / PKG / "__pycache__").mkdir(parents=True)
    (root / PKG / "a.py").write_bytes(NEW)
    os.utime(root / PKG / "a.py", (0, 0))
    (root / PKG / "__pycache__" / f"a.{TAG}.pyc").write_bytes(stale_pyc(tmp_path))
    (root / PKG / "__pycache__" / f"a.{TAG}.opt-1.pyc").write_bytes(timestamp_pyc(quadratic_body(120_000), NEW))
    q = queue(tmp_path)
    env = dict(cli_env, IMGQUILT_PYC_CPU_SECONDS="2")  # the default bound is 10 s of CPU; the test needs less
    doc = json.loads(imgquilt("audit", "--root", str(root), "--json", cwd=q, env=env, check=5).out)
    (f,) = doc["patches"][0]["files"]
    verdicts = {b["path"].rpartition("/")[2]: b["verdict"] for b in f["bytecode"]}
    assert f["state"] == "shadowed" and verdicts == {f"a.{TAG}.pyc": "stale", f"a.{TAG}.opt-1.pyc": "cannot-tell"}


def test_cannot_tell_is_said_and_strict_fails(tmp_path: Path, cli_env) -> None:
    """A timestamp pyc of another CPython whose mtime and size match: it would be loaded, and imgquilt
    cannot compare its code. Live, with "cannot tell" in text and JSON; exit 5 with --strict."""
    data = Path(__file__).parents[1] / "data" / "pyc"
    src = (data / "mod.py").read_bytes()
    root = tmp_path / "root"
    (root / PKG / "__pycache__").mkdir(parents=True)
    (root / PKG / "mod.py").write_bytes(src)
    os.utime(root / PKG / "mod.py", (1796144216, 1796144216))
    (root / PKG / "__pycache__" / "mod.cpython-37.pyc").write_bytes((data / "mod.cpython-37.timestamp.pyc").read_bytes())
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-mod.patch", [(f"{PKG}/mod.py", src.replace(b"source", b"base"), src)])
    text = imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)
    assert "cannot tell" in text.out and "mod.cpython-37.pyc" in text.out
    doc = json.loads(imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=0).out)
    (f,) = doc["patches"][0]["files"]
    assert f["state"] == "live" and f["bytecode"][0]["verdict"] == "cannot-tell"
    assert f["detail"].startswith("cannot tell which code CPython runs")
    r = imgquilt("audit", "--root", str(root), "--strict", cwd=q, env=cli_env, check=5)
    assert "--strict" in r.err and "0001-mod.patch: " + f"{PKG}/mod.py" in r.err
    doc = json.loads(imgquilt("audit", "--root", str(root), "--strict", "--json", cwd=q, env=cli_env, check=5).out)
    assert doc["error"]["code"] == 5
