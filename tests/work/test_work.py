"""The work-tree engine (imgquilt.work) on real directories: snapshots, push/pop, refresh, series editing, safety."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgquilt.errors import BaseDrift, MalformedPatch, Refused, UnsafePath, UsageError
from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import Header, build_patch, make_section, parse_patch
from imgquilt.rootfs.source import RootfsSource
from imgquilt.work import WorkTree, check_header, check_patch_name, pop, push, read_queue_patch, refresh, series_edit, track
from support.qtools import merged_usr_root

A0 = b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\n"
A1 = A0.replace(b"line 2\n", b"line two\n")
A2 = A1.replace(b"line 6\n", b"line six\n")
B0 = b"\x89binary-ish \xff\r\nsecond\r\nno newline"
B1 = b"\x89binary-ish \xff\r\nSECOND\r\nno newline"


@pytest.fixture
def image(tmp_path: Path) -> Path:
    return merged_usr_root(tmp_path / "image", {"usr/lib/app/a.txt": A0, "usr/lib/app/b.dat": B0}, modes={"usr/lib/app/b.dat": 0o600})


def write(q: Path, name: str, changes, header: bytes = b"") -> bytes:
    patch = build_patch(name, Header(header or f"Description: {name}\n\n".encode()), [make_section(*c) for c in changes])
    (q / "patches").mkdir(exist_ok=True)
    (q / "patches" / name).write_bytes(patch.raw)
    with open(q / "series", "a") as f:
        f.write(name + "\n")
    return patch.raw


def tree(q: Path, image: Path | None) -> WorkTree:
    return WorkTree(q, open_image=(lambda: RootfsSource(image)) if image else None, image_explicit=image is not None)


def test_push_pop_restore_bytes_and_modes_through_a_chain(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1), ("usr/lib/app/b.dat", B0, B1)])
    write(queue, "02.patch", [("usr/lib/app/a.txt", A1, A2), ("usr/lib/app/new.sh", None, b"#!/bin/sh\n", 0o755)])
    wt = tree(queue, image)
    done = push.push(wt, all=True)
    assert [p.name for p in done] == ["01.patch", "02.patch"]
    work = queue / ".imgquilt/work"
    assert (work / "usr/lib/app/a.txt").read_bytes() == A2
    assert (work / "usr/lib/app/b.dat").read_bytes() == B1
    assert os.stat(work / "usr/lib/app/b.dat").st_mode & 0o777 == 0o600  # the image's mode is kept
    assert os.stat(work / "usr/lib/app/new.sh").st_mode & 0o777 == 0o755  # Mode: of a new file
    assert refresh.unrefreshed(wt, "02.patch") == [] and refresh.unrefreshed(wt, "01.patch") == []
    assert pop.pop(wt) == ["02.patch"]
    assert (work / "usr/lib/app/a.txt").read_bytes() == A1
    assert not (work / "usr/lib/app/new.sh").exists()
    assert pop.pop(wt) == ["01.patch"]
    assert not work.exists() or list(work.rglob("*")) == []
    assert wt.applied() == [] and wt.unapplied() == ["01.patch", "02.patch"]
    # push by name and by count
    assert [p.name for p in push.push(wt, "02.patch")] == ["01.patch", "02.patch"]
    assert pop.pop(wt, count=2) == ["02.patch", "01.patch"]
    assert [p.name for p in push.push(wt, count=1)] == ["01.patch"]
    assert pop.pop(wt, "01.patch") == []  # already the top


def test_refresh_keeps_header_and_unchanged_sections_verbatim(queue: Path, image: Path) -> None:
    header = b"Description: two files\n Long text.\nX-Team-Field: kept\nRequires: 00.patch\n\n"
    raw = write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1), ("usr/lib/app/b.dat", B0, B1)], header)
    # an unknown section field must survive a refresh that does not touch that file
    raw = raw.replace(b"Index: usr/lib/app/b.dat\n", b"Index: usr/lib/app/b.dat\nX-Reviewed: yes\n")
    (queue / "patches/01.patch").write_bytes(raw)
    wt = tree(queue, image)
    push.push(wt)
    assert refresh.refresh(wt).changed is False
    (queue / ".imgquilt/work/usr/lib/app/a.txt").write_bytes(A2)
    assert refresh.unrefreshed(wt, "01.patch") == ["usr/lib/app/a.txt"]
    r = refresh.refresh(wt)
    assert r.changed
    new = (queue / "patches/01.patch").read_bytes()
    b_section = make_section("usr/lib/app/b.dat", B0, B1).raw.replace(b"Index: usr/lib/app/b.dat\n", b"Index: usr/lib/app/b.dat\nX-Reviewed: yes\n")
    assert new == header + make_section("usr/lib/app/a.txt", A0, A2).raw + b_section
    # undoing a change drops its section
    (queue / ".imgquilt/work/usr/lib/app/b.dat").write_bytes(B0)
    refresh.refresh(wt)
    assert [s.path for s in parse_patch((queue / "patches/01.patch").read_bytes()).sections] == ["usr/lib/app/a.txt"]


def test_refresh_of_a_lower_patch_uses_the_next_snapshot(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    write(queue, "02.patch", [("usr/lib/app/a.txt", A1, A2)])
    wt = tree(queue, image)
    push.push(wt, all=True)
    before = (queue / "patches/01.patch").read_bytes()
    assert refresh.refresh(wt, "01.patch").changed is False
    assert (queue / "patches/01.patch").read_bytes() == before
    assert refresh.diff(wt, "01.patch").sections[0].raw == make_section("usr/lib/app/a.txt", A0, A1).raw


def test_pop_refuses_unrefreshed_changes_and_force_discards_them(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    wt = tree(queue, image)
    push.push(wt)
    f = queue / ".imgquilt/work/usr/lib/app/a.txt"
    f.write_bytes(A2)
    with pytest.raises(Refused) as exc:
        pop.pop(wt)
    assert exc.value.exit_code == 3 and "usr/lib/app/a.txt" in exc.value.message
    assert f.read_bytes() == A2 and wt.applied() == ["01.patch"]
    assert pop.pop(wt, force=True) == ["01.patch"]
    assert not f.exists()


def test_push_refuses_drift_and_a_broken_chain_without_writing(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    write(queue, "02.patch", [("usr/lib/app/a.txt", A0, A2)])  # chain broken: made against A0
    wt = tree(queue, image)
    push.push(wt)
    with pytest.raises(BaseDrift) as exc:
        push.push(wt)
    msg = exc.value.message
    assert "02.patch: usr/lib/app/a.txt: base drifted" in msg and sha256_hex(A0) in msg and sha256_hex(A1) in msg and "chain" in msg
    assert wt.applied() == ["01.patch"]
    assert (queue / ".imgquilt/work/usr/lib/app/a.txt").read_bytes() == A1
    # unrefreshed edits are named as the reason
    (queue / ".imgquilt/work/usr/lib/app/a.txt").write_bytes(A2)
    (queue / "patches/02.patch").write_bytes(build_patch("02.patch", Header(b""), [make_section("usr/lib/app/a.txt", A1, A0)]).raw)
    with pytest.raises(BaseDrift, match="not refreshed into 01.patch"):
        push.push(wt)


def test_image_drift_names_the_image(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("lib/app/a.txt", A0, A1)])
    (image / "usr/lib/app/a.txt").write_bytes(A0 + b"upstream\n")
    with pytest.raises(BaseDrift, match=r"lib/app/a.txt \(resolved: usr/lib/app/a.txt\).*--image"):
        push.push(tree(queue, image))
    assert not (queue / ".imgquilt/work").exists() or list((queue / ".imgquilt/work").rglob("*")) == []


def test_two_names_of_one_file_share_one_work_copy(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("lib/app/a.txt", A0, A1)])
    write(queue, "02.patch", [("usr/lib/app/a.txt", A1, A2)])
    wt = tree(queue, image)
    push.push(wt, all=True)
    work = queue / ".imgquilt/work"
    assert (work / "lib/app/a.txt").read_bytes() == A2
    assert not (work / "usr/lib/app/a.txt").exists()
    assert wt.location("usr/lib/app/a.txt") == "lib/app/a.txt"
    (work / "lib/app/a.txt").write_bytes(A2 + b"more\n")
    assert refresh.unrefreshed(wt, "02.patch") == ["usr/lib/app/a.txt"]
    refresh.refresh(wt)
    assert parse_patch((queue / "patches/02.patch").read_bytes()).sections[0].raw == make_section("usr/lib/app/a.txt", A1, A2 + b"more\n").raw
    pop.pop(wt)
    assert (work / "lib/app/a.txt").read_bytes() == A1
    with pytest.raises(UsageError, match="same file"):
        track.add(wt, ["usr/lib/app/a.txt"])  # the top patch already names it lib/app/a.txt


def test_new_add_refresh_series_editing_keeps_comments_and_options(queue: Path, image: Path) -> None:
    (queue / "series").write_text("# vendor fixes\nfirst.patch -p0\n\n# local\n")
    (queue / "patches").mkdir()
    (queue / "patches/first.patch").write_bytes(
        build_patch("first.patch", Header(b""), [make_section("usr/lib/app/b.dat", B0, B1)]).raw)
    wt = tree(queue, image)
    series_edit.new(wt, "second.patch", Header(b"Description: second\n"))
    assert (queue / "series").read_text() == "# vendor fixes\nsecond.patch\nfirst.patch -p0\n\n# local\n"
    assert (queue / "patches/second.patch").read_bytes() == b"Description: second\n\n"
    assert read_queue_patch(b"Description: second\n\n", "second.patch").sections == ()
    top, added, already = track.add(wt, ["lib/app/a.txt", "usr/lib/app/brand-new.txt"], new=True)
    assert (top, added, already) == ("second.patch", ["lib/app/a.txt", "usr/lib/app/brand-new.txt"], [])
    assert track.add(wt, ["lib/app/a.txt"])[2] == ["lib/app/a.txt"]
    (queue / ".imgquilt/work/lib/app/a.txt").write_bytes(A1)
    (queue / ".imgquilt/work/usr/lib/app/brand-new.txt").write_bytes(b"")  # an empty new file
    refresh.refresh(wt)
    p = parse_patch((queue / "patches/second.patch").read_bytes())
    assert [s.raw for s in p.sections] == [make_section("lib/app/a.txt", A0, A1).raw, make_section("usr/lib/app/brand-new.txt", None, b"").raw]
    series_edit.rename(wt, "2nd.patch")
    assert (queue / "series").read_text() == "# vendor fixes\n2nd.patch\nfirst.patch -p0\n\n# local\n"
    assert wt.applied() == ["2nd.patch"] and [t.path for t in wt.snapshot("2nd.patch")] == ["lib/app/a.txt", "usr/lib/app/brand-new.txt"]
    with pytest.raises(UsageError, match="not applied"):
        pop.pop(wt, "first.patch")
    series_edit.delete(wt, "2nd.patch", remove=True)
    assert (queue / "series").read_text() == "# vendor fixes\nfirst.patch -p0\n\n# local\n"
    assert not (queue / "patches/2nd.patch").exists()
    assert wt.applied() == [] and not (queue / ".imgquilt/work/lib").exists()


def test_delete_below_the_top_is_refused(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    write(queue, "02.patch", [("usr/lib/app/b.dat", B0, B1)])
    wt = tree(queue, image)
    push.push(wt, all=True)
    with pytest.raises(UsageError, match="below the top"):
        series_edit.delete(wt, "01.patch")
    assert wt.series() == ["01.patch", "02.patch"]


def test_a_symlink_planted_in_the_work_tree_is_never_followed(queue: Path, image: Path, tmp_path: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_bytes(b"precious\n")
    wt = tree(queue, image)
    push.push(wt)
    pop.pop(wt)
    work = queue / ".imgquilt/work"
    (work / "usr/lib").mkdir(parents=True)
    os.symlink(outside, work / "usr/lib/app")
    with pytest.raises(UnsafePath):
        push.push(wt)
    assert (outside / "a.txt").read_bytes() == b"precious\n" and sorted(os.listdir(outside)) == ["a.txt"]
    os.unlink(work / "usr/lib/app")
    push.push(wt)
    os.unlink(work / "usr/lib/app/a.txt")
    os.symlink(outside / "a.txt", work / "usr/lib/app/a.txt")
    with pytest.raises(UnsafePath):
        refresh.refresh(wt)
    assert (outside / "a.txt").read_bytes() == b"precious\n"


def test_a_stray_work_file_is_not_silently_overwritten(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    (queue / ".imgquilt/work/usr/lib/app").mkdir(parents=True)
    (queue / ".imgquilt/work/usr/lib/app/a.txt").write_bytes(b"my edit\n")
    with pytest.raises(UsageError, match="tracked by no applied patch"):
        push.push(tree(queue, image))
    assert (queue / ".imgquilt/work/usr/lib/app/a.txt").read_bytes() == b"my edit\n"


def test_without_any_image_a_clear_usage_error(queue: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    with pytest.raises(UsageError, match="no image"):
        push.push(tree(queue, None))


def test_a_patch_edited_while_applied_is_not_silently_dropped(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    wt = tree(queue, image)
    push.push(wt)
    (queue / "patches/01.patch").write_bytes(build_patch("01.patch", Header(b""), [
        make_section("usr/lib/app/a.txt", A0, A1), make_section("usr/lib/app/b.dat", B0, B1)]).raw)
    with pytest.raises(UsageError, match="does not track"):
        refresh.refresh(wt)


def test_series_edited_under_the_applied_stack_is_reported(queue: Path, image: Path) -> None:
    write(queue, "01.patch", [("usr/lib/app/a.txt", A0, A1)])
    wt = tree(queue, image)
    push.push(wt)
    (queue / "series").write_text("")
    with pytest.raises(UsageError, match="no longer the first patches of series"):
        pop.pop(wt)


def test_one_command_at_a_time(queue: Path, image: Path) -> None:
    wt = tree(queue, image)
    with wt.locked():
        with pytest.raises(UsageError, match="Another imgquilt command"):
            series_edit.new(wt, "x.patch", Header(b""))


@pytest.mark.parametrize("name", ["", "a b.patch", "-p1", "../x.patch", "/abs.patch", "x#y", ".hidden", "dir/.x", "a\\b"])
def test_unusable_patch_names(name: str) -> None:
    with pytest.raises((UsageError, UnsafePath)):
        check_patch_name(name)


def test_headers_with_diff_lines_are_refused_and_trailing_blank_lines_normalised() -> None:
    with pytest.raises(MalformedPatch):
        check_header(b"Description: x\nIndex: etc/passwd\n", "p")
    with pytest.raises(MalformedPatch):
        check_header(b"Description: x\n--- a/x\n+++ b/x\n", "p")
    assert check_header(b"Description: x\n--- not a diff\n\n\n\n", "p").raw == b"Description: x\n--- not a diff\n\n"
    assert check_header(b"\n\n", "p").raw == b""


def test_worktree_keeps_the_state_and_the_verbs_take_it() -> None:
    # issue 33, point 6: no method of WorkTree forwards to a command module; the commands take the tree
    import inspect

    from imgquilt.work import header, importing, unrefreshed

    verbs = {"push": push.push, "pop": pop.pop, "refresh": refresh.refresh, "diff": refresh.diff, "new": series_edit.new,
             "delete": series_edit.delete, "rename": series_edit.rename, "move": series_edit.move, "add": track.add,
             "fold": track.fold, "header": header.header, "set_fields": header.set_fields, "revert": unrefreshed.revert,
             "remove": unrefreshed.remove, "import_patches": importing.import_patches}
    for name, fn in verbs.items():
        assert not hasattr(WorkTree, name), name
        assert next(iter(inspect.signature(fn).parameters)) == "wt", name
