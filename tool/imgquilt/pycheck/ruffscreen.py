"""The Python check's screen: ruff, in a process of its own, says which files may have an undefined name.

pyflakes builds a Python AST of every file, which costs most of the check; ruff reads a megabyte of
Python in milliseconds on another core while this process runs compile(). The engine runs pyflakes
only on the files ruff flags, so the findings stay pyflakes'. Ruff is asked for F821, F822 and F823
(pyflakes' UndefinedName, UndefinedExport, UndefinedLocal) with `# noqa` ignored, for the running
Python's version (the builtins pyflakes knows); any diagnostic of a file, a syntax error included,
flags it. A file counts as clean only when ruff provably read it to the end: each copy ends with a
probe line, an undefined name of our own, and a file whose probe ruff did not report (one it could
not read, such as a non-UTF-8 source, or one with a star import) is flagged too. Anything unexpected
(no ruff binary, an exit other than 0, output that does not parse) makes the screen step aside:
every file then goes through pyflakes, as without ruff.

Where ruff is more lenient than pyflakes it could hide a finding, so:
- names ruff takes as always defined and pyflakes does not (RUFF_ONLY_NAMES: `__cached__`,
  `__warningregistry__`, ...) flag every file that mentions them at all; tests/pycheck/test_ruffscreen.py
  compares the two lists of the installed versions, so a release that adds one fails there first;
- ruff is taken only from the environment imgquilt runs in (the `ruff` package's own binary, as
  `ruff.find_ruff_bin()` finds it, or the one beside this interpreter), never from PATH: a `ruff`
  earlier on PATH that answers only the probe would pass every file.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable
from ..settings import current

CODES = "F821,F822,F823"
# defined for ruff (builtins, module globals of some Python) but undefined for pyflakes 3-4
RUFF_ONLY_NAMES = ("__cached__", "__lazy_import__", "__warningregistry__", "sentinel")
_RUFF_ONLY = re.compile(rb"(?<![A-Za-z0-9_])(?:" + b"|".join(n.encode() for n in RUFF_ONLY_NAMES) + rb")(?![A-Za-z0-9_])")
PROBE = "__imgquilt_screen_probe__"
TIMEOUT = 120  # seconds; ruff reads a megabyte of Python in milliseconds


def find_ruff() -> str | None:
    """The `ruff` package's own binary in this environment (never a PATH lookup), else None."""
    try:
        from ruff import find_ruff_bin

        found = find_ruff_bin()
    except (ImportError, OSError):
        found = str(Path(sys.executable).parent / "ruff")
    return found if os.path.isfile(found) and os.access(found, os.X_OK) else None


def _scratch() -> str | None:
    """Memory-backed scratch space where there is one (the copies live for milliseconds), else $TMPDIR."""
    shm = "/dev/shm"
    return shm if "TMPDIR" not in os.environ and os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class RuffScreen:
    """A pycheck.Screen backed by the ruff binary at `exe`."""

    def __init__(self, exe: str, version: str) -> None:
        self.exe = exe
        self.version = version

    def start(self, items: list[tuple[bytes, str]]) -> Callable[[], set[int] | None]:
        tmp = tempfile.TemporaryDirectory(prefix="imgquilt-ruff-", dir=_scratch())
        try:
            files = []
            for i, (data, _name) in enumerate(items):
                name = f"{i:06d}.py"  # our names, never the patch's
                with open(os.path.join(tmp.name, name), "wb") as f:
                    f.write(data)
                    f.write(b"\n%s\n" % PROBE.encode())
                files.append(name)
            proc = subprocess.Popen(
                [self.exe, "check", "--isolated", "--no-cache", "--ignore-noqa", "--exit-zero", "--quiet",
                 "--select", CODES, "--output-format", "json",
                 "--target-version", f"py{sys.version_info[0]}{sys.version_info[1]}", *files],
                cwd=tmp.name,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                # one thread: the other core compiles meanwhile (measured: more threads only contend)
                env={**os.environ, "RAYON_NUM_THREADS": "1"})
        except OSError:
            tmp.cleanup()
            return lambda: None
        index = {name: i for i, name in enumerate(files)}

        def result() -> set[int] | None:
            try:
                out, _ = proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:  # a ruff that hangs is no screen: pyflakes reads every file
                proc.kill()
                proc.communicate()
                return None
            finally:
                tmp.cleanup()
            if proc.returncode != 0:
                return None
            flagged: set[int] = set()
            probed: set[int] = set()
            try:
                for d in json.loads(out):
                    i = index[os.path.basename(d["filename"])]
                    is_probe = d["code"] == "F821" and PROBE in d["message"]
                    (probed if is_probe else flagged).add(i)
            except (ValueError, KeyError, TypeError):
                return None
            lenient = {i for i, (data, _name) in enumerate(items) if _RUFF_ONLY.search(data)}
            return flagged | lenient | (set(range(len(files))) - probed)

        return result


def ruff_screen() -> RuffScreen | None:
    """The screen when ruff is installed and answers, else None (every file goes through pyflakes)."""
    if current().no_ruff:
        return None
    exe = find_ruff()
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "version"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.decode(errors="replace").split()
    if out.returncode != 0 or len(words) < 2 or words[0] != "ruff":
        return None
    return RuffScreen(exe, f"ruff{words[1]}")
