"""kill -9 at every filesystem-changing syscall of `refresh --rehash`: the next command leaves the queue
(and, when the rehashed patch is applied, the work tree) exactly as it was or exactly rehashed, with no
temp file or journal behind, and the rehash run again succeeds. Same method as test_import_crash.py:
one traced run lists the calls, then one run per call under `strace -e inject=SYSCALL:signal=SIGKILL:when=N`.

Every call is killed at (about 280 runs, 3 minutes on a loaded 2-core box); IMGQUILT_CRASH_SAMPLE=1 keeps
every call of the transaction and a quarter of those before it (they write only the object store and
the Python check's cache). After recovery the queue and work tree must be byte-exact old or new; that
pop -a, push -a and check then work is run on every 4th point (the same bytes stand for the rest).

The queue is test_rehash.py's three-patch chain on one file, from a fresh clone (bases from the image
targets.lock pins), its first patch hand-edited to add a line: the rehash rewrites all three patch
files (the later two re-chained, their hunks moved) and targets.lock. With the three patches applied,
it also pops and pushes them: the work copy and the snapshots of the two later patches change too.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.hostile import forger_seal
from support.qtools import imgquilt, tree_hash
from support.killpoints import STRACE, traced, nth_call, queue_hash
from support.killpoints import driver_env as _env
from support.killpoints import fresh as _fresh
from support.killpoints import kill_points as _kill_points
from support.rehash_queue import MOD, NAMES, chain, hand_edit

RENAMES = ("rename", "renameat", "renameat2")
EDIT = (b"+LINE_03 = 3  # one\n", b"+LINE_03 = 3  # one\n+EXTRA = 0\n")


def _world(tmp: Path, applied: bool) -> Path:
    image = tmp / "image"
    q = chain(image, tmp / "old")
    env = _cli(tmp / "old")
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, env=env, check=0)
    shutil.rmtree(q / ".imgquilt")  # a fresh clone
    if applied:
        imgquilt("push", "-a", cwd=q, env=env, check=0)
    hand_edit(q, NAMES[0], *EDIT)
    return q


def _cli(q: Path) -> dict[str, str]:
    return {**_env(), "HOME": str(q.parent / f"{q.name}-home"), "IMGQUILT_CACHE_DIR": str(q.parent / f"{q.name}-cache")}


def work_hash(q: Path) -> str:
    """The work tree: every path, mode and byte of .imgquilt/work/ and .imgquilt/state/ (applied, snapshots)."""
    return tree_hash(q / ".imgquilt/work") + tree_hash(q / ".imgquilt/state")


def _rehash(q: Path, inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    cmd = traced(log, inject)
    return subprocess.run(cmd + [sys.executable, "-m", "imgquilt", "refresh", "--rehash", NAMES[0]], cwd=q, env=_cli(q),
                          capture_output=True, text=True)


@pytest.mark.parametrize("applied", [False, True], ids=["unapplied", "applied"])
def test_kill_at_every_changing_syscall_of_a_rehash_leaves_old_or_new(tmp_path: Path, applied: bool) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    old = _world(tmp_path, applied)
    state = {"old": (queue_hash(old), work_hash(old) if applied else "")}
    work = [tmp_path / f"w{k}" for k in range(2)]  # beside old/: targets.lock names the image as ../image
    _fresh(old, work[0])
    done = _rehash(work[0], log=tmp_path / "trace.log")
    assert done.returncode == 0, done.stderr
    assert "Re-chained 02-two.patch" in done.stdout and "Re-chained 03-three.patch" in done.stdout
    state["new"] = (queue_hash(work[0]), work_hash(work[0]) if applied else "")
    changed = [n for n in ["targets.lock", *(f"patches/{n}" for n in NAMES)] if (old / n).read_bytes() != (work[0] / n).read_bytes()]
    assert len(changed) == 4, changed
    if applied:
        assert state["new"][1] != state["old"][1]
        assert b"EXTRA = 0\n" in (work[0] / ".imgquilt/work" / MOD).read_bytes()
    points = _kill_points(tmp_path / "trace.log")
    # the transaction starts where .imgquilt/rehash/ is made (no journal at all: every call is swept)
    start = next((i for i, p in enumerate(points) if '"rehash"' in p[2]), 0)
    assert len(points) - start > 50, points[start:]
    chosen = points
    if os.environ.get("IMGQUILT_CRASH_SAMPLE") == "1":  # a quick local run: every call of the transaction; of
        # those before it (the object store, the Python check's cache) every 4th and the last 4
        early = sorted({*range(0, start, 4), *range(max(start - 4, 0), start)})
        chosen = [points[i] for i in early] + points[start:]

    def one(k: int, q: Path) -> str:
        name, n, _ = chosen[k]
        _fresh(old, q)
        p = _rehash(q, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode == 0:
            return "new" if _state(q, applied) == state["new"] else f"{name}#{n}: finished, but not new"
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        for dirpath, _dirs, files in os.walk(q):  # the dead command's temp files: older than the sweep's grace
            for f in files:
                os.utime(os.path.join(dirpath, f), (time.time() - 60, time.time() - 60))
        r = imgquilt("check", cwd=q, env=_cli(q))
        now = _state(q, applied)
        got = next((k for k, v in state.items() if v == now), None)
        if got is None:
            left = sorted(str(x.relative_to(q)) for x in q.rglob("*") if x.is_file() and "/objects/" not in str(x))
            mixed = [k for k, v in state.items() if v[0] == now[0]], [k for k, v in state.items() if v[1] == now[1]]
            return f"{name}#{n}: neither old nor new after the next command (queue, work tree: {mixed}; {left}); check said {r.err[-300:]}"
        if (q / ".imgquilt/rehash").exists():
            return f"{name}#{n}: the rehash journal is still there"
        want = 0 if got == "new" else 6  # old: the hand edit is still there, and check names the rehash
        if r.code != want or (got == "old" and "refresh --rehash 01-one.patch" not in r.err):
            return f"{name}#{n}: recovered {got}, but check says {r.code}: {r.err[-300:]}"
        again = imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=_cli(q))
        if again.code != 0 or _state(q, applied) != state["new"]:
            return f"{name}#{n}: recovered {got}, but the rehash again gave exit {again.code}: {again.err[-300:]}"
        if applied and k % 4 == 0:  # the work tree works: every patch pops and pushes again (the state is
            # byte-exact old or new, so a quarter of the points stand for the rest)
            for args in (("pop", "-a"), ("push", "-a"), ("check",)):
                r = imgquilt(*args, cwd=q, env=_cli(q))
                if r.code != 0:
                    return f"{name}#{n}: recovered {got}, but `imgquilt {' '.join(args)}` then says {r.code}: {r.err[-300:]}"
            if _state(q, applied) != state["new"]:
                return f"{name}#{n}: recovered {got}, but pop -a and push -a did not come back to new"
        return got

    with ThreadPoolExecutor(len(work)) as pool:
        shares = pool.map(lambda w: [one(k, work[w]) for k in range(w, len(chosen), len(work))], range(len(work)))
        results = [r for share in shares for r in share]
    bad = [r for r in results if r not in ("old", "new")]
    print(f"kill points: {len(chosen)} of {len(points)} ({len(points) - start} in the transaction); old: {results.count('old')}, new: {results.count('new')}")
    assert not bad, f"{len(bad)} bad kill points:\n" + "\n".join(bad[:20])
    assert results.count("old") > 0 and results.count("new") > 0


def _state(q: Path, applied: bool) -> tuple[str, str]:
    return queue_hash(q), work_hash(q) if applied else ""


def _killed_at_second_patch(tmp: Path, applied: bool) -> tuple[Path, tuple[str, str]]:
    """A rehash killed as it renames 02-two.patch into place (01 rewritten, 03 and the lock not yet)."""
    old = _world(tmp, applied)
    before = _state(old, applied)
    q = tmp / "killed"
    _fresh(old, q)
    trace = _fresh_trace(tmp, old)
    call, n = nth_call(trace, RENAMES, '02-two.patch")')
    p = _rehash(q, inject=f"{call}:signal=SIGKILL:when={n}")
    assert p.returncode == -9, p.stderr
    assert (q / ".imgquilt/rehash/journal.json").is_file()
    assert (q / "patches" / NAMES[0]).read_bytes() != (old / "patches" / NAMES[0]).read_bytes()  # half-way
    return q, before


def _fresh_trace(tmp: Path, old: Path) -> Path:
    probe = tmp / "probe"
    _fresh(old, probe)
    log = tmp / "probe.log"
    assert _rehash(probe, log=log).returncode == 0
    return log


def test_a_journal_copied_in_with_a_queue_is_refused_and_the_original_recovers(tmp_path: Path) -> None:
    q, before = _killed_at_second_patch(tmp_path, applied=True)
    copy = tmp_path / "w1"  # beside it, so the lock's ../image still resolves
    shutil.copytree(q, copy, symlinks=True)
    kept = tree_hash(copy)
    for args in (("check",), ("push",), ("pop",), ("refresh", "--rehash", NAMES[0])):
        r = imgquilt(*args, cwd=copy, env=_cli(copy))
        assert r.code == 6 and "never acts on a rehash journal" in r.err, (args, r.err)
        assert "written for another queue directory" in r.err
        assert tree_hash(copy) == kept, args  # nothing restored, nothing removed
    r = imgquilt("check", cwd=q, env=_cli(q), check=6)  # the original: the hand edit is back, exactly
    assert "refresh --rehash 01-one.patch" in r.err
    assert _state(q, True) == before and not (q / ".imgquilt/rehash").exists()


def test_a_planted_rehash_journal_is_never_acted_on(tmp_path: Path) -> None:
    """A journal that, acted on, would remove 01-one.patch (it "wrote" it: old none) since targets.lock
    does not hold its "new" bytes: every command refuses it, exit 6, and every file is kept."""
    q = _world(tmp_path, applied=False)
    raw = (q / "patches" / NAMES[0]).read_bytes()
    journal = q / ".imgquilt/rehash/journal.json"
    journal.parent.mkdir(parents=True)
    st = os.stat(q)
    journal.write_text(json.dumps({"version": 2, "command": "rehash", "root": [st.st_dev, st.st_ino], "inode": 1, "files": [
        {"path": f"patches/{NAMES[0]}", "sha256": hashlib.sha256(raw).hexdigest(), "mode": 0o644, "old": None},
        {"path": "targets.lock", "sha256": "0" * 64, "mode": 0o644, "old": 0o644}]}))
    before, planted = queue_hash(q), journal.read_bytes()
    image = tmp_path / "image"
    for args in (("check",), ("push",), ("refresh", "--rehash", NAMES[0]), ("apply", "--root", str(image))):
        r = imgquilt(*args, cwd=q, env=_cli(q))
        assert r.code == 6 and "never acts on a rehash journal" in (r.out + r.err), (args, r.out + r.err)
        assert queue_hash(q) == before and journal.read_bytes() == planted, args


def test_a_forged_journal_with_the_right_inodes_is_never_acted_on(tmp_path: Path) -> None:
    """The same planted journal, right in every field (the current version, the queue's inode and its
    own: inode numbers can be guessed), sealed with a key that is not the user's: refused, exit 6."""
    q = _world(tmp_path, applied=False)
    raw = (q / "patches" / NAMES[0]).read_bytes()
    journal = q / ".imgquilt/rehash/journal.json"
    journal.parent.mkdir(parents=True)
    journal.write_text("{}")
    st = os.stat(q)
    doc = {"version": 3, "command": "rehash", "root": [st.st_dev, st.st_ino], "inode": journal.stat().st_ino, "files": [
        {"path": f"patches/{NAMES[0]}", "sha256": hashlib.sha256(raw).hexdigest(), "mode": 0o644, "old": None},
        {"path": "targets.lock", "sha256": "0" * 64, "mode": 0o644, "old": 0o644}]}
    journal.write_text(json.dumps({**doc, "seal": forger_seal(doc)}))  # rewritten in place: the same inode
    assert json.loads(journal.read_text())["inode"] == journal.stat().st_ino
    before, planted = queue_hash(q), journal.read_bytes()
    for args in (("check",), ("push",), ("refresh", "--rehash", NAMES[0])):
        r = imgquilt(*args, cwd=q, env=_cli(q))
        assert r.code == 6 and "not sealed with your imgquilt journal key" in r.err, (args, r.out + r.err)
        assert queue_hash(q) == before and journal.read_bytes() == planted, args


@pytest.mark.parametrize("applied", [False, True], ids=["unapplied", "applied"])
def test_a_refused_write_puts_back_what_was_written(tmp_path: Path, applied: bool) -> None:
    """The filesystem refuses the last write (targets.lock's rename, ENOSPC): exit 6, and the patch files
    (and work copies) already written are put back before the command returns."""
    old = _world(tmp_path, applied)
    before = _state(old, applied)
    call, n = nth_call(_fresh_trace(tmp_path, old), RENAMES, 'targets.lock")')
    q = tmp_path / "w0"
    _fresh(old, q)
    p = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={call}", "-e", f"inject={call}:error=ENOSPC:when={n}",
                        sys.executable, "-m", "imgquilt", "refresh", "--rehash", NAMES[0]], cwd=q, env=_cli(q), capture_output=True, text=True)
    assert p.returncode == 6, p.stderr
    assert "could not write" in p.stderr and "targets.lock" in p.stderr and "nothing was changed" in p.stderr, p.stderr
    assert _state(q, applied) == before and not (q / ".imgquilt/rehash").exists()
    assert not [x for x in q.rglob("*imgquilt-tmp*")]
    imgquilt("refresh", "--rehash", NAMES[0], cwd=q, env=_cli(q), check=0)


def test_a_file_changed_since_the_kill_is_left_alone(tmp_path: Path) -> None:
    """Recovery puts back only what still holds the killed rehash's bytes: 01-one.patch, edited again by
    hand after the kill, keeps that edit; the work copy and snapshots (which it wrote) are put back."""
    q, before = _killed_at_second_patch(tmp_path, applied=True)
    mine = (q / "patches" / NAMES[0]).read_bytes() + b"# mine\n"
    (q / "patches" / NAMES[0]).write_bytes(mine)
    imgquilt("check", cwd=q, env=_cli(q), check=6)
    assert (q / "patches" / NAMES[0]).read_bytes() == mine
    assert work_hash(q) == before[1] and not (q / ".imgquilt/rehash").exists()
    for name in NAMES[1:]:
        assert (q / "patches" / name).read_bytes() == (tmp_path / "old" / "patches" / name).read_bytes()
