"""The copy of series, patches/ and targets.lock taken at the start, and putting it back on --abort."""
from __future__ import annotations

import json
import stat
from pathlib import Path

from ..queue.queue import Queue, load_queue
from ..util.atomic import fsync_dir
from ..util.atomic import atomic_write
from .state import state_dir


def backup(root: Path, q: Queue) -> None:
    """Copy series, every listed patch and targets.lock (with their modes) below rebase/backup."""
    bdir = state_dir(root) / "backup"
    (bdir / "patches").mkdir(parents=True, exist_ok=True)
    manifest: dict = {"series": None, "patches": {}, "lock": None}
    series = root / "series"
    if series.is_file():
        atomic_write(bdir / "series", series.read_bytes())
        manifest["series"] = stat.S_IMODE(series.stat().st_mode)
    for name in q.names:
        src = q.patches_dir / name
        dest = bdir / "patches" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, src.read_bytes())
        manifest["patches"][name] = stat.S_IMODE(src.stat().st_mode)
    if q.lock_path.is_file():
        atomic_write(bdir / "targets.lock", q.lock_path.read_bytes())
        manifest["lock"] = stat.S_IMODE(q.lock_path.stat().st_mode)
    atomic_write(bdir / "manifest.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    fsync_dir(bdir)


def backup_queue(root: Path) -> Queue:
    """The queue as it was when the rebase started."""
    return load_queue(state_dir(root) / "backup")


def restore(root: Path) -> list[str]:
    """Put series, patches/ and targets.lock back as backed up; returns what was restored."""
    bdir = state_dir(root) / "backup"
    manifest = json.loads((bdir / "manifest.json").read_bytes())
    restored: list[str] = []
    if manifest["series"] is not None:
        atomic_write(root / "series", (bdir / "series").read_bytes(), mode=manifest["series"])
        restored.append("series")
    for name, mode in sorted(manifest["patches"].items()):
        dest = root / "patches" / name
        data = (bdir / "patches" / name).read_bytes()
        if not dest.is_file() or dest.read_bytes() != data or stat.S_IMODE(dest.stat().st_mode) != mode:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data, mode=mode)
        restored.append(f"patches/{name}")
    lock = root / "targets.lock"
    if manifest["lock"] is not None:
        atomic_write(lock, (bdir / "targets.lock").read_bytes(), mode=manifest["lock"])
        restored.append("targets.lock")
    elif lock.exists():
        lock.unlink()  # the rebase wrote it; there was none before
        restored.append("targets.lock (removed)")
    return restored
