"""Checks on paths that come from patches and locks: never trusted as they are.

Tar members are checked by image.layers.tarwalk.member_path, which must accept backslashes (systemd unit
names such as `system-systemd\\x2dcryptsetup.slice` hold them).
"""
from __future__ import annotations

from ..errors import UnsafePath


def check_member_path(path: str, *, what: str = "path") -> str:
    """Return `path` normalised (no leading `./`, no duplicate slashes) or raise UnsafePath.

    Refused: absolute paths, `..` components, NUL bytes and backslashes.
    """
    if not path or path in (".", "./"):
        raise UnsafePath(f"Empty {what} {path!r}.", hint="Name a file inside the image root.")
    if "\x00" in path or "\\" in path:
        raise UnsafePath(f"Unsafe {what} {path!r}: NUL bytes and backslashes are not allowed.",
                         hint="Name the file by its path inside the image root, with `/` between components.")
    if path.startswith("/"):
        raise UnsafePath(
            f"Unsafe {what} {path!r}: absolute paths are not allowed.",
            hint="Write the path relative to the image root (etc/os-release, not /etc/os-release).",
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePath(f"Unsafe {what} {path!r}: `..` components are not allowed.",
                         hint="Name the file by its real path inside the image root (a patch never climbs out of it).")
    if not parts:
        raise UnsafePath(f"Empty {what} {path!r}.", hint="Name a file inside the image root.")
    return "/".join(parts)
