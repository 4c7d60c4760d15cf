"""A running process as `audit --pid` sees it: its root (/proc/PID/root) and when it started.

The start time is the kernel's (field 22 of /proc/PID/stat: clock ticks since boot, CLOCK_BOOTTIME),
turned into wall-clock seconds; it is exact to one clock tick (10 ms on most kernels) and never later
than the real start, so a file changed in that last tick counts as changed after the start.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import BadInput


def _stat_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read(4096).decode("ascii", "replace")
    except FileNotFoundError:
        raise BadInput(f"There is no process {pid} on this machine (no /proc/{pid}).",
                       hint="Give the PID as this machine sees it (`ps`, or the container engine's inspect shows it).") from None
    except OSError as exc:
        raise BadInput(f"Cannot read /proc/{pid}/stat: {exc.strerror or exc}.") from None


def process_root(pid: int) -> Path:
    """/proc/PID/root of a process that exists and whose root this user may read."""
    if pid <= 0:
        raise BadInput(f"{pid} is not a process ID.")
    _stat_line(pid)
    root = Path(f"/proc/{pid}/root")
    try:
        os.stat(root)
    except PermissionError:
        raise BadInput(f"Cannot read the root of process {pid} ({root}): permission denied.",
                       hint="Run as root, or as the user the process runs as.") from None
    except OSError as exc:
        raise BadInput(f"Cannot read the root of process {pid} ({root}): {exc.strerror or exc}.") from None
    return root


def process_started(pid: int) -> float:
    """When process `pid` started, in seconds since the epoch."""
    line = _stat_line(pid)
    fields = line[line.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        ticks = int(fields[19])  # field 22 of the whole line; the first after ")" is field 3
    except (IndexError, ValueError):
        raise BadInput(f"/proc/{pid}/stat is not what Linux writes; cannot tell when process {pid} started.") from None
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + since_boot
