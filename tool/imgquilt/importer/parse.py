"""Splitting a foreign patch into its header and its file diffs (hunks read by the queue's one reader)."""
from __future__ import annotations

import re

from ..queue.binarypatch import BinaryPatchError, read_binary
from ..queue.hunkread import HunkTextError, Joined, is_file_start, read_hunks
from ..queue.hunks import split_lines
from .mail import MBOX_FROM, mail_header
from ..queue.pathquote import unquote_name
from .names import git_names, side_name
from .pins import Pins, comment_header, pin_of
from .values import ForeignFile, ForeignPatch
from .values import bad as _bad

GIT_META = (
    b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"similarity index ",
    b"dissimilarity index ", b"rename from ", b"rename to ", b"copy from ", b"copy to ", b"index ",
    b"Binary files ", b"GIT binary patch",
)


def _intro_line(ln: bytes) -> bool:
    """Lines that belong to the next file diff, not to the header (quilt, svn, diff -r)."""
    return ln.startswith(b"Index: ") or ln.startswith(b"====") or (ln.startswith(b"diff ") and not ln.startswith(b"diff --git "))


_GIT_MODE = re.compile(rb"^[0-7]{6}$")
# git's `index OLD..NEW [MODE]`: blob names of at most 64 hex digits (an abbreviation, SHA-1 or SHA-256); a
# line that is not one (longer names, other characters) is ignored, as `git apply` ignores it
_INDEX = re.compile(rb"^([0-9a-f]{1,64})\.\.([0-9a-f]{1,64})(?: +([0-7]{6}))?\s*$")


def _git_mode(value: bytes, key: bytes, source: str, line: int) -> int:
    """The mode of a git mode line (`100644`: six octal digits, as git writes them), type bits included."""
    if not _GIT_MODE.match(value.strip()):
        raise _bad(source, line, f"`{key.decode().strip()}` {value[:30]!r} is not a git file mode (six octal digits, "
                                 "such as 100644).")
    mode = int(value, 8)
    if mode >> 12 not in (0o10, 0o12):
        what = "a submodule (gitlink)" if mode >> 12 == 0o16 else "not a file or a symlink"
        raise _bad(source, line, f"`{key.decode().strip()}` {value.strip().decode('latin-1')} is {what}; imgquilt patches "
                                 "files and symlinks.")
    return mode


def _meta_name(value: bytes) -> str:
    """A name on a `rename from`-style line: C-quoted or bare (to the end of the line)."""
    if value.startswith(b'"'):
        return unquote_name(value)[0].decode("utf-8", "surrogateescape")
    return value.decode("utf-8", "surrogateescape")


_GREW = " (If a hand edit grew the hunk, recount its @@ header, e.g. with patchutils' `recountdiff`.)"


def parse_foreign(data: bytes, source: str = "<patch>", *, gnu_names: bool = False) -> ForeignPatch:
    """Split a foreign patch into its header and its file diffs. `gnu_names`: a `---`/`+++` name with no tab
    after it ends at its first space, as GNU patch (and so quilt) reads it; else as git reads it (up to a
    timestamp after spaces)."""
    lines = split_lines(data)
    joined = Joined(lines)  # each file diff's hunks are read from it
    n = len(lines)
    pins = Pins(source)
    files: list[ForeignFile] = []
    preamble_end: int | None = None
    last_end = 0  # just past the last file diff read: what follows it is the trailer
    pin_lines: set[int] = set()
    git_seen = False
    i = 0
    while i < n:
        ln = lines[i]
        if not is_file_start(lines, i):
            pin = pin_of(ln)
            if pin is not None:
                pins.add(pin[0], pin[1], i + 1)
                pin_lines.add(i)
            i += 1
            continue
        if preamble_end is None:
            k = i
            while k > 0 and (_intro_line(lines[k - 1]) or (k - 1) in pin_lines):
                k -= 1
            preamble_end = k
        start = i
        cut = None
        old_name = new_name = None
        old_absent = new_absent = False
        meta: dict[bytes, bytes] = {}
        binary = False
        binary_patch = None
        git = ln.startswith(b"diff --git ")
        if git:
            git_seen = True
            try:
                old_name, new_name = git_names(ln)
            except ValueError as exc:
                raise _bad(source, i + 1, str(exc)) from None
            i += 1
            while i < n and lines[i].startswith(GIT_META):
                key = next(p for p in GIT_META if lines[i].startswith(p))
                meta[key] = lines[i][len(key) :].rstrip(b"\r\n")
                binary = binary or key in (b"Binary files ", b"GIT binary patch")
                i += 1
                if key == b"GIT binary patch":
                    try:
                        binary_patch, i = read_binary(lines, i)
                    except BinaryPatchError as exc:
                        raise _bad(source, exc.line, exc.message) from None
                    break
        if i + 1 < n and lines[i].startswith(b"--- ") and lines[i + 1].startswith(b"+++ "):
            try:
                o, o_epoch, o_cut = side_name(lines[i], gnu_names and not git)
                nn, n_epoch, n_cut = side_name(lines[i + 1], gnu_names and not git)
                cut = n_cut or o_cut
            except ValueError as exc:
                raise _bad(source, i + 1, str(exc)) from None
            if git:
                old_absent, new_absent = o is None, nn is None
                old_name = o if o is not None else old_name
                new_name = nn if nn is not None else new_name
            else:
                old_name, new_name = o, nn
                old_absent, new_absent = o is None or o_epoch, nn is None or n_epoch
            i += 2
        if git:
            old_absent = old_absent or b"new file mode " in meta
            new_absent = new_absent or b"deleted file mode " in meta
        try:
            hunks, i = read_hunks(joined, i)
        except HunkTextError as exc:
            raise _bad(source, exc.line, exc.message + _GREW) from None
        last_end = i
        index = None
        if b"index " in meta:
            m = _INDEX.match(meta[b"index "])
            if m:
                index = (m.group(1).decode(), m.group(2).decode())
                if m.group(3):
                    meta[b"index mode "] = m.group(3)
        modes = {k: _git_mode(meta[k], k, source, start + 1)
                 for k in (b"old mode ", b"new mode ", b"new file mode ", b"deleted file mode ", b"index mode ") if k in meta}
        kinds = {m >> 12 == 0o12 for m in modes.values()}
        if len(kinds) > 1:
            raise _bad(source, start + 1, "the diff turns a regular file into a symlink or back; imgquilt carries one kind of "
                                          "file per patch section (import the deletion and the creation as two patches).")
        mode_change = None
        if b"old mode " in modes and b"new mode " in modes:
            mode_change = (modes[b"old mode "] & 0o7777, modes[b"new mode "] & 0o7777)
        old_mode = next((modes[k] & 0o7777 for k in (b"old mode ", b"deleted file mode ", b"index mode ") if k in modes), None)
        nfm = modes[b"new file mode "] & 0o7777 if b"new file mode " in modes else None
        moved_names = None
        for a, b in ((b"rename from ", b"rename to "), (b"copy from ", b"copy to ")):
            if a in meta and b in meta:
                try:
                    moved_names = (_meta_name(meta[a]), _meta_name(meta[b]))
                except ValueError:
                    raise _bad(source, start + 1, f"the name on `{a.decode().strip()}` opens a quote it does not close.") from None
        files.append(
            ForeignFile(
                old_name=old_name,
                new_name=new_name,
                old_absent=old_absent,
                new_absent=new_absent,
                hunks=tuple(hunks),
                line=start + 1,
                new_file_mode=nfm,
                mode_change=mode_change,
                git_index=index,
                rename=b"rename from " in meta,
                copy=b"copy from " in meta,
                binary=binary,
                pin=pins.take(),
                git=git,
                binary_patch=binary_patch,
                link=kinds.pop() if kinds else None,
                old_mode=old_mode,
                moved_names=moved_names,
                gnu_cut=cut,
            )
        )
    if not files:
        raise _bad(source, 0, "no file diff found (no `diff --git` and no `---`/`+++` pair).")
    if pins.blocks:
        raise _bad(source, 0, f"{len(pins.blocks)} TARGET/sha256 pin block(s) name no diff that follows them.")
    trailer = b"".join(ln for k, ln in enumerate(lines[last_end:], last_end) if k not in pin_lines)
    if not trailer.strip():
        trailer = b""
    pre = lines[: preamble_end or 0]
    if pre and MBOX_FROM.match(pre[0]):
        return ForeignPatch(source, mail_header(pre), tuple(files), "mail", trailer)
    header = comment_header([ln for k, ln in enumerate(pre) if k not in pin_lines], pins.status)
    if header.strip() and not header.endswith(b"\n\n") and not header.endswith(b"\r\n\r\n"):
        header += b"\n"
    if not header.strip():
        header = b""
    return ForeignPatch(source, header, tuple(files), "git" if git_seen else "plain", trailer)
