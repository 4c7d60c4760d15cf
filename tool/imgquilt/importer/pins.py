"""Pin lines in their dialects (TARGET, base/patched sha256, Mode, STATUS) and a `#` comment header as DEP-3."""
from __future__ import annotations

import re

from .values import Pin
from .values import bad as _bad

# at the start of a line, or in a `#` comment; never an indented DEP-3 continuation line. Hash pins
# are written with or without a colon (`base sha256 HEX`, `Base-SHA256: HEX`), in any case.
_PIN = re.compile(rb"^(?:[ \t]*#+[ \t]*)?(target|mode|status)[ \t]*:[ \t]*(\S[^\r\n]*?)[ \t]*\r?\n?$", re.I)
_HASH_PIN = re.compile(
    rb"^(?:[ \t]*#+[ \t]*)?((?:base|patched)[ _-]?sha-?256)(?:[ \t]*:[ \t]*(\S+)|[ \t]+([0-9a-fA-F]{64}|absent))[ \t]*\r?\n?$", re.I
)
_REMARK = re.compile(r"\s+(?:\(.*\)|#.*|[-\u2014\u2013]+\s.*)$")
_HASH = re.compile(r"^(?:[0-9a-f]{64}|absent)$")


def pin_of(ln: bytes) -> tuple[str, str] | None:
    m = _PIN.match(ln) or _HASH_PIN.match(ln)
    if not m:
        return None
    key = re.sub(r"[ _-]", "", m.group(1).decode().lower())
    value = next(g for g in m.groups()[1:] if g is not None).decode("utf-8", "surrogateescape").strip()
    if key == "target":
        # `# TARGET: pkg/x.py (inside the pinned image)`: the path is the first word, the rest a remark
        value = _REMARK.sub("", value).split()[0] if value else value
    return key, value


class Pins:
    """Pin blocks in reading order; each file diff takes the oldest pending one."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.blocks: list[dict[str, object]] = []
        self.status: str | None = None

    def add(self, key: str, value: str, lineno: int) -> None:
        if key == "status":
            self.status = value
            return
        if key == "target":
            self.blocks.append({"target": value})
            return
        if key in ("basesha256", "patchedsha256"):
            value = value.lower()
            if not _HASH.match(value):
                raise _bad(self.source, lineno, f"{key} must be 64 hex digits or `absent`, not {value!r}.")
        if key == "mode":
            try:
                parsed: object = int(value, 8)
            except ValueError:
                raise _bad(self.source, lineno, f"Mode must be octal, not {value!r}.") from None
        else:
            parsed = value
        if not self.blocks or key in self.blocks[-1]:
            self.blocks.append({})
        self.blocks[-1][key] = parsed

    def take(self) -> Pin | None:
        if not self.blocks:
            return None
        b = self.blocks.pop(0)
        return Pin(b.get("target"), b.get("basesha256"), b.get("patchedsha256"), b.get("mode"))  # type: ignore[arg-type]


def comment_header(lines: list[bytes], status: str | None) -> bytes:
    """A hand-written artifact's `#` comment block (pins taken out) as DEP-3 Description (+ Status).

    Any other header (DEP-3 fields, a mail, free text) is kept verbatim.
    """
    text = [ln for ln in lines if ln.strip()]
    if not text or not all(ln.lstrip().startswith(b"#") for ln in text):
        if status is not None and text:
            return b"".join(lines).rstrip(b"\r\n") + f"\nStatus: {status}\n".encode("utf-8", "surrogateescape")
        return b"".join(lines)
    body = [ln.decode("utf-8", "surrogateescape").strip().lstrip("#").strip() for ln in lines]
    while body and not body[-1]:
        body.pop()
    while body and not body[0]:
        body.pop(0)
    out = [f"Description: {body[0]}"] + [f" {b}" if b else " ." for b in body[1:]]
    if status is not None:
        out.append(f"Status: {status}")
    return ("\n".join(out) + "\n\n").encode("utf-8", "surrogateescape")
