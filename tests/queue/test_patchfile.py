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
    ("empty-files", [("etc/empty-new", None, b"", None), ("etc/empty-old", b"", None, None)]),
]


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
        assert s.mode == mode
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
