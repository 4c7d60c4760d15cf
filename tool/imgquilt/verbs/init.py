"""`init`: make a directory a queue (series, patches/, a .gitignore for .imgquilt/), keeping what is there."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput


@dataclass(frozen=True)
class InitResult:
    """The queue directory and what `init` created in it (empty when it was a queue already)."""

    root: Path
    created: tuple[str, ...]


def init_queue(root: Path) -> InitResult:
    """Create what is missing of a queue at `root`; never overwrite, never follow a planted symlink."""
    root = Path(root).absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
        series, patches, ignore = root / "series", root / "patches", root / ".gitignore"
        for path, want_dir in ((series, False), (patches, True), (ignore, False)):  # all checked before any is made
            if path.is_symlink() or (path.exists() and path.is_dir() != want_dir):
                raise BadInput(f"{path} exists and is not a {'directory' if want_dir else 'regular file'}.",
                               hint="Remove or rename it, then re-run `imgquilt init`.")
        created: list[str] = []
        if not series.exists():
            with open(series, "xb"):
                pass
            created.append("series")
        if not patches.exists():
            patches.mkdir()
            created.append("patches/")
        old = ignore.read_bytes() if ignore.exists() else b""
        if not {b".imgquilt/", b".imgquilt", b"/.imgquilt/", b"/.imgquilt"} & set(old.splitlines()):
            with open(ignore, "ab") as f:
                f.write((b"" if not old or old.endswith(b"\n") else b"\n") + b".imgquilt/\n")
            created.append(".gitignore")
    except OSError as e:
        raise BadInput(f"Cannot make a queue in {root}: {e.strerror or e} ({e.filename or root}).",
                       hint="Pass --queue DIR naming a directory you can write (it is created if missing).") from None
    return InitResult(root, tuple(created))
