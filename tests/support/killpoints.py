"""The strace kill-point harness the crash tests share.

One traced run of a command (`strace -f -e trace=CHANGING -o LOG`) lists every call that may change the
filesystem (`kill_points`); then the command is run once per chosen call under
`strace -e inject=SYSCALL:signal=SIGKILL:when=N`, which kills it as that call is entered, and the test
checks what is left (exactly old or exactly new, after the recovery the next command does).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from support.qtools import TOOL

STRACE = shutil.which("strace") or "/usr/bin/strace"
# the syscalls that can change the filesystem
CHANGING = [
    "openat",
    "write",
    "pwrite64",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "fsync",
    "fdatasync",
    "fchmod",
    "fchmodat",
    "fchown",
    "fchownat",
    "fsetxattr",
    "setxattr",
    "lsetxattr",
    "ftruncate",
    "truncate",
]
_CALL = re.compile(r"^(?:\d+ +)?([a-z0-9_]+)\((.*)$")


def traced(log: Path | None = None, inject: str | None = None, changing: list[str] | None = None) -> list[str]:
    """The strace prefix of a command: with `log`, trace every call of `changing` (default CHANGING) into
    it; else kill as `inject` (SYSCALL:signal=SIGKILL:when=N) says, tracing only that syscall."""
    cmd = [STRACE, "-f", "-qq"]
    if log is not None:
        return cmd + ["-o", str(log), "-e", "trace=" + ",".join(CHANGING if changing is None else changing)]
    assert inject is not None
    return cmd + ["-o", "/dev/null", "-e", f"trace={inject.split(':')[0]}", "-e", f"inject={inject}"]


def kill_points(log: Path) -> list[tuple[str, int, str]]:
    """(syscall, N, args) for every call in the trace that may change the filesystem (N counts that syscall)."""
    seen: Counter[str] = Counter()
    points = []
    for line in log.read_text().splitlines():
        m = _CALL.match(line)
        if not m:
            continue  # `<... resumed>`, signals, exit
        name, args = m.groups()
        seen[name] += 1
        if name == "openat" and not re.search(r"O_CREAT|O_WRONLY|O_RDWR", args):
            continue  # a read
        if name in ("write", "pwrite64") and re.match(r"[12],", args):
            continue  # stdout/stderr
        points.append((name, seen[name], args))
    return points


def sample(
    points: list[tuple[str, int, str]], budget: int, *, sampled: bool = False, edge: int = 4
) -> list[tuple[str, int, str]]:
    """All points unless sampling (`sampled`, or IMGQUILT_CRASH_SAMPLE=1) and they exceed the budget; then
    every phase boundary (each journal call and the 4 calls after it), the first and last 4 of every
    syscall, and evenly spaced points in between, so that every phase and every kind of call is killed at."""
    sampled = (sampled or os.environ.get("IMGQUILT_CRASH_SAMPLE") == "1") and os.environ.get(
        "IMGQUILT_CRASH_SAMPLE"
    ) != "0"
    if not sampled or len(points) <= budget:
        return points
    keep: set[int] = set()
    for i, (_, _, args) in enumerate(points):
        if "imgquilt-journal" in args:
            keep.update(range(i, min(i + 5, len(points))))
    by_name: dict[str, list[int]] = {}
    for i, (name, _, _) in enumerate(points):
        by_name.setdefault(name, []).append(i)
    for idx in by_name.values():
        keep.update(idx[:edge] + idx[-edge:])
    rest = [i for i in range(len(points)) if i not in keep]
    room = max(budget - len(keep), 0)
    if rest and room:
        step = len(rest) / room
        keep.update(rest[int(k * step)] for k in range(room))
    return [points[i] for i in sorted(keep)]


def nth_call(log: Path, syscalls: tuple[str, ...], needle: str) -> tuple[str, int]:
    """The first call of one of `syscalls` in a traced run with `needle` in its arguments: (its syscall,
    which call of that syscall it is, as strace's when= counts)."""
    seen: dict[str, int] = {}
    for line in log.read_text().splitlines():
        m = _CALL.match(line)
        if m and m.group(1) in syscalls:
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
            if needle in m.group(2):
                return m.group(1), seen[m.group(1)]
    raise AssertionError(f"no {syscalls} call with {needle} in {log}")


def fresh(src: Path, dst: Path) -> None:
    """dst becomes a copy of src (symlinks kept), whatever a killed run left there."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


def queue_hash(q: Path) -> str:
    """Every path and byte of the queue but its state directory (.imgquilt/), temp files included."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(q):
        dirnames[:] = sorted(d for d in dirnames if d != ".imgquilt")
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(q)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _killed_tmp() -> str:
    """TMPDIR of the traced runs: a run killed inside a temporary directory of its own (queue.difftext's,
    killed at an unlink of its cleanup) cannot remove it, so they go here, removed when the tests end."""
    path = tempfile.mkdtemp(prefix="imgquilt-killed-runs-")
    atexit.register(shutil.rmtree, path, True)
    return path


def driver_env() -> dict[str, str]:
    """The environment of a traced imgquilt run: this worktree's code, no bytecode written, no ruff,
    temporary files where the tests remove them."""
    return dict(
        os.environ, PYTHONPATH=str(TOOL), PYTHONDONTWRITEBYTECODE="1", IMGQUILT_NO_RUFF="1", TMPDIR=_killed_tmp()
    )
