"""kill -9 at every filesystem-changing syscall of a 50-file in-place apply: the root ends exactly old or new.

How: one traced run of the apply (`strace -f -e trace=...`) lists, per syscall, every call that can
change the filesystem (openat with O_CREAT/O_WRONLY/O_RDWR, write to a file, renameat/renameat2,
unlinkat, linkat, mkdirat, fsync, fchmod, fchown, fsetxattr, ...): about 400 for this apply. For each
chosen call, a fresh copy of the old root is applied under `strace -e inject=SYSCALL:signal=SIGKILL:when=N`,
which kills the process as that call is entered. After each kill a recovery run
(imgquilt.rootfs.inplace.recover, what every `apply --root` does first under the lock) must leave the
tree hash exactly old or exactly new (the tree hash covers every path, mode, owner and byte, so a left
temp, backup, journal or directory fails it), and a second apply must reach new.

Which calls: all of them by default (the full sweep, ~2-3 minutes on a loaded 2-core box). With
IMGQUILT_CRASH_SAMPLE=1 (for a quick local run) a sample of ~110 that covers every phase: every call on the journal and the four
after it (each phase boundary), the first and last four calls of every syscall, and evenly spaced
calls in between. The apply runs as a small driver doing what `apply --root` does (lock and recover,
plan, write) without the CLI's import cost; the queue has no .py file, so the Python check is not run.
Two workers, each on its own root path (the record names the root, so each has its own `new`).

strace is required (CI installs it in .ci/install-tools); without it the test is skipped, naming strace (in CI,
where IMGQUILT_CI_REQUIRE_TOOLS=1, that skip fails the run). The harness is tests/support/killpoints.py.
"""
from __future__ import annotations

import os
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


from imgquilt.engine.plan import plan_apply
from imgquilt.queue.queue import load_queue
from imgquilt.rootfs.inplace import recover, write_in_place
from imgquilt.rootfs.source import RootfsSource
from support.qtools import imgquilt, tree_hash, write_patch
from support.killpoints import STRACE
from support.killpoints import fresh as _fresh
from support.killpoints import kill_points as _kill_points
from support.killpoints import sample as _sample
from support.inplace_crash import REVERSE_DRIVER, _run, run_traced


def _content(i: int) -> bytes:
    return b"".join(b"line %d of file %d\n" % (k, i) for k in range(20))


def _build(tmp: Path) -> tuple[Path, Path]:
    """The old root and a queue of 53 changes: 30 modified (5 with a user xattr, 3 setuid), 12 new
    (8 in directories that do not exist yet), 8 deleted; and 3 Python sources (2 changed, 1 deleted)
    whose 7 bytecode files the apply removes."""
    old = tmp / "old"
    changes = []
    for i in range(38):
        p = old / f"d{i % 4}" / f"f{i:02d}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(_content(i))
        if i < 5:
            os.setxattr(p, "user.imgquilt.test", b"kept %d" % i)
        if 5 <= i < 8:
            os.chmod(p, 0o4755)
        rel = str(p.relative_to(old))
        changes.append((rel, _content(i), None if i >= 30 else _content(i).replace(b"line 7 ", b"LINE 7 ")))
    for i in range(12):
        rel = f"d{i % 4}/n{i:02d}.txt" if i < 4 else f"new{i % 2}/sub{i % 4}/n{i:02d}.txt"
        changes.append((rel, None, b"new file %d\n" % i))
    # Python sources with their bytecode, which the apply removes in the same transaction
    for i in range(3):
        src = old / "py" / f"m{i}.py"
        cache = old / "py" / "__pycache__"
        cache.mkdir(parents=True, exist_ok=True)
        src.write_bytes(b"VALUE = %d\n" % i)
        for tag in ("cpython-311", "cpython-311.opt-1"):
            (cache / f"m{i}.{tag}.pyc").write_bytes(b"stale bytecode %d\n" % i)
        new = None if i == 2 else b"VALUE = %d\n" % (i + 10)
        changes.append((f"py/m{i}.py", src.read_bytes(), new))
    (old / "py" / "m2.pyc").write_bytes(b"sourceless bytecode\n")  # beside the source the patch deletes
    q = tmp / "q"
    write_patch(q, "0001-fifty.patch", changes)
    return old, q


def _second_apply(q: Path, root: Path) -> None:
    write_in_place(root, plan_apply(load_queue(q), RootfsSource(root), None))


def test_kill_at_every_changing_syscall_recovers_old_or_new(tmp_path: Path, cli_env: dict[str, str]) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE}); install it (.ci/install-tools)"
    old, q = _build(tmp_path)
    old_hash = tree_hash(old)
    # the record names the root's path, so each worker applies at its own path and has its own `new`
    roots = [tmp_path / f"w{k}" / "root" for k in range(2)]
    new_hash: dict[Path, str] = {}
    for k, root in enumerate(roots):
        _fresh(old, root)
        log = tmp_path / f"trace{k}.log"
        done = _run(q, root, log=log)
        assert done.returncode == 0, done.stderr
        new_hash[root] = tree_hash(root)
        assert new_hash[root] != old_hash
        assert not list((root / "py").rglob("*.pyc")), "the stale bytecode is gone in new"
    points = _kill_points(log)
    assert [p[:2] for p in points] == [p[:2] for p in _kill_points(tmp_path / "trace0.log")], "the two traced runs differ"
    kinds = Counter(name for name, _, _ in points)
    for needed in ("openat", "write", "renameat", "unlinkat", "linkat", "mkdirat", "fsync", "fchmod", "fchown", "fsetxattr"):
        assert kinds[needed] > 0, f"the trace holds no {needed}: {kinds}"
    assert len(points) > 300, kinds

    chosen = _sample(points, budget=110)

    def one(point: tuple[str, int, str], root: Path) -> str:
        name, n, _ = point
        _fresh(old, root)
        p = _run(q, root, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        recover(root)
        h = tree_hash(root)
        state = "old" if h == old_hash else "new" if h == new_hash[root] else None
        if state is None:
            left = sorted(str(x.relative_to(root)) for x in root.rglob("*") if "imgquilt" in x.name)
            return f"{name}#{n}: neither old nor new after recovery (imgquilt files: {left[:5]})"
        _second_apply(q, root)
        if tree_hash(root) != new_hash[root]:
            return f"{name}#{n}: recovered {state}, but a second apply did not reach new"
        return state

    # one worker per root: worker k takes every k-th point
    with ThreadPoolExecutor(len(roots)) as pool:
        shares = pool.map(lambda k: [one(pt, roots[k]) for pt in chosen[k::len(roots)]], range(len(roots)))
        results = [r for share in shares for r in share]
    outcomes = Counter(r for r in results if r in ("old", "new"))
    bad = [r for r in results if r not in ("old", "new")]
    print(f"kill points: {len(chosen)} of {len(points)} {dict(kinds)}; recovered exactly old: {outcomes['old']}, exactly new: {outcomes['new']}")
    assert not bad, f"{len(bad)} bad kill points:\n" + "\n".join(bad[:20])
    assert outcomes["old"] > 0 and outcomes["new"] > 0
    # the real CLI on a crashed root recovers and reaches new too
    root = roots[0]
    _fresh(old, root)
    assert _run(q, root, inject="renameat:signal=SIGKILL:when=3").returncode == -9
    imgquilt("--queue", str(q), "apply", "--root", str(root), "--no-python-check", cwd=tmp_path, env=cli_env, check=0)
    assert tree_hash(root) == new_hash[root]


def _run_reverse(q: Path, root: Path, inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    return run_traced(REVERSE_DRIVER, str(q), str(root), inject=inject, log=log)


def test_kill_during_apply_reverse_recovers_patched_or_taken_off(tmp_path: Path) -> None:
    """`apply --reverse` is the same journaled write (with the directories apply made removed past the
    commit): killed at a sample of its ~400 changing calls (every phase boundary, the first and last
    of each syscall, evenly spaced others: ~40; the full sweep with IMGQUILT_CRASH_SAMPLE=0), a root ends
    exactly patched or exactly taken off, which is the old root but for the stale bytecode apply removed."""
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE}); install it (.ci/install-tools)"
    old, q = _build(tmp_path)
    patched = tmp_path / "patched"
    _fresh(old, patched)
    assert _run(q, patched, log=tmp_path / "apply.log").returncode == 0
    record = (patched / "var/lib/imgquilt/applied.json").read_text()
    assert '"created_dirs"' in record and '"var/lib/imgquilt"' in record  # the old root has no var/ at all
    patched_hash = tree_hash(patched)
    # taken off: exactly the old root, less the bytecode apply removed (it is not brought back)
    expect = tmp_path / "expect"
    _fresh(old, expect)
    for pyc in list(expect.rglob("*.pyc")):
        pyc.unlink()
    roots = [tmp_path / f"r{k}" / "root" for k in range(2)]
    log = tmp_path / "reverse.log"
    _fresh(patched, roots[0])
    done = _run_reverse(q, roots[0], log=log)
    assert done.returncode == 0, done.stderr
    off_hash = tree_hash(roots[0])
    assert off_hash == tree_hash(expect), "taken off, the root is the image's again (bar the removed bytecode)"
    points = _kill_points(log)
    kinds = Counter(name for name, _, _ in points)
    assert kinds["renameat"] > 0 and kinds["unlinkat"] > 0, kinds
    assert any(name == "unlinkat" and "AT_REMOVEDIR" in args for name, _, args in points), "the directories apply made are removed"
    chosen = _sample(points, budget=40, sampled=True, edge=1)  # the apply sweep above covers the machinery whole

    def one(point: tuple[str, int, str], root: Path) -> str:
        name, n, _ = point
        _fresh(patched, root)
        p = _run_reverse(q, root, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        recover(root)
        h = tree_hash(root)
        state = "patched" if h == patched_hash else "off" if h == off_hash else None
        if state is None:
            left = sorted(str(x.relative_to(root)) for x in root.rglob("*") if "imgquilt" in x.name)
            return f"{name}#{n}: neither patched nor taken off after recovery (imgquilt files: {left[:5]})"
        if state == "patched":
            again = _run_reverse(q, root)
            if again.returncode != 0 or tree_hash(root) != off_hash:
                return f"{name}#{n}: recovered patched, but a second reverse did not take it off"
        return state

    with ThreadPoolExecutor(len(roots)) as pool:
        shares = pool.map(lambda k: [one(pt, roots[k]) for pt in chosen[k::len(roots)]], range(len(roots)))
        results = [r for share in shares for r in share]
    outcomes = Counter(r for r in results if r in ("patched", "off"))
    bad = [r for r in results if r not in ("patched", "off")]
    print(f"reverse kill points: {len(chosen)} of {len(points)} {dict(kinds)}; patched: {outcomes['patched']}, off: {outcomes['off']}")
    assert not bad, f"{len(bad)} bad kill points:\n" + "\n".join(bad[:20])
    assert outcomes["patched"] > 0 and outcomes["off"] > 0
