"""targets.lock: the pinned image and the pinned state of every target file (TOML, sorted, stable)."""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from ..errors import MalformedLock
from ..fs.types import ImageInfo

LOCK_VERSION = 1


@dataclass(frozen=True)
class LockTarget:
    """One target file as pinned."""

    path: str
    resolved: str
    base_sha256: str
    final_sha256: str
    mode: int
    uid: int
    gid: int
    layer: str | None
    patches: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    """The whole targets.lock."""

    series_sha256: str
    image: ImageInfo
    targets: tuple[LockTarget, ...]
    version: int = LOCK_VERSION

    def target(self, path: str) -> LockTarget | None:
        return next((t for t in self.targets if t.path == path), None)


def rootfs_digest(pairs: list[tuple[str, str]]) -> str:
    """A digest for a filesystem with no manifest: over its (resolved path, base sha256) pairs."""
    h = hashlib.sha256()
    for resolved, sha in sorted(set(pairs)):
        h.update(f"{resolved}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest()


def render_lock(lock: Lock) -> bytes:
    """TOML with sorted keys and targets sorted by path: one line changes per changed fact."""
    image = {"ref": lock.image.ref, "digest": lock.image.digest or ""}
    if lock.image.platform:
        image["platform"] = lock.image.platform
    targets = []
    for t in sorted(lock.targets, key=lambda t: t.path):
        entry = {
            "base_sha256": t.base_sha256,
            "final_sha256": t.final_sha256,
            "gid": t.gid,
            "mode": f"{t.mode:04o}",
            "path": t.path,
            "patches": list(t.patches),
            "resolved": t.resolved,
            "uid": t.uid,
        }
        if t.layer:
            entry["layer"] = t.layer
        targets.append(dict(sorted(entry.items())))
    doc = {"version": lock.version, "series_sha256": lock.series_sha256, "image": dict(sorted(image.items()))}
    if targets:
        doc["target"] = targets
    return tomli_w.dumps(doc).encode()


def parse_lock(data: bytes, *, source: str = "targets.lock") -> Lock:
    """Read targets.lock; any missing or mistyped key is MalformedLock."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
        if doc.get("version") != LOCK_VERSION:
            raise MalformedLock(f"{source}: unsupported version {doc.get('version')!r} (this imgquilt reads {LOCK_VERSION}).")
        img = doc["image"]
        info = ImageInfo(
            ref=str(img["ref"]),
            digest=str(img.get("digest") or "") or None,
            platform=img.get("platform"),
            kind="rootfs" if str(img["ref"]).startswith("rootfs:") else "image",
        )
        targets = tuple(
            LockTarget(
                path=str(t["path"]),
                resolved=str(t["resolved"]),
                base_sha256=str(t["base_sha256"]),
                final_sha256=str(t["final_sha256"]),
                mode=int(str(t["mode"]), 8),
                uid=int(t["uid"]),
                gid=int(t["gid"]),
                layer=t.get("layer"),
                patches=tuple(str(p) for p in t["patches"]),
            )
            for t in doc.get("target", [])
        )
        return Lock(str(doc["series_sha256"]), info, targets)
    except MalformedLock:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MalformedLock(
            f"{source} cannot be read: {exc.__class__.__name__}: {exc}.",
            hint="Regenerate it with `imgquilt lock`.",
        ) from None


def read_lock(path: Path) -> Lock | None:
    """The lock at `path`, or None when there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_lock(data, source=str(path))
