"""Helpers for tests: build queues and patches from before/after bytes, run the CLI, hash trees."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from imgquilt.queue.patchfile import Header, build_patch, make_section

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tool"


# the demo service every CLI session patches: a Python file and a CRLF config
SERVER = b"import os\n\nPORT = int(os.environ.get('PORT', '8000'))\n\n\ndef serve():\n    return PORT\n"
CONF = b"[server]\r\nworkers = 2\r\n"


def merged_usr_root(root: Path, files: dict[str, bytes], *, modes: dict[str, int] | None = None,
                    links: tuple[str, ...] = ("lib",)) -> Path:
    """A merged-/usr rootfs: each of `links` is a relative symlink X -> usr/X (so patches can name
    lib/... while the bytes live in usr/lib/...), holding `files` (paths under the root)."""
    root.mkdir(parents=True)
    for name in links:
        (root / "usr" / name).mkdir(parents=True, exist_ok=True)
        os.symlink(f"usr/{name}", root / name)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    for rel, mode in (modes or {}).items():
        os.chmod(root / rel, mode)
    return root


def svc_root(root: Path) -> Path:
    """The demo service's merged-/usr rootfs: usr/lib/svc/server.py (reached as lib/svc/...) and etc/svc.conf."""
    return merged_usr_root(root, {"usr/lib/svc/server.py": SERVER, "etc/svc.conf": CONF})


def empty_queue(q: Path) -> Path:
    """A queue with an empty series (what `imgquilt init` leaves, less patches/ and .gitignore)."""
    q.mkdir(parents=True)
    (q / "series").write_text("")
    return q


def write_patch(queue: Path, name: str, changes: list[tuple[str, bytes | None, bytes | None]], *,
                fields: dict[str, str] | None = None, modes: dict[str, int] | None = None) -> bytes:
    """Write patches/NAME from (path, old, new) triples and append it to series; return its bytes."""
    head = "".join(f"{k}: {v}\n" for k, v in (fields or {"Description": name}).items()) + "\n"
    sections = [make_section(p, old, new, (modes or {}).get(p)) for p, old, new in changes]
    patch = build_patch(name, Header(head.encode()), sections)
    (queue / "patches").mkdir(parents=True, exist_ok=True)
    (queue / "patches" / name).write_bytes(patch.raw)
    with open(queue / "series", "a") as f:
        f.write(name + "\n")
    return patch.raw


def copy_demo_queue(dest: Path) -> Path:
    """The repository's demo queue (series, patches, lock, examples/) copied to `dest`, so that what
    apply keeps in the queue's .imgquilt/ never lands in the repository."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".venv", ".git", "out", ".imgquilt", "tests", "tool", "bench"))
    return dest


def tree_hash(root: Path) -> str:
    """A hash of a whole tree: every path, type, mode, owner, symlink target and file content."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}\0{st.st_mode:o}\0{st.st_uid}\0{st.st_gid}\0".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


@dataclass
class Run:
    code: int
    out: str
    err: str


def imgquilt(*args: str, cwd: Path, env: dict[str, str] | None = None, check: int | None = None) -> Run:
    """Run the real console entry point (python -m imgquilt) as a user would."""
    e = dict(env or os.environ)
    e["PYTHONPATH"] = str(TOOL) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("COLUMNS", "200")
    p = subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=e, capture_output=True, text=True)
    r = Run(p.returncode, p.stdout, p.stderr)
    # exit 1 is a bug (docs/exit-codes.md): no input in the suite may get it, whatever a test expects
    assert r.code != 1 or check == 1, f"imgquilt {' '.join(args)} exited 1 (an internal error)\n{r.err[-2000:]}"
    if check is not None:
        assert r.code == check, f"imgquilt {' '.join(args)} exited {r.code}, wanted {check}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    return r
