"""Applying onto an extracted rootfs: in-root symlinks, refusals that change nothing, all-or-nothing writes."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgquilt.engine.plan import plan_apply
from imgquilt.errors import BaseDrift, ImgquiltError, MissingTarget, Refused, RootWriteFailed, UnsafePath
from imgquilt.queue.queue import load_queue
from imgquilt.rootfs import inplace
from imgquilt.rootfs.inplace import recover, write_in_place
from imgquilt.rootfs.journal import JOURNAL
from imgquilt.rootfs.source import RootfsSource
from support.qtools import tree_hash, write_patch

WHICH = b"#!/bin/sh\n# which: locate a command\nset -e\necho \"$1\"\n"
TOOL = b"import sys\n\ndef main():\n    return 0\n"


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """A merged-/usr root: bin -> usr/bin, an absolute symlink, a 0755 file, a uid-1000 file."""
    r = tmp_path / "root"
    (r / "usr/bin").mkdir(parents=True)
    (r / "usr/lib/tool").mkdir(parents=True)
    (r / "etc/alternatives").mkdir(parents=True)
    (r / "home/app").mkdir(parents=True)
    os.symlink("usr/bin", r / "bin")
    (r / "usr/bin/which").write_bytes(WHICH)
    os.chmod(r / "usr/bin/which", 0o755)
    (r / "usr/lib/tool/tool.py").write_bytes(TOOL)
    os.symlink("/usr/lib/tool/tool.py", r / "etc/alternatives/tool")
    (r / "home/app/config.toml").write_bytes(b"workers = 2\r\n")
    if os.geteuid() == 0:
        os.chown(r / "home/app/config.toml", 1000, 1000)
    return r


def queue_with(tmp_path: Path, changes) -> Path:
    q = tmp_path / "q"
    q.mkdir(exist_ok=True)
    for name, ch in changes:
        write_patch(q, name, ch)
    return q


def test_patch_through_directory_symlink_and_absolute_symlink(tmp_path: Path, rootfs: Path) -> None:
    q = queue_with(tmp_path, [
        ("0001-which.patch", [("bin/which", WHICH, WHICH.replace(b"set -e", b"set -eu"))]),
        ("0002-tool.patch", [("etc/alternatives/tool", TOOL, TOOL.replace(b"return 0", b"return 1"))]),
    ])
    outside = tmp_path / "usr"  # where a host-side resolution of /usr/lib/... would land if re-rooting failed
    result = plan_apply(load_queue(q), RootfsSource(rootfs), None)
    assert {f.resolved for f in result.files} >= {"usr/bin/which", "usr/lib/tool/tool.py"}
    write_in_place(rootfs, result)
    assert (rootfs / "usr/bin/which").read_bytes() == WHICH.replace(b"set -e", b"set -eu")
    assert (rootfs / "usr/lib/tool/tool.py").read_bytes() == TOOL.replace(b"return 0", b"return 1")
    assert os.path.islink(rootfs / "bin") and os.path.islink(rootfs / "etc/alternatives/tool")
    assert (rootfs / "usr/bin/which").stat().st_mode & 0o777 == 0o755
    assert not outside.exists()


def test_metadata_is_kept(tmp_path: Path, rootfs: Path) -> None:
    cfg = rootfs / "home/app/config.toml"
    before = cfg.stat()
    q = queue_with(tmp_path, [("0001-cfg.patch", [("home/app/config.toml", b"workers = 2\r\n", b"workers = 8\r\n")])])
    write_in_place(rootfs, plan_apply(load_queue(q), RootfsSource(rootfs), None))
    after = cfg.stat()
    assert cfg.read_bytes() == b"workers = 8\r\n"
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)
    assert after.st_ino != before.st_ino  # replaced by rename, never rewritten in place


def test_hostile_symlink_is_refused_and_nothing_outside_changes(tmp_path: Path, rootfs: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"host file\n")
    os.symlink("../../victim.txt", rootfs / "etc/evil")
    q = queue_with(tmp_path, [("0001-evil.patch", [("etc/evil", b"host file\n", b"owned\n")])])
    before = tree_hash(rootfs)
    with pytest.raises(ImgquiltError) as exc:  # `..` stops at the root: the root's own victim.txt, which is not there
        plan_apply(load_queue(q), RootfsSource(rootfs), None)
    assert exc.value.exit_code == 6 and "victim.txt" in exc.value.message
    assert victim.read_bytes() == b"host file\n"
    assert tree_hash(rootfs) == before


def test_refused_apply_leaves_root_byte_identical(tmp_path: Path, rootfs: Path) -> None:
    q = queue_with(tmp_path, [
        ("0001-which.patch", [("bin/which", WHICH, WHICH + b"# one\n")]),
        ("0002-drift.patch", [("usr/lib/tool/tool.py", b"something else\n", b"x\n")]),
    ])
    before = tree_hash(rootfs)
    with pytest.raises(BaseDrift) as exc:
        plan_apply(load_queue(q), RootfsSource(rootfs), None)
    msg = exc.value.render()
    assert "0002-drift.patch" in msg and "usr/lib/tool/tool.py" in msg
    assert "found" in msg and "rebase" in msg
    assert exc.value.exit_code == 3
    assert tree_hash(rootfs) == before


def test_missing_target_is_bad_input(tmp_path: Path, rootfs: Path) -> None:
    q = queue_with(tmp_path, [("0001-gone.patch", [("usr/lib/gone.py", b"x\n", b"y\n")])])
    with pytest.raises(MissingTarget) as exc:
        plan_apply(load_queue(q), RootfsSource(rootfs), None)
    assert exc.value.exit_code == 6


def test_failure_on_third_file_rolls_everything_back(tmp_path: Path, rootfs: Path, monkeypatch) -> None:
    (rootfs / "usr/lib/tool/a.py").write_bytes(b"a = 1\n")
    q = queue_with(tmp_path, [
        ("0001-multi.patch", [
            ("bin/which", WHICH, WHICH + b"# 1\n"),
            ("home/app/config.toml", b"workers = 2\r\n", b"workers = 3\r\n"),
            ("usr/lib/tool/a.py", b"a = 1\n", None),
            ("usr/lib/tool/new.py", None, b"n = 1\n"),
            ("usr/lib/tool/tool.py", TOOL, TOOL + b"# 4\n"),
        ]),
    ])
    result = plan_apply(load_queue(q), RootfsSource(rootfs), None)
    before = tree_hash(rootfs)
    real = os.replace
    calls = {"n": 0}

    def flaky(src, dst, **kw):
        if str(src).endswith(".new"):  # a target's rename in the commit phase
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(28, "No space left on device (injected)")
        real(src, dst, **kw)

    monkeypatch.setattr(inplace.os, "replace", flaky)
    with pytest.raises(RootWriteFailed) as exc:
        write_in_place(rootfs, result)
    assert exc.value.exit_code == 6 and "ENOSPC" in exc.value.message and "rolled back" in exc.value.message
    assert calls["n"] == 3
    assert tree_hash(rootfs) == before
    monkeypatch.setattr(inplace.os, "replace", real)
    write_in_place(rootfs, result)
    assert not (rootfs / "usr/lib/tool/a.py").exists()
    assert (rootfs / "usr/lib/tool/new.py").read_bytes() == b"n = 1\n"


def test_crash_leaves_journal_that_next_run_rolls_back(tmp_path: Path, rootfs: Path, monkeypatch) -> None:
    q = queue_with(tmp_path, [("0001.patch", [("bin/which", WHICH, WHICH + b"#\n"), ("usr/lib/tool/tool.py", TOOL, TOOL + b"#\n")])])
    result = plan_apply(load_queue(q), RootfsSource(rootfs), None)
    before = tree_hash(rootfs)

    class Crash(BaseException):
        pass

    calls = {"n": 0}
    real = os.replace

    def crash(src, dst, **kw):
        if str(src).endswith(".new"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise Crash()
        real(src, dst, **kw)

    # a crash that skips the rollback (the process dies): simulate by disabling _undo
    monkeypatch.setattr(inplace.os, "replace", crash)
    monkeypatch.setattr(inplace, "_undo", lambda held: False)
    with pytest.raises(Crash):
        write_in_place(rootfs, result)
    monkeypatch.setattr(inplace.os, "replace", real)
    assert (rootfs / JOURNAL).exists()
    assert tree_hash(rootfs) != before
    assert recover(rootfs) is True
    # what the crash left behind is gone except the state directory the journal lived in
    assert (rootfs / "usr/bin/which").read_bytes() == WHICH
    assert (rootfs / "usr/lib/tool/tool.py").read_bytes() == TOOL
    assert not (rootfs / JOURNAL).exists()
    assert tree_hash(rootfs) == before  # no backups, temps or journal temps left
    assert recover(rootfs) is False


def test_symlink_swapped_in_after_planning_is_not_followed(tmp_path: Path, rootfs: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    q = queue_with(tmp_path, [("0001.patch", [("usr/lib/tool/tool.py", TOOL, TOOL + b"#\n")])])
    result = plan_apply(load_queue(q), RootfsSource(rootfs), None)
    # race: the directory becomes a symlink to the host between verification and writing
    os.rename(rootfs / "usr/lib/tool", tmp_path / "moved")
    os.symlink(str(outside), rootfs / "usr/lib/tool")
    with pytest.raises((Refused, UnsafePath, MissingTarget)):
        write_in_place(rootfs, result)
    assert list(outside.iterdir()) == []
