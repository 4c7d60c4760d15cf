"""kill -9 at every filesystem-changing syscall of `import --series` (and of a rebase): the next command
leaves the queue exactly old or exactly imported, with no temp file or journal behind, and the import
run again succeeds. Same method as test_inplace_crash.py: one traced run lists the calls, then one
run per call under `strace -e inject=SYSCALL:signal=SIGKILL:when=N`.

The import brings three patches from a quilt series, one of them replacing (-f) an unapplied patch
of the same name, so both the new-file and the replace paths are killed at.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support.qtools import empty_queue, imgquilt, write_patch
from support.killpoints import STRACE, fresh, nth_call, queue_hash, traced
from support.killpoints import driver_env as _env
from support.killpoints import kill_points as _kill_points
from support.killpoints import sample as _sample

BASES = {f"etc/f{i}.conf": b"line %d\nx\n" % i for i in range(1, 4)}


def _world(tmp: Path) -> tuple[Path, Path, Path]:
    root = tmp / "root"
    for path, data in BASES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    up = tmp / "upstream"
    up.mkdir()
    for i in range(1, 4):
        (up / f"p{i}.diff").write_bytes(b"--- a/etc/f%d.conf\n+++ b/etc/f%d.conf\n@@ -1,2 +1,2 @@\n-line %d\n+LINE %d\n x\n"
                                        % (i, i, i, i))
    (up / "series").write_text("p1.diff\np2.diff\np3.diff\n")
    q = empty_queue(tmp / "old")
    write_patch(q, "p2.diff", [("etc/f2.conf", BASES["etc/f2.conf"], b"older change\nx\n")])  # replaced by -f
    return root, up, q


def _import(q: Path, up: Path, root: Path, inject: str | None = None, log: Path | None = None):
    cmd = traced(log, inject)
    args = [sys.executable, "-m", "imgquilt", "import", "-f", "--series", str(up / "series"), "--image", f"rootfs:{root}"]
    return subprocess.run(cmd + args, cwd=q, env={**_env(), "IMGQUILT_CACHE_DIR": str(q.parent / "cache")},
                          capture_output=True, text=True)


def test_kill_at_every_changing_syscall_of_an_import_leaves_old_or_new(tmp_path: Path) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    root, up, old = _world(tmp_path)
    old_hash = queue_hash(old)
    work = [tmp_path / f"w{k}" / "q" for k in range(2)]
    for q in work:
        fresh(old, q)
    done = _import(work[0], up, root, log=tmp_path / "trace.log")
    assert done.returncode == 0, done.stderr
    new_hash = queue_hash(work[0])
    assert new_hash != old_hash and (work[0] / "series").read_text() == "p2.diff\np1.diff\np3.diff\n"  # nothing applied: after the last patch
    points = [p for p in _kill_points(tmp_path / "trace.log")
              if "/q/" in p[2] or p[0] not in ("openat",)]  # the queue's own files (and every rename, fsync...)
    assert len(points) > 20, points
    chosen = _sample(points, budget=80)

    def one(point: tuple[str, int, str], q: Path) -> str:
        name, n, _ = point
        fresh(old, q)
        p = _import(q, up, root, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode == 0:
            return "new" if queue_hash(q) == new_hash else f"{name}#{n}: finished, but not new"
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        for dirpath, dirs, files in os.walk(q):  # the dead command's temp files: older than the sweep's grace
            for f in files:
                os.utime(os.path.join(dirpath, f), (time.time() - 60, time.time() - 60))
        r = imgquilt("check", cwd=q, env={**_env(), "IMGQUILT_CACHE_DIR": str(q.parent / "cache")})
        h = queue_hash(q)
        state = "old" if h == old_hash else "new" if h == new_hash else None
        if state is None:
            left = sorted(str(x.relative_to(q)) for x in q.rglob("*") if x.is_file() and ".imgquilt/" not in str(x))
            return f"{name}#{n}: neither old nor new after the next command ({left}); check said {r.err[-300:]}"
        if (q / ".imgquilt/import").exists():
            return f"{name}#{n}: the import journal is still there"
        if state == "old" and r.code != 0:
            return f"{name}#{n}: recovered old, but check says {r.code}: {r.err[-300:]}"
        again = imgquilt("import", "-f", "--series", str(up / "series"), "--image", f"rootfs:{root}", cwd=q,
                         env={**_env(), "IMGQUILT_CACHE_DIR": str(q.parent / "cache")})
        if again.code != 0 or queue_hash(q) != new_hash:
            return f"{name}#{n}: recovered {state}, but importing again gave exit {again.code}: {again.err[-300:]}"
        return state

    with ThreadPoolExecutor(len(work)) as pool:
        shares = pool.map(lambda k: [one(pt, work[k]) for pt in chosen[k::len(work)]], range(len(work)))
        results = [r for share in shares for r in share]
    bad = [r for r in results if r not in ("old", "new")]
    print(f"kill points: {len(chosen)} of {len(points)}; old: {results.count('old')}, new: {results.count('new')}")
    assert not bad, f"{len(bad)} bad kill points:\n" + "\n".join(bad[:20])
    assert results.count("old") > 0 and results.count("new") > 0


def test_a_temp_file_a_killed_rebase_left_is_removed_by_the_next_command(tmp_path: Path, cli_env) -> None:
    """A rebase killed at its first rename leaves `patches/.NAME.imgquilt-XXXXXXXX.tmp`: `check` removes it
    (it is nobody's: no writer holds it) and reports nothing else wrong; a live writer's temp is left."""
    import fcntl

    root, _, q = _world(tmp_path)
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    new_root = tmp_path / "new-root"
    shutil.copytree(root, new_root)
    (new_root / "etc/f2.conf").write_bytes(b"line 2\nx\nupstream\n")
    p = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename", "-e", "inject=rename:signal=SIGKILL:when=1",
                        sys.executable, "-m", "imgquilt", "rebase", "--image", f"rootfs:{new_root}"],
                       cwd=q, env={**cli_env, **_env()}, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    temps = [x for x in q.rglob(".*.tmp") if ".imgquilt/" not in str(x)]
    assert temps, sorted(q.rglob("*"))
    for t in temps:
        os.utime(t, (time.time() - 60, time.time() - 60))
    live = q / "patches" / ".p2.diff.imgquilt-abcdefgh.tmp"
    live.write_bytes(b"being written")
    os.utime(live, (time.time() - 60, time.time() - 60))
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live writer holds its temp
        imgquilt("check", cwd=q, env=cli_env)
        assert live.exists()
    assert not any(t.exists() for t in temps)
    r = imgquilt("check", cwd=q, env=cli_env)
    assert live.exists() is False and "temp file" not in r.err


def test_an_import_that_leaves_series_as_it_is_is_undone_too(tmp_path: Path) -> None:
    """`import -f` of patches series already lists (unapplied): series does not change, so the last patch
    file written commits the import. Killed as it renames the second of two into place, the next command
    puts the first back."""
    root, up, _ = _world(tmp_path)
    (up / "series").write_text("p1.diff\np2.diff\n")
    q = empty_queue(tmp_path / "q")
    for i in (1, 2):
        write_patch(q, f"p{i}.diff", [(f"etc/f{i}.conf", BASES[f"etc/f{i}.conf"], b"older change %d\nx\n" % i)])
    old_hash, series = queue_hash(q), (q / "series").read_bytes()
    probe = tmp_path / "probe" / "q"
    fresh(q, probe)
    assert _import(probe, up, root, log=tmp_path / "trace.log").returncode == 0
    assert (probe / "series").read_bytes() == series and queue_hash(probe) != old_hash
    call, n = nth_call(tmp_path / "trace.log", ("rename", "renameat", "renameat2"), 'p2.diff")')
    p = _import(q, up, root, inject=f"{call}:signal=SIGKILL:when={n}")
    assert p.returncode == -9, p.stderr
    assert (q / "patches/p1.diff").read_bytes() == (probe / "patches/p1.diff").read_bytes()  # half-imported
    imgquilt("check", cwd=q, env={**_env(), "IMGQUILT_CACHE_DIR": str(q.parent / "cache")})
    assert queue_hash(q) == old_hash and not (q / ".imgquilt/import").exists()
