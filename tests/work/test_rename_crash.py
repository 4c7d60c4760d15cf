"""kill -9 inside `rename`, `delete -r`, `header --set`, `remove` and `move`: the next command leaves the queue and the work tree exactly as
they were or exactly renamed (deleted), with no journal behind, and the command run again succeeds.
Same method as test_rehash_crash.py (one traced run lists the calls, then one run per chosen call under
`strace -e inject=SYSCALL:signal=SIGKILL:when=N`), on a sample of the calls to keep CI cheap: every call
that touches the journal and the two after it, the last 4 (the commit), and evenly spaced others, about
16 a command (IMGQUILT_CRASH_FULL=1 kills at every call of the transaction).

The queue: test_rehash.py's three-patch chain on one file, all three applied, the third one Requires:
the second. `header --set` of the second rewrites its file (and the pins that follow); `remove` of the
file from the top patch rewrites the top patch and puts the work file back. `rename` of the second writes the renamed patch file, the third's Requires, the snapshots
and the applied list, removes the old file, then series (the commit). `delete -r` of the top pops it
(the work copy and the state change), removes its file, then series.

On a queue whose work tree was never used (no `.imgquilt/state`), `move`, `header --set` and `remove`
(refused there: nothing is applied) are killed at every call before the journal too, where the
work-tree lock is taken: taking it makes no file, so none of them leaves a state directory behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.qtools import empty_queue, imgquilt, tree_hash, write_patch
from support.killpoints import STRACE, traced, queue_hash
from support.killpoints import driver_env as _env
from support.killpoints import fresh as _fresh
from support.killpoints import kill_points as _kill_points
from support.rehash_queue import BASE, MOD, NAMES, P1, P2, P3

COMMANDS = {
    "rename": ["rename", "-P", NAMES[1], "02-renamed.patch"],
    "delete": ["delete", "-r", NAMES[2]],
    # issue 35: the other verbs that rewrite patch files through the same journal
    "header": ["header", "-P", NAMES[1], "--set", "X-Reviewed=yes"],
    "remove": ["remove", MOD],
    "move": ["move", "03-c.patch", "--after", "01-a.patch"],  # in _world_of_three_files
}
BUDGET = 16


def _world(tmp: Path) -> Path:
    image = tmp / "image"
    (image / "usr/lib/app").mkdir(parents=True)
    (image / MOD).write_bytes(BASE)
    q = empty_queue(tmp / "old")
    for name, old, new in zip(NAMES, (BASE, P1, P2), (P1, P2, P3)):
        write_patch(q, name, [(MOD, old, new)], fields={"Requires": NAMES[1]} if name == NAMES[2] else None)
    env = _cli(q)
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, env=env, check=0)
    imgquilt("push", "-a", cwd=q, env=env, check=0)
    return q


def _world_of_three_files(tmp: Path, *, push: bool = True) -> Path:
    """For `move`: three patches on three files (so any order applies), locked, the first one applied
    (`push=False`: none, and the work tree never used)."""
    image = tmp / "image"
    (image / "usr/lib/app").mkdir(parents=True)
    q = empty_queue(tmp / "old")
    for k, name in enumerate(("01-a.patch", "02-b.patch", "03-c.patch")):
        path = f"usr/lib/app/f{k}.py"
        (image / path).write_bytes(b"X = %d\n" % k)
        write_patch(q, name, [(path, b"X = %d\n" % k, b"X = %d\n" % (k + 10))])
    env = _cli(q)
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, env=env, check=0)
    if push:
        imgquilt("push", cwd=q, env=env, check=0)
    return q


def _cli(q: Path) -> dict[str, str]:
    return {**_env(), "HOME": str(q.parent / f"{q.name}-home"), "IMGQUILT_CACHE_DIR": str(q.parent / f"{q.name}-cache")}


def _state(q: Path) -> tuple[str, str]:
    return queue_hash(q), tree_hash(q / ".imgquilt/work") + tree_hash(q / ".imgquilt/state")


def _run(q: Path, args: list[str], inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    cmd = traced(log, inject)
    return subprocess.run(cmd + [sys.executable, "-m", "imgquilt", *args], cwd=q, env=_cli(q), capture_output=True, text=True)


def _choose(points: list[tuple[str, int, str]], start: int) -> list[tuple[str, int, str]]:
    tail = points[start:]
    if os.environ.get("IMGQUILT_CRASH_FULL") == "1" or len(tail) <= BUDGET:
        return tail
    keep = {len(tail) - k for k in range(1, 5)}
    for i, (_, _, args) in enumerate(tail):
        if "journal" in args:
            keep.update(range(i, min(i + 3, len(tail))))
    rest = [i for i in range(len(tail)) if i not in keep]
    room = max(BUDGET - len(keep), 0)
    if rest and room:
        keep.update(rest[int(k * len(rest) / room)] for k in range(room))
    return [tail[i] for i in sorted(keep)]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_kill_inside_a_rewriting_verb_leaves_old_or_new(tmp_path: Path, command: str) -> None:
    old = (_world_of_three_files if command == "move" else _world)(tmp_path)
    _kill_everywhere(tmp_path, old, command, COMMANDS[command])


# issue 35: the same verbs on a queue whose work tree was never used (no .imgquilt/state yet): before the
# journal, the command takes the work-tree lock, which made the state directory and its lock file, so a
# kill there left a state directory that was neither before (none) nor after
FRESH = {
    "move": (["move", "03-c.patch", "--after", "01-a.patch"], 0),
    "header": (["header", "-P", "02-b.patch", "--set", "X-Reviewed=yes"], 0),
    "remove": (["remove", "usr/lib/app/f0.py"], 2),  # nothing is applied: refused, nothing written
}


@pytest.mark.parametrize("command", sorted(FRESH))
def test_kill_inside_a_rewriting_verb_on_a_fresh_queue(tmp_path: Path, command: str) -> None:
    old = _world_of_three_files(tmp_path, push=False)
    assert not (old / ".imgquilt/state").exists()
    args, code = FRESH[command]
    _kill_everywhere(tmp_path, old, command, args, fresh=True, code=code)


def _kill_everywhere(tmp_path: Path, old: Path, command: str, args: list[str], *, fresh: bool = False,
                     code: int = 0) -> None:
    """Kill `args` at the chosen calls of its transaction (on a fresh queue: at every call before it
    too); each must end exactly old or exactly new (`code`: the exit of the run that is not killed)."""
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    work = [tmp_path / f"w{k}" for k in range(2)]
    _fresh(old, work[0])
    done = _run(work[0], args, log=tmp_path / "trace.log")
    assert done.returncode == code, done.stderr
    states = {"old": _state(old), "new": _state(work[0])}
    if code == 0:
        assert states["old"][0] != states["new"][0]
        changes_work = command not in ("header", "move") and not fresh  # these leave the work tree as it is
        assert (states["old"][1] != states["new"][1]) is changes_work
    else:
        assert states["new"] == states["old"], "a refusal writes nothing"
    # what check says of each, run on copies (the lock still names a deleted patch: that is the lock's business)
    checks = {}
    for k, src in (("old", old), ("new", work[0])):
        _fresh(src, tmp_path / "probe" / k)
        checks[k] = imgquilt("check", cwd=tmp_path / "probe" / k, env=_cli(tmp_path / "probe" / k)).code
    points = _kill_points(tmp_path / "trace.log")
    journal = next((i for i, p in enumerate(points) if f'"{command}"' in p[2]), len(points))  # .imgquilt/COMMAND/
    before = points[:journal] if fresh else []  # on a fresh queue: where the lock was taken
    chosen = before + _choose(points, journal)
    assert chosen

    def one(k: int, q: Path) -> str:
        name, n, _ = chosen[k]
        _fresh(old, q)
        p = _run(q, args, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode == code:
            return "new" if _state(q) == states["new"] else f"{name}#{n}: finished, but not new"
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        for dirpath, _dirs, files in os.walk(q):  # the dead command's temp files: older than the sweep's grace
            for f in files:
                os.utime(os.path.join(dirpath, f), (time.time() - 60, time.time() - 60), follow_symlinks=False)
        r = imgquilt("check", cwd=q, env=_cli(q))
        got = next((k for k, v in states.items() if v == _state(q)), None)
        if got is None:
            return f"{name}#{n}: neither old nor new after the next command; check said {r.code}: {r.err[-300:]}"
        if (q / ".imgquilt" / command).exists():
            return f"{name}#{n}: the journal is still there"
        if r.code != checks[got]:
            return f"{name}#{n}: recovered {got}, but check says {r.code} (not {checks[got]}): {r.err[-300:]}"
        if got == "old":
            again = imgquilt(*args, cwd=q, env=_cli(q))
            if again.code != code or _state(q) != states["new"]:
                return f"{name}#{n}: recovered old, but the command again gave exit {again.code}: {again.err[-300:]}"
        return got

    with ThreadPoolExecutor(len(work)) as pool:
        shares = pool.map(lambda w: [one(k, work[w]) for k in range(w, len(chosen), len(work))], range(len(work)))
        results = [r for share in shares for r in share]
    bad = [r for r in results if r not in ("old", "new")]
    print(f"kill points: {len(chosen)} of {len(points)} ({len(before)} before the journal); "
          f"old: {results.count('old')}, new: {results.count('new')}")
    assert not bad, f"{len(bad)} bad kill points:\n" + "\n".join(bad[:20])
    if code == 0:
        assert results.count("old") > 0 and results.count("new") > 0
