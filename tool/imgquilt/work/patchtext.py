"""What the work commands accept as patch names and headers, and the header-only patch `new` writes."""
from __future__ import annotations

import re

from ..errors import MalformedPatch, UsageError
from ..fs.paths import check_member_path
from ..queue.hunks import show_line
from ..queue.patchfile import Header, Patch, parse_patch


def check_patch_name(name: str) -> str:
    """A patch name for series and patches/: a safe relative path, no spaces, `#` or hidden parts."""
    bad = not name or any(c.isspace() for c in name) or "#" in name or name.startswith("-") or not name.isprintable()
    if not bad and any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in name.split("/")):
        raise UsageError(f"Unusable patch name {name[:80]!r}...: a part of it is longer than 255 bytes, more than a "
                         "file name may be.", hint="Pick a shorter name, e.g. 0003-fix-port.patch.")
    if not bad:
        norm = check_member_path(name, what="patch name")
        bad = norm != name or any(p.startswith(".") for p in norm.split("/"))
    if bad:
        raise UsageError(
            f"Unusable patch name {name!r}.",
            hint="Use a relative file name without spaces, `#`, `..` or hidden parts, e.g. 0003-fix-port.patch.",
        )
    return name


def read_queue_patch(data: bytes, name: str) -> Patch:
    """parse_patch, plus the header-only patch `new` writes before its first refresh (no sections)."""
    if not re.search(rb"^(Index: |diff |--- |\+\+\+ |@@ )", data, re.M):
        return Patch(name, Header(data), (), data)
    return parse_patch(data, name)


def check_header(raw: bytes, name: str) -> Header:
    """A header as a user edited it: no diff lines in it, ends with one blank separator line."""
    lines = raw.splitlines(keepends=True)
    for k, ln in enumerate(lines):
        nxt = lines[k + 1] if k + 1 < len(lines) else b""
        if ln.startswith((b"Index: ", b"diff --git ", b"@@ ")) or (ln.startswith(b"--- ") and nxt.startswith(b"+++ ")):
            raise MalformedPatch(
                f"The header of {name} may not hold diff lines ({show_line(ln.rstrip())}).",
                hint="Edit only the description fields; the diff is written by `imgquilt refresh`.",
            )
    body = raw.rstrip(b"\r\n \t")
    return Header(body + b"\n\n" if body else b"")
