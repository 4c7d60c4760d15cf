"""Image references as skopeo and podman spell them, opened as a filesystem Source."""
from __future__ import annotations

from pathlib import Path

from ..errors import BadImage
from ..fs.types import Source


def open_source(ref: str, *, platform: str | None = None, cache_dir: Path | None = None) -> Source:
    """Open `ref` (rootfs:DIR, a bare directory, ...) for reading targets."""
    from ..rootfs.source import RootfsSource

    if ref.startswith("rootfs:"):
        return RootfsSource(Path(ref[len("rootfs:"):]), ref=ref)
    p = Path(ref)
    if p.is_dir() and not (p / "oci-layout").exists():
        return RootfsSource(p, ref=ref)
    raise BadImage(f"Unsupported image reference {ref!r}.")
