"""The patch file format: byte-exact round trips, DEP-3 headers kept, bad input refused."""
from __future__ import annotations

import pytest

from imgquilt.engine.apply import apply_hunks, apply_section
from imgquilt.errors import MalformedPatch, UnsafePath
from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import Header, build_patch, make_section, parse_patch, render_section

HEADER = (
    b"Description: Share the fused-MoE wrapper per geometry\n"
    b" Continuation lines start with one space (DEP-3 style).\n"
    b"Author: Platform Team <platform@example.org>\n"
    b"Origin: vendor, https://example.org/pr/1\n"
    b"Bug: https://example.org/bug/7\n"
    b"Forwarded: no\n"
    b"Reviewed-by: A <a@example.org>\n"
    b"Last-Update: 2026-11-01\n"
    b"Applied-Upstream: no\n"
    b"Requires: 0001-envs-shared-moe-knob.patch\n"
    b"Status: wip\n"
    b"X-Team-Ticket: OPS-123\n"
    b"\n"
)

CANONICAL = [
    ("crlf", [("etc/app.ini", b"[a]\r\nx=1\r\ny=2\r\n", b"[a]\r\nx=2\r\ny=2\r\n", None)]),
    ("no-eol", [("usr/lib/x.py", b"def f():\n    return 1", b"def f():\n    return 2", None)]),
    ("binaryish", [("usr/share/x.txt", b"caf\xe9\n\x00?\n", b"caf\xe9!\n\x00?\n", None)]),
    ("new-and-delete", [("usr/bin/tool", None, b"#!/bin/sh\necho hi\n", 0o755), ("etc/stale.conf", b"old\n", None, None)]),
    # written in git's form (`new file mode 100644`), which reads back as mode 0644
    ("empty-files", [("etc/empty-new", None, b"", None), ("etc/empty-old", b"", None, None)]),
]
READ_MODE = {"etc/empty-new": 0o644}


@pytest.mark.parametrize("name,changes", CANONICAL, ids=[c[0] for c in CANONICAL])
def test_round_trip_is_byte_identical(name, changes) -> None:
    p = build_patch(name, Header(HEADER), [make_section(path, a, b, m) for path, a, b, m in changes])
    again = parse_patch(p.raw, name)
    assert again.to_bytes() == p.raw
    rebuilt = build_patch(name, again.header, again.sections)
    assert rebuilt.raw == p.raw
    for s, (path, a, b, mode) in zip(again.sections, changes):
        assert s.path == path
        assert s.base_sha256 == sha256_hex(a)
        assert s.patched_sha256 == sha256_hex(b)
        assert s.mode == READ_MODE.get(path, mode)
        result = apply_section(a, s)  # NUL bytes: a GIT binary patch section
        assert (None if b is None else result) == b


def test_header_fields_are_kept_verbatim_and_parsed() -> None:
    p = parse_patch(HEADER + render_section("a/b", b"1\n", b"2\n"), "x")
    assert p.header.raw == HEADER
    f = dict(p.header.fields)
    assert f["Description"] == "Share the fused-MoE wrapper per geometry\nContinuation lines start with one space (DEP-3 style)."
    assert f["X-Team-Ticket"] == "OPS-123"
    assert p.header.requires == ["0001-envs-shared-moe-knob.patch"]
    assert p.header.description.startswith("Share the fused-MoE")


def test_header_with_field_changes_one_field_only() -> None:
    h = Header(HEADER).with_field("Status", "merged")
    assert h.get("Status") == "merged"
    assert h.raw == HEADER.replace(b"Status: wip", b"Status: merged")
    assert Header(HEADER).with_field("Status", None).get("Status") is None
    added = Header(b"Description: x\n\n").with_field("Requires", "a.patch")
    assert added.raw == b"Description: x\nRequires: a.patch\n\n"


def _section(path="usr/x", base="a" * 64, patched="b" * 64, body=b"--- a/usr/x\n+++ b/usr/x\n@@ -1 +1 @@\n-a\n+b\n"):
    return f"Index: {path}\nBase-SHA256: {base}\nPatched-SHA256: {patched}\n".encode() + body


@pytest.mark.parametrize(
    "data,needle",
    [
        (b"Description: only a header\n", "no file sections yet"),
        (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "no `Index:`"),
        (_section(base="XYZ"), "64 lowercase hex"),
        (_section(base="A" * 64), "64 lowercase hex"),
        (_section().replace(b"Patched-SHA256: " + b"b" * 64 + b"\n", b""), "no Patched-SHA256"),
        (_section(body=b"--- a/usr/x\n+++ b/usr/x\n@@ -1,3 +1,3 @@\n-a\n+b\n"), "truncated"),
        (_section(base="absent"), "Base-SHA256 is absent"),
        (_section() + _section(), "two sections"),
        (_section(body=b""), "no `---`"),
    ],
)
def test_malformed_patches_are_refused(data: bytes, needle: str) -> None:
    with pytest.raises(MalformedPatch) as exc:
        parse_patch(data, "bad.patch")
    assert "bad.patch" in exc.value.message
    assert needle in exc.value.message
    assert exc.value.exit_code == 6


@pytest.mark.parametrize("path", ["/etc/passwd", "usr/../../etc/passwd", "usr\\x", "a/\x00b"])
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePath) as exc:
        parse_patch(_section(path=path), "bad.patch")
    assert exc.value.exit_code == 6


def test_a_lone_cr_is_part_of_a_line_never_a_line_start() -> None:
    # a CR without LF before "Index: " must not open a second section (GNU patch splits at LF only)
    new = b"\rIndex: \nx = 1\r\n"
    section = make_section("etc/app.ini", None, new, 0o644)
    patch = build_patch("p.patch", Header(b"Description: d\n\n"), [section])
    (s,) = parse_patch(patch.raw, "p.patch").sections
    assert apply_hunks(b"", s.hunks) == new


def test_patch_files_and_import_read_hunks_with_one_reader() -> None:
    from imgquilt.importer import parse_foreign

    grown = b"--- a/usr/x\n+++ b/usr/x\n@@ -1 +1 @@\n-a\n+b\n+c\n"
    with pytest.raises(MalformedPatch, match="more lines than its @@ header"):
        parse_patch(_section(body=grown), "bad.patch")
    with pytest.raises(MalformedPatch, match="more lines than its @@ header"):
        parse_foreign(grown, "bad.diff")


# --- git's extended headers where a plain diff cannot say it (docs/patch-format.md) -----------------
TOOL = b"#!/bin/sh\necho hi\n"
TOOL_ID = "4163036efa65bd4a469e752267498f01ea36a55c"  # git hash-object of TOOL
EMPTY_ID = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
ZERO = "0" * 40


def _git_lines(raw: bytes) -> bytes:
    """A section's lines from `diff --git` up to its `---` line."""
    return raw[raw.index(b"diff --git "):raw.index(b"\n--- ") + 1]


def _without_git_lines(raw: bytes) -> bytes:
    return raw.replace(_git_lines(raw), b"") if b"diff --git " in raw else raw


@pytest.mark.parametrize("old,new,mode,deleted_mode,want", [
    (None, TOOL, 0o755, None, f"diff --git a/p b/p\nnew file mode 100755\nindex {ZERO}..{TOOL_ID}\n"),
    (None, TOOL, 0o750, None, f"diff --git a/p b/p\nnew file mode 100755\nindex {ZERO}..{TOOL_ID}\n"),
    (None, b"", None, None, f"diff --git a/p b/p\nnew file mode 100644\nindex {ZERO}..{EMPTY_ID}\n"),
    (None, b"", 0o755, None, f"diff --git a/p b/p\nnew file mode 100755\nindex {ZERO}..{EMPTY_ID}\n"),
    (b"", None, None, None, f"diff --git a/p b/p\ndeleted file mode 100644\nindex {EMPTY_ID}..{ZERO}\n"),
    (b"", None, None, 0o755, f"diff --git a/p b/p\ndeleted file mode 100755\nindex {EMPTY_ID}..{ZERO}\n"),
    (TOOL, None, None, 0o755, f"diff --git a/p b/p\ndeleted file mode 100755\nindex {TOOL_ID}..{ZERO}\n"),
], ids=["new-executable", "new-0750", "new-empty", "new-empty-executable", "deleted-empty", "deleted-empty-executable",
        "deleted-executable"])
def test_sections_a_plain_diff_cannot_say_are_written_in_git_form(old, new, mode, deleted_mode, want: str) -> None:
    s = make_section("p", old, new, mode, deleted_mode=deleted_mode)
    assert _git_lines(s.raw) == want.encode()
    # `Mode:` stays where it was (the exact bits), the `---`/`+++` lines and hunks are what they were
    assert (b"\nMode: " in s.raw) == (old is None and mode is not None)
    assert s.raw.replace(want.encode(), b"") == _without_git_lines(render_section("p", old, new, mode))
    again = parse_patch(s.raw, "x").sections[0]
    assert again.git_form and again.raw == s.raw
    assert again.mode == (None if new is None else mode if mode is not None else 0o644)
    assert again.deleted_mode == (None if old is None else deleted_mode if deleted_mode is not None else 0o644)
    assert (None if new is None else apply_section(old, again)) == new


@pytest.mark.parametrize("old,new,mode,deleted_mode", [
    (None, TOOL, None, None), (None, TOOL, 0o644, None), (None, TOOL, 0o600, None),
    (TOOL, None, None, None), (TOOL, None, None, 0o644), (TOOL, None, None, 0o600), (TOOL, TOOL + b"x\n", None, None),
])
def test_every_other_section_is_written_as_before(old, new, mode, deleted_mode) -> None:
    s = make_section("p", old, new, mode, deleted_mode=deleted_mode)
    assert b"diff --git" not in s.raw and not s.git_form
    assert s.raw == render_section("p", old, new, mode)  # deleted_mode changes nothing here


def test_deleted_file_mode_is_the_mode_the_writer_knows_after_a_mode_change_alone() -> None:
    """A plain section right after git headers alone gets a `diff --git` line and its new/deleted mode
    line (GNU patch would read its diff as the file before's): the deleted file's mode, when read."""
    chmod = make_section("a", b"x\n", b"x\n", mode_change=(0o644, 0o755))
    for deleted_mode, line in ((None, b"deleted file mode 100644"), (0o755, b"deleted file mode 100755")):
        gone = make_section("b", TOOL, None, deleted_mode=deleted_mode)
        p = build_patch("x", Header(b""), [chmod, gone])
        assert p.raw.count(b"diff --git a/b b/b\n" + line + b"\n") == 1
        assert parse_patch(p.raw, "x").sections[1].deleted_mode == (0o755 if deleted_mode else 0o644)


def test_a_binary_executable_file_deleted_says_its_mode() -> None:
    s = make_section("p", b"\0\x01", None, deleted_mode=0o755)
    assert s.binary is not None and b"\ndeleted file mode 100755\nindex " in s.raw
    assert parse_patch(s.raw, "x").sections[0].deleted_mode == 0o755
    assert b"\ndeleted file mode 100644\n" in make_section("p", b"\0\x01", None).raw


def test_plain_sections_written_before_still_read() -> None:
    """Old patches: a new executable file with `Mode:` alone, an empty file with no hunk."""
    old_exec = (b"Index: p\nBase-SHA256: absent\nPatched-SHA256: " + sha256_hex(TOOL).encode() +
                b"\nMode: 0755\n--- /dev/null\n+++ b/p\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+echo hi\n")
    old_empty = (b"Index: e\nBase-SHA256: absent\nPatched-SHA256: " + sha256_hex(b"").encode() + b"\n--- /dev/null\n+++ b/e\n")
    p = parse_patch(old_exec + old_empty, "old")
    assert [(s.path, s.mode, s.git_form) for s in p.sections] == [("p", 0o755, False), ("e", None, False)]
    assert apply_section(None, p.sections[0]) == TOOL and apply_section(None, p.sections[1]) == b""


@pytest.mark.parametrize("field,git_mode,want", [
    ("0755", "100755", 0o755), ("0750", "100755", 0o750), ("0700", "100755", 0o700), ("0644", "100644", 0o644),
    ("0600", "100644", 0o600), ("0644", "100755", None), ("0600", "100755", None), ("0755", "100644", None),
])
def test_mode_gives_the_exact_bits_and_must_agree_with_git_on_the_executable_bit(field: str, git_mode: str, want) -> None:
    raw = (f"Index: p\nBase-SHA256: absent\nPatched-SHA256: {sha256_hex(TOOL)}\nMode: {field}\n"
           f"diff --git a/p b/p\nnew file mode {git_mode}\n--- /dev/null\n+++ b/p\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+echo hi\n").encode()
    if want is None:
        with pytest.raises(MalformedPatch, match="disagree on the executable bit"):
            parse_patch(raw, "x")
    else:
        assert parse_patch(raw, "x").sections[0].mode == want
