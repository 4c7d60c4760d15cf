"""The inner-loop parts of the benchmark (issue 11): queues built from real code and synthetic ones,
and the child-process runner that reports wall time and peak RSS. Used by bench_apply.py.

History queue: this repository's own git history, replayed as a queue. Every first-parent step of
HEAD changes some Python files; each file's change becomes patches, one per group of hunks (the
groups as small as it takes to reach the wanted count), stopping at the end of a step once the
count is reached. The rootfs is the tree of the first commit, so every file ends at a real
commit's state (the Python check compares those with the first commit's files), while the patches
in between hold the real, partial edits; every other Python file of the first commit is there too (the
cross-module Python check reads the modules the patched files import). Decision: the git history has ~50 steps over ~190 files,
too few for 400 whole-file patches, and the pip cache holds no series of releases; splitting each
step's change per hunk group keeps every line real.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from imgquilt.engine.apply import apply_hunks
from imgquilt.queue.difftext import diff_hunks
from imgquilt.queue.patchfile import Header, build_patch, make_section

PREFIX = "srv/app"  # where the repository's files lie in the rootfs


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float  # user + system of the child (less noisy than wall time on a shared machine)
    max_rss_kb: int
    code: int
    out: bytes
    err: bytes


TIME = shutil.which("time") and "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def run_child(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> Run:
    """Run `cmd`, returning its wall time, CPU and its own peak RSS.

    A child's ru_maxrss counts the memory of the process it was forked from (Linux keeps the high
    water mark across exec), so the peak is taken by GNU time (a small process) where it is installed:
    it forks the command and reports wait4's figure for it alone. Without it, wait4's own figure is
    used, which is at least this (Python) process's size."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as rss:
        wrapped = [TIME, "-q", "-f", "%M", "-o", rss.name, *cmd] if TIME else cmd
        t0 = time.perf_counter()
        p = subprocess.Popen(wrapped, stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        max_rss = usage.ru_maxrss
        if TIME:
            try:
                max_rss = int(Path(rss.name).read_text().split()[-1])
            except (ValueError, IndexError):
                pass
        return Run(seconds, usage.ru_utime + usage.ru_stime, max_rss, p.returncode, out.read(), err.read())


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def _show(repo: Path, commit: str, path: str) -> bytes | None:
    p = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    return p.stdout if p.returncode == 0 else None


@dataclass(frozen=True)
class HistoryQueue:
    queue: Path
    rootfs: Path
    patches: int
    files: int
    steps: int


def build_history_queue(repo: Path, dest: Path, want: int = 400) -> HistoryQueue:
    """The queue and the rootfs it applies to (see the module docstring)."""
    commits = _git(repo, "rev-list", "--first-parent", "--reverse", "HEAD").decode().split()
    changes: list[list[tuple[str, bytes | None, bytes | None]]] = []  # per step: (path, old, new)
    for prev, cur in zip(commits, commits[1:]):
        names = _git(repo, "diff", "--name-only", "--no-renames", prev, cur, "--", "*.py").decode().split()
        step = [(n, _show(repo, prev, n), _show(repo, cur, n)) for n in names]
        changes.append([c for c in step if c[1] != c[2]])
    hunks = {(i, n): diff_hunks(old, new) for i, step in enumerate(changes) for n, old, new in step}
    per_change = 1
    while sum(min(len(h), per_change) or 1 for h in hunks.values()) < want and per_change < 10_000:
        per_change += 1  # more pieces per file change until the history gives `want` patches
    shutil.rmtree(dest, ignore_errors=True)
    root, queue = dest / "rootfs", dest / "queue"
    (queue / "patches").mkdir(parents=True)
    names: list[str] = []
    touched: set[str] = set()
    used_steps = 0
    for i, step in enumerate(changes):
        if len(names) >= want:
            break
        used_steps += 1
        for path, old, new in step:
            hs = hunks[(i, path)]
            pieces = max(1, min(len(hs), per_change)) if old is not None and new is not None else 1
            bounds = [round(k * len(hs) / pieces) for k in range(pieces + 1)]
            state = old
            for k in range(pieces):
                nxt = new if k == pieces - 1 else apply_hunks(old or b"", hs[: bounds[k + 1]])
                name = f"{len(names) + 1:04d}-{Path(path).stem}.patch"
                header = Header(f"Description: {commits[i + 1][:12]} {path} ({k + 1}/{pieces})\n\n".encode())
                section = make_section(f"{PREFIX}/{path}", state, nxt)
                (queue / "patches" / name).write_bytes(build_patch(name, header, [section]).raw)
                names.append(name)
                state = nxt
            touched.add(path)
    (queue / "series").write_text("".join(n + "\n" for n in names))
    # every Python file of the first commit, not only those the queue touches: the cross-module
    # check reads the modules the patched files import (a tree without them would be refused)
    first = _git(repo, "ls-tree", "-r", "--name-only", commits[0]).decode().split("\n")
    for path in sorted(touched | {p for p in first if p.endswith(".py")}):
        data = _show(repo, commits[0], path)
        if data is not None:
            (root / PREFIX / path).parent.mkdir(parents=True, exist_ok=True)
            (root / PREFIX / path).write_bytes(data)
    (root / PREFIX).mkdir(parents=True, exist_ok=True)
    return HistoryQueue(queue, root, len(names), len(touched), used_steps)


def build_synthetic(dest: Path, files: int = 1000, patches: int = 1000) -> tuple[Path, Path]:
    """A series of `patches` patches over `files` text files (each patch changes one line of one file)."""
    shutil.rmtree(dest, ignore_errors=True)
    root, queue = dest / "rootfs", dest / "queue"
    (queue / "patches").mkdir(parents=True)
    state: dict[str, bytes] = {}
    for f in range(files):
        path = f"etc/app/d{f % 20:02d}/f{f:04d}.conf"
        data = b"".join(b"key%d = value %d\n" % (k, k) for k in range(40))
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        state[path] = data
    paths = sorted(state)
    names = []
    for n in range(patches):
        path = paths[n % files]
        old = state[path]
        line = b"key%d = value %d\n" % (n % 40, n % 40)
        new = old.replace(line, b"key%d = patched by %d\n" % (n % 40, n), 1)
        name = f"{n + 1:04d}-p.patch"
        (queue / "patches" / name).write_bytes(build_patch(name, Header(b"Description: synthetic\n\n"),
                                                            [make_section(path, old, new)]).raw)
        state[path] = new
        names.append(name)
    (queue / "series").write_text("".join(n + "\n" for n in names))
    return queue, root


def verify_in_memory(queue: Path, root: Path) -> float:
    """Seconds to load the queue and verify it on the rootfs in memory (nothing written), in this process."""
    from imgquilt.engine.plan import plan_apply
    from imgquilt.queue.queue import load_queue
    from imgquilt.rootfs.source import RootfsSource

    t0 = time.perf_counter()
    q = load_queue(queue)
    plan_apply(q, RootfsSource(root, ref=f"rootfs:{root}"), None)
    return time.perf_counter() - t0


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        out = min(out, fn())
    return out


if __name__ == "__main__":  # a quick look: python3 bench/inner_loop.py DEST
    dest = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/imgquilt-history")
    hq = build_history_queue(Path(__file__).resolve().parent.parent, dest)
    print(hq)
