"""A sandbox that runs a program of an image's root filesystem, never on the host's.

Each run is one `unshare --user --map-root-user --net --mount --pid --fork --kill-child` whose first
process is sandbox_child.py under this interpreter: it mounts the root read only (the patched files
over it, read only), a private tmpfs at /tmp, pivots into it, drops every capability and execs the
program (see sandbox_child.py for each step). The program sees the root and nothing of the host: no
host path, no network (a new network namespace holds only a loopback that is down), no process
outside its own pid namespace. It runs with a time limit (the whole namespace is killed when it runs
past it: its pid 1 dies and the kernel kills the rest) and an address-space limit.

The patched files are staged once per Sandbox in a private temporary directory of imgquilt's (mode
0700, outside the root) and removed when it closes; nothing is ever written to the root.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import SandboxUnavailable
from ..fs.content import Data, chunks_of
from .sandbox_ways import argv_bwrap, argv_podman, choose, unshare_argv

CHILD = Path(__file__).with_name("sandbox_child.py")
SETUP_FAILED = 125
TMP_BYTES = 256 << 20
TAIL = 4000  # bytes of each stream a report keeps


@dataclass(frozen=True)
class Staged:
    """A file (or an empty directory, data None) to show at `rel` of the root, read only."""

    rel: str
    data: Data | None
    mode: int = 0o644


@dataclass(frozen=True)
class Ran:
    """One program run in the sandbox."""

    code: int | None  # exit status; None when it was killed at the time limit
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False

    def tail(self, which: str = "stderr") -> str:
        raw = getattr(self, which)[-TAIL:]
        return raw.decode("utf-8", "replace")


@dataclass
class Sandbox:
    """Runs programs of `root` (read only), with `staged` files over it when asked for the patched tree."""

    root: Path
    staged: Sequence[Staged] = ()
    binds: Sequence[tuple[Path, str]] = ()  # host directories shown read only at a path of the root (--mount-queue)
    timeout: float = 120.0
    memory: int | None = None
    cwd: str = "/"
    user: tuple[int, int] | None = None  # (uid, gid) the program runs as (the image's User); None: 0
    base_staged: Sequence[Staged] = ()  # files shown over the root on the base too (a rebase's queue so far)
    way: str = "unshare"  # how it is made (sandbox_ways: the first that works)
    seconds: float = 0.0  # the wall time of every program run so far (the probes' own time)
    cpu_seconds: float = 0.0  # their CPU time (user + system, the sandbox's own processes included)
    _work: Path | None = field(default=None, repr=False)

    def __enter__(self) -> "Sandbox":
        self.way = choose()
        self._work = Path(tempfile.mkdtemp(prefix="imgquilt-boot-"))
        (self._work / "mnt").mkdir()
        _stage(self._work / "files", self.staged)
        _stage(self._work / "base", self.base_staged)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def _mounts(self, patched: bool) -> tuple[list[list], list[list[str]]]:
        """(overlays, binds) for the child. A patched file the base has is bound over it, as the overlay
        deployment does; a new one comes in a read-only overlay on its nearest directory the base has
        (the topmost such directory, once), as does a --mount-queue point the base lacks."""
        assert self._work is not None
        files, points = self._work / ("files" if patched else "base"), self._work / "points"
        staged = list(self.staged if patched else self.base_staged)
        need: set[str] = set()
        for s in staged:
            if s.data is None or not self.is_file(s.rel):
                need.add(self._nearest_dir(s.rel))
        for _, rel in self.binds:
            (points / rel).mkdir(parents=True, exist_ok=True)
            if not self.is_dir(rel):
                need.add(self._nearest_dir(rel))
        tops = [""] if "" in need else sorted(o for o in need if not any(t != o and o.startswith(t + "/") for t in need))
        overlays = []
        for top in tops:
            lowers = [str(d / top) for d in (files, points) if (d / top).is_dir()]
            if lowers:
                overlays.append([lowers, top])
        binds = [[str(files / s.rel), s.rel] for s in staged
                 if s.data is not None and not any(t == "" or s.rel.startswith(t + "/") for t in tops)]
        binds += [[str(host), rel] for host, rel in self.binds]
        return overlays, binds

    def _nearest_dir(self, rel: str) -> str:
        parent = rel.rpartition("/")[0]
        while parent and not self.is_dir(parent):
            parent = parent.rpartition("/")[0]
        return parent

    def _lstat(self, rel: str) -> os.stat_result | None:
        """lstat of `rel` in the root, every component a real directory (a link is never followed)."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            parts = [p for p in rel.split("/") if p]
            for p in parts[:-1]:
                try:
                    nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    return None
                os.close(fd)
                fd = nfd
            if not parts:
                return os.fstat(fd)
            try:
                return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except OSError:
                return None
        finally:
            os.close(fd)

    def is_file(self, rel: str) -> bool:
        import stat

        st = self._lstat(rel)
        return st is not None and stat.S_ISREG(st.st_mode)

    def is_dir(self, rel: str) -> bool:
        import stat

        st = self._lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def run(self, argv: Sequence[str], env: Mapping[str, str], *, patched: bool, stdin: bytes = b"") -> Ran:
        """Run `argv` (argv[0] a path inside the root) on the base or the patched tree."""
        assert self._work is not None, "use the Sandbox as a context manager"
        overlays, binds = self._mounts(patched)
        spec = {"mountpoint": str(self._work / "mnt"), "root": str(Path(self.root).absolute()), "overlays": overlays,
                "binds": binds, "tmp_bytes": TMP_BYTES, "argv": list(argv), "env": dict(env), "cwd": self.cwd,
                "memory": self.memory, "user": list(self.user) if self.user else None}
        cmd, penv, limit = self._command(spec, patched)
        cpu0 = _children_cpu()
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=penv, preexec_fn=limit)
        try:
            out, err = proc.communicate(stdin, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, err = proc.communicate()
            self.seconds += time.monotonic() - start
            self.cpu_seconds += _children_cpu() - cpu0
            return Ran(None, out, err, time.monotonic() - start, timed_out=True)
        except BaseException:
            _kill(proc)
            raise
        ran = Ran(proc.returncode, out, err, time.monotonic() - start)
        self.seconds += ran.seconds
        self.cpu_seconds += _children_cpu() - cpu0
        why = self._setup_failed(ran)
        if why is not None:
            raise SandboxUnavailable(f"The sandbox ({self.way}) could not be made: {why}.",
                                     hint="unshare needs unprivileged user namespaces with mount, pid and network namespaces, "
                                          "tmpfs and overlayfs in them (Linux 5.11 or later); IMGQUILT_SANDBOX picks another "
                                          "way; see docs/boot.md.")
        return ran

    def _command(self, spec: dict, patched: bool):
        """(argv, its environment, a pre-exec limit) of one run, by the way this sandbox is made."""
        host = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if self.way == "bwrap":
            def limit() -> None:  # bwrap has no option for it: the limit is inherited by the program
                if self.memory:
                    import resource

                    resource.setrlimit(resource.RLIMIT_AS, (self.memory, self.memory))

            return argv_bwrap(spec, Path(self.root).absolute(), self._work / "files"), dict(spec["env"]), limit  # type: ignore[operator]
        if self.way == "podman":
            assert self._work is not None
            files = self._work / ("files" if patched else "base")
            staged = self.staged if patched else self.base_staged
            shown = [(str(files / s.rel), s.rel) for s in staged if s.data is not None]
            shown += [(str(host_dir), rel) for host_dir, rel in self.binds]
            return argv_podman(spec, Path(self.root).absolute(), shown, self.timeout), host, None
        return [*unshare_argv(), sys.executable, "-I", "-S", str(CHILD), json.dumps(spec)], host, None

    def _setup_failed(self, ran: Ran) -> str | None:
        """Why the sandbox itself failed (not the program in it), else None."""
        err = ran.stderr.decode("utf-8", "replace").strip().splitlines()
        last = err[-1] if err else ""
        if self.way == "unshare" and ran.code == SETUP_FAILED and "imgquilt-sandbox: " in last:
            return last.removeprefix("imgquilt-sandbox: ")
        if self.way == "bwrap" and ran.code == 1 and last.startswith("bwrap: "):
            return last
        if self.way == "podman" and ran.code in (125, 126) and any(x.startswith("Error: ") for x in err):
            return next(x for x in err if x.startswith("Error: "))
        return None


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _stage(files: Path, staged: Sequence[Staged]) -> None:
    """Write the staged files under `files` (a new directory of ours), each with its mode."""
    files.mkdir()
    for s in staged:
        dest = files / s.rel
        if s.data is None:
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            for chunk in chunks_of(s.data):
                os.write(fd, chunk)
            os.fchmod(fd, s.mode & 0o7777)
        finally:
            os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    """The whole group: unshare and its child (then the kernel kills all of the pid namespace)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def check_available() -> None:
    """Some way to make a sandbox works (sandbox_ways.choose); SandboxUnavailable naming each tried."""
    choose()
