"""The sections only git's extended headers can say: `git apply` and GNU `patch -p1` give imgquilt's tree.

A plain `---`/`+++` diff cannot say that a new file is executable (`Mode:` is imgquilt's own field,
both tools ignore it), that an empty file is created or deleted (no hunk: both tools skip the
section), or that the file a deletion removes was executable (git apply warns on a `deleted file
mode` that is not the file's). imgquilt writes these sections with `diff --git` and git's mode lines
(docs/patch-format.md, "git's extended headers"); these tests make them through the real workflows
(a quilt session: init, new, add, edit, refresh; an import of `git diff`), apply the patch with both
tools on copies of the base tree, and compare each tree with `imgquilt apply --root`'s, bytes and
executable bits.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from imgquilt.queue.patchfile import parse_patch
from support.qtools import imgquilt

# the base tree: an ordinary file, an empty one and an executable one (to delete), with their modes
BASE: dict[str, tuple[bytes, int]] = {
    "etc/app.conf": (b"[app]\nworkers = 2\n", 0o644),
    "etc/app.d/old-empty.conf": (b"", 0o644),
    "usr/bin/old-tool": (b"#!/bin/sh\necho old tool\n", 0o755),
    "usr/bin/keep": (b"#!/bin/sh\nexec true\n", 0o755),
    "usr/sbin/spare-tool": (b"#!/bin/sh\nexec false\n", 0o755),
}
NEW_TOOL = b"#!/bin/sh\necho new tool\n"

# case -> (paths `add --new` names, paths `add` names, what the work tree gets: path -> (bytes, mode) or None)
CASES: dict[str, tuple[list[str], list[str], dict[str, tuple[bytes, int] | None]]] = {
    "new-executable": (["usr/bin/new-tool"], [], {"usr/bin/new-tool": (NEW_TOOL, 0o755)}),
    "new-empty": (["etc/app.d/new-empty.conf"], [], {"etc/app.d/new-empty.conf": (b"", 0o644)}),
    "deleted-empty": ([], ["etc/app.d/old-empty.conf"], {"etc/app.d/old-empty.conf": None}),
    # after a mode change alone (a section of git headers with no diff) a plain deletion gets a `diff
    # --git` line and `deleted file mode` in front of it (GNU patch would take its hunk for the file
    # before): that mode must be the deleted file's
    "deleted-executable": ([], ["usr/bin/keep", "usr/bin/old-tool"],
                           {"usr/bin/keep": (BASE["usr/bin/keep"][0], 0o644), "usr/bin/old-tool": None}),
}
# all four in one patch, with an ordinary edit between them (GNU patch must not take that diff for
# an empty file's, whose section has no hunk)
CASES["all"] = (
    [p for c in CASES.values() for p in c[0]],
    ["etc/app.conf"] + [p for c in CASES.values() for p in c[1]],
    {"etc/app.conf": (b"[app]\nworkers = 8\n", 0o644), **{p: w for c in CASES.values() for p, w in c[2].items()}},
)
# the git lines each case's section must carry
GIT_LINES = {
    "usr/bin/new-tool": b"new file mode 100755\n",
    "etc/app.d/new-empty.conf": b"new file mode 100644\n",
    "etc/app.d/old-empty.conf": b"deleted file mode 100644\n",
    "usr/bin/old-tool": b"deleted file mode 100755\n",
}


def make_base(root: Path) -> Path:
    for rel, (data, mode) in BASE.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.chmod(p, mode)
    return root


def tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every regular file below root: its bytes and whether it is executable (git's notion of a mode)."""
    out: dict[str, tuple[bytes, bool]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if rel == "var/lib/imgquilt/applied.json":  # imgquilt's apply record
                continue
            st = p.lstat()
            assert stat.S_ISREG(st.st_mode), rel
            out[rel] = (p.read_bytes(), bool(st.st_mode & 0o111))
    return out


def tools_trees(patch_files: list[Path], base: Path, tmp: Path) -> dict[str, dict[str, tuple[bytes, bool]]]:
    """The trees `git apply` and GNU `patch -p1` make of a copy of `base` each, applying the patch files
    in order (each run must succeed, with no warning and nothing reversed)."""
    out = {}
    git_tree = tmp / "by-git-apply"
    shutil.copytree(base, git_tree, symlinks=True)
    for patch_file in patch_files:
        r = subprocess.run(["git", "apply", "--verbose", str(patch_file)], cwd=git_tree, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "warning" not in r.stderr, r.stderr  # e.g. "has type 100755, expected 100644"
    out["git apply"] = tree(git_tree)
    gnu_tree = tmp / "by-patch"
    shutil.copytree(base, gnu_tree, symlinks=True)
    for patch_file in patch_files:
        r = subprocess.run(["patch", "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch_file)],
                           cwd=gnu_tree, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Assuming -R" not in r.stdout and "Reversed" not in r.stdout, r.stdout
    out["patch -p1"] = tree(gnu_tree)
    return out


def imgquilt_tree(queue: Path, base: Path, tmp: Path, env: dict) -> dict[str, tuple[bytes, bool]]:
    applied = tmp / "by-imgquilt"
    shutil.copytree(base, applied, symlinks=True)
    imgquilt("apply", "--root", str(applied), cwd=queue, env=env, check=0)
    return tree(applied)


def expected(changes: dict[str, tuple[bytes, int] | None]) -> dict[str, tuple[bytes, bool]]:
    want = {rel: (data, bool(mode & 0o111)) for rel, (data, mode) in BASE.items()}
    for rel, change in changes.items():
        if change is None:
            want.pop(rel)
        else:
            want[rel] = (change[0], bool(change[1] & 0o111))
    return want


@pytest.mark.parametrize("case", list(CASES))
def test_refreshed_sections_apply_with_git_apply_and_patch_as_imgquilt_applies_them(case: str, tmp_path: Path, cli_env) -> None:
    new, existing, changes = CASES[case]
    base = make_base(tmp_path / "rootfs")
    q = tmp_path / "queue"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    imgquilt("new", "0001-modes.patch", "-d", f"git-form sections: {case}", cwd=q, env=cli_env, check=0)
    if new:
        imgquilt("add", "--new", *new, "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    if existing:
        imgquilt("add", *existing, "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    work = q / ".imgquilt/work"
    for rel, change in changes.items():
        p = work / rel
        if change is None:
            p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(change[0])
        os.chmod(p, change[1])
    r = imgquilt("refresh", cwd=q, env=cli_env, check=0)
    assert "Refreshed patch 0001-modes.patch" in r.out
    patch_file = q / "patches/0001-modes.patch"
    mine = imgquilt_tree(q, base, tmp_path, cli_env)
    assert mine == expected(changes)
    for tool, got in tools_trees([patch_file], base, tmp_path).items():
        assert got == mine, f"{tool} made another tree than imgquilt apply --root"

    raw = patch_file.read_bytes()
    parsed = parse_patch(raw, "0001-modes.patch")
    assert {s.path for s in parsed.sections} == set(changes)
    for s in parsed.sections:
        if s.path in GIT_LINES:
            assert GIT_LINES[s.path] in s.raw and s.raw.count(b"diff --git ") == 1, s.raw
    if "usr/bin/new-tool" in changes:  # `Mode:` stays: it says the exact bits
        assert b"Mode: 0755\ndiff --git a/usr/bin/new-tool b/usr/bin/new-tool\nnew file mode 100755\n" in raw
    if "etc/app.conf" in changes:  # an ordinary edit keeps its plain diff (a `diff --git` line in front of it
        conf = next(s for s in parsed.sections if s.path == "etc/app.conf")  # when it follows a section with no hunk)
        assert b" mode " not in conf.raw and b"\nindex " not in conf.raw


def _git(*args: str, cwd: Path) -> bytes:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
           "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.org", "HOME": str(cwd)}
    r = subprocess.run(["git", "-c", "core.autocrlf=false", "-c", "core.fileMode=true", *args], cwd=cwd, env=env, capture_output=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_imported_git_diff_writes_the_git_form_with_the_modes_of_the_files_here(tmp_path: Path, cli_env) -> None:
    """`import` of a `git diff` holding the four cases writes them in git's form too; a plain `diff -u`
    deletion of an executable file is written with `deleted file mode 100755` (the mode the image has)."""
    new, existing, changes = CASES["all"]
    base = make_base(tmp_path / "rootfs")
    repo = make_base(tmp_path / "repo")
    _git("init", "-q", ".", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "base", cwd=repo)
    for rel, change in changes.items():
        p = repo / rel
        if change is None:
            p.unlink()
            continue
        p.write_bytes(change[0])
        os.chmod(p, change[1])
    _git("add", "-A", cwd=repo)
    diff = _git("diff", "--cached", "--no-color", cwd=repo)
    assert b"new file mode 100755" in diff and b"deleted file mode 100755" in diff  # what git itself writes
    foreign = tmp_path / "modes.diff"
    foreign.write_bytes(diff)
    plain = tmp_path / "drop-tool.diff"  # GNU diff's form: no modes at all
    plain.write_bytes(b"--- a/usr/sbin/spare-tool\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-#!/bin/sh\n-exec false\n")
    q = tmp_path / "queue"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    imgquilt("import", str(foreign), "-P", "0001-modes.patch", "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    imgquilt("import", str(plain), "-P", "0002-drop-spare.patch", "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    mine = imgquilt_tree(q, base, tmp_path, cli_env)
    want = expected(changes)
    want.pop("usr/sbin/spare-tool")
    assert mine == want
    for tool, got in tools_trees([q / "patches/0001-modes.patch", q / "patches/0002-drop-spare.patch"], base, tmp_path).items():
        assert got == mine, f"{tool} made another tree than imgquilt apply --root"

    one = (q / "patches/0001-modes.patch").read_bytes()
    for line in GIT_LINES.values():
        assert line in one
    two = (q / "patches/0002-drop-spare.patch").read_bytes()
    assert b"diff --git a/usr/sbin/spare-tool b/usr/sbin/spare-tool\ndeleted file mode 100755\n" in two


def test_a_binary_executable_file_deleted_applies_with_git_apply_without_a_warning(tmp_path: Path) -> None:
    """GNU patch applies no binary patch; git apply warns when `deleted file mode` is not the file's."""
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    blob = b"\x7fELF\x00\x01\x02 not text\n"
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool.bin").write_bytes(blob)
    os.chmod(root / "usr/bin/tool.bin", 0o755)
    patch = tmp_path / "drop.patch"
    patch.write_bytes(build_patch("drop.patch", Header(b""), [make_section("usr/bin/tool.bin", blob, None, deleted_mode=0o755)]).raw)
    r = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert not (root / "usr/bin/tool.bin").exists()



def test_a_plain_deletion_written_before_gets_its_files_mode_when_a_refresh_puts_git_headers_before_it(
        tmp_path: Path, cli_env) -> None:
    """A patch written before git's form: an edit, then a plain deletion of an executable file. The edit
    becomes a mode change alone (git headers, no diff); refresh keeps the deletion's bytes, and the
    `diff --git` and `deleted file mode` build_patch puts in front of it (GNU patch would read its diff
    as the file before's) say the file's real mode: git apply warns on a 100644 there."""
    from imgquilt.queue.patchfile import render_section

    base = make_base(tmp_path / "rootfs")
    q = tmp_path / "queue"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    conf, _ = BASE["etc/app.conf"]
    drop = render_section("usr/bin/old-tool", BASE["usr/bin/old-tool"][0], None)  # the plain form written before
    assert b"diff --git" not in drop
    (q / "patches/0001-drop.patch").write_bytes(b"Description: drop the old tool\n\n" +
                                                 render_section("etc/app.conf", conf, conf + b"# more\n") + drop)
    (q / "series").write_text("0001-drop.patch\n")
    imgquilt("push", "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    work = q / ".imgquilt/work"
    (work / "etc/app.conf").write_bytes(conf)
    os.chmod(work / "etc/app.conf", 0o755)
    imgquilt("refresh", cwd=q, env=cli_env, check=0)
    patch_file = q / "patches/0001-drop.patch"
    raw = patch_file.read_bytes()
    assert b"diff --git a/etc/app.conf b/etc/app.conf\nold mode 100644\nnew mode 100755\nIndex: usr/bin/old-tool\n" in raw
    assert b"diff --git a/usr/bin/old-tool b/usr/bin/old-tool\ndeleted file mode 100755\n--- a/usr/bin/old-tool\n" in raw
    mine = imgquilt_tree(q, base, tmp_path, cli_env)
    assert mine["etc/app.conf"] == (conf, True) and "usr/bin/old-tool" not in mine
    for tool, got in tools_trees([patch_file], base, tmp_path).items():
        assert got == mine, f"{tool} made another tree than imgquilt apply --root"
