"""kill -9 during `restore`, during an in-place apply of symlink sections, and during its `apply --reverse`:
the root ends exactly as before or exactly as after, never between.

The strace kill-point harness is test_inplace_crash's (imported, not copied): one traced run lists the
calls that can change the filesystem; each that changes the tree's names (every rename, unlink, link,
symlink, mkdir: every step of the transaction, the journal's included) and the first and last of each
other kind (a temp's write, fsync, fchmod, fchown) is killed at on a fresh copy of the root, which
recovery (what every in-place command does first, under the lock) must leave exactly old or exactly
new; from two roots of each state short of the end, a second run must reach it. The queue is small
(3 link sections, 2 edits, 1 new file) so the three sweeps (~20-35 points each) stay near a minute on
a loaded 2-core box; IMGQUILT_CRASH_SAMPLE=0 kills at every changing call.
"""
from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from imgquilt.queue.patchfile import Header, build_patch, make_section
from imgquilt.rootfs.inplace import recover
from imgquilt.store import ObjectStore
from support.qtools import empty_queue, tree_hash
from support.inplace_crash import DRIVER, REVERSE_DRIVER, run_traced
from support.killpoints import STRACE
from support.killpoints import fresh as _fresh
from support.killpoints import kill_points as _kill_points

RESTORE_DRIVER = """
import sys
from pathlib import Path
from imgquilt.queue.queue import load_queue
from imgquilt.verbs.restore import restore
restore(load_queue(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[3:])  # restore PATH... --root: lock, recover, plan, write
"""


STEPS = {"rename", "renameat", "renameat2", "unlink", "unlinkat", "link", "linkat", "symlink", "symlinkat", "mkdir", "mkdirat"}


def _content(i: int) -> bytes:
    return b"".join(b"line %d of file %d\n" % (k, i) for k in range(12))


def _build(tmp: Path) -> tuple[Path, Path, list[str]]:
    """An old root holding links and files, and a queue (one patch) that retargets a link, deletes one,
    creates one in directories that do not exist yet, edits 2 files and creates 1; its bases in the
    object store. Returns the root, the queue, and the paths `restore` puts back."""
    old = tmp / "old"
    for d in ("etc/app/v1", "etc/app/v2", "srv"):
        (old / d).mkdir(parents=True, exist_ok=True)
    os.symlink("v1", old / "etc/app/current")
    os.symlink("/etc/app/v1/conf", old / "etc/old-link")
    sections = [make_section("etc/app/current", b"v1", b"v2", link=True),
                make_section("etc/old-link", b"/etc/app/v1/conf", None, link=True),
                make_section("opt/links/v2", None, b"../../etc/app/v2", link=True)]
    edited = []
    for i in range(2):
        rel = f"srv/f{i}.txt" if i else "etc/app/v1/f0.conf"
        (old / rel).write_bytes(_content(i))
        os.chmod(old / rel, 0o640 if i else 0o644)
        sections.append(make_section(rel, _content(i), _content(i).replace(b"line 3 ", b"LINE 3 ")))
        edited.append(rel)
    sections.append(make_section("srv/new.txt", None, b"new\n"))
    q = empty_queue(tmp / "q")
    (q / "patches").mkdir()
    p = build_patch("0001-links.patch", Header(b"Description: links and files\n\n"), sections)
    (q / "patches/0001-links.patch").write_bytes(p.raw)
    (q / "series").write_text("0001-links.patch\n")
    store = ObjectStore(q)
    for data in (_content(0), _content(1), b"v1", b"/etc/app/v1/conf"):
        store.put(data)
    return old, q, edited + ["srv/new.txt", "etc/app/current", "etc/old-link"]


def _points(log: Path) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]]]:
    """Every call that changes the tree's names (each rename, unlink, link, symlink, mkdir: every step of
    the transaction, the journal's included), and the first and last of each other changing call
    (a temp's write, fsync, fchmod, fchown): (chosen, all)."""
    points = _kill_points(log)
    keep = {i for i, pt in enumerate(points) if pt[0] in STEPS}
    by_name: dict[str, list[int]] = {}
    for i, pt in enumerate(points):
        by_name.setdefault(pt[0], []).append(i)
    for name, idx in by_name.items():
        keep.update((idx[0], idx[-1]))
    return [points[i] for i in sorted(keep)], points


def _sweep(tmp: Path, start: Path, run: Callable[..., object], states: dict[str, str], then: str) -> Counter[str]:
    """Kill `run` at each chosen call on fresh copies of `start`: after recovery each root must hash as
    one of `states` (name -> tree hash), and (for two roots of each state short of it) a plain run must
    then reach `then`."""
    log = tmp / "sweep.log"
    roots = [tmp / f"w{k}" / "root" for k in range(2)]
    _fresh(start, roots[0])
    assert run(roots[0], log=log).returncode == 0
    chosen, points = _points(log)
    kinds = Counter(name for name, _, _ in points)
    assert kinds["renameat"] > 0 and kinds["fsync"] > 0, kinds
    if os.environ.get("IMGQUILT_CRASH_SAMPLE") == "0":
        chosen = points
    checked: Counter[str] = Counter()

    def one(point: tuple[str, int, str], root: Path) -> str:
        name, n, _ = point
        _fresh(start, root)
        p = run(root, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode != -9:
            return f"{name}#{n}: not killed (exit {p.returncode}): {p.stderr[-300:]}"
        recover(root)
        h = tree_hash(root)
        state = next((s for s, want in states.items() if want == h), None)
        if state is None:
            left = sorted(str(x.relative_to(root)) for x in root.rglob("*") if "imgquilt" in x.name)
            return f"{name}#{n}: neither of {sorted(states)} after recovery (imgquilt files: {left[:5]})"
        if state != then and checked[state] < 2:
            checked[state] += 1
            again = run(root)
            if again.returncode != 0 or tree_hash(root) != states[then]:
                return f"{name}#{n}: recovered {state}, but a second run did not reach {then}: {again.stderr[-300:]}"
        return state

    with ThreadPoolExecutor(len(roots)) as pool:
        shares = pool.map(lambda k: [one(pt, roots[k]) for pt in chosen[k::len(roots)]], range(len(roots)))
        results = [r for share in shares for r in share]
    bad = [r for r in results if r not in states]
    assert not bad, f"{len(bad)} bad kill points of {len(chosen)}:\n" + "\n".join(bad[:20])
    out = Counter(results)
    print(f"{len(chosen)} of {len(points)} kill points {dict(kinds)}: {dict(out)}")
    return out


def _state_of(start: Path, at: Path, run: Callable[..., object]) -> str:
    _fresh(start, at)
    done = run(at)
    assert done.returncode == 0, done.stderr
    return tree_hash(at)


def test_kill_during_apply_of_symlink_sections_and_its_reverse(tmp_path: Path) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    old, q, _ = _build(tmp_path)
    # every worker root sits at the same depth under tmp_path, so the absolute link targets agree
    patched = tmp_path / "p" / "root"
    apply_ = lambda root, **kw: run_traced(DRIVER, str(q), str(root), **kw)  # noqa: E731
    reverse_ = lambda root, **kw: run_traced(REVERSE_DRIVER, str(q), str(root), **kw)  # noqa: E731
    new_hash = _state_of(old, patched, apply_)
    assert os.readlink(patched / "etc/app/current") == "v2" and not os.path.lexists(patched / "etc/old-link")
    assert os.readlink(patched / "opt/links/v2") == "../../etc/app/v2"
    got = _sweep(tmp_path / "apply", old, apply_, {"old": tree_hash(old), "new": new_hash}, "new")
    assert got["old"] and got["new"]
    off = tmp_path / "off" / "root"
    _fresh(patched, off)
    assert reverse_(off).returncode == 0
    assert tree_hash(off) == tree_hash(old), "taken off, the root is the old one again, links and all"
    got = _sweep(tmp_path / "reverse", patched, reverse_, {"patched": new_hash, "off": tree_hash(old)}, "off")
    assert got["patched"] and got["off"]


def test_kill_during_restore(tmp_path: Path) -> None:
    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    old, q, paths = _build(tmp_path)
    patched = tmp_path / "p" / "root"
    _state_of(old, patched, lambda root, **kw: run_traced(DRIVER, str(q), str(root), **kw))
    restore_ = lambda root, **kw: run_traced(RESTORE_DRIVER, str(q), str(root), *paths, **kw)  # noqa: E731
    done = tmp_path / "r" / "root"
    restored = _state_of(patched, done, restore_)
    for p in paths[:2]:
        assert (done / p).read_bytes() == (old / p).read_bytes(), p
    assert not (done / "srv/new.txt").exists()
    assert os.readlink(done / "etc/app/current") == "v1" and os.readlink(done / "etc/old-link") == "/etc/app/v1/conf"
    got = _sweep(tmp_path / "restore", patched, restore_, {"before": tree_hash(patched), "restored": restored}, "restored")
    assert got["before"] and got["restored"]
