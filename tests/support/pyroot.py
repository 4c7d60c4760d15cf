"""A Debian root holding this machine's own Debian CPython (/usr/bin/python3.11, its standard library,
its C extension modules in lib-dynload and every shared library they link against), made offline by
copying those files at their own paths (tests/support/pybase.py's way), for `imgquilt boot` to run for real.

pip on Debian installs into /usr/local/lib/python3.X/dist-packages: the packages of a test go there.
Made once per test session (a module-scoped fixture copies it), about 60 MB.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.pybase import _SKIP_STDLIB, _copy, _is_elf, _libs

PYTHON = Path("/usr/bin/python3.11")
DIST = "usr/local/lib/python3.11/dist-packages"


def available() -> bool:
    return PYTHON.is_file() and Path("/usr/lib/python3.11/os.py").is_file()


def debian_root(root: Path) -> Path:
    stdlib = Path("/usr/lib/python3.11")
    elves = [PYTHON]
    _copy(PYTHON, root)
    os.symlink("python3.11", root / "usr/bin/python3")
    for dirpath, dirnames, filenames in os.walk(stdlib):
        rel = Path(dirpath).relative_to(stdlib)
        dirnames[:] = [d for d in dirnames if d not in _SKIP_STDLIB and not (rel == Path(".") and d.startswith("config-"))]
        for name in filenames:
            src = Path(dirpath) / name
            _copy(src, root)
            if _is_elf(src):
                elves.append(src)
    for tool in ("sh", "cat", "ls"):
        found = Path(os.path.realpath(shutil.which(tool) or f"/bin/{tool}"))
        _copy(found, root)
        elves.append(found)
    for elf in elves:
        for lib in _libs(elf):
            _copy(lib, root)
            _copy(Path(os.path.realpath(lib)), root)
    for d in ("tmp", "root", "etc", "dev", "proc", DIST, "usr/lib/python3/dist-packages"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    return root
