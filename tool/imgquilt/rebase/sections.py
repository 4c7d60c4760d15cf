"""Rewriting one file section's bytes: renamed to a moved path, or regenerated against a new base."""
from __future__ import annotations

import re

from ..fs.content import held
from ..errors import MalformedPatch
from ..queue.patchfile import FileSection, Patch, make_section, parse_patch


def retarget(s: FileSection, new_path: str, patch: str) -> bytes:
    """The section's bytes with its path lines naming `new_path` (the diff itself is kept)."""
    lines = held(s.raw, s.path).splitlines(keepends=True)
    out: list[bytes] = []
    old = re.escape(s.path.encode("utf-8", "surrogateescape"))
    new = new_path.encode("utf-8", "surrogateescape")
    in_head = True
    for ln in lines:
        if ln.startswith(b"@@"):
            in_head = False
        if in_head:
            if ln.startswith(b"Index: "):
                ln = b"Index: " + new + (b"\r\n" if ln.endswith(b"\r\n") else b"\n")
            elif ln.startswith(b"diff --git "):
                ln = re.sub(rb"^diff --git ([ab]/)?" + old + rb" ([ab]/)?" + old + rb"(?=[\r\n]|$)",
                            lambda m: b"diff --git " + (m.group(1) or b"") + new + b" " + (m.group(2) or b"") + new, ln)
            else:
                ln = re.sub(rb"^(---|\+\+\+) ([ab]/)?" + old + rb"(?=[\t\r\n]|$)", lambda m: m.group(1) + b" " + (m.group(2) or b"") + new, ln)
        out.append(ln)
    raw = b"".join(out)
    got = parse_patch(raw, patch).sections[0]
    if got.path != new_path or got.hunks != s.hunks:
        raise MalformedPatch(f"{patch}: cannot rename section {s.path} to {new_path}.")
    return raw


def rewritten(path: str, old: bytes | None, new: bytes | None, like: FileSection, strip: int, patch: str) -> FileSection:
    """A fresh section for old→new that keeps what the user's section had beyond the diff:
    its unknown fields, its Mode (and the `deleted file mode` it gave), and no a/ b/ prefixes for a `-p0`
    series entry."""
    raw = make_section(path, old, new, like.mode, link=like.link, mode_change=like.mode_change, deleted_mode=like.deleted_mode).raw
    if like.extra or strip == 0:
        lines = raw.splitlines(keepends=True)
        at = next((i for i, ln in enumerate(lines) if ln.startswith((b"diff --git ", b"--- "))), len(lines))
        extra = [f"{k}: {v}\n".encode("utf-8", "surrogateescape") for k, v in like.extra]
        if strip == 0:
            for i in (at, at + 1):
                lines[i] = re.sub(rb"^(---|\+\+\+) [ab]/", rb"\1 ", lines[i])
        raw = b"".join(lines[:at] + extra + lines[at:])
    return parse_patch(raw, patch).sections[0]


def original_section(patch: Patch, path: str) -> FileSection:
    return next(s for s in patch.sections if s.path == path)
