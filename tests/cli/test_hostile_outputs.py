"""Hostile names in what imgquilt prints, and hostile `audit --merge` shards.

A CI runner executes a log line that starts (after blanks) with `::` and one holding `##[`; names
reach the output from inputs (merged documents, file names in patches/, paths), so a name with a
newline must never start such a line, in text, `--format github` or `--json` output. A shard that is
not shaped as `audit --json` writes it is exit 6, never exit 1.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.qtools import empty_queue, imgquilt

EVIL = "0001-x.patch\n::add-mask::secret\r::error title=pwned::pwned\n  ::warning::indented ##[add-mask]legacy"
COMMAND = re.compile(r"^\s*::")


def commands(text: str) -> list[str]:
    """The lines of `text` a runner would execute (it ends lines at \\n, \\r and \\r\\n)."""
    return [ln for ln in re.split(r"\r\n|\r|\n", text) if COMMAND.match(ln) or "##[" in ln]


def fleet_doc(name: str) -> dict:
    return {"expect": "live", "series_sha256": "a" * 64, "images": [
        {"image": {"ref": "docker://example.com/app:1\n::error::ref", "digest": None, "platform": None},
         "series_sha256": "a" * 64, "patches": [{"name": name, "state": "pending"}], "expect": "live"}]}


@pytest.mark.parametrize("fmt", ["text", "github"])
def test_a_hostile_patch_name_in_a_merged_document_starts_no_workflow_command(tmp_path: Path, fmt: str) -> None:
    (tmp_path / "a.json").write_text(json.dumps(fleet_doc(EVIL)))
    r = imgquilt("audit", "--merge", str(tmp_path / "a.json"), "--format", fmt, cwd=tmp_path, check=5)
    executed = commands(r.out) + commands(r.err)
    if fmt == "github":  # exactly the annotation imgquilt means, its message escaped by GitHub's rules
        assert len(executed) == 1 and executed[0].startswith("::error file=patches/0001-x.patch%0A%3A%3Aadd-mask"), executed
        assert "%0D" in executed[0] and "%0A" in executed[0]
    else:
        assert executed == [], executed
    assert "0001-x.patch\\n::add-mask::secret" in r.out  # the table shows the name, escaped, on one line


def test_json_output_keeps_the_name_exactly_and_starts_no_command(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(fleet_doc(EVIL)))
    r = imgquilt("audit", "--merge", str(tmp_path / "a.json"), "--json", cwd=tmp_path, check=5)
    assert commands(r.out) == [] and commands(r.err) == []
    assert json.loads(r.out)["patches"] == [EVIL]


def test_a_hostile_file_name_in_patches_starts_no_workflow_command(tmp_path: Path) -> None:
    q = empty_queue(tmp_path / "q")
    (q / "patches").mkdir()
    (q / "patches" / "stray\n::add-mask::secret.patch").write_bytes(b"x\n")
    (q / "patches" / "also ##[add-mask]legacy.patch").write_bytes(b"x\n")
    for args in (("check",), ("check", "--format", "github"), ("--json", "check")):
        r = imgquilt(*args, cwd=q, check=6)
        executed = [ln for ln in commands(r.out + "\n" + r.err) if not ln.startswith("::error file=patches/")]
        assert executed == [], (args, executed)


SHARDS = {
    "not-json": b"[",
    "nan": b'{"patches": [{"name": "a", "state": "live"}], "series_sha256": NaN}',
    "infinity": b'{"patches": [{"name": "a", "state": "live"}], "x": Infinity}',
    "surrogate": b'{"patches": [{"name": "\\ud800", "state": "live"}]}',
    "deep": b"[" * 100000 + b"]" * 100000,
    "deep-but-parsed": b'{"patches": [], "x": ' + b"[" * 500 + b"]" * 500 + b"}",
    "name-not-a-string": b'{"images": [{"patches": [{"name": 1, "state": "live"}]}]}',
    "no-name": b'{"images": [{"patches": [{"state": "live"}]}]}',
    "no-state": b'{"patches": [{"name": "a"}]}',
    "patch-a-list": b'{"images": [{"patches": [["a"]]}]}',
    "state-an-object": b'{"patches": [{"name": "a", "state": {"x": 1}}]}',
    "unknown-state": b'{"patches": [{"name": "a", "state": "live\\n::error::x"}]}',
    "error-a-string": b'{"patches": [], "error": "x"}',
    "error-message-a-number": b'{"images": [{"patches": [], "error": {"message": 1}}]}',
    "image-a-number": b'{"images": [{"image": 5, "patches": [{"name": "a", "state": "live"}]}]}',
    "series-a-list": b'{"images": [{"patches": [{"name": "a", "state": "live"}], "series_sha256": ["x"]}]}',
    "expect-a-list": b'{"expect": ["x"], "patches": [{"name": "a", "state": "live"}]}',
    "not-utf8": b'{"patches": [{"name": "\xff", "state": "live"}]}',
}


@pytest.mark.parametrize("case", sorted(SHARDS))
def test_a_malformed_shard_is_bad_input(tmp_path: Path, case: str) -> None:
    (tmp_path / "shard.json").write_bytes(SHARDS[case])
    r = imgquilt("audit", "--merge", str(tmp_path / "shard.json"), cwd=tmp_path)
    assert r.code == 6 and "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert "shard.json" in r.err


def test_a_shard_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "shard.json")
    r = imgquilt("audit", "--merge", str(tmp_path / "shard.json"), cwd=tmp_path)
    assert r.code == 6 and "not a regular file" in r.err, r.err
