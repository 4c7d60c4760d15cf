"""The in-place apply driver run under strace (traced or killed at a call), for the crash tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.killpoints import CHANGING, traced
from support.qtools import TOOL

DRIVER = """
import sys
from pathlib import Path
from imgquilt.engine.plan import plan_apply
from imgquilt.queue.queue import load_queue
from imgquilt.rootfs.inplace import hold_root, write_in_place
from imgquilt.rootfs.source import RootfsSource
q, root = Path(sys.argv[1]), Path(sys.argv[2])
with hold_root(root) as held:  # as outputs.apply_queue: lock and recover, then plan, then write
    write_in_place(root, plan_apply(load_queue(q), RootfsSource(root), None), held=held)
"""


def run_traced(driver: str, *argv: str, inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    """Run `driver` (Python source) with `argv`: traced into `log` (every changing call), or killed by
    strace as it enters the call `inject` names (SYSCALL:signal=SIGKILL:when=N), or (neither) plainly."""
    env = dict(os.environ, PYTHONPATH=str(TOOL), PYTHONDONTWRITEBYTECODE="1")
    cmd = traced(log, inject, CHANGING) if log is not None or inject is not None else []  # [] : a plain run
    return subprocess.run(cmd + [sys.executable, "-c", driver, *argv], env=env, capture_output=True, text=True)


def _run(q: Path, root: Path, inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
    return run_traced(DRIVER, str(q), str(root), inject=inject, log=log)


REVERSE_DRIVER = """
import sys
from pathlib import Path
from imgquilt.queue.queue import load_queue
from imgquilt.verbs.restore import reverse
reverse(load_queue(Path(sys.argv[1])), Path(sys.argv[2]))  # apply --reverse --root: lock, recover, plan, write
"""
