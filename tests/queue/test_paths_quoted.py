"""File names holding a tab, a newline or a double quote round-trip as `git apply` takes them: import of a
real `git diff` (C-quoted names), the patch imgquilt writes (quoted the same way) applied by `git apply`,
GNU `patch -p1` and imgquilt, and the quilt workflow: add, edit, refresh, pop, push."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from imgquilt.queue.patchfile import parse_patch
from support.qtools import empty_queue, imgquilt

NAMES = {"etc/with\ttab.conf": b"a\n", "etc/with\nnewline.conf": b"b\n", 'etc/with"quote.conf': b"q\n"}
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "core.quotePath=true"]


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _git_diff(tmp: Path) -> bytes:
    repo = _tree(tmp / "repo", NAMES)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "."], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=repo, check=True)
    _tree(repo, {k: v.upper() for k, v in NAMES.items()})
    return subprocess.run([*GIT, "diff"], cwd=repo, check=True, capture_output=True).stdout


def test_quoted_names_import_and_apply_with_git_patch_and_imgquilt(tmp_path: Path) -> None:
    diff = _git_diff(tmp_path)
    assert b'--- "a/etc/with\\ttab.conf"' in diff and b'"a/etc/with\\nnewline.conf"' in diff
    (tmp_path / "names.diff").write_bytes(diff)
    root = _tree(tmp_path / "root", NAMES)
    q = empty_queue(tmp_path / "q")
    imgquilt("import", str(tmp_path / "names.diff"), "--image", f"rootfs:{root}", cwd=q, check=0)
    raw = (q / "patches/names.diff").read_bytes()
    assert {s.path for s in parse_patch(raw).sections} == set(NAMES)
    assert b'Index: "etc/with\\ttab.conf"\n' in raw and b'+++ "b/etc/with\\nnewline.conf"\n' in raw
    want = {k: v.upper() for k, v in NAMES.items()}
    for tool, cmd in (("git", ["git", "apply", "-p1"]), ("patch", ["patch", "-p1", "-s", "-i"])):
        tree = shutil.copytree(root, tmp_path / tool)
        p = subprocess.run([*cmd, str(q / "patches/names.diff")], cwd=tree, capture_output=True, text=True)
        assert p.returncode == 0, (tool, p.stderr)
        assert {k: (tree / k).read_bytes() for k in NAMES} == want, tool
    out = shutil.copytree(root, tmp_path / "out")
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert {k: (out / k).read_bytes() for k in NAMES} == want
    imgquilt("check", cwd=q, check=0)
    r = imgquilt("files", "names.diff", cwd=q, check=0)  # one line each, quoted as git quotes them
    assert set(r.out.splitlines()) == {'"etc/with\\"quote.conf"', '"etc/with\\nnewline.conf"', '"etc/with\\ttab.conf"'}


def test_add_edit_refresh_a_file_with_a_tab_and_a_newline_in_its_name(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root", NAMES)
    q = empty_queue(tmp_path / "q")
    env = dict(os.environ, IMGQUILT_EDITOR="true")
    imgquilt("new", "names.patch", cwd=q, env=env, check=0)
    imgquilt("add", *NAMES, "--image", f"rootfs:{root}", cwd=q, env=env, check=0)
    for rel, data in NAMES.items():
        (q / ".imgquilt/work" / rel).write_bytes(data + b"more\n")
    imgquilt("refresh", cwd=q, env=env, check=0)
    raw = (q / "patches/names.patch").read_bytes()
    assert {s.path for s in parse_patch(raw).sections} == set(NAMES)
    imgquilt("pop", cwd=q, env=env, check=0)
    imgquilt("push", cwd=q, env=env, check=0)
    assert {k: (q / ".imgquilt/work" / k).read_bytes() for k in NAMES} == {k: v + b"more\n" for k, v in NAMES.items()}
    tree = shutil.copytree(root, tmp_path / "git")
    p = subprocess.run(["git", "apply", "-p1", str(q / "patches/names.patch")], cwd=tree, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert {k: (tree / k).read_bytes() for k in NAMES} == {k: v + b"more\n" for k, v in NAMES.items()}


def test_a_name_with_a_space_is_written_with_the_tab_gnu_patch_needs(tmp_path: Path) -> None:
    """A bare name holding a space ends with a tab on the `---`/`+++` lines, as git writes it: without it
    GNU patch reads `etc/with` and finds no file to patch (a new file's and a deletion's too)."""
    spaced = {"etc/with space.conf": b"a\n", "etc/old space.conf": b"o\n"}
    root = _tree(tmp_path / "root", spaced)
    q = empty_queue(tmp_path / "q")
    imgquilt("new", "spaces.patch", cwd=q, check=0)
    imgquilt("add", "--new", *spaced, "etc/new space.conf", "--image", f"rootfs:{root}", cwd=q, check=0)
    work = q / ".imgquilt/work"
    (work / "etc/with space.conf").write_bytes(b"b\n")
    (work / "etc/old space.conf").unlink()
    (work / "etc/new space.conf").write_bytes(b"n\n")
    imgquilt("refresh", cwd=q, check=0)
    raw = (q / "patches/spaces.patch").read_bytes()
    assert b"--- a/etc/with space.conf\t\n+++ b/etc/with space.conf\t\n" in raw
    assert b"--- /dev/null\n+++ b/etc/new space.conf\t\n" in raw and b"--- a/etc/old space.conf\t\n+++ /dev/null\n" in raw
    assert {s.path for s in parse_patch(raw).sections} == {*spaced, "etc/new space.conf"}
    want = {"etc/with space.conf": b"b\n", "etc/new space.conf": b"n\n"}
    for tool, cmd in (("git", ["git", "apply", "-p1"]), ("patch", ["patch", "-p1", "-s", "-i"])):
        tree = shutil.copytree(root, tmp_path / tool)
        p = subprocess.run([*cmd, str(q / "patches/spaces.patch")], cwd=tree, capture_output=True, text=True)
        assert p.returncode == 0, (tool, p.stdout, p.stderr)
        assert {k: (tree / k).read_bytes() for k in want} == want and not (tree / "etc/old space.conf").exists(), tool
    out = shutil.copytree(root, tmp_path / "out")
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert {k: (out / k).read_bytes() for k in want} == want and not (out / "etc/old space.conf").exists()
    imgquilt("pop", cwd=q, check=0)
    imgquilt("push", cwd=q, check=0)
    imgquilt("check", cwd=q, check=0)
