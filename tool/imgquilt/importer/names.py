"""File names on `---`/`+++` and `diff --git` lines: C-quoting, timestamps, -pN."""
from __future__ import annotations

import re
from datetime import datetime

from ..queue.pathquote import unquote_name as _unquote
from .values import bad as _bad

# the timestamps diff, GNU patch and git write after a name: ISO 8601 (`2010-08-18 20:13:31.484002255
# -0500`, a zone with or without a colon) and ctime style (`Wed Aug 18 20:13:31 2010`)
_ISO = r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?: ?(?:[+-]\d{2}:?\d{2}|Z|UTC|GMT))?"
_CTIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}(?: [A-Z]{3,5})? \d{4}"
_STAMP = re.compile(rb"^(?:" + _ISO.encode() + rb"|" + _CTIME.encode() + rb")$")
# a timestamp after spaces instead of a tab (whitespace-damaged patches, git's t4135): git and GNU patch
# both take the name to end where the date starts
_SPACED_STAMP = re.compile(rb"[ ]+(?:" + _ISO.encode() + rb"|" + _CTIME.encode() + rb")$")


def _is_epoch(stamp: bytes) -> bool:
    """GNU patch reads a file whose timestamp is the Unix epoch (in any zone) as absent."""
    text = stamp.decode("ascii", "replace").strip()
    if not text:
        return False
    m = re.match(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d+)?(?: ?([+-]\d{2}):?(\d{2}))?$", text)
    if m:
        zone = f"{m.group(3)}{m.group(4)}" if m.group(3) else "+0000"
        try:
            dt = datetime.strptime(m.group(1) + " " + zone, "%Y-%m-%d %H:%M:%S %z")
        except ValueError:
            return False
        return dt.timestamp() == 0 and not (m.group(2) or "").strip(".0")
    return bool(re.match(r"^\w{3} \w{3} +1 00:00:00 1970$", text))


def split_stamp(rest: bytes, gnu: bool = False) -> tuple[bytes, bytes]:
    """(name, timestamp) of what follows `--- `/`+++ ` (unquoted). The name ends at a tab; without one,
    git ends it where a timestamp after spaces starts (a name may hold spaces: `post image.txt`), GNU
    patch (`gnu`, as quilt applies a series) at the first space."""
    name, tab, stamp = rest.partition(b"\t")
    if tab:
        return name, stamp
    if gnu:
        name, _, stamp = rest.partition(b" ")
        return name, stamp.strip()
    m = _SPACED_STAMP.search(rest)
    if m and m.start() > 0:
        return rest[: m.start()], rest[m.start():].strip()
    return rest, b""


def side_name(line: bytes, gnu: bool = False) -> tuple[str | None, bool, str | None]:
    """A `---`/`+++` line: (name or None for /dev/null, epoch timestamp, the name git would take where
    GNU patch's rule (`gnu`) takes another)."""
    rest = line[4:].rstrip(b"\r\n")
    other = None
    if rest.startswith(b'"'):
        name, stamp = _unquote(rest)
        stamp = stamp.lstrip(b"\t ")
    else:
        name, stamp = split_stamp(rest, gnu)
        if gnu:
            whole = split_stamp(rest)[0]
            other = whole.decode("utf-8", "surrogateescape") if whole != name else None
    if name == b"/dev/null":
        return None, False, None
    return name.decode("utf-8", "surrogateescape"), _is_epoch(stamp), other


def git_names(line: bytes) -> tuple[str, str]:
    rest = line[len(b"diff --git ") :].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        a, rest = _unquote(rest)
        rest = rest.lstrip(b" ")
        b = _unquote(rest)[0] if rest.startswith(b'"') else rest
    else:
        # unquoted "a/X b/X": prefer the split that gives equal tails (names may hold spaces)
        half = (len(rest) - 1) // 2
        a, b = rest[:half], rest[half + 1 :]
        if rest[half : half + 1] != b" " or a.split(b"/", 1)[-1] != b.split(b"/", 1)[-1]:
            k = rest.find(b" b/")
            if k > 0:
                a, b = rest[:k], rest[k + 1 :]
            else:
                a, _, b = rest.partition(b" ")
    return a.decode("utf-8", "surrogateescape"), b.decode("utf-8", "surrogateescape")


def best_name(names: list[str]) -> str:
    """GNU patch's "best" of several names: fewest components, then shortest base name, then shortest name, then first."""
    return min(enumerate(names), key=lambda kn: (kn[1].count("/"), len(kn[1].rpartition("/")[2]), len(kn[1]), kn[0]))[1]


def strip_path(name: str, strip: int, *, source: str = "", line: int = 0) -> str:
    """GNU patch's -pN: drop N leading components (runs of slashes count as one)."""
    parts = [p for p in name.split("/")]
    while parts and parts[0] == "" and strip:
        parts.pop(0)
    rest = "/".join(parts)
    for _ in range(strip):
        head, sep, tail = rest.partition("/")
        if not sep:
            raise _bad(source, line, f"name {name!r} has fewer than {strip + 1} components for -p{strip}.")
        rest = tail.lstrip("/")
    return rest
