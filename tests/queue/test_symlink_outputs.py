"""Symlinks through patches, end to end: a git diff (made by real git) creates, retargets and deletes
links, beside a mode change and an edit; imported, locked on a real image (built with umoci), and
written as a layer, an image (`umoci unpack` shows real links), in place (the same tree), never as an
overlay (a bind mount cannot place a link); audit calls it live; a link where a file is expected, or
the reverse, is drift (exit 3); rebase carries the link sections onto a new image and stops on a link
retargeted upstream.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.imagetools import build_oci, dir_, file, run, symlink
from imgquilt.queue.patchfile import parse_patch
from support.qtools import imgquilt
from support.import_git import git
from support.import_trees import tree_state

pytestmark = pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci is needed")

TOOL = "#!/usr/bin/env python3\nprint('v1')\n"
BASE = [dir_("etc"), dir_("etc/app"), dir_("etc/app/v1"), dir_("etc/app/v2"), file("etc/app/v1/conf", "one\n"),
        file("etc/app/v2/conf", "two\n"), symlink("etc/app/current", "v1"), symlink("etc/old-link", "/etc/app/v1/conf"),
        dir_("usr"), dir_("usr/lib"), dir_("usr/lib/tool"), file("usr/lib/tool/tool.py", TOOL), dir_("usr/bin"),
        symlink("usr/bin/tool", "../lib/tool/tool.py")]
WANT = {"etc/app/current": ("link", "v2"), "usr/bin/tool2": ("link", "tool"), "usr/bin/tool": ("link", "../lib/tool/tool.py"),
        "usr/lib/tool/tool.py": ("file", TOOL.replace("v1", "v2").encode(), True),
        "etc/app/v1/conf": ("file", b"one\n", False), "etc/app/v2/conf": ("file", b"two\n", False)}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The base image, its unpacked rootfs, and a queue holding the link patch (imported and locked)."""
    tmp = tmp_path_factory.mktemp("links")
    layout = tmp / "layout"
    build_oci(layout, [BASE])
    run("umoci", "unpack", "--rootless", "--image", f"{layout}:latest", tmp / "base-bundle")
    rootfs = tmp / "base-bundle/rootfs"
    # the change, made by git on a copy of the tree: retarget, create, delete links; a mode change; an edit
    repo = tmp / "repo"
    shutil.copytree(rootfs, repo, symlinks=True)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    os.remove(repo / "etc/app/current")
    os.symlink("v2", repo / "etc/app/current")
    os.symlink("tool", repo / "usr/bin/tool2")
    os.remove(repo / "etc/old-link")
    (repo / "usr/lib/tool/tool.py").write_text(TOOL.replace("v1", "v2"))
    os.chmod(repo / "usr/lib/tool/tool.py", 0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links: current -> v2, tool2, no old-link; tool.py executable")
    (tmp / "links.patch").write_text(git(repo, "format-patch", "--stdout", "-1"))
    q = tmp / "queue"
    q.mkdir()
    (q / "series").write_text("")
    imgquilt("import", str(tmp / "links.patch"), "-P", "0001-links.patch", "--image", f"oci:{layout}:latest", cwd=q, check=0)
    imgquilt("lock", "--image", f"oci:{layout}:latest", cwd=q, check=0)
    return {"tmp": tmp, "layout": layout, "rootfs": rootfs, "queue": q}


def test_the_imported_patch_holds_symlink_sections_both_tools_apply(world) -> None:
    q, rootfs = world["queue"], world["rootfs"]
    p = parse_patch((q / "patches/0001-links.patch").read_bytes())
    kinds = {s.path: (s.link, s.is_new, s.is_delete, s.mode_change) for s in p.sections}
    assert kinds == {"etc/app/current": (True, False, False, None), "etc/old-link": (True, False, True, None),
                     "usr/bin/tool2": (True, True, False, None), "usr/lib/tool/tool.py": (False, False, False, (0o644, 0o755))}
    lock = (q / "targets.lock").read_text()
    assert lock.count('kind = "symlink"') == 3
    for tool in (["git", "apply"], ["patch", "-p1", "--batch", "-F0", "-i"]):
        t = shutil.copytree(rootfs, world["tmp"] / f"by-{tool[0]}", symlinks=True)
        subprocess.run([*tool, str(q / "patches/0001-links.patch")], cwd=t, check=True, capture_output=True,
                       env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(world["tmp"])))
        got = tree_state(t)
        assert {k: got.get(k) for k in WANT} == WANT and "etc/old-link" not in got, tool[0]


def test_layer_image_and_root_hold_real_symlinks(world) -> None:
    tmp, q, layout = world["tmp"], world["queue"], world["layout"]
    doc = json.loads(imgquilt("--json", "apply", "--layer", str(tmp / "out.tar"), cwd=q, check=0).out)
    assert {f["path"] for f in doc["files"] if f.get("kind") == "symlink"} == {"etc/app/current", "usr/bin/tool2"}
    with tarfile.open(tmp / "out.tar") as t:
        members = {m.name: m for m in t.getmembers()}
    assert members["etc/app/current"].issym() and members["etc/app/current"].linkname == "v2"
    assert members["usr/bin/tool2"].issym() and members["usr/bin/tool2"].linkname == "tool"
    assert "etc/.wh.old-link" in members
    assert members["usr/lib/tool/tool.py"].mode & 0o777 == 0o755
    # an image: umoci unpacks real links
    imgquilt("apply", "--output-image", f"oci:{tmp / 'out-layout'}:patched", cwd=q, check=0)
    run("umoci", "unpack", "--rootless", "--image", f"{tmp / 'out-layout'}:patched", tmp / "out-bundle")
    unpacked = tree_state(tmp / "out-bundle/rootfs")
    assert {k: unpacked.get(k) for k in WANT} == WANT and "etc/old-link" not in unpacked
    # zstd: the frame's content size is the tar's (a link's target is in its header, not a body)
    imgquilt("apply", "--output-image", f"oci:{tmp / 'out-zstd'}:patched", "--compression", "zstd", cwd=q, check=0)
    doc = json.loads(imgquilt("--json", "audit", "--image", f"oci:{tmp / 'out-zstd'}:patched", cwd=q, check=0).out)
    assert [p["state"] for p in doc["patches"]] == ["live"]
    # in place, onto the unpacked base: the same tree, real links
    root = shutil.copytree(world["rootfs"], tmp / "inplace", symlinks=True)
    imgquilt("apply", "--root", str(root), cwd=q, check=0)
    assert os.path.islink(root / "etc/app/current") and os.readlink(root / "etc/app/current") == "v2"
    assert tree_state(root) == unpacked
    # applied again: nothing to change
    r = imgquilt("apply", "--root", str(root), cwd=q, check=0)
    assert "already" in (r.out + r.err)
    # audit: live in the image and in the root
    for ref in (f"oci:{tmp / 'out-layout'}:patched", f"rootfs:{root}"):
        doc = json.loads(imgquilt("--json", "audit", "--image", ref, cwd=q, check=0).out)
        assert [p["state"] for p in doc["patches"]] == ["live"], ref
    doc = json.loads(imgquilt("--json", "audit", "--image", f"oci:{layout}:latest", "--expect", "pending", cwd=q, check=0).out)
    assert [p["state"] for p in doc["patches"]] == ["pending"]


def test_an_overlay_cannot_place_a_link_and_says_so(world) -> None:
    tmp, q = world["tmp"], world["queue"]
    r = imgquilt("apply", "--overlay", str(tmp / "ov"), cwd=q, check=2)
    assert "a bind mount cannot put a symlink in place" in r.err and "--layer" in r.err.splitlines()[-1]
    assert not (tmp / "ov").exists()


def test_a_file_where_a_link_is_expected_is_drift(world) -> None:
    tmp, q = world["tmp"], world["queue"]
    root = shutil.copytree(world["rootfs"], tmp / "drift", symlinks=True)
    os.remove(root / "etc/app/current")
    (root / "etc/app/current").write_text("v1")  # the link's bytes, as a regular file
    before = tree_state(root)
    r = imgquilt("apply", "--root", str(root), "--image", f"rootfs:{root}", cwd=q, check=3)
    assert "the patch changes a symlink, but the file here is a regular file" in r.err
    assert "another kind of file" in r.err.splitlines()[-1]
    assert tree_state(root) == before
    doc = json.loads(imgquilt("--json", "audit", "--image", f"rootfs:{root}", cwd=q, check=5).out)
    (f,) = [f for p in doc["patches"] for f in p["files"] if f["path"] == "etc/app/current"]
    assert f["state"] == "drifted"


def test_rebase_carries_links_and_stops_on_one_retargeted_upstream(world, tmp_path: Path) -> None:
    q = shutil.copytree(world["queue"], tmp_path / "q", symlinks=True)
    old = world["rootfs"]
    new = shutil.copytree(old, tmp_path / "new", symlinks=True)
    (new / "etc/app/v2/conf").write_text("two, updated\n")  # upstream changed something else
    # what upstream changed under the patch: its links read as links on both images (`current` leads to a directory)
    r = imgquilt("--json", "diff", "--upstream", "0001-links.patch", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}",
                 cwd=q, check=0)
    assert json.loads(r.out)["patch"] == "0001-links.patch"
    imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, check=0)
    out = shutil.copytree(new, tmp_path / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert os.readlink(out / "etc/app/current") == "v2" and os.readlink(out / "usr/bin/tool2") == "tool"
    newer = shutil.copytree(new, tmp_path / "newer", symlinks=True)
    os.remove(newer / "etc/app/current")
    os.symlink("v3", newer / "etc/app/current")
    r = imgquilt("rebase", "--image", f"rootfs:{newer}", cwd=q, check=4)
    assert "symlink retargeted upstream" in r.err
    imgquilt("rebase", "--abort", cwd=q, check=0)


def test_one_patch_reaching_one_file_by_two_names_is_refused(tmp_path: Path) -> None:
    """A hand-written patch whose two sections name one file (`etc/x` and `conf/x`, `conf -> etc`):
    which one wins is anyone's guess, so apply refuses it (exit 6) before writing anything."""
    from support.qtools import empty_queue, write_patch

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/x").write_bytes(b"one\n")
    os.symlink("etc", root / "conf")
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-twice.patch", [("etc/x", b"one\n", b"two\n"), ("conf/x", b"one\n", b"three\n")])
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--root", str(root), cwd=q, check=6)
    assert "0001-twice.patch: conf/x (resolved: etc/x): the same file as its section etc/x" in r.err
    assert "keep one section per file" in r.err
    assert (root / "etc/x").read_bytes() == b"one\n"
