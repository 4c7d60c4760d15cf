"""The overlay sink: patched files plus mounts.tsv, for bind mounts without a rebuild."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgquilt.engine.result import RECORD_PATH, ApplyResult, FileResult
from imgquilt.errors import UsageError
from imgquilt.fs.types import ImageInfo, TargetFile
from imgquilt.verbs.apply import write_overlay


def fr(path: str, resolved: str, old: bytes | None, new: bytes | None, *, mode: int = 0o644, uid: int = 0, gid: int = 0) -> FileResult:
    return FileResult(TargetFile(path, resolved, old, mode, uid, gid), new, mode, uid, gid, ("0001-x.patch",))


def result(*files: FileResult) -> ApplyResult:
    return ApplyResult(ImageInfo("oci:demo:latest", None), "ab" * 32, ("0001-x.patch",), tuple(sorted(files, key=lambda f: f.resolved)), False)


DEMO = result(
    fr("bin/which", "usr/bin/which", b"old\n", b"new\n", mode=0o755),
    fr("home/app/config.toml", "home/app/config.toml", b"a\n", b"b\n", mode=0o640, uid=1000, gid=1000),
    fr("usr/local/bin/demosvc-healthcheck", "usr/local/bin/demosvc-healthcheck", None, b"#!/bin/sh\n", mode=0o755),
    FileResult(TargetFile(RECORD_PATH, RECORD_PATH, None), b"{}\n", 0o644, 0, 0, ()),
)


def test_files_land_at_resolved_paths_and_mounts_tsv_lists_them_sorted(tmp_path: Path) -> None:
    dest = tmp_path / "overlay"
    info = write_overlay(DEMO, dest)
    assert info.path == dest and info.mounts_file == dest / "mounts.tsv"
    assert (dest / "usr/bin/which").read_bytes() == b"new\n"
    assert not (dest / "bin").exists()
    lines = (dest / "mounts.tsv").read_text().splitlines()
    assert lines == [
        f"{dest}/home/app/config.toml\t/home/app/config.toml\t0640",
        f"{dest}/usr/bin/which\t/usr/bin/which\t0755",
        f"{dest}/usr/local/bin/demosvc-healthcheck\t/usr/local/bin/demosvc-healthcheck\t0755",
        f"{dest}/{RECORD_PATH}\t/{RECORD_PATH}\t0644",
    ]
    for line in lines:
        host, container, mode = line.split("\t")
        assert Path(host).is_file() and container.startswith("/")
        assert f"{Path(host).stat().st_mode & 0o7777:04o}" == mode


def test_mode_and_owner_are_kept(tmp_path: Path) -> None:
    dest = tmp_path / "overlay"
    write_overlay(DEMO, dest)
    st = (dest / "home/app/config.toml").stat()
    assert st.st_mode & 0o7777 == 0o640
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert (dest / "usr/bin/which").stat().st_mode & 0o7777 == 0o755


def test_a_relative_destination_is_listed_with_absolute_host_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_overlay(DEMO, Path("ov"))
    first = (tmp_path / "ov" / "mounts.tsv").read_text().splitlines()[0]
    assert first.startswith(str(tmp_path / "ov") + "/")


def test_a_deletion_is_refused_by_name_and_nothing_is_written(tmp_path: Path) -> None:
    res = result(
        fr("bin/which", "usr/bin/which", b"old\n", b"new\n"),
        fr("usr/lib/demo/legacy.py", "usr/lib/demo/legacy.py", b"x = 1\n", None),
    )
    with pytest.raises(UsageError, match=r"usr/lib/demo/legacy\.py.*cannot be bind-mounted"):
        write_overlay(res, tmp_path / "overlay")
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_overlay_is_replaced_whole(tmp_path: Path) -> None:
    dest = tmp_path / "overlay"
    write_overlay(result(fr("etc/old.conf", "etc/old.conf", b"a", b"b")), dest)
    write_overlay(DEMO, dest)
    assert not (dest / "etc/old.conf").exists()
    assert (dest / "usr/bin/which").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overlay"]  # no temp or old directories left


def test_an_empty_directory_is_used_and_a_foreign_one_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write_overlay(DEMO, empty)
    assert (empty / "mounts.tsv").is_file()
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an earlier overlay"):
        write_overlay(DEMO, foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_a_failure_halfway_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real_fsync = os.fsync

    def flaky_fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", flaky_fsync)
    with pytest.raises(UsageError, match="No space left"):
        write_overlay(DEMO, tmp_path / "overlay")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rewrite_keeps_the_earlier_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "overlay"
    write_overlay(result(fr("etc/old.conf", "etc/old.conf", b"a", b"b")), dest)
    before = (dest / "mounts.tsv").read_text()

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(UsageError):
        write_overlay(DEMO, dest)
    assert (dest / "mounts.tsv").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overlay"]


def test_a_file_named_like_the_list_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="mounts.tsv"):
        write_overlay(result(fr("mounts.tsv", "mounts.tsv", None, b"x")), tmp_path / "ov")


def test_a_bad_destination_is_caught_before_anything_is_computed(tmp_path: Path) -> None:
    from imgquilt.image.sinks.overlay import check_overlay_destination

    assert check_overlay_destination(tmp_path / "new") == tmp_path / "new"
    with pytest.raises(UsageError, match="does not exist"):
        check_overlay_destination(tmp_path / "missing" / "ov")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="not an earlier overlay"):
        check_overlay_destination(tmp_path / "file")


def test_check_overlay_refuses_a_deletion_up_front() -> None:
    from imgquilt.verbs.apply import check_overlay

    check_overlay(DEMO)
    with pytest.raises(UsageError, match="legacy.py"):
        check_overlay(result(fr("usr/lib/demo/legacy.py", "usr/lib/demo/legacy.py", b"x", None)))


def test_an_earlier_overlay_holding_anything_else_is_refused_and_kept(tmp_path: Path) -> None:
    """mounts.tsv is not sealed: its presence alone never licenses removing a directory's other files."""
    dest = tmp_path / "overlay"
    write_overlay(DEMO, dest)
    (dest / "usr/bin/notes.txt").write_text("mine")  # a file the user put beside the overlay's
    with pytest.raises(UsageError, match="not an earlier overlay"):
        write_overlay(DEMO, dest)
    assert (dest / "usr/bin/notes.txt").read_text() == "mine"
    (dest / "usr/bin/notes.txt").unlink()
    (dest / "usr/share").mkdir()  # an empty directory no mount needs
    with pytest.raises(UsageError, match="not an earlier overlay"):
        write_overlay(DEMO, dest)
    (dest / "usr/share").rmdir()
    write_overlay(result(fr("etc/old.conf", "etc/old.conf", b"a", b"b")), dest)  # only the overlay: replaced
    assert not (dest / "usr/bin/which").exists()

    home = tmp_path / "home"  # a directory that merely holds a file named mounts.tsv
    home.mkdir()
    (home / "mounts.tsv").write_text("")
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(UsageError, match="not an earlier overlay"):
        write_overlay(DEMO, home)
    (home / "mounts.tsv").write_text("junk\n")
    (home / "thesis.tex").unlink()
    with pytest.raises(UsageError, match="not an earlier overlay"):
        write_overlay(DEMO, home)  # a mounts.tsv that is not one
    assert (home / "mounts.tsv").read_text() == "junk\n"
