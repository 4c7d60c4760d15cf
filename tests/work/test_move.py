"""`move` and import's placement: where patches go in series, with hashes re-chained as `refresh --rehash`
re-chains them, the lock and the work tree following, in one transaction (killed anywhere: old or new)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import parse_patch
from support.qtools import TOOL, empty_queue, imgquilt
from support.killpoints import STRACE, queue_hash, traced
from support.killpoints import fresh as _fresh
from support.killpoints import kill_points as _kill_points

TEXT = b"".join(b"line %d\n" % i for i in range(1, 21))


def _diff(line: int, new: bytes) -> bytes:
    old = b"line %d\n" % line
    return (b"--- a/etc/f.txt\n+++ b/etc/f.txt\n@@ -%d,3 +%d,3 @@\n line %d\n-%s+%s line %d\n"
            % (line - 1, line - 1, line - 1, old, new, line + 1))


def _world(tmp: Path) -> tuple[Path, Path]:
    image = tmp / "image"
    (image / "etc").mkdir(parents=True)
    (image / "etc/f.txt").write_bytes(TEXT)
    (image / "etc/other.txt").write_bytes(b"other\n")
    q = empty_queue(tmp / "q")
    for name, line in (("a.diff", 3), ("b.diff", 10), ("c.diff", 16)):
        (tmp / name).write_bytes(_diff(line, b"LINE %d\n" % line))
    imgquilt("import", str(tmp / "a.diff"), str(tmp / "b.diff"), str(tmp / "c.diff"), "--image", f"rootfs:{image}", cwd=q, check=0)
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)
    return image, q


def _result(tmp: Path, image: Path, q: Path, name: str) -> bytes:
    import shutil

    out = shutil.copytree(image, tmp / name)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    return (out / "etc/f.txt").read_bytes()


def test_move_reorders_and_rechains_every_patch_on_the_file(tmp_path: Path) -> None:
    image, q = _world(tmp_path)
    (q / "series").write_text("a.diff\nb.diff   # keep this note\nc.diff\n")
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)
    before = _result(tmp_path, image, q, "before")
    r = imgquilt("move", "c.diff", "--before", "a.diff", cwd=q, check=0)
    assert "re-chained a.diff" in r.out and "re-chained b.diff" in r.out and "Wrote" in r.out
    assert (q / "series").read_text() == "c.diff\na.diff\nb.diff   # keep this note\n"  # lines move whole
    c = parse_patch((q / "patches/c.diff").read_bytes()).sections[0]
    a = parse_patch((q / "patches/a.diff").read_bytes()).sections[0]
    assert c.base_sha256 == sha256_hex(TEXT) and a.base_sha256 == c.patched_sha256  # the chain, re-pinned
    imgquilt("check", cwd=q, check=0)
    assert _result(tmp_path, image, q, "after") == before  # the lock was rewritten (apply takes it) and the tree is the same
    doc = json.loads(imgquilt("--json", "move", "a.diff", "--after", "b.diff", cwd=q, check=0).out)
    assert doc["moved"] == "a.diff" and doc["after"] == "b.diff" and doc["applied"] == []
    assert [ln.split()[0] for ln in (q / "series").read_text().splitlines()] == ["c.diff", "b.diff", "a.diff"]
    imgquilt("check", cwd=q, check=0)
    # already there; no place; an unknown patch: usage errors with a hint
    for args in (["a.diff", "--after", "b.diff"], ["a.diff"], ["nope.diff", "--top"], ["a.diff", "--before", "a.diff"]):
        r = imgquilt("move", *args, cwd=q, check=2)
        assert r.err.strip(), args


def test_move_with_applied_patches_moves_the_work_tree_along(tmp_path: Path) -> None:
    image, q = _world(tmp_path)
    imgquilt("push", "-a", cwd=q, check=0)
    imgquilt("move", "b.diff", "--before", "a.diff", cwd=q, check=0)
    assert imgquilt("applied", cwd=q, check=0).out.split() == ["b.diff", "a.diff", "c.diff"]
    assert (q / ".imgquilt/work/etc/f.txt").read_bytes() == TEXT.replace(b"line 3\n", b"LINE 3\n").replace(
        b"line 10\n", b"LINE 10\n").replace(b"line 16\n", b"LINE 16\n")
    imgquilt("pop", "-a", cwd=q, check=0)  # the snapshots follow: every pop restores its file
    assert not (q / ".imgquilt/work/etc/f.txt").exists()
    # --top pushes the patch (qpush --move): it lands after the top and becomes it
    imgquilt("push", cwd=q, check=0)
    r = imgquilt("move", "c.diff", "--top", cwd=q, check=0)
    assert imgquilt("applied", cwd=q, check=0).out.split() == ["b.diff", "c.diff"] and "Now at c.diff" in r.out
    # a change not refreshed is never lost: refused, nothing changed
    (q / ".imgquilt/work/etc/f.txt").write_bytes(b"edited\n")
    before = queue_hash(q)
    r = imgquilt("move", "b.diff", "--after", "a.diff", cwd=q, check=3)
    assert "not refreshed" in r.err and "imgquilt refresh" in r.err.splitlines()[-1]
    assert queue_hash(q) == before


def test_move_stops_where_a_hunk_fits_nowhere_and_writes_nothing(tmp_path: Path) -> None:
    image, q = _world(tmp_path)
    (tmp_path / "d.diff").write_bytes(_diff(10, b"LINE 10 again\n").replace(b"-line 10\n", b"-LINE 10\n"))
    imgquilt("import", str(tmp_path / "d.diff"), "--image", f"rootfs:{image}", cwd=q, check=0)  # d needs b below it
    before = queue_hash(q)
    r = imgquilt("move", "d.diff", "--before", "b.diff", cwd=q, check=3)
    assert "no longer fits" in r.err and "nothing was written" in r.err
    assert queue_hash(q) == before


def test_import_places_patches_after_the_last_or_where_asked(tmp_path: Path) -> None:
    image, q = _world(tmp_path)
    (tmp_path / "x.diff").write_bytes(b"--- a/etc/other.txt\n+++ b/etc/other.txt\n@@ -1 +1 @@\n-other\n+OTHER\n")
    r = imgquilt("import", str(tmp_path / "x.diff"), "--image", f"rootfs:{image}", cwd=q, check=0)
    assert "after c.diff (no patch is applied)" in r.out
    assert (q / "series").read_text().split() == ["a.diff", "b.diff", "c.diff", "x.diff"]
    # --before: its bases are read there, and a patch after it on the same file is re-chained onto it
    (tmp_path / "y.diff").write_bytes(_diff(12, b"LINE 12\n"))
    r = imgquilt("import", str(tmp_path / "y.diff"), "--before", "b.diff", "--image", f"rootfs:{image}", cwd=q, check=0)
    assert "Re-chained onto them: b.diff, c.diff" in r.out
    assert (q / "series").read_text().split() == ["a.diff", "y.diff", "b.diff", "c.diff", "x.diff"]
    y = parse_patch((q / "patches/y.diff").read_bytes()).sections[0]
    assert y.base_sha256 == sha256_hex(TEXT.replace(b"line 3\n", b"LINE 3\n"))  # a's result: read where it stands
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)  # the whole new series verifies on the image
    imgquilt("check", cwd=q, check=0)
    # never below an applied patch
    imgquilt("push", "a.diff", cwd=q, check=0)
    (tmp_path / "z.diff").write_bytes(b"--- a/etc/other.txt\n+++ b/etc/other.txt\n@@ -1 +1 @@\n-OTHER\n+z\n")
    r = imgquilt("import", str(tmp_path / "z.diff"), "--before", "a.diff", "--image", f"rootfs:{image}", cwd=q, check=2)
    assert "below the applied patch a.diff" in r.err and "imgquilt pop" in r.err.splitlines()[-1]
    # --after an unapplied patch: its bases are what the patches up to it leave
    r = imgquilt("import", str(tmp_path / "z.diff"), "--after", "x.diff", "--image", f"rootfs:{image}", cwd=q, check=0)
    assert (q / "series").read_text().split()[-1] == "z.diff"
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(TOOL), PYTHONDONTWRITEBYTECODE="1", IMGQUILT_NO_RUFF="1")


def test_kill_at_the_changing_syscalls_of_a_move_leaves_old_or_new(tmp_path: Path) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    image, old = _world(tmp_path)
    imgquilt("push", "-a", cwd=old, check=0)
    old_hash = queue_hash(old)
    work = [tmp_path / f"w{k}" / "q" for k in range(2)]

    def move(q: Path, inject: str | None = None, log: Path | None = None):
        cmd = traced(log, inject)
        return subprocess.run(cmd + [sys.executable, "-m", "imgquilt", "move", "c.diff", "--before", "a.diff"], cwd=q,
                              env={**_env(), "IMGQUILT_CACHE_DIR": str(q.parent / "cache")}, capture_output=True, text=True)

    _fresh(old, work[0])
    done = move(work[0], log=tmp_path / "trace.log")
    assert done.returncode == 0, done.stderr
    new_hash = queue_hash(work[0])
    new_work = (work[0] / ".imgquilt/work/etc/f.txt").read_bytes()
    points = [p for p in _kill_points(tmp_path / "trace.log") if "/q/" in p[2] or p[0] != "openat"]
    # the transaction is queue.interrupted's, killed at every call by test_rehash_crash and test_import_crash:
    # here every call on the move's journal and an even spread of the others (IMGQUILT_CRASH_FULL=1: all)
    if os.environ.get("IMGQUILT_CRASH_FULL") == "1":
        chosen = points
    else:
        step = max(1, len(points) // 16)
        chosen = sorted(set(points[::step]) | {p for p in points if "journal" in p[2]}, key=points.index)

    def one(point: tuple[str, int, str], q: Path) -> str:
        name, n, _ = point
        _fresh(old, q)
        p = move(q, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode not in (0, -9):
            return f"{name}#{n}: exit {p.returncode}: {p.stderr[-300:]}"
        for dirpath, _dirs, files in os.walk(q):
            for f in files:
                os.utime(os.path.join(dirpath, f), (time.time() - 60, time.time() - 60))
        imgquilt("check", cwd=q, env=_env())  # the next command cleans up (queue.interrupted.recover)
        r = imgquilt("applied", cwd=q, env=_env())
        h = queue_hash(q)
        state = "old" if h == old_hash else "new" if h == new_hash else None
        if state is None or (q / ".imgquilt/move/journal.json").exists():
            left = sorted(str(x.relative_to(q)) for x in q.rglob("*") if x.is_file() and ".imgquilt/objects" not in str(x))
            return f"{name}#{n}: neither old nor new ({r.err[-200:]}; {left})"
        order = r.out.split()
        want = (["a.diff", "b.diff", "c.diff"], None) if state == "old" else (["c.diff", "a.diff", "b.diff"], new_work)
        if order != want[0] or (want[1] is not None and (q / ".imgquilt/work/etc/f.txt").read_bytes() != want[1]):
            return f"{name}#{n}: {state} queue, but the work tree says {order}"
        return state

    with ThreadPoolExecutor(len(work)) as pool:
        shares = pool.map(lambda k: [one(pt, work[k]) for pt in chosen[k::len(work)]], range(len(work)))
        results = [r for share in shares for r in share]
    bad = [r for r in results if r not in ("old", "new")]
    assert not bad, "\n".join(bad[:10])
    assert results.count("old") > 0 and results.count("new") > 0


def test_move_keeps_guards_and_rechains_the_selection(tmp_path: Path) -> None:
    """A guarded line moves whole (its guards with it); the chains re-pinned are the work tree's selection's."""
    image, q = _world(tmp_path)
    (q / "series").write_text("a.diff\nb.diff #+other  # only for other\nc.diff\n")
    imgquilt("move", "c.diff", "--before", "a.diff", cwd=q, check=0)
    assert (q / "series").read_text() == "c.diff\na.diff\nb.diff #+other  # only for other\n"
    r = imgquilt("move", "b.diff", "--top", cwd=q, check=2)
    assert "guarded out of the work tree's selection" in r.err
    c = parse_patch((q / "patches/c.diff").read_bytes()).sections[0]
    a = parse_patch((q / "patches/a.diff").read_bytes()).sections[0]
    assert c.base_sha256 == sha256_hex(TEXT) and a.base_sha256 == c.patched_sha256
