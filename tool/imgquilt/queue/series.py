"""The `series` file: ordered patch names in quilt syntax."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import MalformedSeries


@dataclass(frozen=True)
class SeriesEntry:
    """One patch listed in `series`."""

    name: str
    strip: int = 1  # -p level
    line: int = 0  # 1-based line number in series (0: not from a file)


def parse_series(data: bytes, *, source: str = "series") -> list[SeriesEntry]:
    """Parse series bytes. `#` starts a comment; `-p0`/`-p1` is accepted, anything else refused."""
    entries: list[SeriesEntry] = []
    for lineno, raw in enumerate(data.decode("utf-8", "surrogateescape").splitlines(), 1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        words = text.split()
        name, opts = words[0], words[1:]
        strip = 1
        for opt in opts:
            if opt in ("-p0", "-p1"):
                strip = int(opt[2])
            else:
                raise MalformedSeries(
                    f"{source} line {lineno}: unsupported option {opt!r} for {name!r}.",
                    hint="Only -p0 and -p1 are accepted; remove the option.",
                )
        if name.startswith("/") or ".." in name.split("/") or "\\" in name:
            raise MalformedSeries(f"{source} line {lineno}: unsafe patch name {name!r}.")
        entries.append(SeriesEntry(name, strip, lineno))
    return entries


def render_series(entries: list[SeriesEntry]) -> bytes:
    """Write a series file, one patch per line (a -p0 entry keeps its option)."""
    out = []
    for e in entries:
        out.append(e.name + (" -p0" if e.strip == 0 else ""))
    return ("\n".join(out) + "\n").encode() if out else b""
