"""Every way import refuses a patch: the documented exit code, a hint line under the message, never 1,
and nothing written (the queue is as it was)."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.qtools import imgquilt
from support.killpoints import queue_hash
from support.import_trees import LINK, make_tree, refused_with_hint

TREE = {"etc/app.conf": "a = 1\nb = 2\n", "etc/link": (LINK, "app.conf"), "loop1": (LINK, "loop2"), "loop2": (LINK, "loop1")}
MOD = b"@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
CASES = [
    ("absolute path", b"--- /etc/app.conf\n+++ /etc/app.conf\n" + MOD, ["-p0"], 6),
    ("dot-dot path", b"--- a/../etc/app.conf\n+++ b/../etc/app.conf\n" + MOD, [], 6),
    ("backslash path", b"--- a/etc\\\\app.conf\n+++ b/etc\\\\app.conf\n" + MOD, [], 6),
    ("deeper -p than the names", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n" + MOD, ["-p4"], 6),
    ("missing file", b"--- a/etc/nope.conf\n+++ b/etc/nope.conf\n" + MOD, [], 6),
    ("no file diff", b"just some text\n", [], 6),
    ("truncated hunk", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1,3 +1,3 @@\n a = 1\n", [], 6),
    ("hunk grew by a hand edit", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n" + MOD + b"+c = 4\n", [], 6),
    ("hunk fits nowhere", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n", [], 3),
    ("creates a file that exists", b"--- /dev/null\n+++ b/etc/app.conf\n@@ -0,0 +1 @@\n+new\n", [], 3),
    ("regular diff onto a symlink", b"--- a/etc/link\n+++ b/etc/link\n" + MOD, [], 3),
    ("symlink loop", b"--- a/loop1/x\n+++ b/loop1/x\n@@ -0,0 +1 @@\n+x\n", [], 6),
    ("binary diff with no bytes", b"diff --git a/etc/app.conf b/etc/app.conf\nindex 1111111..2222222 100644\n"
                                  b"Binary files a/etc/app.conf and b/etc/app.conf differ\n", [], 6),
    ("submodule", b"diff --git a/sub b/sub\nnew file mode 160000\nindex 0000000..1234567\n--- /dev/null\n+++ b/sub\n"
                  b"@@ -0,0 +1 @@\n+Subproject commit 1234567\n", [], 6),
    ("file turned into a symlink", b"diff --git a/etc/app.conf b/etc/app.conf\ndeleted file mode 100644\n--- a/etc/app.conf\n+++ /dev/null\n"
                                   b"@@ -1,2 +0,0 @@\n-a = 1\n-b = 2\n"
                                   b"diff --git a/etc/app.conf b/etc/app.conf\nnew file mode 120000\n--- /dev/null\n+++ b/etc/app.conf\n"
                                   b"@@ -0,0 +1 @@\n+elsewhere\n\\ No newline at end of file\n", [], 6),
    ("file below a link the patch makes", b"diff --git a/etc/d b/etc/d\nnew file mode 120000\n--- /dev/null\n+++ b/etc/d\n"
                                          b"@@ -0,0 +1 @@\n+..\n\\ No newline at end of file\n"
                                          b"diff --git a/etc/d/x b/etc/d/x\nnew file mode 100644\n--- /dev/null\n+++ b/etc/d/x\n"
                                          b"@@ -0,0 +1 @@\n+x\n", [], 6),
    ("fuzz out of range", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n" + MOD, ["--fuzz", "5"], 2),
    ("two places", b"--- a/etc/app.conf\n+++ b/etc/app.conf\n" + MOD, ["--after", "x", "--before", "y"], 2),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_refusal_has_its_code_and_a_hint_and_writes_nothing(tmp_path: Path, case) -> None:
    _id, diff, args, code = case
    base = make_tree(tmp_path / "base", TREE)
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    (tmp_path / "p.diff").write_bytes(diff)
    before = queue_hash(q)
    r = imgquilt("import", str(tmp_path / "p.diff"), *args, "--image", f"rootfs:{base}", cwd=q)
    refused_with_hint(r, (code,))
    assert queue_hash(q) == before and not (q / "patches").exists()


def test_a_missing_patch_file_is_bad_input_with_a_hint(tmp_path: Path) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    refused_with_hint(imgquilt("import", str(tmp_path / "nope.diff"), "--image", f"rootfs:{tmp_path}", cwd=q), (6,))
