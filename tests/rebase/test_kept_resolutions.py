"""Kept resolutions (issue 34, point 4): a conflict resolved once is never asked twice, as `git rerere`.

A user's sessions through the real console script, on old/new rootfs trees: the rebase stops, the
file is resolved, and then the rebase is abandoned (--abort, kill -9 of --continue); the next
identical rebase takes the resolution, says so in text and JSON, and finishes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import imgquilt, write_patch
from support.killpoints import driver_env, fresh, kill_points, sample, traced
from support.rebase_queue import (
    DEBUG_LINE,
    LOADED_LINE,
    LOADED_VERIFY,
    SITE311,
    WEIGHTS,
    WEIGHTS_V1,
    WEIGHTS_V2,
    make_patches,
    make_root,
)

W311 = f"{SITE311}/{WEIGHTS}"
UPSTREAM_LINE = b'logger.debug("loading shard %s from %s", shard.name, model_dir)'
RESOLVED = b'        logger.info("loading shard %s from %s (%d tensors)", shard.name, model_dir, len(shard.tensors))\n'


@pytest.fixture
def stopped(tmp_path: Path, cli_env):
    """A queue locked to the old image, and a rebase onto the new one stopped on a conflict."""
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    new = make_root(tmp_path / "new", WEIGHTS_V2.replace(DEBUG_LINE, UPSTREAM_LINE))
    q = tmp_path / "queue"
    make_patches(q)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=cli_env, check=4)
    return q, new, cli_env


def resolve(q: Path) -> bytes:
    """The user's resolution, scripted: upstream's argument with the patch's level."""
    work = q / ".imgquilt/work" / W311
    out, skipping = [], False
    for line in work.read_bytes().splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            skipping = True
            out.append(RESOLVED)
        elif line.startswith(b">>>>>>> "):
            skipping = False
        elif not skipping:
            out.append(line)
    data = b"".join(out)
    work.write_bytes(data)
    return data


def expected() -> bytes:
    return WEIGHTS_V2.replace(DEBUG_LINE, RESOLVED.strip()).replace(LOADED_LINE, LOADED_VERIFY)


def reused_and_done(q: Path, new: Path, env) -> None:
    """The second identical rebase: no stop, the kept resolution named in JSON and text, the result the user's."""
    r = imgquilt("--json", "rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["status"] == "done"
    f = doc["patches"][0]["files"][0]
    assert f["reused"] is True and f["by_hand"] is True and "kept resolution" in f["detail"]
    assert any("reused the kept resolution of " + W311 in n for n in doc["notes"])
    copy = new.parent / "applied"
    shutil.copytree(new, copy, symlinks=True)
    imgquilt("apply", "--root", str(copy), cwd=q, env=env, check=0)
    assert (copy / W311).read_bytes() == expected()
    shutil.rmtree(copy)


def test_abort_then_the_same_rebase_takes_the_resolution_and_says_so(stopped) -> None:
    q, new, env = stopped
    resolve(q)
    r = imgquilt("--json", "rebase", "--abort", cwd=q, env=env, check=0)
    assert any("Kept the resolution of " + W311 in n for n in json.loads(r.out)["notes"])
    assert not (q / ".imgquilt/work" / W311).exists()
    r = imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=0)
    assert "kept resolution reused" in r.out and f"reused the kept resolution of {W311}" in r.out
    copy = new.parent / "applied"
    shutil.copytree(new, copy, symlinks=True)
    imgquilt("apply", "--root", str(copy), cwd=q, env=env, check=0)
    assert (copy / W311).read_bytes() == expected()


def test_a_resolution_taken_by_continue_is_kept_and_forget_drops_it(stopped) -> None:
    q, new, env = stopped
    resolve(q)
    saved = {p: p.read_bytes() for p in [q / "series", q / "targets.lock", *(q / "patches").iterdir()]}
    imgquilt("rebase", "--continue", cwd=q, env=env, check=0)
    for p, data in saved.items():  # the user goes back (git checkout) and rebases again
        p.write_bytes(data)
    reused_and_done(q, new, env)
    r = imgquilt("--json", "rebase", "--forget", cwd=q, env=env, check=0)
    assert json.loads(r.out) == {"status": "forgotten", "forgotten": 1}
    imgquilt("rebase", "--forget", "--abort", cwd=q, env=env, check=2)
    for p, data in saved.items():
        p.write_bytes(data)
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)  # forgotten: asked again


def test_an_unresolved_file_at_abort_is_not_kept(stopped) -> None:
    q, new, env = stopped
    r = imgquilt("--json", "rebase", "--abort", cwd=q, env=env, check=0)
    assert not any("Kept" in n for n in json.loads(r.out)["notes"])
    assert not list((q / ".imgquilt").glob("resolutions/*.json"))
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)


def test_a_forged_or_unsealed_resolution_is_never_used(stopped, tmp_path: Path) -> None:
    q, new, env = stopped
    resolve(q)
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    [entry] = list((q / ".imgquilt/resolutions").glob("*.json"))
    data = entry.with_suffix(".data")
    good = data.read_bytes()
    # the bytes swapped for others: their hash is not the sealed one
    data.write_bytes(good.replace(b"tensors", b"TENSORS"))
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    # an entry re-sealed under another key (a cloned queue's): refused as well
    data.write_bytes(good)
    doc = json.loads(entry.read_text())
    doc["seal"] = "0" * 64
    entry.write_text(json.dumps(doc))
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    # a planted symlinked directory is refused, never followed (and never taken as a resolution)
    shutil.rmtree(q / ".imgquilt/resolutions")
    (tmp_path / "elsewhere").mkdir()
    (q / ".imgquilt/resolutions").symlink_to(tmp_path / "elsewhere")
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    assert not list((tmp_path / "elsewhere").iterdir())


def test_kill_9_of_continue_after_resolving_then_a_new_rebase_finds_the_resolution(stopped, tmp_path: Path) -> None:
    """`rebase --continue` killed at sampled calls that change files; whatever it left, `--abort` (when a
    rebase is still there) and the same rebase again: it never stops on the resolved conflict."""
    q, new, env = stopped
    resolve(q)
    start = tmp_path / "start"
    shutil.copytree(q, start, symlinks=True)
    log = tmp_path / "trace.log"
    run_env = {**driver_env(), "HOME": env["HOME"], "IMGQUILT_CACHE_DIR": env["IMGQUILT_CACHE_DIR"]}
    cmd = [sys.executable, "-m", "imgquilt", "rebase", "--continue"]
    subprocess.run(traced(log) + cmd, cwd=q, env=run_env, capture_output=True, check=True)
    points = sample(kill_points(log), 6, sampled=True)
    assert len(points) >= 5
    killed = 0
    for name, n, _ in points:
        fresh(start, q)
        p = subprocess.run(
            traced(inject=f"{name}:signal=SIGKILL:when={n}") + cmd, cwd=q, env=run_env, capture_output=True
        )
        if p.returncode == 0:
            continue  # the kill point was past the end
        killed += 1
        if (q / ".imgquilt/rebase/state.json").exists():
            imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
        r = imgquilt("--json", "rebase", "--image", f"rootfs:{new}", cwd=q, env=env)
        doc = json.loads(r.out)
        if r.code == 0 and not any(f.get("reused") for pp in doc["patches"] for f in pp["files"]):
            # killed after the finish wrote the rebased queue: nothing left to resolve
            assert all(pp["state"] != "conflict" for pp in doc["patches"])
            continue
        assert r.code == 0 and doc["status"] == "done", (name, n, r.err)
        assert doc["patches"][0]["files"][0]["reused"] is True, (name, n)
    assert killed >= 2


def test_a_patch_with_one_kept_and_one_new_conflict_stops_for_the_new_one_only(tmp_path: Path, cli_env) -> None:
    env = cli_env
    texts = {name: b"".join(b"%s line %d\n" % (name.encode(), i) for i in range(1, 9)) for name in ("a", "b")}
    old, new = tmp_path / "old", tmp_path / "new"
    for root, tail in ((old, b""), (new, b" upstream")):
        (root / "etc").mkdir(parents=True)
        for name, text in texts.items():
            (root / "etc" / f"{name}.conf").write_bytes(text.replace(b"line 2\n", b"line 2" + tail + b"\n"))
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("")
    changes = [(f"etc/{n}.conf", t, t.replace(b"line 2\n", b"line 2 ours\n")) for n, t in texts.items()]
    write_patch(q, "0001-both.patch", changes)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=env, check=0)
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    a, b = q / ".imgquilt/work/etc/a.conf", q / ".imgquilt/work/etc/b.conf"
    mine_a = texts["a"].replace(b"line 2\n", b"line 2 ours, upstream\n")
    a.write_bytes(mine_a)  # b is left with its markers
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)

    r = imgquilt("--json", "rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    doc = json.loads(r.out)
    notes = [n for n in doc["notes"] if "reused the kept resolution of etc/a.conf (" in n]
    assert notes and "1 other conflict(s) to resolve" in notes[0]
    assert a.read_bytes() == mine_a and b.read_bytes().count(b"<<<<<<< ") == 1
    mine_b = texts["b"].replace(b"line 2\n", b"line 2 ours, upstream\n")
    b.write_bytes(mine_b)
    doc = json.loads(imgquilt("--json", "rebase", "--continue", cwd=q, env=env, check=0).out)
    files = {f["path"]: f for f in doc["patches"][0]["files"]}
    assert files["etc/a.conf"]["reused"] is True and files["etc/b.conf"]["reused"] is False
    assert files["etc/b.conf"]["by_hand"] is True
    copy = tmp_path / "applied"
    shutil.copytree(new, copy)
    imgquilt("apply", "--root", str(copy), cwd=q, env=env, check=0)
    assert (copy / "etc/a.conf").read_bytes() == mine_a and (copy / "etc/b.conf").read_bytes() == mine_b
