"""3-way merges through real `git merge-file`: byte-exact, conflicts counted and labelled."""
from __future__ import annotations

import os
from pathlib import Path

from imgquilt.engine.merge import leftover_markers, merge3

BASE = b"".join(f"line {i}\n".encode() for i in range(1, 21))


def _ours(data: bytes) -> bytes:
    return data.replace(b"line 10\n", b"line ten\n")


def test_clean_merge_places_the_change_after_an_insertion_above() -> None:
    theirs = b"header\nmore header\n" + BASE
    m = merge3(BASE, _ours(BASE), theirs)
    assert m.clean and m.conflicts == 0
    assert m.data == b"header\nmore header\n" + _ours(BASE)


def test_trailing_newline_kept_exactly() -> None:
    base = BASE.rstrip(b"\n")  # no final newline
    m = merge3(base, _ours(base), b"top\n" + base)
    assert m.clean and m.data == b"top\n" + _ours(base)
    assert not m.data.endswith(b"\n")
    # theirs adds the final newline far from our change: kept
    m = merge3(base, _ours(base), base + b"\n")
    assert m.clean and m.data == _ours(base) + b"\n"


def test_crlf_and_non_utf8_survive() -> None:
    base = BASE.replace(b"\n", b"\r\n").replace(b"line 3\r\n", b"caf\xe9 \xff\r\n")
    ours = base.replace(b"line 10\r\n", b"line ten\r\n")
    theirs = b"# \xfe\r\n" + base
    m = merge3(base, ours, theirs)
    assert m.clean and m.data == b"# \xfe\r\n" + ours


def test_conflict_is_counted_and_labelled_with_diff3_markers() -> None:
    theirs = BASE.replace(b"line 10\n", b"line 10 (upstream)\n").replace(b"line 18\n", b"line eighteen\n")
    ours = _ours(BASE).replace(b"line 18\n", b"line 18 (ours)\n")
    m = merge3(BASE, ours, theirs, ours_label="0001-fix.patch (old image + patch)", base_label="old image",
               theirs_label="rootfs:new (new image)")
    assert m.conflicts == 2 and not m.clean
    # as git merge-file --diff3: the old base's lines between ||||||| and =======
    assert (b"<<<<<<< 0001-fix.patch (old image + patch)\nline ten\n||||||| old image\nline 10\n=======\n"
            b"line 10 (upstream)\n>>>>>>> rootfs:new (new image)\n") in m.data
    assert leftover_markers(m.data, ours, theirs, BASE) == [10, 12, 14, 16, 24, 26, 28, 30]
    plain = merge3(BASE, ours, theirs, ours_label="ours", theirs_label="theirs", style="merge")
    assert plain.conflicts == 2 and b"|||||||" not in plain.data
    assert b"<<<<<<< ours\nline ten\n=======\nline 10 (upstream)\n>>>>>>> theirs\n" in plain.data
    assert leftover_markers(plain.data, ours, theirs) == [10, 12, 14, 22, 24, 26]


def test_user_git_config_does_not_change_the_marker_style(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    theirs = BASE.replace(b"line 10\n", b"line 10 (upstream)\n")
    for user, style, has_base in (("merge", "diff3", True), ("diff3", "merge", False), ("zdiff3", "merge", False)):
        (home / ".gitconfig").write_text(f"[merge]\n\tconflictStyle = {user}\n")
        monkeypatch.setenv("HOME", str(home))
        m = merge3(BASE, _ours(BASE), theirs, style=style)
        assert m.conflicts == 1 and (b"|||||||" in m.data) == has_base, (user, style)


def test_trivial_and_upstream_merges() -> None:
    ours = _ours(BASE)
    assert merge3(BASE, ours, BASE).data == ours  # image unchanged
    assert merge3(BASE, ours, ours).data == ours  # the change went upstream
    # the change went upstream along with other changes: the result is exactly the new base
    theirs = b"new top\n" + ours
    m = merge3(BASE, ours, theirs)
    assert m.clean and m.data == theirs


def test_new_file_on_both_sides_conflicts_unless_equal() -> None:
    assert merge3(b"", b"x = 1\n", b"x = 1\n").data == b"x = 1\n"
    m = merge3(b"", b"x = 1\n", b"x = 2\n")
    assert m.conflicts == 1


def test_binary_files_merge_only_trivially() -> None:
    base = b"\x7fELF\0\0\1" + bytes(range(256))
    ours = base.replace(b"\1", b"\2", 1)
    assert merge3(base, ours, base).data == ours
    theirs = base + b"\0tail"
    m = merge3(base, ours, theirs)
    assert m.binary and m.conflicts == 1 and m.data == theirs


def test_leftover_markers_ignore_lines_the_file_already_had() -> None:
    rst = b"Title\n=======\n\ntext\n"
    assert leftover_markers(rst, rst) == []
    assert leftover_markers(rst + b"<<<<<<< mine\n", rst) == [5]
    assert leftover_markers(b"ok\r\n=======\r\n", b"ok\r\n") == [2]


def test_merge_leaves_no_temp_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    merge3(BASE, _ours(BASE), b"x\n" + BASE)
    assert os.listdir(tmp_path) == []
