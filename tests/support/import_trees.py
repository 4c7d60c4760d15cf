"""Trees and refusals for the import tests: a tree made from a listing, its state, a refusal with its hint."""

from __future__ import annotations

import os
import stat
from pathlib import Path

LINK = object()  # a tree entry that is a symlink: (LINK, target)


def make_tree(root: Path, spec: dict[str, object]) -> Path:
    """Files (bytes/str) and symlinks ((LINK, target)) at relative paths."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, what in spec.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, tuple) and what[0] is LINK:
            os.symlink(what[1], p)
        else:
            p.write_bytes(what if isinstance(what, bytes) else str(what).encode())
    return root


def tree_state(root: Path) -> dict[str, tuple]:
    """Every file and symlink below root (never followed): ("file", bytes, executable) / ("link", target).
    The tools' leftovers (.rej, .orig) and imgquilt's record are not part of the tree."""
    out: dict[str, tuple] = {}
    for top, dirs, names in os.walk(root, followlinks=False):
        for n in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            p = os.path.join(top, n)
            rel = os.path.relpath(p, root)
            if rel.endswith((".rej", ".orig")) or rel.startswith("var/lib/imgquilt"):
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("file", Path(p).read_bytes(), bool(st.st_mode & 0o100))
    return out


def refused_with_hint(r, codes=(3, 6)) -> None:
    assert r.code in codes, (r.code, r.err)
    lines = [ln for ln in r.err.strip().splitlines() if ln.strip()]
    assert len(lines) >= 2 and not lines[-1].startswith("imgquilt:"), f"no hint line:\n{r.err}"
