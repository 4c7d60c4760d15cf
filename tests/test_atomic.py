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
