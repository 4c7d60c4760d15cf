"""The pure engine: hunks apply exactly where they say, byte for byte."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imgquilt.engine.apply import HunkError, apply_hunks, reverse_hunks
from imgquilt.queue.difftext import diff_hunks, format_hunks, unified_diff
from imgquilt.queue.hunks import Hunk, HunkLine, sha256_hex, split_lines

CASES = {
    "crlf": (b"one\r\ntwo\r\nthree\r\n", b"one\r\nTWO\r\nthree\r\n"),
    "no-final-newline": (b"a\nb\nc", b"a\nb\nC"),
    "add-final-newline": (b"a\nb", b"a\nb\n"),
    "drop-final-newline": (b"a\nb\n", b"a\nb"),
    "non-utf8": (b"caf\xe9\n\xff\xfe\n", b"caf\xe9!\n\xff\xfe\n"),
    "lone-cr": (b"a\rb\nc\n", b"a\rB\nc\n"),
    "from-empty": (b"", b"new\n"),
    "to-empty": (b"gone\n", b""),
    "form-feed-and-vt": (b"x\x0cy\n\x0bz\n", b"x\x0cy\n\x0bZ\n"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_diff_then_apply_is_byte_exact(name: str) -> None:
    old, new = CASES[name]
    assert apply_hunks(old, diff_hunks(old, new)) == new


@pytest.mark.parametrize("name", sorted(CASES))
def test_reverse_hunks_undo(name: str) -> None:
    old, new = CASES[name]
    assert apply_hunks(new, reverse_hunks(tuple(diff_hunks(old, new)))) == old


def test_split_lines_keeps_cr_inside_lines() -> None:
    assert split_lines(b"a\r\nb\rc\nd") == [b"a\r\n", b"b\rc\n", b"d"]
    assert split_lines(b"") == []


def test_no_fuzz_no_offset() -> None:
    old = b"".join(f"line {i}\n".encode() for i in range(20))
    new = old.replace(b"line 10\n", b"line ten\n")
    hunks = diff_hunks(old, new)
    shifted = b"extra\n" + old  # same content one line lower: a fuzzy tool would find it
    with pytest.raises(HunkError) as exc:
        apply_hunks(shifted, hunks)
    assert "hunk #1" in str(exc.value)


def test_overlapping_or_out_of_range_hunks_refused() -> None:
    h = Hunk(5, 1, 5, 1, (HunkLine("-", b"x\n"), HunkLine("+", b"y\n")))
    with pytest.raises(HunkError):
        apply_hunks(b"a\n", [h])


def test_no_newline_marker_written() -> None:
    text = unified_diff(b"a\nb", b"a\nc", "f")
    assert text.endswith(b"-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")
    assert text.startswith(b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n")


def test_new_and_deleted_file_headers() -> None:
    assert unified_diff(None, b"x\n", "p").startswith(b"--- /dev/null\n+++ b/p\n@@ -0,0 +1 @@\n+x\n")
    assert unified_diff(b"x\n", None, "p") == b"--- a/p\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"


def test_sha256_absent() -> None:
    assert sha256_hex(None) == "absent"
    assert sha256_hex(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


lines = st.lists(
    st.sampled_from([b"a", b"b", b"c\r", b"\xff", b"", b"def f():", b"    return 1", b"\r"]), max_size=30
)


@settings(max_examples=300, deadline=None)
@given(lines, lines, st.booleans(), st.booleans())
def test_property_any_bytes_round_trip(a: list[bytes], b: list[bytes], end_a: bool, end_b: bool) -> None:
    old = b"\n".join(a) + (b"\n" if end_a and a else b"")
    new = b"\n".join(b) + (b"\n" if end_b and b else b"")
    hunks = diff_hunks(old, new)
    assert apply_hunks(old, hunks) == new
    assert format_hunks(hunks) == b"" or format_hunks(hunks).startswith(b"@@ -")
