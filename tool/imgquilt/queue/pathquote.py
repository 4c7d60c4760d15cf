"""File names in diff text, quoted as git quotes them (and GNU patch and `git apply` read them).

A name holding a control character (a tab, a newline), a double quote or a backslash cannot stand
bare on a `---`/`+++`, `diff --git` or `Index:` line: a tab would start the timestamp, a newline the
next line. Such a name is written C-quoted, as git writes it with core.quotePath=false: in double
quotes, with `\\t`, `\\n`, `\\"`, `\\\\` (and `\\a \\b \\v \\f \\r`), other control bytes as three
octal digits, every other byte (UTF-8 included) as it is. Any other name is written bare, so the
patch text of ordinary names is unchanged.
"""
from __future__ import annotations

import re

_ESCAPES = {7: b"a", 8: b"b", 9: b"t", 10: b"n", 11: b"v", 12: b"f", 13: b"r", 34: b'"', 92: b"\\"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
_NEEDS = re.compile(rb'[\x00-\x1f\x7f"\\]')


def needs_quoting(name: bytes) -> bool:
    return _NEEDS.search(name) is not None


def quote_name(name: str) -> bytes:
    """`name` as a diff line holds it: bare, or C-quoted when it must be."""
    raw = name.encode("utf-8", "surrogateescape")
    if not needs_quoting(raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in _ESCAPES:
            out += b"\\" + _ESCAPES[b]
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')


def unquote_name(data: bytes) -> tuple[bytes, bytes]:
    """A C-quoted name at the start of `data` (which starts with `"`): (the name, the rest after the quote).
    Raises ValueError when the quote is not closed."""
    out = bytearray()
    i = 1
    while i < len(data):
        c = data[i : i + 1]
        if c == b'"':
            return bytes(out), data[i + 1 :]
        if c == b"\\":
            nxt = data[i + 1 : i + 2]
            if nxt in _UNESCAPES:
                out.append(_UNESCAPES[nxt])
                i += 2
                continue
            octal = data[i + 1 : i + 4]
            if re.fullmatch(rb"[0-7]{3}", octal):
                out.append(int(octal, 8) & 0xFF)
                i += 4
                continue
        out += c
        i += 1
    raise ValueError("unterminated quoted name")


def read_name(text: bytes) -> tuple[str, bytes]:
    """A file name at the start of `text` (quoted or bare, a bare one ending at a tab): (name, the rest)."""
    if text.startswith(b'"'):
        name, rest = unquote_name(text)
    else:
        name, _, rest = text.partition(b"\t")
    return name.decode("utf-8", "surrogateescape"), rest
