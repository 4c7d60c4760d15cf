"""`refresh --rehash`: the one way back from a hand edit, on a three-patch chain over one file.

Each test starts from a fresh clone's point of view (no .imgquilt/): the bases come from the image
targets.lock pins. The chain's results are checked against GNU `patch -p1 -F0`, which applies the
rewritten patches exactly where their headers say.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from imgquilt.queue.hunks import sha256_hex
from support.qtools import imgquilt, tree_hash, write_patch
from support.rehash_queue import BASE, MOD, NAMES, P1, P3, chain, hand_edit


@pytest.fixture
def world(tmp_path: Path, cli_env):
    image = tmp_path / "image"
    q = chain(image, tmp_path / "q")
    (image / "etc").mkdir()
    (image / "etc/app.conf").write_bytes(b"workers = 2\n")
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, env=cli_env, check=0)
    shutil.rmtree(q / ".imgquilt")  # a fresh clone: nothing but series, patches/ and targets.lock
    return tmp_path, image, q, cli_env


def queue_files(q: Path) -> dict[str, bytes]:
    return {str(p.relative_to(q)): p.read_bytes() for p in sorted([q / "series", q / "targets.lock", *(q / "patches").iterdir()])}


def patched_by_gnu_patch(tmp: Path, image: Path, q: Path) -> bytes:
    work = tmp / "gnu"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(image, work)
    for name in NAMES:
        subprocess.run(["patch", "-p1", "-F0", "--quiet", "-i", str(q / "patches" / name)], cwd=work, check=True)
    return (work / MOD).read_bytes()


def test_a_hand_edit_of_the_first_patch_re_chains_the_others_and_the_queue_applies(world) -> None:
    tmp, image, q, env = world
    # the hand edit adds a line: 01's @@ counts go wrong and 02's and 03's lines move down by one
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # one\n+EXTRA = 0\n")
    r = imgquilt("check", cwd=q, env=env, check=6)
    assert "`imgquilt refresh --rehash 01-one.patch`" in r.err
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=0)
    assert "hunk headers recounted" in r.err and "moved 1 line(s) down" in r.err
    assert "Re-chained 02-two.patch" in r.out and "Re-chained 03-three.patch" in r.out and "Wrote " in r.out
    want = P3.replace(b"LINE_03 = 3  # one\n", b"LINE_03 = 3  # one\nEXTRA = 0\n")
    imgquilt("check", cwd=q, env=env, check=0)
    # the rewritten patches apply with GNU patch, no fuzz, no offset: the headers name the real lines
    assert patched_by_gnu_patch(tmp, image, q) == want
    two = (q / "patches" / NAMES[1]).read_bytes()
    one_result = P1.replace(b"LINE_03 = 3  # one\n", b"LINE_03 = 3  # one\nEXTRA = 0\n")
    assert b"@@ -18,7 +18,7 @@" in two and f"Base-SHA256: {sha256_hex(one_result)}\n".encode() in two
    root = tmp / "root"
    shutil.copytree(image, root)
    imgquilt("apply", "--root", str(root), cwd=q, env=env, check=0)
    assert (root / MOD).read_bytes() == want
    assert "3 patch(es): 3 live." in imgquilt("audit", "--root", str(root), cwd=q, env=env, check=0).out
    lock = (q / "targets.lock").read_text()
    assert sha256_hex(want) in lock and hashlib.sha256((q / "patches" / NAMES[1]).read_bytes()).hexdigest() in lock


def test_with_the_first_patch_applied_the_work_tree_follows(world) -> None:
    tmp, image, q, env = world
    imgquilt("push", cwd=q, env=env, check=0)
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # uno\n")
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=0)
    assert "Re-pinned patch 01-one.patch." in r.out
    assert imgquilt("top", cwd=q, env=env, check=0).out.strip() == NAMES[0]
    assert b"LINE_03 = 3  # uno\n" in (q / ".imgquilt/work" / MOD).read_bytes()
    imgquilt("push", "-a", cwd=q, env=env, check=0)
    assert (q / ".imgquilt/work" / MOD).read_bytes() == P3.replace(b"# one", b"# uno")
    imgquilt("pop", "-a", cwd=q, env=env, check=0)
    imgquilt("check", cwd=q, env=env, check=0)


def test_unrefreshed_work_is_refused_before_anything_changes(world) -> None:
    tmp, image, q, env = world
    imgquilt("push", "2", cwd=q, env=env, check=0)
    work = q / ".imgquilt/work" / MOD
    work.write_bytes(work.read_bytes() + b"TAIL = 1\n")
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # uno\n")
    before, tree = queue_files(q), tree_hash(q / ".imgquilt")
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=3)
    assert "02-two.patch has changes in .imgquilt/work/ not refreshed" in r.err
    assert queue_files(q) == before and tree_hash(q / ".imgquilt") == tree


@pytest.mark.parametrize("applied", [0, 2])
def test_a_later_hunk_that_no_longer_fits_stops_with_nothing_written(world, applied: int) -> None:
    tmp, image, q, env = world
    if applied:
        imgquilt("push", str(applied), cwd=q, env=env, check=0)
    # 01 now also changes line 19, which is context of 02's hunk
    p1 = q / "patches" / NAMES[0]
    p1.write_bytes(p1.read_bytes() + b"@@ -19,1 +19,1 @@\n-LINE_19 = 19\n+LINE_19 = 190\n")
    before = queue_files(q)
    state = tree_hash(q / ".imgquilt") if applied else None
    r = imgquilt("--json", "refresh", "--rehash", NAMES[0], cwd=q, env=env, check=3)
    err = json.loads(r.out)["error"]
    assert err["kind"] == "chain-conflict" and err["code"] == 3
    assert "02-two.patch: usr/lib/app/mod.py: hunk 1 (@@ -17,7 @@) no longer fits" in err["message"]
    assert "nothing was written" in err["message"] and "01-one.patch" in err["hint"]
    assert queue_files(q) == before
    if applied:
        assert tree_hash(q / ".imgquilt") == state


def test_two_hand_edited_patches_are_re_pinned_together(world) -> None:
    tmp, image, q, env = world
    write_patch(q, "04-conf.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 4\n")])
    imgquilt("lock", cwd=q, env=env, check=0)
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # uno\n")
    hand_edit(q, "04-conf.patch", b"+workers = 4\n", b"+workers = 8\n")
    r = imgquilt("check", cwd=q, env=env, check=6)
    assert "`imgquilt refresh --rehash 01-one.patch 04-conf.patch`" in r.err
    # one alone: the series it verifies still has the other hand edit, which is named
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=3)
    assert "04-conf.patch edited by hand too? Re-pin them together: `imgquilt refresh --rehash 01-one.patch 04-conf.patch`" in r.err
    r = imgquilt("refresh", "--rehash", "04-conf.patch", NAMES[0], cwd=q, env=env, check=0)
    assert r.out.count("Re-pinned patch") == 2
    imgquilt("check", cwd=q, env=env, check=0)


def test_the_python_check_runs_unless_asked_not_to(world) -> None:
    tmp, image, q, env = world
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = UNDEFINED  # one\n")
    before = queue_files(q)
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=3)
    assert f"{MOD}:3:11: UndefinedName: undefined name 'UNDEFINED'" in r.err
    assert "`imgquilt refresh --rehash 01-one.patch --no-python-check`" in r.err
    assert queue_files(q) == before
    imgquilt("refresh", "--rehash", NAMES[0], "--no-python-check", cwd=q, env=env, check=0)
    assert imgquilt("check", cwd=q, env=env, check=0)


def test_a_first_patch_whose_base_is_not_the_images_is_drift(world) -> None:
    tmp, image, q, env = world
    hand_edit(q, NAMES[0], f"Base-SHA256: {sha256_hex(BASE)}".encode(), b"Base-SHA256: " + b"e" * 64)
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=env, check=3)
    assert f"the queue pins {sha256_hex(BASE)}" in r.err and "drift" in r.err


def test_without_a_lock_only_the_patches_change(tmp_path: Path, cli_env) -> None:
    image = tmp_path / "image"
    q = chain(image, tmp_path / "q")
    imgquilt("push", "--image", f"rootfs:{image}", cwd=q, env=cli_env, check=0)  # remembers the image
    imgquilt("pop", cwd=q, env=cli_env, check=0)
    hand_edit(q, NAMES[0], b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # uno\n")
    r = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=cli_env, check=0)
    assert "Re-chained 02-two.patch" in r.out and "Wrote" not in r.out and not (q / "targets.lock").exists()
    imgquilt("check", cwd=q, env=cli_env, check=0)
