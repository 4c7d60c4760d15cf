"""`import` reads foreign files as every queue file is read (regular files only, 64 MiB), and never acts
on an import journal it did not write in this queue."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from support.qtools import empty_queue, imgquilt, tree_hash

DIFF = b"--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1 +1 @@\n-workers = 2\n+workers = 8\n"


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(b"workers = 2\n")
    return root


@pytest.mark.parametrize("what", ["fifo-series", "fifo-patch", "dev-zero-patch", "huge-patch", "fifo-file"])
def test_what_import_reads_is_guarded(tmp_path: Path, what: str) -> None:
    root = _root(tmp_path)
    up = tmp_path / "up"
    up.mkdir()
    (up / "ok.diff").write_bytes(DIFF)
    (up / "series").write_text("ok.diff\nbad.diff\n")
    if what == "fifo-series":
        (up / "series").unlink()
        os.mkfifo(up / "series")
    elif what in ("fifo-patch", "fifo-file"):
        os.mkfifo(up / "bad.diff")
    elif what == "dev-zero-patch":
        os.symlink("/dev/zero", up / "bad.diff")
    else:
        with open(up / "bad.diff", "wb") as f:
            f.truncate(65 << 20)  # sparse: 65 MiB of nothing, over the cap
    q = empty_queue(tmp_path / "q")
    before = tree_hash(q)
    args = ["import", str(up / "bad.diff")] if what == "fifo-file" else ["import", "--series", str(up / "series")]
    r = imgquilt(*args, "--image", f"rootfs:{root}", cwd=q)
    assert r.code == 6 and "Traceback" not in r.err, r.err
    assert "not a regular file" in r.err or "more than imgquilt reads" in r.err, r.err
    assert tree_hash(q) == before


def test_a_planted_import_journal_is_never_acted_on(tmp_path: Path) -> None:
    """A journal copied in with a queue (or planted) naming the queue's patches must not make imgquilt
    delete or restore anything: exit 6 naming it, every file kept."""
    root = _root(tmp_path)
    q = empty_queue(tmp_path / "q")
    (tmp_path / "fix.diff").write_bytes(DIFF)
    imgquilt("import", str(tmp_path / "fix.diff"), "--image", f"rootfs:{root}", cwd=q, check=0)
    raw = (q / "patches/fix.diff").read_bytes()
    journal = q / ".imgquilt/import/journal.json"
    journal.parent.mkdir(parents=True)
    st = os.stat(q)
    journal.write_text(json.dumps({"version": 1, "root": [st.st_dev, st.st_ino], "inode": 1, "series": "0" * 64,
                                   "patches": [{"name": "fix.diff", "sha256": hashlib.sha256(raw).hexdigest(),
                                                "replaced": False}]}))
    for args in (("check",), ("push",), ("apply", "--root", str(root))):
        r = imgquilt(*args, cwd=q)
        assert r.code == 6 and "never acts on an import journal" in (r.out + r.err), (args, r.out + r.err)
        assert (q / "patches/fix.diff").read_bytes() == raw and (q / "series").read_text() == "fix.diff\n"
