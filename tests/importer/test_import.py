"""Importing foreign patches: every dialect, every pin checked, hunks applied exactly (no fuzz), DEP-3 kept."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from imgquilt.errors import BadInput, BaseDrift, HunkMismatch, MalformedPatch, MissingTarget, ResultMismatch, UnsafePath, UsageError
from imgquilt.importer import Base, apply_foreign, mail_subject_name, parse_foreign, split_mbox, strip_path
from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import parse_patch
from imgquilt.rootfs.source import RootfsSource
from imgquilt.work import ImportItem, WorkTree, importing, push

CONF = b"[server]\nworkers = 2\nport = 80\n"
CONF_8 = b"[server]\nworkers = 8\nport = 80\n"
PY = b"def f():\n    return 1\n\n\ndef g():\n    return 2\n"


def files(mapping: dict[str, bytes | None]):
    """A base reader over a dict (None: absent): regular files, mode 0644."""
    return lambda path, _follow: Base(mapping.get(path), None if mapping.get(path) is None else 0o644)


def convert(data: bytes, mapping: dict[str, bytes | None], strip: int = 1, **kw):
    conv = apply_foreign(parse_foreign(data, "t.patch"), strip, files(mapping), **kw)
    return {c.path: (c.base, c.result, c.mode) for c in conv.changes}, conv.notes


def test_plain_diff_u_with_timestamps_and_strip_levels() -> None:
    diff = b"--- etc/svc.conf.orig\t2024-05-01 10:00:00.000000000 +0200\n+++ etc/svc.conf\t2024-05-01 11:00:00.000000000 +0200\n@@ -1,3 +1,3 @@\n [server]\n-workers = 2\n+workers = 8\n port = 80\n"
    changes, _ = convert(diff, {"etc/svc.conf": CONF}, strip=0)
    assert changes == {"etc/svc.conf": (CONF, CONF_8, None)}
    # -p1 on a/ b/ names, -p2 deeper
    diff1 = diff.replace(b"--- etc/svc.conf.orig", b"--- a/etc/svc.conf").replace(b"+++ etc/svc.conf", b"+++ b/etc/svc.conf")
    assert convert(diff1, {"etc/svc.conf": CONF})[0] == changes
    assert strip_path("x/y/etc/svc.conf", 2) == "etc/svc.conf"
    assert strip_path("/abs//etc/a", 1) == "etc/a"
    with pytest.raises(MalformedPatch, match="fewer than 4 components"):
        convert(diff1, {}, strip=3)


def test_quilt_patch_with_index_lines_function_headers_and_dep3() -> None:
    patch = (b"Description: Return three\n Because two is not enough.\nOrigin: vendor\nX-Local: kept\n\n"
             b"Index: pkg/mod.py\n===================================================================\n"
             b"--- pkg.orig/mod.py\n+++ pkg/mod.py\n@@ -4,3 +4,3 @@ def f():\n \n def g():\n-    return 2\n+    return 3\n")
    fp = parse_foreign(patch, "q.patch")
    assert fp.header == b"Description: Return three\n Because two is not enough.\nOrigin: vendor\nX-Local: kept\n\n"
    changes, _ = convert(patch, {"mod.py": PY})
    assert changes == {"mod.py": (PY, PY.replace(b"return 2", b"return 3"), None)}


def test_git_diff_new_deleted_renamed_quoted_and_mode_changes() -> None:
    patch = (
        b"diff --git a/bin/run b/bin/run\nnew file mode 100755\nindex 0000000..1c8a0b0\n--- /dev/null\n+++ b/bin/run\n@@ -0,0 +1 @@\n+#!/bin/sh\n"
        b"diff --git a/etc/old.conf b/etc/old.conf\ndeleted file mode 100644\nindex 3b18e51..0000000\n--- a/etc/old.conf\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello world\n"
        b"diff --git a/etc/empty b/etc/empty\nnew file mode 100644\nindex 0000000..e69de29\n"
        b"diff --git a/etc/svc.conf b/etc/svc2.conf\nsimilarity index 60%\nrename from etc/svc.conf\nrename to etc/svc2.conf\n"
        b"--- a/etc/svc.conf\n+++ b/etc/svc2.conf\n@@ -1,3 +1,3 @@\n [server]\n-workers = 2\n+workers = 8\n port = 80\n"
        b"diff --git \"a/usr/share/caf\\303\\251.txt\" \"b/usr/share/caf\\303\\251.txt\"\nold mode 100644\nnew mode 100755\n"
        b"--- \"a/usr/share/caf\\303\\251.txt\"\n+++ \"b/usr/share/caf\\303\\251.txt\"\n@@ -1 +1 @@\n-a\n+b\n"
    )
    base = {"etc/old.conf": b"hello world\n", "etc/svc.conf": CONF, "usr/share/caf\u00e9.txt": b"a\n"}
    conv = apply_foreign(parse_foreign(patch, "t.patch"), 1, files(base), git_index="ignore")
    changes = {c.path: (c.base, c.result, c.mode) for c in conv.changes}
    assert changes == {
        "bin/run": (None, b"#!/bin/sh\n", 0o755),
        "etc/old.conf": (b"hello world\n", None, None),
        "etc/empty": (None, b"", None),
        "etc/svc.conf": (CONF, None, None),
        "etc/svc2.conf": (None, CONF_8, None),
        "usr/share/caf\u00e9.txt": (b"a\n", b"b\n", None),
    }
    # `old mode`/`new mode` change the mode, as git apply does; the rename keeps the renamed file's mode
    assert {c.path: c.mode_change for c in conv.changes if c.mode_change} == {"usr/share/caf\u00e9.txt": (0o644, 0o755)}
    assert conv.notes == []


def test_git_index_hashes_are_checked() -> None:
    def blob(d: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest()

    diff = (f"diff --git a/etc/svc.conf b/etc/svc.conf\nindex {blob(CONF)[:12]}..{blob(CONF_8)[:12]} 100644\n".encode()
            + b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -2 +2 @@\n-workers = 2\n+workers = 8\n")
    assert convert(diff, {"etc/svc.conf": CONF})[0]["etc/svc.conf"][1] == CONF_8
    other = CONF.replace(b"port = 80", b"port = 81")
    with pytest.raises(BaseDrift, match=f"blob {blob(CONF)[:12]}, the file here is blob {blob(other)[:12]}") as exc:
        convert(diff, {"etc/svc.conf": other})
    assert "--ignore-git-index" in exc.value.hint
    assert convert(diff, {"etc/svc.conf": other}, git_index="ignore")[0]["etc/svc.conf"][1] == other.replace(b"2", b"8")


def test_format_patch_mail_becomes_dep3_fields() -> None:
    mail = (
        b"From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\n"
        b"From: =?UTF-8?q?Ren=C3=A9e=20Dev?= <renee@example.org>\n"
        b"Date: Thu, 2 May 2024 12:00:00 +0200\n"
        b"Subject: [PATCH 2/3] svc: more workers for\n the busy hours\n"
        b"MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n\n"
        b"Two workers saturate at peak.\n\nSigned-off-by: Ren\xc3\xa9e Dev <renee@example.org>\n---\n etc/svc.conf | 2 +-\n 1 file changed\n\n"
        b"diff --git a/etc/svc.conf b/etc/svc.conf\n--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -2 +2 @@\n-workers = 2\n+workers = 8\n"
        b"-- \n2.39.2\n\n"
    )
    fp = parse_foreign(mail, "m.patch")
    assert fp.kind == "mail"
    assert fp.header == (
        "Description: svc: more workers for the busy hours\n Two workers saturate at peak.\n .\n Signed-off-by: Ren\u00e9e Dev <renee@example.org>\n"
        "Author: Ren\u00e9e Dev <renee@example.org>\nLast-Update: 2024-05-02\n\n"
    ).encode()
    assert convert(mail, {"etc/svc.conf": CONF})[0] == {"etc/svc.conf": (CONF, CONF_8, None)}
    two = split_mbox(mail + mail.replace(b"[PATCH 2/3] svc: more", b"[PATCH 3/3] svc: fewer"))
    assert len(two) == 2 and two[0] == mail
    assert mail_subject_name(two[1], 3) == "0003-svc-fewer-workers-for-the-busy-hours.patch"  # the whole subject, unfolded, as git names it


def test_pinned_target_format_is_verified() -> None:
    new = PY.replace(b"return 2", b"return 3")
    pinned = (b"# Hotfix for the g() regression.\n# TARGET: /usr/lib/python3/dist-packages/foo.py\n"
              + f"# base sha256: {sha256_hex(PY)}\n# patched sha256: {sha256_hex(new)}\n".encode()
              + b"--- foo.py.orig\n+++ foo.py\n@@ -5,2 +5,2 @@\n def g():\n-    return 2\n+    return 3\n")
    fp = parse_foreign(pinned, "pin.diff")
    # pin lines become the section's hashes; the rest of the comment block the Description
    assert fp.header == b"Description: Hotfix for the g() regression.\n\n"
    changes, _ = convert(pinned, {"usr/lib/python3/dist-packages/foo.py": PY})
    assert changes == {"usr/lib/python3/dist-packages/foo.py": (PY, new, None)}
    with pytest.raises(BaseDrift) as exc:
        convert(pinned, {"usr/lib/python3/dist-packages/foo.py": PY + b"\n"})
    assert exc.value.exit_code == 3 and sha256_hex(PY) in exc.value.message and sha256_hex(PY + b"\n") in exc.value.message
    with pytest.raises(ResultMismatch):
        convert(pinned.replace(sha256_hex(new).encode(), b"a" * 64), {"usr/lib/python3/dist-packages/foo.py": PY})


def test_several_pin_blocks_go_to_the_diffs_in_order() -> None:
    two = (b"TARGET: /etc/a.conf\nbase sha256: " + sha256_hex(b"a\n").encode() + b"\n"
           b"TARGET: /etc/b.conf\npatched sha256: " + sha256_hex(b"B\n").encode() + b"\n\n"
           b"--- x\n+++ x\n@@ -1 +1 @@\n-a\n+A\n"
           b"--- y\n+++ y\n@@ -1 +1 @@\n-b\n+B\n")
    changes, _ = convert(two, {"etc/a.conf": b"a\n", "etc/b.conf": b"b\n"})
    assert changes == {"etc/a.conf": (b"a\n", b"A\n", None), "etc/b.conf": (b"b\n", b"B\n", None)}
    with pytest.raises(MalformedPatch, match="pin block"):
        parse_foreign(two + b"TARGET: /etc/c.conf\n", "x")


def test_an_offset_hunk_lands_on_the_nearest_exact_match_and_is_renumbered() -> None:
    # made against a file with one line less on top: `patch` applies it "with offset 1", so does import
    diff = b"--- a/mod.py\n+++ b/mod.py\n@@ -3,3 +3,3 @@\n \n def g():\n-    return 2\n+    return 3\n"
    conv = apply_foreign(parse_foreign(diff, "t.patch"), 1, files({"mod.py": PY}))
    (c,) = conv.changes
    assert c.result == PY.replace(b"return 2", b"return 3")
    assert conv.notes == ["mod.py hunk 1 at line 4, 1 line below its header"]
    (h,) = c.hunks
    assert (h.old_start, h.new_start) == (4, 4) and h.lines == parse_foreign(diff).files[0].hunks[0].lines
    # the nearest match wins: the same three lines at line 2 and at line 9, header says 7
    text = b"x\na\nb\nc\ny\ny\ny\ny\na\nb\nc\n"
    near = b"--- a/t\n+++ b/t\n@@ -7,3 +7,3 @@\n a\n-b\n+B\n c\n"
    (c,) = apply_foreign(parse_foreign(near), 1, files({"t": text})).changes
    assert c.result == text[:-4] + b"B\nc\n" and c.hunks[0].old_start == 9


def test_fuzz_is_off_by_default_and_reported_when_asked() -> None:
    text = b"one\ntwo\nthree\nfour\nfive\nsix\nseven\n"
    # first context line differs from the file: needs fuzz 1
    fuzzy = b"--- a/t\n+++ b/t\n@@ -2,5 +2,5 @@\n TWO\n three\n-four\n+FOUR\n five\n six\n"
    with pytest.raises(HunkMismatch) as exc:
        convert(fuzzy, {"t": text})
    assert exc.value.exit_code == 3
    assert "with --fuzz 1 it would apply at line 2" in exc.value.message and sha256_hex(text) in exc.value.message
    conv = apply_foreign(parse_foreign(fuzzy), 1, files({"t": text}), fuzz=1)
    assert conv.changes[0].result == text.replace(b"four", b"FOUR") and conv.changes[0].hunks is None  # re-diffed
    assert conv.notes == ["t hunk 1 at line 2, at its header's line, with fuzz 1"]
    hopeless = fuzzy.replace(b"-four", b"-fours")
    with pytest.raises(HunkMismatch, match="not even with 2 context lines dropped"):
        convert(hopeless, {"t": text}, fuzz=2)


@pytest.mark.parametrize("data,cls,needle", [
    (b"just some words\n", MalformedPatch, "no file diff"),
    (b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n", MalformedPatch, "truncated"),
    (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", MalformedPatch, "more lines"),
    (b"--- a/x\n+++ b/x\n@@ bad @@\n", MalformedPatch, "hunk header"),
    (b"--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", UnsafePath, ".."),
    (b"diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n", BadInput, "binary"),
])
def test_bad_foreign_patches(data: bytes, cls: type, needle: str) -> None:
    with pytest.raises(cls, match=needle):
        convert(data, {"x": b"a\nb\nc\n", "x.bin": b"\0", "etc/passwd": b"a\n"}, git_index="ignore")


def test_creating_a_file_that_exists_and_changing_one_that_does_not() -> None:
    with pytest.raises(BaseDrift, match="creates the file, but it exists"):
        convert(b"--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+new\n", {"x": b"old\n"})
    with pytest.raises(MissingTarget):
        convert(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", {})


def test_crlf_no_newline_stripped_context_and_two_diffs_of_one_file() -> None:
    base = b"one\r\n\r\ntwo\r\n\nthree"
    diff = (b"--- a/w.txt\n+++ b/w.txt\n@@ -1,3 +1,3 @@\n-one\r\n+ONE\r\n \r\n two\r\n"
            b"--- a/w.txt\n+++ b/w.txt\n@@ -3,3 +3,3 @@\n two\r\n\n-three\n\\ No newline at end of file\n+THREE\n")
    changes, _ = convert(diff, {"w.txt": base})
    assert changes == {"w.txt": (base, b"ONE\r\n\r\ntwo\r\n\nTHREE\n", None)}  # one net change per file


# --- into a queue ---------------------------------------------------------------------------
@pytest.fixture
def setup(tmp_path: Path):
    image = tmp_path / "image"
    (image / "etc").mkdir(parents=True)
    (image / "etc/svc.conf").write_bytes(CONF)
    (image / "mod.py").write_bytes(PY)
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("# ours\n")
    wt = WorkTree(q, open_image=lambda: RootfsSource(image), image_explicit=True)
    return q, image, wt


def test_import_inserts_after_the_top_and_chains_bases(setup) -> None:
    q, image, wt = setup
    p1 = b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -2 +2 @@\n-workers = 2\n+workers = 8\n"
    p2 = b"Description: then the port\n\n--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -3 +3 @@\n-port = 80\n+port = 81\n"
    done = importing.import_patches(wt, [ImportItem("01.patch", p1), ImportItem("02.patch", p2)], fields=[("Author", "Ops <ops@example.org>")])
    assert [d.name for d in done] == ["01.patch", "02.patch"]
    assert (q / "series").read_text() == "# ours\n01.patch\n02.patch\n"
    a = parse_patch((q / "patches/01.patch").read_bytes())
    b = parse_patch((q / "patches/02.patch").read_bytes())
    # the imported hunk text is kept (not re-diffed), under the hashes
    def kept(old: bytes, new: bytes, diff: bytes) -> bytes:
        return f"Index: etc/svc.conf\nBase-SHA256: {sha256_hex(old)}\nPatched-SHA256: {sha256_hex(new)}\n".encode() + diff[diff.index(b"--- "):]
    assert a.raw == b"Author: Ops <ops@example.org>\n\n" + kept(CONF, CONF_8, p1)
    assert b.raw == b"Description: then the port\nAuthor: Ops <ops@example.org>\n\n" + kept(CONF_8, CONF_8.replace(b"80", b"81"), p2)
    # push the first, then import in between: the base is the work tree's, the new patch goes after the top
    push.push(wt)
    p3 = b"--- a/mod.py\n+++ b/mod.py\n@@ -2 +2 @@\n-    return 1\n+    return 10\n"
    importing.import_patches(wt, [ImportItem("01b.patch", p3)])
    assert wt.series() == ["01.patch", "01b.patch", "02.patch"]
    (q / ".imgquilt/work/etc/svc.conf").write_bytes(CONF_8 + b"# local\n")  # not refreshed: import sees it
    p4 = b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -4 +4 @@\n-# local\n+# LOCAL\n"
    importing.import_patches(wt, [ImportItem("01c.patch", p4)])
    assert parse_patch((q / "patches/01c.patch").read_bytes()).sections[0].base_sha256 == sha256_hex(CONF_8 + b"# local\n")


def test_import_refuses_name_clashes_unless_forced_and_never_an_applied_patch(setup) -> None:
    q, image, wt = setup
    p1 = b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -2 +2 @@\n-workers = 2\n+workers = 8\n"
    importing.import_patches(wt, [ImportItem("01.patch", p1)])
    with pytest.raises(UsageError, match="already exists"):
        importing.import_patches(wt, [ImportItem("01.patch", p1)])
    again = p1.replace(b"workers = 8", b"workers = 4")
    importing.import_patches(wt, [ImportItem("01.patch", again)], replace=True)
    assert wt.series() == ["01.patch"]
    assert parse_patch((q / "patches/01.patch").read_bytes()).sections[0].patched_sha256 == sha256_hex(CONF.replace(b"2", b"4"))
    push.push(wt)
    with pytest.raises(UsageError, match="applied"):
        importing.import_patches(wt, [ImportItem("01.patch", p1)], replace=True)
    with pytest.raises(BadInput, match="changes nothing"):
        importing.import_patches(wt, [ImportItem("noop.patch", b"diff --git a/mod.py b/mod.py\n")])


def test_nothing_is_written_when_one_patch_of_a_series_fails(setup) -> None:
    q, image, wt = setup
    good = b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -2 +2 @@\n-workers = 2\n+workers = 8\n"
    bad = b"--- a/mod.py\n+++ b/mod.py\n@@ -1 +1 @@\n-def nope():\n+def f():\n"
    with pytest.raises(HunkMismatch):
        importing.import_patches(wt, [ImportItem("01.patch", good), ImportItem("02.patch", bad)])
    assert (q / "series").read_text() == "# ours\n"
    assert not (q / "patches").exists() or os.listdir(q / "patches") == []


def test_append_and_prepend_hunks_and_pin_dialects() -> None:
    body = b"+X = 1\n"
    for pin in (b"base sha256 ", b"BASE SHA256: ", b"Base-SHA256: ", b"# base-sha256 "):
        data = pin + sha256_hex(PY).encode() + b"\n--- a/mod.py\n+++ b/mod.py\n@@ append: the knob @@\n" + body + b"@@ prepend @@\n+# head\n"
        (c,), _ = apply_foreign(parse_foreign(data, "a.diff"), 1, files({"mod.py": PY})).changes, None
        assert c.result == b"# head\n" + PY + b"X = 1\n" and c.hunks is None  # anchors: re-diffed
    with pytest.raises(HunkMismatch, match="does not end with a newline"):
        convert(b"--- a/t\n+++ b/t\n@@ append @@\n+y\n", {"t": b"x = 1"})
    # the imgquilt format itself never holds them
    with pytest.raises(MalformedPatch, match="append/prepend"):
        make = f"Index: t\nBase-SHA256: {sha256_hex(b'x')}\nPatched-SHA256: {sha256_hex(b'xy')}\n--- a/t\n+++ b/t\n@@ append @@\n+y\n"
        parse_patch(make.encode())


def test_an_imgquilt_patch_in_git_form_imports_with_its_exact_mode_bits() -> None:
    """An imgquilt patch writes a new executable file with `Mode:` (the exact bits) and git's `new file
    mode 100755`: import takes `Mode:` when both say executable (or both not), git's line otherwise."""
    tool = b"#!/bin/sh\n"
    for field, git_mode, want in (("0750", "100755", 0o750), ("0755", "100755", 0o755), ("0600", "100644", 0o600),
                                  ("0644", "100755", 0o755)):
        patch = (f"Index: usr/bin/tool\nBase-SHA256: absent\nPatched-SHA256: {sha256_hex(tool)}\nMode: {field}\n"
                 f"diff --git a/usr/bin/tool b/usr/bin/tool\nnew file mode {git_mode}\n"
                 "--- /dev/null\n+++ b/usr/bin/tool\n@@ -0,0 +1 @@\n+#!/bin/sh\n").encode()
        changes, _ = convert(patch, {})
        assert changes["usr/bin/tool"][2] == want, (field, git_mode)


def test_a_deletion_carries_the_mode_of_the_file_here() -> None:
    """The writer says `deleted file mode` with the mode the file has where it is imported, not the
    one the diff claims (git apply warns on one that is not the file's)."""
    old = b"#!/bin/sh\n"
    patch = b"diff --git a/usr/bin/tool b/usr/bin/tool\ndeleted file mode 100644\n--- a/usr/bin/tool\n+++ /dev/null\n@@ -1 +0,0 @@\n-#!/bin/sh\n"
    conv = apply_foreign(parse_foreign(patch, "t.patch"), 1, lambda path, _follow: Base(old if path == "usr/bin/tool" else None, 0o755))
    assert [(c.path, c.result, c.deleted_mode) for c in conv.changes] == [("usr/bin/tool", None, 0o755)]
