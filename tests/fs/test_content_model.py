"""One content model (issue 33, point 3): a content is read through fs/content.py whether it is bytes or
a Spooled, the apply record has one reader, and a spooled record reads as the bytes do."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from imgquilt.engine.record import parse_record, read_record_seen, record_document
from imgquilt.fs.content import SpoolWriter, Spooled, chunks_of, held_if_small, link_content_at, pread_of, slice_of

TOOL = Path(__file__).resolve().parents[2] / "tool" / "imgquilt"
# every module reads bytes and a Spooled alike through fs.content (none is left out)
NOT_YET: set[str] = set()


def _spooled(data: bytes) -> Spooled:
    w = SpoolWriter(at=0)
    w.write(data)
    out = w.finish()
    assert isinstance(out, Spooled)
    return out


def _spooled_branches(tree: ast.AST) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "isinstance"
        and len(n.args) == 2
        and "Spooled" in ast.unparse(n.args[1])
    ]


def test_no_spooled_branch_outside_the_content_module() -> None:
    found = []
    for path in sorted(TOOL.rglob("*.py")):
        rel = str(path.relative_to(TOOL))
        if rel == "fs/content.py" or rel in NOT_YET:
            continue
        found += [f"{rel}:{line}" for line in _spooled_branches(ast.parse(path.read_text()))]
    assert found == [], (
        "ask fs/content.py (pread_of, chunks_of, held_if_small, ...) instead of isinstance(..., Spooled)"
    )


def test_the_content_helpers_read_bytes_and_a_spooled_alike() -> None:
    data = b"line one\r\nline two\nno newline"
    for carried in (data, _spooled(data)):
        assert pread_of(carried, 5, 3) == data[3:8]
        assert pread_of(carried, 100, 25) == data[25:]
        assert b"".join(chunks_of(carried, 4, 6)) == data[6:]
        assert slice_of(carried, 2, 7) == data[2:9]
        assert held_if_small(carried) == data
    assert link_content_at(data, -1, "never") is False  # bytes are written, never linked


def test_one_record_reader_for_audit_and_the_undo_a_spooled_record_included() -> None:
    doc = {
        "imgquilt_version": "x",
        "series_sha256": "a" * 64,
        "image": {"ref": "docker://r/i", "digest": "sha256:" + "b" * 64},
        "patches": [
            {
                "name": "01.patch",
                "files": [{"path": "etc/x", "resolved": "etc/x", "base_sha256": "c" * 64, "patched_sha256": "d" * 64}],
            }
        ],
    }
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    for carried in (raw, _spooled(raw)):
        assert record_document(carried) == doc
        rec = parse_record(carried)  # a spooled record used to read as "not a record"
        assert rec is not None and rec.series_sha256 == "a" * 64 and rec.names == ["01.patch"]
        seen = read_record_seen(carried)
        assert seen.files == {"01.patch": {"etc/x": "d" * 64}} and seen.image_ref == "docker://r/i"
    # audit reads what the undo refuses (no `resolved`) and says why it cannot read the rest
    lenient = json.dumps(
        {"series_sha256": "a" * 64, "patches": [{"name": "p", "files": [{"path": "f", "patched_sha256": "e"}]}]}
    ).encode()
    assert parse_record(lenient) is None and read_record_seen(lenient).files == {"p": {"f": "e"}}
    for bad, why in ((b"[]", "no `patches` list"), (b"\xff", "utf-8")):
        assert parse_record(bad) is None
        try:
            read_record_seen(bad)
        except ValueError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(bad)


def test_a_content_is_hashed_once_and_a_mutable_buffer_every_time(monkeypatch) -> None:
    """sha256_of remembers the digest of a `bytes` object by identity (it is immutable and held while
    remembered); a bytearray is hashed every time, and the digest is always the content's own."""
    import hashlib

    import imgquilt.fs.content as content

    calls = []
    real = hashlib.sha256

    def counting(data=b""):
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(content.hashlib, "sha256", counting)
    data = b"x = 1\n" * 2000
    want = real(data).hexdigest()
    assert content.sha256_of(data) == want and content.sha256_of(data) == want
    assert len(calls) == 1
    same_bytes_other_object = bytes(bytearray(data))
    assert content.sha256_of(same_bytes_other_object) == want and len(calls) == 2
    buf = bytearray(data)
    assert content.sha256_of(buf) == want
    buf[0:1] = b"y"
    assert content.sha256_of(buf) == real(bytes(buf)).hexdigest() != want
    # bounded: past the limit the oldest are let go (and hashed again when asked)
    monkeypatch.setattr(content, "_DIGESTS_MAX", 3 * len(data))
    others = [bytes([65 + i]) * len(data) for i in range(5)]
    for o in others:
        content.sha256_of(o)
    assert content._DIGESTS_HELD[0] <= 3 * len(data)
    assert all(content.sha256_of(o) == real(o).hexdigest() for o in others)
