"""Patches from elsewhere, read byte-exact and turned into imgquilt sections with real hashes.

Accepted input, detected per file:
  * a plain `diff -u` / `diff -urN` (timestamps after a tab; an epoch timestamp means "absent",
    as GNU patch reads it);
  * quilt patches (`Index:` and `====` lines, `pkg.orig/` names, `@@ ... @@ func` hunk headers);
  * `git diff` (`diff --git`, new/deleted file modes, renames, C-quoted names, `index` blob hashes)
    and `git format-patch` mails (From/Subject/Date/body become Author/Description/Last-Update);
  * the hand-written pin format: comment lines `# TARGET: /abs/path`, `# base sha256: HEX`,
    `# patched sha256: HEX` before a diff (a pin block applies to the next file diff, in order);
  * imgquilt patches themselves (`Base-SHA256:`/`Patched-SHA256:`/`Mode:` are read as pins).

Hunks are applied with imgquilt's engine at the exact lines they name: no fuzz, no offset. A diff
that does not fit its base is refused, never slid into place. Every pin the patch carries (pin
lines, git `index` hashes) is checked against the real bytes.
"""
from __future__ import annotations

import email.header
import email.policy
import email.utils
import re
from dataclasses import dataclass, field
from datetime import datetime
from email.parser import BytesHeaderParser
from typing import Callable

from .engine.apply import PlaceError, Placed, apply_placed, place_hunks, renumbered
from .errors import BadInput, BaseDrift, HunkMismatch, MalformedPatch, MissingTarget, ResultMismatch
from .fs.paths import check_member_path
from .queue.binarypatch import BinaryPatch, BinaryPatchError, apply_binary, git_blob_sha1, read_binary
from .queue.difftext import HunkTextError, is_file_start, read_hunks
from .queue.hunks import ABSENT, Hunk, sha256_hex, split_lines

# at the start of a line, or in a `#` comment; never an indented DEP-3 continuation line. Hash pins
# are written with or without a colon (`base sha256 HEX`, `Base-SHA256: HEX`), in any case.
_PIN = re.compile(rb"^(?:[ \t]*#+[ \t]*)?(target|mode|status)[ \t]*:[ \t]*(\S[^\r\n]*?)[ \t]*\r?\n?$", re.I)
_HASH_PIN = re.compile(
    rb"^(?:[ \t]*#+[ \t]*)?((?:base|patched)[ _-]?sha-?256)(?:[ \t]*:[ \t]*(\S+)|[ \t]+([0-9a-fA-F]{64}|absent))[ \t]*\r?\n?$", re.I
)
_REMARK = re.compile(r"\s+(?:\(.*\)|#.*|[-\u2014\u2013]+\s.*)$")
_HASH = re.compile(r"^(?:[0-9a-f]{64}|absent)$")
_MBOX_FROM = re.compile(rb"^From [0-9a-f]{40} ")
_SUBJECT_TAG = re.compile(r"^\s*\[[^\]]*\]\s*")
_GIT_META = (
    b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"similarity index ",
    b"dissimilarity index ", b"rename from ", b"rename to ", b"copy from ", b"copy to ", b"index ",
    b"Binary files ", b"GIT binary patch",
)
_ZERO_SHA1 = re.compile(r"^0+$")


@dataclass(frozen=True)
class Pin:
    """What a patch claims about one file: where it is and the hashes before and after."""

    target: str | None = None
    base: str | None = None
    patched: str | None = None
    mode: int | None = None


@dataclass(frozen=True)
class ForeignFile:
    """One file diff of a foreign patch, names as written (unquoted, timestamps cut)."""

    old_name: str | None  # None: /dev/null
    new_name: str | None
    old_absent: bool
    new_absent: bool
    hunks: tuple[Hunk, ...]
    line: int  # 1-based line of the diff's first line, for messages
    new_file_mode: int | None = None
    mode_change: tuple[int, int] | None = None
    git_index: tuple[str, str] | None = None
    rename: bool = False
    copy: bool = False
    binary: bool = False
    pin: Pin | None = None
    git: bool = False
    binary_patch: BinaryPatch | None = None  # `GIT binary patch` (None with binary: "Binary files differ")


@dataclass(frozen=True)
class ForeignPatch:
    """A parsed foreign patch: the header imgquilt will keep and its file diffs in order."""

    source: str
    header: bytes
    files: tuple[ForeignFile, ...]
    kind: str  # "mail", "git", "plain"


@dataclass(frozen=True)
class FileChange:
    """The net change of one path over a whole foreign patch."""

    path: str
    base: bytes | None
    result: bytes | None
    mode: int | None  # for a new file
    # the imported hunks renumbered to the lines they apply at, when they alone make this change
    # (no fuzz, no anchor): written as they came; None: the writer diffs base -> result
    hunks: tuple[Hunk, ...] | None = None


@dataclass
class Converted:
    """The outcome of applying a foreign patch to real bases."""

    changes: list[FileChange]
    notes: list[str] = field(default_factory=list)


def _bad(source: str, line: int, msg: str) -> MalformedPatch:
    where = f"{source} line {line}" if line else source
    return MalformedPatch(f"Cannot import {where}: {msg}", hint="Check that the file is a unified diff (diff -u, git diff, quilt).")


# --- reading names -----------------------------------------------------------------------
_C_ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13, b'"': 34, b"\\": 92}


def _unquote(data: bytes) -> tuple[bytes, bytes]:
    """Read a git C-quoted name at the start of `data`; returns (name, rest after the quote)."""
    out = bytearray()
    i = 1
    while i < len(data):
        c = data[i : i + 1]
        if c == b'"':
            return bytes(out), data[i + 1 :]
        if c == b"\\":
            nxt = data[i + 1 : i + 2]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            octal = data[i + 1 : i + 4]
            if re.fullmatch(rb"[0-7]{3}", octal):
                out.append(int(octal, 8))
                i += 4
                continue
        out += c
        i += 1
    raise ValueError("unterminated quoted name")


def _is_epoch(stamp: bytes) -> bool:
    """GNU patch reads a file whose timestamp is the Unix epoch as absent."""
    text = stamp.decode("ascii", "replace").strip()
    if not text:
        return False
    m = re.match(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d+)?(?: ([+-]\d{4}))?$", text)
    if m:
        try:
            dt = datetime.strptime(m.group(1) + " " + (m.group(3) or "+0000"), "%Y-%m-%d %H:%M:%S %z")
        except ValueError:
            return False
        return dt.timestamp() == 0 and not (m.group(2) or "").strip(".0")
    return bool(re.match(r"^\w{3} \w{3} +1 00:00:00 1970$", text))


def _side(line: bytes) -> tuple[str | None, bool]:
    """A `---`/`+++` line: (name or None for /dev/null, epoch timestamp)."""
    rest = line[4:].rstrip(b"\r\n")
    if rest.startswith(b'"'):
        name, stamp = _unquote(rest)
        stamp = stamp.lstrip(b"\t ")
    else:
        name, _, stamp = rest.partition(b"\t")
    if name == b"/dev/null":
        return None, False
    return name.decode("utf-8", "surrogateescape"), _is_epoch(stamp)


def _git_names(line: bytes) -> tuple[str, str]:
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


# --- the whole file ----------------------------------------------------------------------
def _intro_line(ln: bytes) -> bool:
    """Lines that belong to the next file diff, not to the header (quilt, svn, diff -r)."""
    return ln.startswith(b"Index: ") or ln.startswith(b"====") or (ln.startswith(b"diff ") and not ln.startswith(b"diff --git "))


def _pin_of(ln: bytes) -> tuple[str, str] | None:
    m = _PIN.match(ln) or _HASH_PIN.match(ln)
    if not m:
        return None
    key = re.sub(r"[ _-]", "", m.group(1).decode().lower())
    value = next(g for g in m.groups()[1:] if g is not None).decode("utf-8", "surrogateescape").strip()
    if key == "target":
        # `# TARGET: pkg/x.py (inside the pinned image)`: the path is the first word, the rest a remark
        value = _REMARK.sub("", value).split()[0] if value else value
    return key, value


class _Pins:
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


def parse_foreign(data: bytes, source: str = "<patch>") -> ForeignPatch:
    """Split a foreign patch into its header and its file diffs."""
    lines = split_lines(data)
    n = len(lines)
    pins = _Pins(source)
    files: list[ForeignFile] = []
    preamble_end: int | None = None
    pin_lines: set[int] = set()
    git_seen = False
    i = 0
    while i < n:
        ln = lines[i]
        if not is_file_start(lines, i):
            pin = _pin_of(ln)
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
        old_name = new_name = None
        old_absent = new_absent = False
        meta: dict[bytes, bytes] = {}
        binary = False
        binary_patch = None
        git = ln.startswith(b"diff --git ")
        if git:
            git_seen = True
            try:
                old_name, new_name = _git_names(ln)
            except ValueError as exc:
                raise _bad(source, i + 1, str(exc)) from None
            i += 1
            while i < n and lines[i].startswith(_GIT_META):
                key = next(p for p in _GIT_META if lines[i].startswith(p))
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
                o, o_epoch = _side(lines[i])
                nn, n_epoch = _side(lines[i + 1])
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
            hunks, i = read_hunks(lines, i)
        except HunkTextError as exc:
            raise _bad(source, exc.line, exc.message) from None
        index = None
        if b"index " in meta:
            m = re.match(rb"^([0-9a-f]+)\.\.([0-9a-f]+)", meta[b"index "])
            if m:
                index = (m.group(1).decode(), m.group(2).decode())
        mode_change = None
        if b"old mode " in meta and b"new mode " in meta:
            mode_change = (int(meta[b"old mode "], 8) & 0o7777, int(meta[b"new mode "], 8) & 0o7777)
        nfm = int(meta[b"new file mode "][-6:], 8) & 0o7777 if b"new file mode " in meta else None
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
            )
        )
    if not files:
        raise _bad(source, 0, "no file diff found (no `diff --git` and no `---`/`+++` pair).")
    if pins.blocks:
        raise _bad(source, 0, f"{len(pins.blocks)} TARGET/sha256 pin block(s) name no diff that follows them.")
    pre = lines[: preamble_end or 0]
    if pre and _MBOX_FROM.match(pre[0]):
        return ForeignPatch(source, mail_header(pre), tuple(files), "mail")
    header = comment_header([ln for k, ln in enumerate(pre) if k not in pin_lines], pins.status)
    if header.strip() and not header.endswith(b"\n\n") and not header.endswith(b"\r\n\r\n"):
        header += b"\n"
    if not header.strip():
        header = b""
    return ForeignPatch(source, header, tuple(files), "git" if git_seen else "plain")


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


def mail_header(pre: list[bytes]) -> bytes:
    """DEP-3 fields from a `git format-patch` mail: Description (subject + body), Author, Last-Update."""
    text = b"".join(pre[1:])
    head, sep, body = text.partition(b"\n\n")
    # compat32 and an explicit decode: the `default` policy's header registry costs ~5 ms a mail
    msg = BytesHeaderParser(policy=email.policy.compat32).parsebytes(head + b"\n\n")

    def field(name: str) -> str:
        raw = msg.get(name)
        if raw is None:
            return ""
        return str(email.header.make_header(email.header.decode_header(str(raw))))

    subject = _SUBJECT_TAG.sub("", field("Subject"))
    while _SUBJECT_TAG.match(subject):
        subject = _SUBJECT_TAG.sub("", subject)
    subject = " ".join(subject.split())
    body_lines: list[str] = []
    for raw in split_lines(body):
        line = raw.decode("utf-8", "surrogateescape").rstrip("\r\n")
        if line == "---":  # the diffstat follows
            break
        body_lines.append(line.rstrip())
    while body_lines and not body_lines[-1]:
        body_lines.pop()
    while body_lines and not body_lines[0]:
        body_lines.pop(0)
    out = [f"Description: {subject}"]
    out += [f" {ln}" if ln else " ." for ln in body_lines]
    if field("From"):
        out.append(f"Author: {' '.join(field('From').split())}")
    if field("Date"):
        try:
            out.append(f"Last-Update: {email.utils.parsedate_to_datetime(field('Date')).date().isoformat()}")
        except (TypeError, ValueError):
            pass
    return ("\n".join(out) + "\n\n").encode("utf-8", "surrogateescape")


def split_mbox(data: bytes) -> list[bytes]:
    """`git format-patch --stdout` output holds one mail per patch: split at each `From <sha>` line."""
    lines = split_lines(data)
    starts = [k for k, ln in enumerate(lines) if _MBOX_FROM.match(ln)]
    if len(starts) < 2:
        return [data]
    bounds = starts + [len(lines)]
    return [b"".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]


def mail_subject_name(data: bytes, number: int) -> str:
    """A file name as `git format-patch` makes it: 0001-subject-words.patch."""
    m = re.search(rb"^Subject: (.*)$", data, re.M)
    subject = _SUBJECT_TAG.sub("", m.group(1).decode("utf-8", "replace")) if m else "patch"
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", subject).strip("-.")[:52].rstrip("-.") or "patch"
    return f"{number:04d}-{slug}.patch"


# --- applying ------------------------------------------------------------------------------
def file_paths(f: ForeignFile, strip: int, source: str, prefix: str = "") -> tuple[str, str]:
    """(path read, path written) inside the image for one file diff; `prefix` as `patch -d DIR`."""
    if f.pin is not None and f.pin.target:
        target = f.pin.target if f.pin.target.startswith("/") else _under(prefix, f.pin.target)
        target = check_member_path(target.lstrip("/"), what=f"TARGET in {source}")
        return target, target
    def one(name: str | None) -> str | None:
        if name is None:
            return None
        return check_member_path(_under(prefix, strip_path(name, strip, source=source, line=f.line)), what=f"path in {source}")

    old, new = one(f.old_name), one(f.new_name)
    if f.rename or f.copy:
        if old is None or new is None:
            raise _bad(source, f.line, "a rename or copy names no source or destination.")
        return old, new
    name = new if (new is not None and not f.new_absent) else (old if old is not None else new)
    if name is None:
        raise _bad(source, f.line, "both sides of the diff are /dev/null.")
    return name, name


def _under(prefix: str, path: str) -> str:
    return f"{prefix.strip('/')}/{path}" if prefix.strip("/") else path


BaseReader = Callable[[str, str | None], bytes | None]
# every path of the image ending in "/" + the given tail (for package-relative paths)
TailFinder = Callable[[str], list[str]]


def _by_tail(path: str, pinned: str, read_base: BaseReader, find_tail: TailFinder | None, where: str) -> str | None:
    """The one image file whose path ends in `path` and whose bytes have the pinned base hash."""
    if find_tail is None:
        return None
    candidates = sorted(find_tail(path))
    hits = [c for c in candidates if sha256_hex(read_base(c, pinned)) == pinned]
    if len(hits) == 1:
        return hits[0]
    named = ", ".join(candidates[:8]) + (" ..." if len(candidates) > 8 else "") if candidates else "none"
    what = "none has" if not hits else f"{len(hits)} have"
    raise MissingTarget(
        f"Cannot import {where}: {path} is not in the image; files ending in it: {named}; {what} the pinned base sha256 {pinned}.",
        hint="Say where the patch's paths start with --prefix DIR (as `patch -d DIR`).",
    )


def _placement_notes(where: str, placed: list[Placed]) -> list[str]:
    notes = []
    for p in placed:
        if p.hunk.anchor is not None or (p.start == p.named and not p.fuzz):
            continue
        d = p.start - p.named
        moved = f"{abs(d)} line{'s' if abs(d) != 1 else ''} {'below' if d > 0 else 'above'} its header" if d else "at its header's line"
        fuzz = f", with fuzz {p.fuzz}" if p.fuzz else ""
        notes.append(f"{where} hunk {p.index + 1} at line {p.start + 1}, {moved}{fuzz}")
    return notes


def apply_foreign(
    fp: ForeignPatch,
    strip: int,
    read_base: BaseReader,
    *,
    label: str | None = None,
    check_git_index: bool = True,
    fuzz: int = 0,
    prefix: str = "",
    find_tail: TailFinder | None = None,
) -> Converted:
    """Apply every file diff of `fp` to real bases; verify every pin. Nothing is written here.

    `read_base(path, pinned_base)` returns the file's current bytes (None: absent).
    """
    label = label or fp.source
    state: dict[str, bytes | None] = {}
    first: dict[str, bytes | None] = {}
    modes: dict[str, int | None] = {}
    order: list[str] = []
    notes: list[str] = []
    kept: dict[str, tuple[Hunk, ...] | None] = {}

    def get(path: str, want: str | None) -> bytes | None:
        if path not in state:
            state[path] = read_base(path, want)
            first[path] = state[path]
            order.append(path)
        return state[path]

    for f in fp.files:
        src, dst = file_paths(f, strip, fp.source, prefix)
        where = f"{label}: {dst}" + (f" (from {src})" if src != dst else "")
        if f.binary and f.binary_patch is None:
            raise BadInput(
                f"Cannot import {where}: the diff says only that the binary file differs (no content).",
                hint="Make the diff with `git diff --binary` (or `git format-patch --binary`), which carries the bytes.",
            )
        pin = f.pin or Pin()
        base = get(src, pin.base)
        if base is None and src == dst and src not in kept and pin.base not in (None, ABSENT) and not f.old_absent:
            found = _by_tail(src, pin.base, read_base, find_tail, where)  # type: ignore[arg-type]
            if found is not None:
                notes.append(f"{src} is not in the image; took {found}, the one file ending in it with the pinned base.")
                order.remove(src)
                del state[src], first[src]
                src = dst = found
                where = f"{label}: {dst}"
                base = get(src, pin.base)
        actual = sha256_hex(base)
        if pin.base is not None and pin.base != actual:
            raise BaseDrift(
                f"Refused: {where}: the patch pins base sha256 {pin.base}, the file here is {actual}.",
                hint="Import onto the image the patch was made for (--image REF), or drop the stale pin line.",
            )
        if check_git_index and f.git_index is not None:
            want = f.git_index[0]
            have = git_blob_sha1(base)
            if not (have.startswith(want) or (base is None and _ZERO_SHA1.match(want))):
                raise BaseDrift(
                    f"Refused: {where}: the git diff was made against blob {want}, the file here is blob {have[:len(want)]} (sha256 {actual}).",
                    hint="Import onto the image the diff was made for (--image REF), or pass --ignore-git-index to trust the hunks alone.",
                )
        if f.old_absent and base is not None and not (f.rename or f.copy):
            raise BaseDrift(
                f"Refused: {where}: the patch creates the file, but it exists here (sha256 {actual}).",
                hint="The file is already there: drop this part of the patch, or import onto another image.",
            )
        if base is None and not f.old_absent and any(h.old_len for h in f.hunks):
            raise MissingTarget(
                f"Cannot import {where}: the file does not exist here, and the patch changes its lines.",
                hint="Check the path (-p level, TARGET line) and the image (--image REF).",
            )
        placed: list[Placed] = []
        if f.binary_patch is not None:
            try:
                new = apply_binary(base, f.binary_patch)
            except BinaryPatchError as exc:
                raise HunkMismatch(f"Refused: {where}: the binary patch does not apply: {exc.message} (base sha256 {actual}).") from None
        else:
            src_lines = split_lines(base or b"")
            if base and not base.endswith(b"\n") and any(h.anchor == "append" for h in f.hunks):
                raise HunkMismatch(
                    f"Refused: {where}: the file does not end with a newline, so an `@@ append` hunk has no line to follow (base sha256 {actual}).",
                    hint="Write the hunk as a numbered diff that also changes the last line.",
                )
            try:
                placed = place_hunks(src_lines, f.hunks, fuzz=fuzz)
            except PlaceError as exc:
                raise _no_fit(where, exc, actual, fuzz) from None
            new = apply_placed(src_lines, placed)
            notes += _placement_notes(f"{dst}", placed)
        result: bytes | None = new
        if f.new_absent:
            if new:
                raise ResultMismatch(f"Refused: {where}: the patch deletes the file, but {len(new)} byte(s) remain after its hunks.")
            result = None
        elif base is None and not new and not f.old_absent and not f.hunks:
            result = None  # nothing created
        got = sha256_hex(result)
        if pin.patched is not None and pin.patched != got:
            raise ResultMismatch(
                f"Refused: {where}: the patch pins patched sha256 {pin.patched}, applying it gives {got}.",
                hint="The pin and the diff disagree: fix the pin line, or regenerate the patch.",
            )
        if check_git_index and f.git_index is not None and not (f.rename or f.copy):
            want = f.git_index[1]
            have = git_blob_sha1(result)
            if not (have.startswith(want) or (result is None and _ZERO_SHA1.match(want))):
                raise ResultMismatch(f"Refused: {where}: git names the result blob {want}, applying the hunks gives {have[:len(want)]}.")
        if f.mode_change is not None and f.mode_change[0] != f.mode_change[1]:
            notes.append(f"{dst}: mode change {f.mode_change[0]:04o} -> {f.mode_change[1]:04o} ignored (imgquilt keeps the image's mode).")
        if dst != src:
            get(dst, None)
            if f.rename:
                state[src] = None
        state[dst] = result
        exact = f.hunks and all(h.anchor is None for h in f.hunks) and all(p.fuzz == 0 for p in placed) and src == dst
        kept[dst] = renumbered(placed) if exact and dst not in kept else None
        mode = f.new_file_mode if f.new_file_mode is not None else pin.mode
        if mode is not None and mode != 0o644:
            modes[dst] = mode
    changes: list[FileChange] = []
    for path in order:
        base, result = first[path], state[path]
        if base == result:
            continue
        hunks = kept.get(path)
        if result is None or base is None and not result:
            hunks = None  # deletions and empty files: the writer's own form
        changes.append(FileChange(path, base, result, modes.get(path) if base is None else None, hunks))
    return Converted(changes, notes)


def _no_fit(where: str, exc: PlaceError, actual: str, fuzz: int) -> HunkMismatch:
    if exc.would is not None:
        line, need = exc.would
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere exactly; with --fuzz {need} it would apply at line {line}"
        hint = f"Check the change at line {line}, then pass --fuzz {need} to accept it, or regenerate the diff against this file."
    else:
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere, not even with 2 context lines dropped (fuzz 2)"
        hint = "The diff was made against other bytes: import onto the right image, or regenerate the diff against this file."
    return HunkMismatch(f"Refused: {where}: {detail} (base sha256 {actual}).", hint=hint)


__all__ = [
    "ABSENT", "Converted", "FileChange", "ForeignFile", "ForeignPatch", "Pin", "apply_foreign",
    "file_paths", "git_blob_sha1", "mail_header", "mail_subject_name", "parse_foreign", "split_mbox", "strip_path",
]
