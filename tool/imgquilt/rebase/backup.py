"""The copy of series, patches/ and targets.lock taken at the start, and putting it back on --abort.

The backup's manifest names every file it holds with its mode and sha256, and is sealed with the
user's key (util.sealing) like the rebase journal: --abort restores only from a manifest whose seal
verifies, only files whose bytes hash as the manifest says, and only to patch names.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from ..errors import BadInput, ForeignState, ImgquiltError
from ..queue.queue import Queue, load_queue
from ..util.atomic import atomic_write
from ..work.queuefiles import QueueFiles
from ..util.sealing import seal, sealed_here
from .state import rebase_dir, state_dir


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def backup(root: Path, q: Queue, *, created: list[str] | None = None) -> None:
    """Copy series, every listed patch and targets.lock (with their modes) below rebase/backup;
    `created`: the patches the rebase will add (--split's copies), which --abort removes again."""
    bdir = rebase_dir(root, "backup")
    manifest: dict = {"series": None, "patches": {}, "lock": None, "sha256": {}}
    if created:
        manifest["created"] = list(created)
    series = root / "series"
    if series.is_file():
        bdir.write("series", q.series_bytes)
        manifest["series"] = stat.S_IMODE(series.stat().st_mode)
        manifest["sha256"]["series"] = _sha(q.series_bytes)
    for name, p in zip(q.names, q.patches):
        bdir.write(f"patches/{name}", p.raw)
        manifest["patches"][name] = stat.S_IMODE((q.patches_dir / name).stat().st_mode)
        manifest["sha256"][f"patches/{name}"] = _sha(p.raw)
    if q.lock_path.is_file():
        lock = q.lock_path.read_bytes()
        bdir.write("targets.lock", lock)
        manifest["lock"] = stat.S_IMODE(q.lock_path.stat().st_mode)
        manifest["sha256"]["targets.lock"] = _sha(lock)
    manifest["seal"] = seal(manifest)
    bdir.write("manifest.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


def backup_queue(root: Path) -> Queue:
    """The queue as it was when the rebase started."""
    bdir = rebase_dir(root, "backup")
    bdir.ensure()  # checked: no link on the way
    return load_queue(state_dir(root) / "backup")


def _manifest(bdir) -> dict:
    from ..work.patchtext import check_patch_name

    try:
        doc = json.loads(bdir.read("manifest.json") or b"")
        if not (isinstance(doc, dict) and isinstance(doc["patches"], dict) and isinstance(doc["sha256"], dict)
                and all(isinstance(m, int) or m is None for m in [doc["series"], doc["lock"], *doc["patches"].values()])):
            raise ValueError("unexpected layout")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise BadInput(f"The rebase backup's manifest ({bdir.path}/manifest.json) cannot be read ({exc!r}).",
                       hint="The rebase state is damaged: restore series, patches/ and targets.lock from git, then remove .imgquilt/rebase.") from None
    if not sealed_here(doc):
        raise ForeignState(f"{bdir.path}/manifest.json is not sealed with your imgquilt journal key (planted, copied "
                           "from elsewhere, or written by another user); imgquilt never restores a queue from it.",
                           hint="Remove .imgquilt/rebase, and restore series, patches/ and targets.lock from git.")
    try:
        if not isinstance(doc.get("created", []), list):
            raise BadInput("`created` is not a list")
        for name in [*doc["patches"], *doc.get("created", [])]:
            check_patch_name(name)
    except ImgquiltError as exc:
        raise ForeignState(f"{bdir.path}/manifest.json names an unusable patch: {exc.message}",
                           hint="Remove .imgquilt/rebase, and restore series, patches/ and targets.lock from git.") from None
    return doc


def _backed_up(bdir, rel: str, manifest: dict) -> bytes:
    data = bdir.read(rel, cap=64 << 20)
    if data is None:
        raise BadInput(f"The rebase backup lost {rel} ({bdir.path}).",
                       hint="Restore it from git, then remove .imgquilt/rebase.")
    if manifest["sha256"].get(rel) != _sha(data):
        raise ForeignState(f"The rebase backup's {rel} ({bdir.path}) is not the file the backup took; imgquilt does "
                           "not restore it.", hint="Restore it from git, then remove .imgquilt/rebase.")
    return data


def restore(root: Path) -> list[str]:
    """Put series, patches/ and targets.lock back as backed up; returns what was restored."""
    bdir = rebase_dir(root, "backup")
    manifest = _manifest(bdir)
    files = {rel: _backed_up(bdir, rel, manifest) for rel in  # every one checked before the first is written
             (["series"] if manifest["series"] is not None else []) + [f"patches/{n}" for n in manifest["patches"]]
             + (["targets.lock"] if manifest["lock"] is not None else [])}
    restored: list[str] = []
    if manifest["series"] is not None:
        atomic_write(root / "series", files["series"], mode=manifest["series"] & 0o777)
        restored.append("series")
    for name, mode in sorted(manifest["patches"].items()):
        mode &= 0o777
        dest = root / "patches" / name
        data = files[f"patches/{name}"]
        if not dest.is_file() or dest.read_bytes() != data or stat.S_IMODE(dest.stat().st_mode) != mode:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data, mode=mode)
        restored.append(f"patches/{name}")
    for name in manifest.get("created", []):
        if name not in manifest["patches"] and os.path.lexists(root / "patches" / name):
            QueueFiles(root).remove_patch(name, missing_ok=True)
            restored.append(f"patches/{name} (removed)")  # a copy --split made
    lock = root / "targets.lock"
    if manifest["lock"] is not None:
        atomic_write(lock, files["targets.lock"], mode=manifest["lock"] & 0o777)
        restored.append("targets.lock")
    elif lock.exists():
        lock.unlink()  # the rebase wrote it; there was none before
        restored.append("targets.lock (removed)")
    return restored
