"""The imgquilt patch file: a DEP-3 style header, then per file `Index:`, hashes and a unified diff.

Parsing keeps the original bytes: `Patch.raw` is the file as read, so parse-then-write of a patch is
byte-identical. Each section's hunks are read by the one unified-diff reader in `difftext`, on bytes,
so the line bytes come back exactly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import MalformedPatch, UnsafePath
from ..fs.paths import check_member_path
from .difftext import diff_names, format_hunks, unified_diff
from .hunkread import HunkTextError, is_file_start, read_hunks
from .binarypatch import BinaryPatch, BinaryPatchError, is_binary, read_binary, render_binary
from .hunks import ABSENT, Hunk, sha256_hex, show_line, split_lines
from .pathquote import quote_name, read_name, unquote_name

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FIELD = re.compile(rb"^([A-Za-z][A-Za-z0-9_-]*):[ \t]?(.*?)\r?\n?$", re.S)
SECTION_FIELDS = ("Base-SHA256", "Patched-SHA256", "Mode")


@dataclass(frozen=True)
class Header:
    """The text before the first `Index:` line, kept verbatim; fields are parsed from it."""

    raw: bytes = b""

    @property
    def fields(self) -> list[tuple[str, str]]:
        """RFC 822-style fields in order; continuation lines (leading space) are joined with newlines."""
        out: list[tuple[str, str]] = []
        for line in self.raw.splitlines():
            if line[:1] in (b" ", b"\t") and out:
                name, value = out[-1]
                out[-1] = (name, value + "\n" + line[1:].decode("utf-8", "surrogateescape"))
                continue
            m = _FIELD.match(line)
            if m:
                out.append((m.group(1).decode(), m.group(2).decode("utf-8", "surrogateescape")))
        return out

    def get(self, name: str) -> str | None:
        for k, v in self.fields:
            if k.lower() == name.lower():
                return v
        return None

    @property
    def description(self) -> str:
        return self.get("Description") or self.get("Subject") or ""

    @property
    def requires(self) -> list[str]:
        value = self.get("Requires") or ""
        return [w for w in re.split(r"[\s,]+", value) if w]

    def with_field(self, name: str, value: str | None) -> "Header":
        """A header with `name` set to `value` (None removes it); other bytes are untouched."""
        lines = self.raw.splitlines(keepends=True)
        out: list[bytes] = []
        skipping = False
        done = False
        new = None
        if value is not None:
            first, *rest = value.split("\n")
            new = (f"{name}: {first}\n" + "".join(f" {r}\n" for r in rest)).encode("utf-8", "surrogateescape")
        for line in lines:
            if skipping and line[:1] in (b" ", b"\t"):
                continue
            skipping = False
            m = _FIELD.match(line)
            if m and m.group(1).decode().lower() == name.lower():
                skipping = True
                if new is not None and not done:
                    out.append(new)
                    done = True
                continue
            out.append(line)
        if new is not None and not done:
            # insert after the last field, before the blank separator line
            idx = len(out)
            while idx > 0 and out[idx - 1].strip() == b"":
                idx -= 1
            out.insert(idx, new)
            if idx == len(out) - 1:
                out.append(b"\n")
        return Header(b"".join(out))


@dataclass(frozen=True)
class FileSection:
    """One file of a patch: its path, its pinned hashes and its diff."""

    path: str
    base_sha256: str  # 64 hex or "absent"
    patched_sha256: str
    hunks: tuple[Hunk, ...]
    raw: bytes  # the section's exact bytes, from `Index:` to the next section
    mode: int | None = None  # `Mode:` for a new file
    extra: tuple[tuple[str, str], ...] = field(default=())  # unknown section fields, kept
    binary: BinaryPatch | None = None  # a `GIT binary patch` section: a whole-file change, no hunks

    @property
    def is_new(self) -> bool:
        return self.base_sha256 == ABSENT

    @property
    def is_delete(self) -> bool:
        return self.patched_sha256 == ABSENT


@dataclass(frozen=True)
class Patch:
    """A parsed patch file; `raw` is its exact bytes."""

    name: str
    header: Header
    sections: tuple[FileSection, ...]
    raw: bytes

    def to_bytes(self) -> bytes:
        return self.raw

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.sections]


def _bad(name: str, msg: str) -> MalformedPatch:
    return MalformedPatch(
        f"Malformed patch {name}: {msg}",
        hint="Fix the patch file, or bring it in with `imgquilt import`, which writes the imgquilt format.",
    )


def _hash_field(name: str, path: str, key: str, value: str | None) -> str:
    if value is None:
        raise _bad(name, f"section {path!r} has no {key}: line.")
    value = value.strip()
    if value != ABSENT and not _HEX64.match(value):
        raise _bad(name, f"section {path!r}: {key} must be 64 lowercase hex digits or `absent`, not {value!r}.")
    return value


def _diff_name(name: str, path: str, line: bytes) -> str:
    """The name on a `---`/`+++` line (C-quoted or bare), without a timestamp (after a tab)."""
    try:
        return read_name(line[4:].rstrip(b"\n"))[0]
    except ValueError:
        raise _bad(name, f"section {path!r}: the name on {line[:60]!r} opens a quote it does not close.") from None


def _parse_hunks(name: str, path: str, lines: list[bytes]) -> tuple[str, str, tuple[Hunk, ...]]:
    """The `---`/`+++` names and the hunks of one section's diff (`lines` start at `---`)."""
    if len(lines) < 2 or not lines[1].startswith(b"+++ "):
        raise _bad(name, f"section {path!r} must hold exactly one ---/+++ file diff, found 0.")
    try:
        hunks, end = read_hunks(lines, 2)
    except HunkTextError as exc:
        raise _bad(name, f"section {path!r}: {exc.message}") from None
    if any(h.anchor for h in hunks):
        raise _bad(name, f"section {path!r}: `@@ append/prepend @@` hunks are not unified diff; bring the patch in with `imgquilt import`.")
    extra = sum(1 for k in range(end, len(lines)) if is_file_start(lines, k) and lines[k].startswith(b"--- "))
    if extra:
        raise _bad(name, f"section {path!r} must hold exactly one ---/+++ file diff, found {1 + extra}.")
    stray = next((ln for ln in lines[end:] if ln.startswith((b"@@", b"+++ ", b"--- ", b"*** ", b"diff "))), None)
    if stray is not None:  # GNU patch would read it as more diff; imgquilt would not
        raise _bad(name, f"section {path!r}: stray diff line {show_line(stray.rstrip(), 60)} after its hunks.")
    return _diff_name(name, path, lines[0]), _diff_name(name, path, lines[1]), tuple(hunks)


_MODE = re.compile(r"^0?[0-7]{3}$")


def _mode_field(name: str, path: str, value: str | None) -> int | None:
    """`Mode:` holds permission bits only (0644, 0755): no setuid/setgid/sticky, no file type."""
    if value is None:
        return None
    if not _MODE.match(value.strip()):
        raise _bad(name, f"section {path!r}: Mode must be permission bits such as 0644 or 0755 "
                         f"(no setuid, setgid or sticky bit), not {value.strip()[:40]!r}.")
    return int(value.strip(), 8)


def _same_file(name: str, path: str, side: str, diff_name: str, strip: int | None) -> None:
    """`---`/`+++` must name the `Index:` file after -pN (the series' level; None: -p1 or -p0), so
    `patch`, `git apply` and imgquilt all change the same file."""
    if diff_name == "/dev/null":
        return
    if diff_name.startswith("/") or "\\" in diff_name or "\0" in diff_name or ".." in diff_name.split("/"):
        raise _bad(name, f"section {path!r}: the {side} name {diff_name!r} is unsafe (absolute, `..`, NUL or backslash).")
    p1 = diff_name.split("/", 1)[1] if "/" in diff_name else ""
    wanted = {1: [p1], 0: [diff_name]}.get(strip, [p1, diff_name])
    for candidate in wanted:
        try:
            if candidate and check_member_path(candidate) == path:
                return
        except UnsafePath:
            pass
    level = "-p1" if strip == 1 else "-p0" if strip == 0 else "-p1 or -p0"
    raise _bad(name, f"section {path!r}: the {side} line names {diff_name!r}, which is not {path!r} after {level} "
                     "(patch would change another file than imgquilt).")


def _parse_section(name: str, raw: bytes, strip: int | None = None) -> FileSection:
    lines = split_lines(raw)
    index = lines[0][len(b"Index: "):].rstrip(b"\r\n")
    if index.startswith(b'"'):  # a name holding a tab, a newline or a quote (pathquote)
        try:
            quoted, rest = unquote_name(index)
        except ValueError:
            raise _bad(name, f"the quoted name on {lines[0][:60]!r} is not closed.") from None
        if rest:
            raise _bad(name, f"text after the quoted name on {lines[0][:60]!r}.")
        index = quoted
    path = check_member_path(index.decode("utf-8", "surrogateescape"), what=f"path in patch {name}")
    fields: dict[str, str] = {}
    extra: list[tuple[str, str]] = []
    i = 1
    while i < len(lines) and not lines[i].startswith((b"--- ", b"diff --git ")):
        m = _FIELD.match(lines[i])
        if m:
            key, value = m.group(1).decode(), m.group(2).decode("utf-8", "surrogateescape")
            if key in SECTION_FIELDS:
                fields[key] = value
            else:
                extra.append((key, value))
        elif lines[i].strip() and not lines[i].startswith(b"="):
            raise _bad(name, f"section {path!r}: unexpected line {show_line(lines[i].rstrip())} before `---`.")
        i += 1
    if i == len(lines):
        raise _bad(name, f"section {path!r} has no `---`/`+++` lines.")
    base = _hash_field(name, path, "Base-SHA256", fields.get("Base-SHA256"))
    patched = _hash_field(name, path, "Patched-SHA256", fields.get("Patched-SHA256"))
    mode = _mode_field(name, path, fields.get("Mode"))
    if lines[i].startswith(b"diff --git "):
        return _parse_binary(name, path, lines, i, base, patched, mode, raw, tuple(extra))
    src, dst, hunks = _parse_hunks(name, path, lines[i:])
    for side, diff_name in (("---", src), ("+++", dst)):
        _same_file(name, path, side, diff_name, strip)
    if (src == "/dev/null") != (base == ABSENT):
        raise _bad(name, f"section {path!r}: `---` is {src} but Base-SHA256 is {base}.")
    if (dst == "/dev/null") != (patched == ABSENT):
        raise _bad(name, f"section {path!r}: `+++` is {dst} but Patched-SHA256 is {patched}.")
    return FileSection(path, base, patched, hunks, raw, mode, tuple(extra))


_GIT_HEAD = (b"new file mode ", b"deleted file mode ", b"index ", b"old mode ", b"new mode ")


def _parse_binary(
    name: str, path: str, lines: list[bytes], i: int, base: str, patched: str, mode: int | None, raw: bytes, extra: tuple[tuple[str, str], ...]
) -> FileSection:
    """A section holding `diff --git` + `GIT binary patch`: a whole-file change pinned like any other."""
    names = lines[i].rstrip(b"\r\n")[len(b"diff --git "):]
    if names not in (quote_name(f"a/{path}") + b" " + quote_name(f"b/{path}"), quote_name(path) + b" " + quote_name(path)):
        # one meaning for every tool: git apply would patch the file these names give
        raise _bad(name, f"section {path!r}: its `diff --git` names {names.decode('latin-1')!r} do not name its Index path.")
    i += 1
    seen: set[bytes] = set()
    while i < len(lines) and lines[i].startswith(_GIT_HEAD):
        seen.add(next(k for k in _GIT_HEAD if lines[i].startswith(k)))
        i += 1
    if i >= len(lines) or lines[i].rstrip(b"\r\n") != b"GIT binary patch":
        raise _bad(name, f"section {path!r}: a `diff --git` section must hold a `GIT binary patch`.")
    if (b"new file mode " in seen) != (base == ABSENT) or (b"deleted file mode " in seen) != (patched == ABSENT):
        raise _bad(name, f"section {path!r}: its new/deleted file mode lines disagree with Base-SHA256 {base} / Patched-SHA256 {patched}.")
    try:
        bp, end = read_binary(lines, i + 1)
    except BinaryPatchError as exc:
        raise _bad(name, f"section {path!r}: {exc.message}") from None
    if any(ln.strip() for ln in lines[end:]):
        raise _bad(name, f"section {path!r}: unexpected text after its binary patch.")
    return FileSection(path, base, patched, (), raw, mode, extra, binary=bp)


def rehash_command(names: list[str]) -> str:
    """The one command back from a hand edit of patch files, with its arguments (every error about one names it)."""
    return f"`imgquilt refresh --rehash {' '.join(names)}`"


def parse_patch(data: bytes, name: str = "<patch>", *, strip: int | None = None) -> Patch:
    """Parse a patch in the imgquilt format. Raises MalformedPatch with the reason.

    `strip` is the series' -p level the `---`/`+++` names are checked at (None: either). A patch
    that only a hand edit's line counts keep from reading says so, naming the command that recounts.
    """
    try:
        return _parse_patch(data, name, strip)
    except MalformedPatch as exc:
        from .difftext import recount_hunks

        fixed = recount_hunks(data)
        if fixed != data:
            try:
                _parse_patch(fixed, name, strip)
            except MalformedPatch:
                raise exc from None
            exc.hint = f"A hand edit changed a hunk's line count: {rehash_command([name])} recounts its @@ headers and re-pins it."
            exc.recount = True  # type: ignore[attr-defined]  # check lists the hint with the problem
        raise


def _parse_patch(data: bytes, name: str, strip: int | None) -> Patch:
    # split at b"\n" only: a lone CR is part of a line's bytes, never a line start
    lines = split_lines(data)
    starts = [i for i, ln in enumerate(lines) if ln.startswith(b"Index: ")]
    if not starts:
        if not re.search(rb"^(diff |--- |\+\+\+ |@@ )", data, re.M):
            raise MalformedPatch(
                f"Patch {name} has no file sections yet (made by `imgquilt new`).",
                hint="`imgquilt add` files, edit them and `imgquilt refresh`, or `imgquilt delete -r` it.",
            )
        raise _bad(name, "no `Index:` section (is it a plain diff? use `imgquilt import`).")
    header = Header(b"".join(lines[: starts[0]]))
    sections = []
    bounds = starts + [len(lines)]
    for a, b in zip(bounds, bounds[1:]):
        sections.append(_parse_section(name, b"".join(lines[a:b]), strip))
    seen: set[str] = set()
    for s in sections:
        if s.path in seen:
            raise _bad(name, f"file {s.path!r} has two sections; one section per file.")
        seen.add(s.path)
    return Patch(name, header, tuple(sections), data)


def render_section(path: str, old: bytes | None, new: bytes | None, mode: int | None = None, hunks: tuple[Hunk, ...] | None = None) -> bytes:
    """The canonical bytes of a section turning `old` into `new` (None: absent).

    `hunks` (checked by the caller to turn `old` into `new`) are written as given instead of a
    fresh diff: import keeps a foreign patch's hunk text, renumbered to where it applies.
    """
    head = b"Index: " + quote_name(path) + f"\nBase-SHA256: {sha256_hex(old)}\nPatched-SHA256: {sha256_hex(new)}\n".encode()
    if mode is not None and old is None and new is not None:
        head += f"Mode: {mode:04o}\n".encode()
    if is_binary(old) or is_binary(new):
        return head + render_binary(path, old, new, mode)
    if hunks is None:
        return head + unified_diff(old, new, path)
    return head + diff_names(path, old is None, new is None) + format_hunks(hunks)


def make_section(path: str, old: bytes | None, new: bytes | None, mode: int | None = None, hunks: tuple[Hunk, ...] | None = None) -> FileSection:
    """A parsed section turning `old` into `new` (with `hunks` as written, if given)."""
    raw = render_section(path, old, new, mode, hunks)
    if hunks is not None and not (is_binary(old) or is_binary(new)):  # already values: the caller reads the whole patch back once
        return FileSection(path, sha256_hex(old), sha256_hex(new), hunks, raw, mode if old is None and new is not None else None)
    return _parse_section("<new>", raw)


def build_patch(name: str, header: Header, sections: list[FileSection] | tuple[FileSection, ...]) -> Patch:
    """Assemble a patch from a header and sections (each keeps its own raw bytes)."""
    raw = header.raw + b"".join(s.raw for s in sections)
    return Patch(name, header, tuple(sections), raw)


def with_header(patch: Patch, header: Header) -> Patch:
    """The same patch under another header."""
    return build_patch(patch.name, header, patch.sections)


def renamed(patch: Patch, name: str) -> Patch:
    return replace(patch, name=name)
