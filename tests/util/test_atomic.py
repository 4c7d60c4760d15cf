"""The one atomic writer: whole files or nothing, never through a symlink, no temp files left."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from imgquilt.util.atomic import atomic_write, publish, write_atomic_at


def test_write_atomic_at_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").symlink_to(outside)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic_at(fd, "f", b"new\r\nno final newline", 0o640)
    finally:
        os.close(fd)
    assert outside.read_bytes() == b"keep\n"
    assert not (d / "f").is_symlink() and (d / "f").read_bytes() == b"new\r\nno final newline"
    assert stat.S_IMODE((d / "f").stat().st_mode) == 0o640
    assert sorted(p.name for p in d.iterdir()) == ["f"]


def test_write_atomic_at_leaves_the_old_file_when_the_write_fails(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"old\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(TypeError):
            write_atomic_at(fd, "f", "not bytes", 0o644)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_atomic_write_and_publish(tmp_path: Path) -> None:
    atomic_write(tmp_path / "a", b"\xff\xfe", mode=0o444)
    assert (tmp_path / "a").read_bytes() == b"\xff\xfe"
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o444
    publish(tmp_path / "a", tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def _held(path: str, dir_fd: int | None = None) -> bool:
    """Does a live writer hold this temp (its flock), as `check` asks it?"""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def test_every_temp_is_locked_by_its_writer_until_its_rename(tmp_path: Path, monkeypatch) -> None:
    """A temp found unlocked is a dead command's (check names it at once, sweep removes it): so both
    writers, by path and by directory fd, hold theirs until it is renamed into place."""
    from imgquilt.util import atomic

    seen: list[tuple[str, bool]] = []
    real = os.replace

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        seen.append((os.path.basename(str(src)), _held(src, src_dir_fd)))
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(atomic.os, "replace", replace)
    atomic.atomic_write(tmp_path / "series", b"one\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        atomic.write_atomic_at(fd, "patch", b"two\n")
    finally:
        os.close(fd)
    assert [held for _, held in seen] == [True, True], seen
    assert seen[1][0] == ".patch.imgquilt-tmp"
    assert (tmp_path / "series").read_bytes() == b"one\n" and (tmp_path / "patch").read_bytes() == b"two\n"
