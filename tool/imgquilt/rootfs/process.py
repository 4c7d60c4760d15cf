"""A running process as `audit --pid` sees it: its root (/proc/PID/root) and when it started.

The start time is the kernel's (field 22 of /proc/PID/stat: clock ticks since boot, CLOCK_BOOTTIME),
turned into wall-clock seconds; it is exact to one clock tick (10 ms on most kernels) and never later
than the real start, so a file changed in that last tick counts as changed after the start.

A PID names a process only while it runs: once it exits, the number can name the next process
started. So the process is pinned before anything is read (pin_process): its start time read, a
pidfd opened, its root opened as a directory fd, and its start time read again, the same or the
audit is refused; every read then goes through that fd (never /proc/PID/root by path again), and
after the reads the process is checked once more (`Pinned.check`): still running, the same start
time, else the audit is refused rather than reported for a process that is gone.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
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


def _start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    line = _stat_line(pid)
    fields = line[line.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return int(fields[19])  # field 22 of the whole line; the first after ")" is field 3
    except (IndexError, ValueError):
        raise BadInput(f"/proc/{pid}/stat is not what Linux writes; cannot tell when process {pid} started.") from None


def _wall(ticks: int) -> float:
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + ticks / os.sysconf("SC_CLK_TCK")


def process_started(pid: int) -> float:
    """When process `pid` started, in seconds since the epoch."""
    return _wall(_start_ticks(pid))


def _changed(pid: int) -> BadInput:
    return BadInput(f"Process {pid} ended while imgquilt audited it (its PID may now name another process); "
                    "nothing is said about it.", hint="Run the audit again while the process runs.")


@dataclass(frozen=True)
class Pinned:
    """A process pinned for one audit: its root open as a directory fd, its start time, its pidfd."""

    pid: int
    ticks: int
    root_fd: int
    pidfd: int | None

    @property
    def started(self) -> float:
        return _wall(self.ticks)

    @property
    def root(self) -> Path:
        """A path to the pinned root (the fd's own /proc entry): opening it opens that very directory,
        whatever process the PID names by then."""
        return Path(f"/proc/self/fd/{self.root_fd}")

    @property
    def shown(self) -> str:
        return f"/proc/{self.pid}/root"

    def environ(self) -> dict[str, str]:
        """The process's environment as it started (/proc/PID/environ: what execve gave it; the
        first of a repeated key, as getenv finds). Read while pinned: call check() after it."""
        try:
            with open(f"/proc/{self.pid}/environ", "rb") as f:
                data = f.read(1 << 22)
        except FileNotFoundError:
            raise _changed(self.pid) from None
        except OSError as exc:
            raise BadInput(f"Cannot read the environment of process {self.pid} (/proc/{self.pid}/environ): {exc.strerror or exc}.",
                           hint="Run as root, or as the user the process runs as.") from None
        out: dict[str, str] = {}
        for item in data.split(b"\0"):
            key, eq, value = item.partition(b"=")
            if eq and key:
                out.setdefault(key.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
        return out

    def check(self) -> None:
        """The process still runs and is the one pinned; else BadInput (the audit is refused)."""
        if self.pidfd is not None:
            import signal

            try:
                signal.pidfd_send_signal(self.pidfd, 0)
            except ProcessLookupError:
                raise _changed(self.pid) from None
            except OSError:
                pass  # not allowed to signal it (another user's): the start time below decides
        try:
            same = _start_ticks(self.pid) == self.ticks
        except BadInput:
            same = False
        if not same:
            raise _changed(self.pid)

    def close(self) -> None:
        for fd in (self.root_fd, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


def pin_process(pid: int) -> Pinned:
    """Pin process `pid` (see the module docstring): BadInput when it does not exist, its root cannot
    be read, or it changed while it was pinned."""
    root = process_root(pid)
    ticks = _start_ticks(pid)
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass  # an old kernel: the start time, read again around every step, pins it alone
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        if pidfd is not None:
            os.close(pidfd)
        raise BadInput(f"Cannot read the root of process {pid} ({root}): {exc.strerror or exc}.") from None
    pinned = Pinned(pid, ticks, root_fd, pidfd)
    try:
        pinned.check()  # the root opened is the one of the process whose start time was read
    except BaseException:
        pinned.close()
        raise
    return pinned
