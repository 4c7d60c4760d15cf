"""The rebase journal (`.imgquilt/rebase/state.json`) and its backup manifest are acted on only when
sealed with the user's key and naming patch names: a cloned queue's planted journal never makes
`rebase --continue` remove (or `--abort` write) anything, let alone outside the queue."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.hostile import forger_seal, refused, unchanged
from support.qtools import imgquilt
from support.rebase_stopped import stopped  # noqa: F401 (fixture)


def _planted(q: Path, victim: Path, seal: str | None) -> None:
    """The journal of the stopped rebase, edited as a hostile queue would ship it: every patch carried,
    and a "dropped" patch named by an absolute path outside the queue."""
    path = q / ".imgquilt/rebase/state.json"
    doc = json.loads(path.read_bytes())
    doc.pop("seal", None)
    doc.update(phase="running", current=None, next=3, version=doc["version"])
    doc["done"] = [{"name": str(victim), "state": "unchanged", "dropped": True, "notes": [], "files": [], "raw_sha": None}]
    if seal == "user":
        from imgquilt.util.sealing import seal as user_seal

        doc["seal"] = user_seal(doc)
    elif seal == "forger":
        doc["seal"] = forger_seal(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("seal", [None, "forger", "user"])
def test_a_planted_journal_never_removes_a_file(stopped, seal) -> None:  # noqa: F811
    q, before, home, env = stopped
    victim = home / "notes.txt"
    _planted(q, victim, seal)
    with unchanged(home, q / "patches"):
        word = "patch name" if seal == "user" else "not sealed"  # sealed by the user: still no patch name
        refused(imgquilt("rebase", "--continue", cwd=q, env=env), 6, "state.json", word)
    assert victim.read_bytes() == b"keep me\n"
    r = imgquilt("rebase", "--abort", cwd=q, env=env)  # the backup, sealed at the start, still restores
    assert r.code == 0, r.out + r.err
    for p, data in before.items():
        assert p.read_bytes() == data, p


def test_an_unsealed_backup_manifest_is_never_restored(stopped) -> None:  # noqa: F811
    q, before, home, env = stopped
    manifest = q / ".imgquilt/rebase/backup/manifest.json"
    doc = json.loads(manifest.read_bytes())
    doc.pop("seal", None)
    (q / ".imgquilt/rebase/backup/patches/0001-log-shard-tensors.patch").write_bytes(b"planted\n")
    manifest.write_text(json.dumps(doc))
    with unchanged(home, q / "patches"):
        refused(imgquilt("rebase", "--abort", cwd=q, env=env), 6, "manifest.json", "not sealed")


def test_a_backed_up_file_that_changed_is_never_restored(stopped) -> None:  # noqa: F811
    q, before, home, env = stopped
    (q / ".imgquilt/rebase/backup/patches/0001-log-shard-tensors.patch").write_bytes(b"planted\n")
    with unchanged(home, q / "patches", q / "series"):
        refused(imgquilt("rebase", "--abort", cwd=q, env=env), 6, "0001-log-shard-tensors.patch", "not the file the backup took")
