"""The copy of series, patches/ and targets.lock taken at the start, and putting it back on --abort."""
from __future__ import annotations

import json
import stat
from pathlib import Path

from ..errors import BadInput
from ..queue.queue import Queue, load_queue
from ..util.atomic import atomic_write
from .state import rebase_dir, state_dir


def backup(root: Path, q: Queue) -> None:
    """Copy series, every listed patch and targets.lock (with their modes) below rebase/backup."""
    bdir = rebase_dir(root, "backup")
    manifest: dict = {"series": None, "patches": {}, "lock": None}
    series = root / "series"
    if series.is_file():
        bdir.write("series", q.series_bytes)
        manifest["series"] = stat.S_IMODE(series.stat().st_mode)
    for name, p in zip(q.names, q.patches):
        bdir.write(f"patches/{name}", p.raw)
        manifest["patches"][name] = stat.S_IMODE((q.patches_dir / name).stat().st_mode)
    if q.lock_path.is_file():
        bdir.write("targets.lock", q.lock_path.read_bytes())
        manifest["lock"] = stat.S_IMODE(q.lock_path.stat().st_mode)
    bdir.write("manifest.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


def backup_queue(root: Path) -> Queue:
    """The queue as it was when the rebase started."""
    bdir = rebase_dir(root, "backup")
    bdir.ensure()  # checked: no link on the way
    return load_queue(state_dir(root) / "backup")


def _manifest(bdir) -> dict:
    try:
        doc = json.loads(bdir.read("manifest.json") or b"")
        if not (isinstance(doc, dict) and isinstance(doc["patches"], dict)
                and all(isinstance(m, int) or m is None for m in [doc["series"], doc["lock"], *doc["patches"].values()])):
            raise ValueError("unexpected layout")
        unsafe = [n for n in doc["patches"] if n.startswith("/") or "\\" in n or "\0" in n or ".." in n.split("/")]
        if unsafe:
            raise ValueError(f"unsafe patch names {unsafe}")
        return doc
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"The rebase backup's manifest ({bdir.path}/manifest.json) cannot be read ({exc!r}).",
                       hint="The rebase state is damaged: restore series, patches/ and targets.lock from git, then remove .imgquilt/rebase.") from None


def _backed_up(bdir, rel: str) -> bytes:
    data = bdir.read(rel, cap=64 << 20)
    if data is None:
        raise BadInput(f"The rebase backup lost {rel} ({bdir.path}).",
                       hint="Restore it from git, then remove .imgquilt/rebase.")
    return data


def restore(root: Path) -> list[str]:
    """Put series, patches/ and targets.lock back as backed up; returns what was restored."""
    bdir = rebase_dir(root, "backup")
    manifest = _manifest(bdir)
    restored: list[str] = []
    if manifest["series"] is not None:
        atomic_write(root / "series", _backed_up(bdir, "series"), mode=manifest["series"] & 0o777)
        restored.append("series")
    for name, mode in sorted(manifest["patches"].items()):
        mode &= 0o777
        dest = root / "patches" / name
        data = _backed_up(bdir, f"patches/{name}")
        if not dest.is_file() or dest.read_bytes() != data or stat.S_IMODE(dest.stat().st_mode) != mode:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data, mode=mode)
        restored.append(f"patches/{name}")
    lock = root / "targets.lock"
    if manifest["lock"] is not None:
        atomic_write(lock, _backed_up(bdir, "targets.lock"), mode=manifest["lock"] & 0o777)
        restored.append("targets.lock")
    elif lock.exists():
        lock.unlink()  # the rebase wrote it; there was none before
        restored.append("targets.lock (removed)")
    return restored
