"""Real patches from public test suites, imported and applied, against what `git apply` and GNU `patch` do.

The inputs are vendored under tests/data/field-patches/ (README.md there names their origin and
license): git's t4135 (whitespace-damaged names, timestamps after spaces, zones with a colon), GNU
patch's symlink tests, python-unidiff's samples. Each case starts from the same tree for every tool;
imgquilt must leave the tree the reference tool leaves (contents, exec bits, symlinks), or refuse with
exit 3 or 6 and a hint line where the reference tool refuses too (or where imgquilt's rule is stricter,
as for a path the patch reaches through a link it creates).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imgquilt.importer import parse_foreign, strip_path
from support.qtools import imgquilt
from support.import_trees import LINK, make_tree, refused_with_hint, tree_state

DATA = Path(__file__).parents[1] / "data/field-patches"


def preimage(data: bytes, strip: int) -> dict[str, bytes]:
    """Old files a diff applies to: each hunk's old lines at the line its header names, filler between."""
    out: dict[str, bytes] = {}
    for f in parse_foreign(data, "p").files:
        if f.old_absent or f.old_name is None or not f.hunks:
            continue
        lines: list[bytes] = []
        for h in f.hunks:
            start = h.old_start - 1 if h.old_len else h.old_start
            while len(lines) < start:
                lines.append(b"filler %d\n" % len(lines))
            lines += h.old_lines
        name = f.moved_names[0] if f.moved_names else strip_path(f.old_name, strip)
        out[name] = b"".join(lines)
    return out


def run_reference(tool: str, patch: Path, strip: int, tree: Path) -> int:
    cmd = {"git": ["git", "apply", f"-p{strip}"], "patch": ["patch", f"-p{strip}", "--batch", "-F0", "-i"],
           "patch-follow": ["patch", f"-p{strip}", "--batch", "-F0", "--follow-symlinks", "-i"],
           "patch-force": ["patch", f"-p{strip}", "-f", "-F0", "-i"]}[tool]
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    return subprocess.run([*cmd, str(patch)], cwd=tree, capture_output=True, env=env).returncode


def import_and_apply(tmp: Path, base: Path, patch: Path, strip: int, extra: list[str] = ()):
    """imgquilt import onto the tree, then apply --root onto a copy: (the import's run, the copy or None)."""
    q = tmp / "queue"
    q.mkdir()
    (q / "series").write_text("")
    r = imgquilt("import", str(patch), "-P", "x.patch", f"-p{strip}", *extra, "--image", f"rootfs:{base}", cwd=q)
    if r.code:
        return r, None
    out = tmp / "imgquilt-tree"
    shutil.copytree(base, out, symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    # what imgquilt wrote must still read with both tools (the section forms they share)
    return r, out


SYM = {"f": "one\n", "l": (LINK, "f")}
IGN = ["--ignore-git-index"]
CASES = [
    # (id, patch file, -p, starting tree, reference tools, imgquilt's extra args, "same" or the refusal codes)
    ("t4135-damaged", "git-t4135/damaged.diff", 1, {}, ["git"], [], "same"),
    ("t4135-damaged-tz", "git-t4135/damaged-tz.diff", 1, {}, ["git"], [], "same"),
    ("t4135-funny-tz", "git-t4135/funny-tz.diff", 1, {}, ["git"], [], "same"),
    ("t4135-git-plain", "git-t4135/git-plain.diff", 1, {}, ["git", "patch"], [], "same"),
    ("t4135-git-spaces", "git-t4135/git-with spaces.diff", 1, {}, ["git"], [], "same"),
    ("t4135-diff-plain", "git-t4135/diff-plain.diff", 0, {"postimage.txt": "preimage\n"}, ["git", "patch"], [], "same"),
    ("t4135-diff-spaces", "git-t4135/diff-with spaces.diff", 0, {"post image.txt": "preimage\n"}, ["git"], [], "same"),
    ("t4135-add-plain", "git-t4135/add-plain.diff", 1, {}, ["git", "patch"], [], "same"),
    ("t4135-add-spaces", "git-t4135/add-with spaces.diff", 1, {}, ["git"], [], "same"),
    ("gnu-create-onto-symlink", "gnu-patch-symlinks/create.diff", 0, SYM, ["patch"], [], (3,)),
    ("gnu-modify-symlink-as-file", "gnu-patch-symlinks/modify.diff", 0, SYM, ["patch"], [], (3,)),
    # --through-links patches the file the link leads to (GNU's --follow-symlinks would put a regular file in the link's place)
    ("gnu-modify-through-links", "gnu-patch-symlinks/modify.diff", 0, SYM, [], ["--through-links"],
     {"f": ("file", b"two\n", False), "l": ("link", "f")}),
    ("gnu-delete-symlink-as-file", "gnu-patch-symlinks/delete.diff", 0, SYM, ["patch"], [], (3,)),
    # GNU patch's and python-unidiff's hand-made git diffs carry made-up blob ids (cad2309 for every link): git
    # apply ignores them for text; imgquilt checks them (test_made_up_blob_ids_...), so these run with the flag
    ("gnu-create-symlink", "gnu-patch-symlinks/create-symlink.diff", 1, {}, ["patch", "git"], [], "same"),
    ("gnu-modify-symlink", "gnu-patch-symlinks/modify-symlink.diff", 1, {"symlink": (LINK, "target1")}, ["patch", "git"], [], "same"),
    ("gnu-delete-symlink", "gnu-patch-symlinks/delete-symlink.diff", 1, {"symlink": (LINK, "target2")}, ["patch", "git"], [], "same"),
    ("gnu-modify-symlink-onto-file", "gnu-patch-symlinks/modify-symlink.diff", 1, {"symlink": "target1"}, ["git"], [], (3,)),
    ("gnu-delete-symlink-onto-file", "gnu-patch-symlinks/delete-symlink.diff", 1, {"symlink": "target2"}, ["git"], [], (3,)),
    ("gnu-symlink-target", "gnu-patch-symlinks/symlink-target.diff", 1, {}, ["patch", "git"], IGN, "same"),
    ("gnu-bad-symlink-target1", "gnu-patch-symlinks/bad-symlink-target1.diff", 1, {}, ["patch", "git"], IGN, "same"),
    ("gnu-bad-symlink-target2", "gnu-patch-symlinks/bad-symlink-target2.diff", 1, {}, ["patch", "git"], IGN, "same"),
    ("gnu-follow-symlink", "gnu-patch-symlinks/follow-symlink.diff", 1, {}, ["patch-force"], IGN, (6,)),
    ("gnu-recursive-symlinks", "gnu-patch-symlinks/f.diff", 0, {"l1": (LINK, "l2"), "l2": (LINK, "l1")}, ["patch"], [], (6,)),
    ("gnu-retraverse", "gnu-patch-symlinks/retraverse.diff", 0, {"abc/def/ghi": (LINK, "../../abc/def")}, ["patch"], [], "same"),
    ("gnu-ld", "gnu-patch-symlinks/ld.diff", 0, {"d/f": "one\n", "ld": (LINK, "d")}, ["patch"], [], "same"),
    ("gnu-eld", "gnu-patch-symlinks/eld.diff", 0, {"d/f": "two\n", "ld": (LINK, "d"), "e/ld": (LINK, "../d")}, ["patch"], [], "same"),
    ("gnu-follow-bad-symlink", "gnu-patch-symlinks/follow-bad-symlink.diff", 0,
     {"g/bad-rel": (LINK, "../../z"), "bad-rel-step2": (LINK, ".."), "g/bad-rel-step1": (LINK, "../bad-rel-step2/z"),
      "g/bad-abs": (LINK, "/z")}, ["patch"], [], (6,)),
    ("gnu-filename-choice-new", "gnu-patch-filename-choice/f.diff", 0, {}, ["patch"], [], "same"),
    ("gnu-filename-choice-existing", "gnu-patch-filename-choice/f.diff", 0, {"f": ""}, ["patch"], [], "same"),
    ("unidiff-git-symlink", "unidiff/git_symlink.diff", 1, {}, ["git", "patch"], [], "same"),
    ("unidiff-git", "unidiff/git.diff", 1, None, ["git", "patch"], IGN, "same"),
    ("unidiff-git-rename", "unidiff/git_rename.diff", 1,
     {"added": "Some content\n" * 12, "oldfile": "Some content\n" * 12, "onefile": "x\n", "sub/onefile": "y\n"}, ["git"], IGN, "same"),
    ("unidiff-git-delete", "unidiff/git_delete.diff", 1, None, ["git", "patch"], IGN, "same"),
    ("unidiff-binary-mail", "unidiff/binary.diff", 1, {}, ["git"], [], "same"),
    ("unidiff-spaces", "unidiff/git_filenames_with_spaces.diff", 1, {}, ["git"], IGN, "same"),
    ("unidiff-submodule", "unidiff/git_submodule.diff", 1, {}, [], [], (6,)),
    ("unidiff-quilt", "unidiff/quilt.diff", 1, None, ["patch", "git"], [], "same"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_real_patch_gives_the_reference_tree_or_a_refusal_with_a_hint(tmp_path: Path, case) -> None:
    _id, name, strip, spec, tools, extra, expect = case
    patch = DATA / name
    if spec is None:
        spec = preimage(patch.read_bytes(), strip)
    base = make_tree(tmp_path / "base", spec)
    r, out = import_and_apply(tmp_path, base, patch, strip, extra)
    refs = {}
    for tool in tools:
        t = tmp_path / f"ref-{tool}"
        shutil.copytree(base, t, symlinks=True)
        refs[tool] = (run_reference(tool, patch, strip, t), tree_state(t))
    if isinstance(expect, dict):  # imgquilt's own rule, stated
        assert r.code == 0, r.err
        assert tree_state(out) == expect
    elif expect == "same":
        assert r.code == 0, r.err
        got = tree_state(out)
        for tool, (code, want) in refs.items():
            assert code == 0, f"{tool} refused the patch"
            assert got == want, (tool, got, want)
        assert got != tree_state(base)
    else:
        refused_with_hint(r, expect)
        for tool, (code, want) in refs.items():
            assert code != 0 or want == tree_state(base), f"{tool} applied what imgquilt refused"


def test_made_up_blob_ids_are_refused_with_a_hint_unless_ignored(tmp_path: Path) -> None:
    """A single git patch whose `index` line names another blob than the bytes it gives is refused (exit 3)
    and the hint names --ignore-git-index; the same diff in a quilt series imports, the mismatch recorded."""
    base = make_tree(tmp_path / "base", {})
    r, _ = import_and_apply(tmp_path, base, DATA / "gnu-patch-symlinks/bad-symlink-target1.diff", 1)
    refused_with_hint(r, (3,))
    assert "--ignore-git-index" in r.err and "cad2309" in r.err
    up = tmp_path / "upstream"
    up.mkdir()
    shutil.copy(DATA / "gnu-patch-symlinks/bad-symlink-target1.diff", up / "create-symlink.diff")
    (up / "series").write_text("create-symlink.diff\n")
    q = tmp_path / "q2"
    q.mkdir()
    (q / "series").write_text("")
    r = imgquilt("import", "--series", str(up / "series"), "--image", f"rootfs:{base}", cwd=q, check=0)
    assert "warning: its git `index` lines do not name these bases (bar)" in r.err
    assert b"Git-Index-Ignored: " in (q / "patches/create-symlink.diff").read_bytes()


def test_a_symlink_diff_imports_as_a_symlink_section_both_tools_still_read(tmp_path: Path) -> None:
    """The imgquilt patch written for a git symlink diff keeps git's headers: `patch -p1` and `git apply`
    create, retarget and delete the link from it as from the original."""
    base = make_tree(tmp_path / "base", {"keep/x": "x\n", "old": (LINK, "target1"), "gone": (LINK, "keep/x")})
    diff = (b"diff --git a/new b/new\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n"
            b"+keep/x\n\\ No newline at end of file\n"
            b"diff --git a/old b/old\nindex 2222222..3333333 120000\n--- a/old\n+++ b/old\n@@ -1 +1 @@\n-target1\n"
            b"\\ No newline at end of file\n+target2\n\\ No newline at end of file\n"
            b"diff --git a/gone b/gone\ndeleted file mode 120000\nindex 4444444..0000000\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n"
            b"-keep/x\n\\ No newline at end of file\n")
    (tmp_path / "links.diff").write_bytes(diff)
    r, out = import_and_apply(tmp_path, base, tmp_path / "links.diff", 1, ["--ignore-git-index"])
    assert r.code == 0, r.err
    want = {"keep/x": ("file", b"x\n", False), "new": ("link", "keep/x"), "old": ("link", "target2")}
    assert tree_state(out) == want
    written = tmp_path / "queue/patches/x.patch"
    text = written.read_bytes()
    assert b"new file mode 120000" in text and b"deleted file mode 120000" in text and b" 120000\n" in text
    for tool in ("patch", "git"):
        t = tmp_path / f"again-{tool}"
        shutil.copytree(base, t, symlinks=True)
        assert run_reference(tool, written, 1, t) == 0
        assert tree_state(t) == want, tool
