"""The imgquilt patch file: a DEP-3 style header, then per file `Index:`, hashes and a unified diff.

Parsing keeps the original bytes: `Patch.raw` is the file as read, so parse-then-write of a patch is
byte-identical. Each section's hunks are read by the one unified-diff reader in `difftext`, on bytes,
so the line bytes come back exactly.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import MalformedPatch, UnsafePath
from ..fs.paths import check_member_path
from ..fs.content import held, held_or_none
from ..util.regular import READ_BUFFER, read_capped
from .difftext import diff_hunks, diff_names, format_hunks
from .binarypatch import BinaryPatch, BinaryPatchError, git_blob_sha1, git_mode_lines, is_binary, read_binary, render_binary
from .hunks import ABSENT, Hunk, sha256_hex, show_line, split_lines
from .pathquote import quote_name, read_name, unquote_name

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FIELD = re.compile(rb"^([A-Za-z][A-Za-z0-9_-]*):[ \t]?(.*?)\r?\n?$", re.S)
SECTION_FIELDS = ("Base-SHA256", "Patched-SHA256", "Mode")
# the header field a refresh or a rebase with --no-python-check writes (docs/patch-format.md)
PYTHON_CHECK_FIELD = "Python-Check"
PYTHON_CHECK_SKIPPED = "skipped"


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
    def python_unchecked(self) -> bool:
        """`Python-Check: skipped`: the patch was last written with --no-python-check (refresh, rebase)."""
        value = self.get(PYTHON_CHECK_FIELD)
        return value is not None and value.strip().split(" ")[0].lower() == PYTHON_CHECK_SKIPPED

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
    # the file is a symlink (git's mode 120000 in the section): its bytes are the link's target
    link: bool = False
    # `old mode`/`new mode` of an existing file: (old, new) permission bits; the result gets the new ones
    mode_change: tuple[int, int] | None = None
    # `deleted file mode` of a regular file a git-form section deletes (644 or 755): what the writer
    # knew of the file; imgquilt does not check it when applying (the hashes decide)
    deleted_mode: int | None = None

    @property
    def new_mode(self) -> int | None:
        return self.mode_change[1] if self.mode_change is not None else None

    @property
    def git_form(self) -> bool:
        """Does the section's diff start with `diff --git` (git's extended headers kept in it)?"""
        return self.binary is not None or _GIT_LINE.search(self.raw) is not None

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


def _read_diff(name: str, path: str, content, start: int, end: int, *, held: bool):
    """The `---`/`+++` names and the hunks of one section's diff, `content[start:end]` (from its `---`
    line). One reader (queue.streamed) whether the section is held in memory or read as it streams:
    held, the hunks are Hunk values; streamed, a StreamedHunks that reads them again when applied."""
    from .streamed import Lines, StreamError, StreamedHunks, check_trailer, hunk_values, scan_hunks

    rd = Lines(content, start, end)  # line numbers count from the diff's `---` line
    try:
        minus = rd.next_line() or b""
        plus = rd.peek_line()
        if plus is None or not plus.startswith(b"+++ "):
            raise _bad(name, f"section {path!r} must hold exactly one ---/+++ file diff, found 0.")
        rd.next_line()
        src, dst = _diff_name(name, path, minus), _diff_name(name, path, plus)
        hunks: tuple[Hunk, ...] | StreamedHunks
        if held:
            hunks = hunk_values(scan_hunks(rd))
        else:
            at, first_line = rd.offset, rd.lineno + 1
            count = sum(1 for ev in scan_hunks(rd) if ev[0] == "@")
            hunks = StreamedHunks(content, at, rd.offset, count, first_line)
        extra_files, stray = check_trailer(rd)
    except StreamError as exc:
        raise _bad(name, f"section {path!r}: {exc.message}") from None
    if extra_files:
        raise _bad(name, f"section {path!r} must hold exactly one ---/+++ file diff, found {1 + extra_files}.")
    if stray is not None:  # GNU patch would read it as more diff; imgquilt would not
        raise _bad(name, f"section {path!r}: stray diff line {show_line(stray.rstrip()[:4096], 60)} after its hunks.")
    return src, dst, hunks


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
    wanted = [p1] if strip == 1 else [diff_name] if strip == 0 else [p1, diff_name]
    for candidate in wanted:
        try:
            if candidate and check_member_path(candidate) == path:
                return
        except UnsafePath:
            pass
    level = "-p1" if strip == 1 else "-p0" if strip == 0 else "-p1 or -p0"
    raise _bad(name, f"section {path!r}: the {side} line names {diff_name!r}, which is not {path!r} after {level} "
                     "(patch would change another file than imgquilt).")


def _section_head(name: str, lines: list[bytes]) -> tuple[str, str, str, int | None, tuple[tuple[str, str], ...], int]:
    """(path, Base-SHA256, Patched-SHA256, Mode, other fields, index of the diff's first line) of a
    section's lines (they start at `Index:`; the first `---` or `diff --git` line ends the head)."""
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
    return path, base, patched, mode, tuple(extra), i


def _check_diff_names(name: str, path: str, src: str, dst: str, base: str, patched: str, strip: int | None) -> None:
    for side, diff_name in (("---", src), ("+++", dst)):
        _same_file(name, path, side, diff_name, strip)
    if (src == "/dev/null") != (base == ABSENT):
        raise _bad(name, f"section {path!r}: `---` is {src} but Base-SHA256 is {base}.")
    if (dst == "/dev/null") != (patched == ABSENT):
        raise _bad(name, f"section {path!r}: `+++` is {dst} but Patched-SHA256 is {patched}.")


def _parse_section(name: str, raw: bytes, strip: int | None = None) -> FileSection:
    lines = split_lines(raw)
    path, base, patched, mode, extra, i = _section_head(name, lines)
    if lines[i].startswith(b"diff --git "):
        return _parse_git(name, path, lines, i, base, patched, mode, raw, extra, strip)
    src, dst, hunks = _read_diff(name, path, raw, sum(map(len, lines[:i])), len(raw), held=True)
    _check_diff_names(name, path, src, dst, base, patched, strip)
    return FileSection(path, base, patched, hunks, raw, mode, extra)


_GIT_HEAD = (b"new file mode ", b"deleted file mode ", b"index ", b"old mode ", b"new mode ")
_GIT_LINE = re.compile(rb"(?m)^diff --git ")
_GIT_MODE = re.compile(rb"^(100|120)([0-7]{3})$")
_INDEX = re.compile(rb"^[0-9a-f]{4,64}\.\.[0-9a-f]{4,64}(?: ([0-7]{6}))?$")
LINK_MODE = 0o120000


def _git_mode(name: str, path: str, key: bytes, value: bytes) -> tuple[bool, int]:
    """(a symlink?, permission bits) of a git file mode: 100644/100755 (a file), 120000 (a symlink)."""
    m = _GIT_MODE.match(value.strip())
    if not m or (m.group(1) == b"120" and m.group(2) != b"000"):
        raise _bad(name, f"section {path!r}: `{key.decode().strip()}` {value.strip()[:30].decode('latin-1')!r} is not a mode "
                         "git writes for a file (100644, 100755) or a symlink (120000).")
    perms = int(m.group(2), 8)
    if perms & ~0o777:
        raise _bad(name, f"section {path!r}: `{key.decode().strip()}` has setuid, setgid or sticky bits.")
    return m.group(1) == b"120", perms


def _git_head(name: str, path: str, lines: list[bytes], i: int, base: str, patched: str,
              mode: int | None) -> tuple[int, bool, int | None, tuple[int, int] | None, int | None]:
    """The `diff --git` line at `i` and git's extended headers after it, checked: (index of the first
    line after them, a symlink?, the new file's mode, a mode change, the deleted file's mode)."""
    names = lines[i].rstrip(b"\r\n")[len(b"diff --git "):]
    if names not in (quote_name(f"a/{path}") + b" " + quote_name(f"b/{path}"), quote_name(path) + b" " + quote_name(path)):
        # one meaning for every tool: git apply would patch the file these names give
        raise _bad(name, f"section {path!r}: its `diff --git` names {names.decode('latin-1')!r} do not name its Index path.")
    i += 1
    heads: dict[bytes, bytes] = {}
    while i < len(lines) and lines[i].startswith(_GIT_HEAD):
        key = next(k for k in _GIT_HEAD if lines[i].startswith(k))
        if key in heads:
            raise _bad(name, f"section {path!r}: two `{key.decode().strip()}` lines.")
        heads[key] = lines[i][len(key):].rstrip(b"\r\n")
        i += 1
    kinds: list[bool] = []
    perms: dict[bytes, int] = {}
    for key in (b"new file mode ", b"deleted file mode ", b"old mode ", b"new mode "):
        if key in heads:
            link, bits = _git_mode(name, path, key, heads[key])
            kinds.append(link)
            perms[key] = bits
    if b"index " in heads:
        m = _INDEX.match(heads[b"index "])
        if not m:
            raise _bad(name, f"section {path!r}: cannot read its `index` line {show_line(heads[b'index '], 60)}.")
        if m.group(1):
            kinds.append(_git_mode(name, path, b"index ", m.group(1))[0])
    if len(set(kinds)) > 1:
        raise _bad(name, f"section {path!r}: it changes a regular file into a symlink or back; a patch section carries "
                         "one kind of file (delete it in one patch, create it in the next).")
    link = bool(kinds) and kinds[0]
    if (b"new file mode " in heads) != (base == ABSENT) or (b"deleted file mode " in heads) != (patched == ABSENT):
        raise _bad(name, f"section {path!r}: its new/deleted file mode lines disagree with Base-SHA256 {base} / Patched-SHA256 {patched}.")
    if (b"old mode " in heads) != (b"new mode " in heads) or (b"old mode " in heads and (base == ABSENT or patched == ABSENT)):
        raise _bad(name, f"section {path!r}: `old mode` and `new mode` go together, on a file that exists before and after.")
    if link and mode is not None:
        raise _bad(name, f"section {path!r}: a symlink has no `Mode:`.")
    if b"new file mode " in heads and not link:
        if mode is None:
            mode = perms[b"new file mode "]
        elif bool(mode & 0o111) != bool(perms[b"new file mode "] & 0o111):
            # `Mode:` says the exact bits (git knows 644 and 755), but not against git's line: git apply
            # and patch would make the file with the other executable bit
            raise _bad(name, f"section {path!r}: `Mode: {mode:04o}` and `new file mode "
                             f"{heads[b'new file mode '].strip().decode('latin-1')}` disagree on the executable bit.")
    mode_change = None
    if b"old mode " in heads and not link and perms[b"old mode "] != perms[b"new mode "]:
        mode_change = (perms[b"old mode "], perms[b"new mode "])
    deleted_mode = perms[b"deleted file mode "] if b"deleted file mode " in heads and not link else None
    return i, link, mode, mode_change, deleted_mode


def _parse_git(
    name: str, path: str, lines: list[bytes], i: int, base: str, patched: str, mode: int | None, raw: bytes,
    extra: tuple[tuple[str, str], ...], strip: int | None,
) -> FileSection:
    """A section whose diff keeps git's extended headers: `diff --git`, then `new file mode`, `deleted
    file mode`, `old mode`/`new mode`, `index` (with a mode), then a `GIT binary patch`, `---`/`+++` and
    hunks, or nothing (a mode change; an empty file created or deleted). Mode 120000 makes it a symlink."""
    i, link, mode, mode_change, deleted_mode = _git_head(name, path, lines, i, base, patched, mode)
    if i < len(lines) and lines[i].rstrip(b"\r\n") == b"GIT binary patch":
        if link:
            raise _bad(name, f"section {path!r}: a symlink's target is text, not a `GIT binary patch`.")
        try:
            bp, end = read_binary(lines, i + 1)
        except BinaryPatchError as exc:
            raise _bad(name, f"section {path!r}: {exc.message}") from None
        _no_stray(name, path, lines[end:])
        return FileSection(path, base, patched, (), raw, mode, extra, binary=bp, mode_change=mode_change,
                           deleted_mode=deleted_mode)
    hunks: tuple[Hunk, ...] = ()
    if i < len(lines) and lines[i].startswith(b"--- "):
        src, dst, hunks = _read_diff(name, path, raw, sum(map(len, lines[:i])), len(raw), held=True)
        _check_git_diff_names(name, path, src, dst, base, patched, strip)
    else:
        _no_stray(name, path, lines[i:])
    if link and patched != ABSENT and not hunks:
        raise _bad(name, f"section {path!r}: a symlink section holds its target as a one-line hunk.")
    return FileSection(path, base, patched, hunks, raw, mode, extra, link=link, mode_change=mode_change,
                       deleted_mode=deleted_mode)


def _check_git_diff_names(name: str, path: str, src: str, dst: str, base: str, patched: str, strip: int | None) -> None:
    for side, diff_name in (("---", src), ("+++", dst)):
        _same_file(name, path, side, diff_name, strip)
    if (src == "/dev/null") != (base == ABSENT) or (dst == "/dev/null") != (patched == ABSENT):
        raise _bad(name, f"section {path!r}: its `---`/`+++` names disagree with Base-SHA256 {base} / Patched-SHA256 {patched}.")


_STRAY = (b"@@", b"+++ ", b"--- ", b"*** ", b"diff ", b"GIT binary patch")


def _no_stray(name: str, path: str, rest: list[bytes]) -> None:
    stray = next((ln for ln in rest if ln.startswith(_STRAY)), None)
    if stray is not None:
        raise _bad(name, f"section {path!r}: stray diff line {show_line(stray.rstrip(), 60)} after its diff.")


def read_patch(path: Path, name: str, *, strip: int | None = None, raw_out: list | None = None) -> Patch | None:
    """The patch file at `path`, parsed (None: it does not exist; not a regular file: exit 6).

    A file of at most spool_at() bytes is read and parsed in memory; a larger one as it streams
    (queue.streamed): its sections are checked by the same rules, and the large ones are kept by
    reference to the file, never held. `raw_out` gets the file's content (bytes or Spooled) before
    it is parsed, for a caller that hashes it even when it does not parse."""
    source = read_patch_source(path)
    if source is None:
        return None
    if raw_out is not None:
        raw_out.append(source if isinstance(source, bytes) else source[0])
    return parse_patch_source(source, name, strip)


def read_patch_source(path: Path):
    """The patch file at `path` as read_patch takes it in, not parsed (None: it does not exist): its
    bytes when it has at most spool_at() of them, else (its Spooled content, its section starts)."""
    from ..fs.content import Spooled, spool_at
    from ..util.regular import open_regular_file

    fd = open_regular_file(path)
    if fd is None:
        return None
    size = os.fstat(fd).st_size
    if size <= spool_at():
        with os.fdopen(fd, "rb", buffering=READ_BUFFER) as f:
            return read_capped(f, shown=str(path), cap=max(spool_at(), size))
    content = Spooled.of_file(fd, shown=str(path))
    starts, sha = _section_starts(content)
    return content.with_sha256(sha), starts


def parse_patch_source(source, name: str, strip: int | None) -> Patch:
    """A source of read_patch_source, parsed."""
    if isinstance(source, bytes):
        return parse_patch(source, name, strip=strip)
    content, starts = source
    return _scan_patch(content, starts, name, strip)


def _section_starts(content) -> tuple[list[int], str]:
    """Offsets of the lines starting with `Index: ` and the file's sha256, in one pass of bounded reads."""
    import hashlib

    from ..fs.content import CHUNK

    h = hashlib.sha256()
    starts: list[int] = []
    tail = b"\n"  # the file's start counts as a line start
    pos = 0
    for chunk in content.chunks(CHUNK):
        h.update(chunk)
        window = tail + chunk
        at = window.find(b"\nIndex: ")
        while at >= 0:
            starts.append(pos - len(tail) + at + 1)
            at = window.find(b"\nIndex: ", at + 1)
        tail = window[-8:]
        pos += len(chunk)
    return sorted(set(starts)), h.hexdigest()


def _scan_patch(content, starts: list[int], name: str, strip: int | None) -> Patch:
    """parse_patch for a file too large to hold (see read_patch)."""
    from ..fs.content import spool_at

    if not starts:
        raise _no_sections(name, content)
    header = Header(content.slice(0, starts[0]).to_bytes(f"the header of patch {name}"))
    bounds = starts + [content.size]
    sections = []
    for a, b in zip(bounds, bounds[1:]):
        if b - a <= spool_at():
            sections.append(_parse_section(name, content.pread(b - a, a), strip))
        else:
            sections.append(_stream_section(name, content, a, b, strip))
    seen: set[str] = set()
    for s in sections:
        if s.path in seen:
            raise _bad(name, f"file {s.path!r} has two sections; one section per file.")
        seen.add(s.path)
    return Patch(name, header, tuple(sections), content)


def _no_sections(name: str, content) -> MalformedPatch:
    from .streamed import Lines

    rd = Lines(content)
    while (line := rd.next_line()) is not None:
        if len(line) >= (1 << 20) and not line.endswith(b"\n"):
            rd.skip_rest_of_line()
        if line.startswith((b"diff ", b"--- ", b"+++ ", b"@@ ")):
            return _bad(name, "no `Index:` section (is it a plain diff? use `imgquilt import`).")
    return MalformedPatch(f"Patch {name} has no file sections yet (made by `imgquilt new`).",
                          hint="`imgquilt add` files, edit them and `imgquilt refresh`, or `imgquilt delete -r` it.")


def _stream_section(name: str, content, a: int, b: int, strip: int | None) -> FileSection:
    """One section larger than spool_at(), checked as it streams (queue.streamed)."""
    from .streamed import HEAD_CAP, Lines, StreamError

    rd = Lines(content, a, b)
    head: list[bytes] = []
    held = 0
    while True:
        line = rd.peek_line()
        if line is None or (head and line.startswith((b"--- ", b"diff --git "))):
            break
        held += len(line)
        if held > HEAD_CAP or not (line.endswith(b"\n") or rd.offset + len(line) >= b):
            raise _bad(name, f"a section's lines before its diff run past {HEAD_CAP} bytes.")
        head.append(rd.next_line() or b"")
    diff_first = rd.peek_line()
    path, base, patched, mode, extra, _ = _section_head(name, head + ([diff_first] if diff_first is not None else []))
    raw = content.slice(a, b - a)
    if diff_first is not None and diff_first.startswith(b"diff --git "):
        rd.lineno = 0  # line numbers count from the diff's first line, as the in-memory reader's
        try:
            return _stream_git(name, path, rd, base, patched, mode, raw, extra, strip, content, b)
        except StreamError as exc:
            raise _bad(name, f"section {path!r}: {exc.message}") from None
    src, dst, hunks = _read_diff(name, path, content, rd.offset, b, held=False)
    _check_diff_names(name, path, src, dst, base, patched, strip)
    return FileSection(path, base, patched, hunks, raw, mode, extra)


def _stream_git(name: str, path: str, rd, base: str, patched: str, mode: int | None, raw, extra,
                strip: int | None, content, end: int) -> FileSection:
    """_parse_git for a section read as it streams: its git headers checked by the same rules; a
    `GIT binary patch` decoded into spooled contents; a text diff of a regular file (a file created or
    deleted with its mode, a mode change with a diff) read as it streams, as a plain section's; a
    symlink's, or git headers alone, parsed held, within IMGQUILT_IN_MEMORY_MAX."""
    from .binarypatch import BINARY_CAP, BinaryBlock
    from .streamed import StreamError, _BLOCK, read_binary_block

    head = [rd.next_line() or b""]
    while (line := rd.peek_line()) is not None and line.startswith(_GIT_HEAD) and len(head) <= len(_GIT_HEAD):
        head.append(rd.next_line() or b"")
    line = rd.peek_line()
    _, link, mode, mode_change, deleted_mode = _git_head(name, path, head + ([line] if line is not None else []), 0, base,
                                                         patched, mode)
    if line is not None and line.startswith(b"--- ") and not link:
        src, dst, hunks = _read_diff(name, path, content, rd.offset, end, held=False)
        _check_git_diff_names(name, path, src, dst, base, patched, strip)
        return FileSection(path, base, patched, hunks, raw, mode, extra, mode_change=mode_change, deleted_mode=deleted_mode)
    if line is None or line.rstrip(b"\r\n") != b"GIT binary patch" or link:
        return _parse_section(name, held(raw, f"section {path} of patch {name}"), strip)
    rd.next_line()
    try:
        kind, data = read_binary_block(rd, BINARY_CAP)
        forward = BinaryBlock(kind, data)
        reverse = None
        nxt = rd.peek_line()
        if nxt is not None and _BLOCK.match(nxt):
            kind, data = read_binary_block(rd, BINARY_CAP)
            reverse = BinaryBlock(kind, data)
    except StreamError as exc:
        raise _bad(name, f"section {path!r}: {exc.message}") from None
    while (line := rd.next_line()) is not None:
        if line.startswith(_STRAY):
            raise _bad(name, f"section {path!r}: stray diff line {show_line(line.rstrip()[:4096], 60)} after its diff.")
        if len(line) >= (1 << 20) and not line.endswith(b"\n"):
            rd.skip_rest_of_line()
    return FileSection(path, base, patched, (), raw, mode, extra, binary=BinaryPatch(forward, reverse), mode_change=mode_change,
                       deleted_mode=deleted_mode)


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


def git_head(path: str, old: bytes | None, new: bytes | None, mode: int | None = None, *, link: bool = False,
             mode_change: tuple[int, int] | None = None, deleted_mode: int | None = None) -> bytes:
    """`diff --git` and git's extended headers for a section (as `git diff` writes them, with full blob ids)."""
    kind = "120000" if link else None
    out = [b"diff --git " + quote_name(f"a/{path}") + b" " + quote_name(f"b/{path}") + b"\n"]
    out.append(git_mode_lines(old, new, mode, deleted_mode, mode_change, kind))
    if old != new or old is None or new is None:
        suffix = f" {kind}" if kind and old is not None and new is not None else ""
        out.append(f"index {git_blob_sha1(old)}..{git_blob_sha1(new)}{suffix}\n".encode())
    return b"".join(out)


def needs_git_form(old: bytes | None, new: bytes | None, mode: int | None = None, deleted_mode: int | None = None) -> bool:
    """Does a regular file's section turning `old` into `new` need git's extended headers for `git apply`
    and `patch -p1` to do what imgquilt does? A new executable file (`mode`), an empty file created or
    deleted, and an executable file deleted (`deleted_mode`): a plain `---`/`+++` diff cannot say them."""
    if old is None:
        return new is not None and (not new or (mode is not None and bool(mode & 0o111)))
    if new is None:
        return not old or (deleted_mode is not None and bool(deleted_mode & 0o111))
    return False


def render_section(path: str, old: bytes | None, new: bytes | None, mode: int | None = None, hunks: tuple[Hunk, ...] | None = None,
                   *, link: bool = False, mode_change: tuple[int, int] | None = None, deleted_mode: int | None = None) -> bytes:
    """The canonical bytes of a section turning `old` into `new` (None: absent).

    `hunks` (checked by the caller to turn `old` into `new`) are written as given instead of a
    fresh diff: import keeps a foreign patch's hunk text, renumbered to where it applies. A symlink
    (`link`: the bytes are its target), a mode change of an existing file, and what needs_git_form
    names (a new executable file, an empty file created or deleted, an executable file deleted:
    `deleted_mode` is the permission bits of the file a deletion removes, when known) are written
    with git's extended headers, which `git apply` and `patch -p1` both read.
    """
    # a diff is made of whole files (git, difflib): a large content is held, within IMGQUILT_IN_MEMORY_MAX
    old, new = held_or_none(old, path), held_or_none(new, path)
    head = b"Index: " + quote_name(path) + f"\nBase-SHA256: {sha256_hex(old)}\nPatched-SHA256: {sha256_hex(new)}\n".encode()
    if mode is not None and old is None and new is not None and not link:
        head += f"Mode: {mode:04o}\n".encode()
    if mode_change is not None and (old is None or new is None or mode_change[0] == mode_change[1]):
        mode_change = None
    if link or new is not None:
        deleted_mode = None
    if not link and (is_binary(old) or is_binary(new)):
        return head + render_binary(path, old, new, mode, mode_change, deleted_mode)
    body = diff_names(path, old is None, new is None) + format_hunks(diff_hunks(old, new) if hunks is None else hunks)
    if link or mode_change is not None or needs_git_form(old, new, mode, deleted_mode):
        if old == new:  # a mode change alone: no diff under git's headers
            body = b""
        return head + git_head(path, old, new, mode, link=link, mode_change=mode_change, deleted_mode=deleted_mode) + body
    return head + body


def make_section(path: str, old: bytes | None, new: bytes | None, mode: int | None = None, hunks: tuple[Hunk, ...] | None = None,
                 *, link: bool = False, mode_change: tuple[int, int] | None = None, deleted_mode: int | None = None) -> FileSection:
    """A parsed section turning `old` into `new` (with `hunks` as written, if given)."""
    old, new = held_or_none(old, path), held_or_none(new, path)
    raw = render_section(path, old, new, mode, hunks, link=link, mode_change=mode_change, deleted_mode=deleted_mode)
    plain = not link and mode_change is None and not (is_binary(old) or is_binary(new)) and \
        not needs_git_form(old, new, mode, deleted_mode)
    if hunks is not None and plain:  # already values: the caller reads the whole patch back once
        return FileSection(path, sha256_hex(old), sha256_hex(new), hunks, raw, mode if old is None and new is not None else None)
    return _parse_section("<new>", raw)


def as_git_form(s: FileSection) -> FileSection:
    """A plain `---`/`+++` section with a `diff --git` line (and its new/deleted file mode) in front:
    after a section that is git headers alone (a mode change), GNU patch would take a plain section's
    diff for that file's."""
    if s.git_form:
        return s
    head, sep, diff = s.raw.partition(b"\n--- ")
    if not sep:
        return s
    p1 = b"\n--- a/" in s.raw or b"\n+++ b/" in s.raw or b"\n--- \"a/" in s.raw or b"\n+++ \"b/" in s.raw
    names = (quote_name(f"a/{s.path}") + b" " + quote_name(f"b/{s.path}")) if p1 else (quote_name(s.path) + b" " + quote_name(s.path))
    old, new = (None if s.is_new else b""), (None if s.is_delete else b"")  # which sides are absent
    git = b"\ndiff --git " + names + b"\n" + git_mode_lines(old, new, s.mode, s.deleted_mode)
    return replace(s, raw=head + git.rstrip(b"\n") + sep + diff)


def _git_safe(sections: list[FileSection] | tuple[FileSection, ...]) -> list[FileSection]:
    """Sections as GNU patch reads them too: one right after a git section with no diff (a mode change)
    gets its own `diff --git` line."""
    out: list[FileSection] = []
    headless = False
    for s in sections:
        if headless and not s.git_form:
            s = as_git_form(s)
        out.append(s)
        headless = s.git_form and s.binary is None and not s.hunks
    return out


def build_patch(name: str, header: Header, sections: list[FileSection] | tuple[FileSection, ...]) -> Patch:
    """Assemble a patch from a header and sections (each keeps its own raw bytes)."""
    # a section read from a large patch file is held here (within IMGQUILT_IN_MEMORY_MAX): assembling
    # a patch is what the authoring commands do, on patches of a size they can render
    sections = [replace(s, raw=held(s.raw, f"section {s.path} of patch {name}")) for s in sections]
    sections = _git_safe(sections)
    raw = header.raw + b"".join(s.raw for s in sections)
    return Patch(name, header, tuple(sections), raw)


def with_header(patch: Patch, header: Header) -> Patch:
    """The same patch under another header."""
    return build_patch(patch.name, header, patch.sections)


def renamed(patch: Patch, name: str) -> Patch:
    return replace(patch, name=name)
