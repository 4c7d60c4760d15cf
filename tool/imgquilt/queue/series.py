"""The `series` file: ordered patch names in quilt syntax, with Mercurial MQ's guards.

A guard is a word in a line's comment: `0007-prep-fused.patch #+glm53 #-rocm`. quilt reads the
whole tail as a comment; imgquilt (as MQ) reads `#+G` and `#-G` there as guards, and `pushable`
decides, from the guards a selection turns on, whether the patch is in it. Every rewrite of
`series` goes line by line (`inserted`, `moved`, `removed`, `renamed`, `guarded`), so the comments, blank
lines, options and guards of the other lines stay as the user wrote them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import MalformedSeries, UsageError

# MQ's guard_re (hgext/mq.py): `#` then + or -, then a name that starts with neither and holds no
# `#` or blank. An optional blank before the `#` belongs to the match (so a rewrite drops it too).
GUARD_RE = re.compile(r"\s?#([-+][^-+# \t\r\n\f][^# \t\r\n\f]*)")
_BAD_GUARD_CHARS = "# \t\r\n\f\v"


@dataclass(frozen=True)
class SeriesEntry:
    """One patch listed in `series`."""

    name: str
    strip: int = 1  # -p level
    line: int = 0  # 1-based line number in series (0: not from a file)
    guards: tuple[str, ...] = ()  # "+G" / "-G", as written on the line


def check_guard_name(name: str, *, what: str = "guard") -> str:
    """A guard name as selected (no sign): MQ's rules. Raises UsageError (exit 2) naming the fault."""
    if not name:
        raise UsageError(f"A {what} name cannot be empty.")
    if name[0] in "+-":
        raise UsageError(f"The {what} name {name!r} starts with {name[0]!r}.",
                         hint="A selected guard is a bare name (glm53); +G and -G are what `imgquilt guard` writes on a patch.")
    bad = next((c for c in name if c in _BAD_GUARD_CHARS or not c.isprintable()), None)
    if bad is not None:
        raise UsageError(f"The {what} name {name!r} holds {bad!r}.", hint="A guard name holds no blank and no `#`.")
    return name


def check_guard(guard: str) -> str:
    """A guard as set on a patch: `+G` or `-G` with a valid name G."""
    if len(guard) < 2 or guard[0] not in "+-":
        raise UsageError(f"The guard {guard!r} must be +NAME or -NAME.",
                         hint="+G: only in profiles that select G; -G: never in profiles that select G.")
    check_guard_name(guard[1:])
    return guard


def pushable(guards: Sequence[str], selected: Iterable[str]) -> tuple[bool, str | None]:
    """Is a patch with these guards in the selection that turns on `selected`? MQ's rule, and why:

    no guard: in (why None); a `-G` with G selected: out, negative wins (why "-G"); some `+G`: in
    when one of them is selected (why "+G"), else out (why the +guards, blank-separated); only
    `-G` guards, none selected: in (why "")."""
    if not guards:
        return True, None
    active = set(selected)
    neg = [g for g in guards if g[0] == "-" and g[1:] in active]
    if neg:
        return False, neg[0]
    pos = [g for g in guards if g[0] == "+"]
    if pos:
        hit = [g for g in pos if g[1:] in active]
        return (True, hit[0]) if hit else (False, " ".join(pos))
    return True, ""


def selected_entries(entries: Sequence[SeriesEntry], selected: Iterable[str]) -> list[SeriesEntry]:
    """The entries a selection applies, in series order."""
    active = frozenset(selected)
    return [e for e in entries if pushable(e.guards, active)[0]]


def has_guards(entries: Sequence[SeriesEntry]) -> bool:
    return any(e.guards for e in entries)


def guard_names(entries: Sequence[SeriesEntry]) -> list[str]:
    """Every guard name the series uses, in first-use order."""
    return list(dict.fromkeys(g[1:] for e in entries for g in e.guards))


def parse_series(data: bytes, *, source: str = "series") -> list[SeriesEntry]:
    """Parse series bytes. `#` starts a comment (`#+G`/`#-G` in it are guards); `-p0`/`-p1` is
    accepted, anything else refused."""
    entries: list[SeriesEntry] = []
    for lineno, raw in enumerate(data.decode("utf-8", "surrogateescape").splitlines(), 1):
        text, hash_, comment = raw.partition("#")
        text = text.strip()
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
        if name.startswith("/") or ".." in name.split("/") or "\\" in name or "\x00" in name:
            raise MalformedSeries(f"{source} line {lineno}: unsafe patch name {name!r}.",
                                  hint="A patch name is a relative path below patches/: no leading /, no `..`, "
                                       "no backslash and no NUL byte.")
        guards = tuple(GUARD_RE.findall(hash_ + comment)) if hash_ else ()
        entries.append(SeriesEntry(name, strip, lineno, guards))
    return entries


def entry_line(e: SeriesEntry) -> str:
    """One series line for an entry, without its end: the name, `-p0` if so, each guard as ` #G`."""
    return e.name + (" -p0" if e.strip == 0 else "") + "".join(f" #{g}" for g in e.guards)


def render_series(entries: Sequence[SeriesEntry]) -> bytes:
    """A new series file, one patch per line (a -p0 entry keeps its option, guards are written as
    MQ writes them). An existing file is edited with the functions below, which keep its comments."""
    out = [entry_line(e) for e in entries]
    return ("\n".join(out) + "\n").encode("utf-8", "surrogateescape") if out else b""


def selection_text(entries: Sequence[SeriesEntry]) -> bytes:
    """What a selection's series_sha256 hashes in place of the series file (docs/targets-lock.md):
    each selected entry as `name` or `name -p0`, one a line; guards, comments and the patches
    outside the selection do not count."""
    return b"".join((e.name + (" -p0" if e.strip == 0 else "") + "\n").encode("utf-8", "surrogateescape") for e in entries)


# --- editing series bytes line by line -------------------------------------------------------
def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "surrogateescape").splitlines(keepends=True)


def _joined(lines: list[str]) -> bytes:
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return "".join(lines).encode("utf-8", "surrogateescape")


def _entry(data: bytes, name: str) -> SeriesEntry:
    return next(e for e in parse_series(data) if e.name == name)


def inserted(data: bytes, entries: Sequence[SeriesEntry], after: str | None) -> bytes:
    """`data` with a line for each entry inserted after `after` (None: before the first patch)."""
    lines = _lines(data)
    listed = parse_series(data)
    if after is not None:
        at = next(e.line for e in listed if e.name == after)
    else:
        at = listed[0].line - 1 if listed else len(lines)
    if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += "\n"
    lines[at:at] = [entry_line(e) + "\n" for e in entries]
    return _joined(lines)


def moved(data: bytes, name: str, after: str | None) -> bytes:
    """`data` with `name`'s line moved whole (its options, guards and comment) right after `after`'s
    line (None: before the first patch)."""
    lines = _lines(data)
    line = _entry(data, name).line
    text = lines[line - 1]
    if not text.endswith(("\n", "\r")):
        text += "\n"
    del lines[line - 1]
    rest = [e for e in parse_series(data) if e.name != name]
    if after is not None:
        at = next(e.line for e in rest if e.name == after)
        at = at - 1 if at > line else at
    else:
        at = (rest[0].line - 1 - (1 if rest[0].line > line else 0)) if rest else len(lines)
    if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
        lines[at - 1] += "\n"
    lines[at:at] = [text]
    return _joined(lines)


def removed(data: bytes, name: str) -> bytes:
    lines = _lines(data)
    del lines[_entry(data, name).line - 1]
    return _joined(lines)


def renamed(data: bytes, old: str, new: str) -> bytes:
    lines = _lines(data)
    i = _entry(data, old).line - 1
    k = lines[i].index(old)
    lines[i] = lines[i][:k] + new + lines[i][k + len(old):]
    return _joined(lines)


def guarded(data: bytes, name: str, guards: Sequence[str]) -> bytes:
    """`data` with the guards of `name`'s line replaced by `guards` (MQ's setguards: the old ones are
    cut out of the comment, the new ones appended as ` #G`); the rest of the line, comment text
    included, and every other line are kept."""
    lines = _lines(data)
    i = _entry(data, name).line - 1
    body = lines[i]
    end = body[len(body.rstrip("\r\n")):]
    body = body[: len(body) - len(end)]
    head, hash_, comment = body.partition("#")
    comment = GUARD_RE.sub("", hash_ + comment)
    if comment.strip() == "":
        comment = ""  # nothing but the guards was there
    lines[i] = (head.rstrip() if not comment else head + comment).rstrip(" \t") + "".join(f" #{g}" for g in guards) + (end or "\n")
    return _joined(lines)
