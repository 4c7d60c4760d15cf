"""A small package in two versions, as an image bump brings them, and a queue that boots on the old
one only: for the cross-module Python check and the rebase report (tests/pycheck/test_boot_check.py,
test_crosscheck.py).

tinylib 1 -> 2:
- `helper` moved from tinylib/util.py to tinylib/helpers.py;
- `configure(path, *, strict=False)` gained a required parameter `mode`;
- `LEGACY_MODE` was removed from the package;
- tinylib/lazy.py has a module `__getattr__` (both versions): "cannot tell";
- tinylib/plugins.py is the same in both, and already imports a name util never had.

The queue (0001) adds a package `tinyfix` whose modules use the three; 0002 edits plugins.py (its
broken import is the base's, never reported).
"""
from __future__ import annotations

from pathlib import Path

from support.imagetools import build_oci, file
from support.qtools import write_patch

SITE = "usr/local/lib/python3.11/site-packages"
PKG = f"{SITE}/tinylib"

INIT_1 = b'''"""tinylib 1.x"""
from .core import configure

LEGACY_MODE = "compat"
__all__ = ["configure", "LEGACY_MODE"]
'''
INIT_2 = b'''"""tinylib 2.x"""
from .core import configure

__all__ = ["configure"]
'''
CORE_1 = b'''def configure(path, *, strict=False):
    """Read the settings at `path`."""
    return {"path": path, "strict": strict}
'''
CORE_2 = b'''def configure(path, mode, *, strict=False):
    """Read the settings at `path` for `mode` ("serve" or "batch")."""
    return {"path": path, "mode": mode, "strict": strict}
'''
UTIL_1 = b'''def helper(x):
    return x * 2


def other():
    return 1
'''
UTIL_2 = b'''def other():
    return 1
'''
HELPERS_2 = b'''def helper(x):
    return x * 2
'''
LAZY = b'''def __getattr__(name):
    if name.startswith("lazy_"):
        return name
    raise AttributeError(name)
'''
PLUGINS = b'''"""Third-party plugins (none shipped)."""
from tinylib.util import other, long_gone


def plugins():
    return []
'''
PLUGINS_PATCHED = PLUGINS + b'''

def plugin_names():
    return [p.__name__ for p in plugins()]
'''

BOOT = b'''"""tinyfix: loaded at service start."""
from tinylib.util import helper
from tinylib import LEGACY_MODE
from tinylib.lazy import lazy_anything

SCALE = helper(3)
MODE = LEGACY_MODE
'''
SETUP = b'''"""tinyfix.setup: the service's settings."""
from tinylib import configure

SETTINGS = configure("svc.toml", strict=True)
'''

OLD = {f"{PKG}/__init__.py": INIT_1, f"{PKG}/core.py": CORE_1, f"{PKG}/util.py": UTIL_1, f"{PKG}/lazy.py": LAZY,
       f"{PKG}/plugins.py": PLUGINS}
NEW = {f"{PKG}/__init__.py": INIT_2, f"{PKG}/core.py": CORE_2, f"{PKG}/util.py": UTIL_2, f"{PKG}/helpers.py": HELPERS_2,
       f"{PKG}/lazy.py": LAZY, f"{PKG}/plugins.py": PLUGINS}

# where each finding is on the new image: (file, line, col, kind, the words it must hold)
EXPECTED = [
    (f"{SITE}/tinyfix/boot.py", 2, 1, "ImportError", "cannot import name 'helper' from 'tinylib.util'"),
    (f"{SITE}/tinyfix/boot.py", 3, 1, "ImportError", "cannot import name 'LEGACY_MODE' from 'tinylib'"),
    (f"{SITE}/tinyfix/setup.py", 4, 12, "TypeError", "configure() missing 1 required positional argument: 'mode'"),
]
CANNOT_TELL = (f"{SITE}/tinyfix/boot.py", 4, 1)


def base_layer() -> list[dict]:
    """A bottom layer that is no Python package (so reading it is a cost the check should not pay)."""
    return [file("etc/os-release", "ID=tiny\n"), file("usr/bin/tiny", "#!/bin/sh\n", mode=0o755)]


def build_images(tmp: Path) -> tuple[Path, Path]:
    """oci layouts old/ and new/ (tag latest), built with umoci: a base layer, then tinylib."""
    old = build_oci(tmp / "old", [base_layer(), [file(p, d) for p, d in OLD.items()]])
    new = build_oci(tmp / "new", [base_layer(), [file(p, d) for p, d in NEW.items()]])
    return old, new


def make_queue(q: Path) -> Path:
    q.mkdir(parents=True)
    (q / "series").write_text("")
    write_patch(q, "0001-tinyfix.patch", [(f"{SITE}/tinyfix/__init__.py", None, b""), (f"{SITE}/tinyfix/boot.py", None, BOOT),
                                           (f"{SITE}/tinyfix/setup.py", None, SETUP)])
    write_patch(q, "0002-plugin-names.patch", [(f"{PKG}/plugins.py", PLUGINS, PLUGINS_PATCHED)])
    return q
