"""`git format-patch` mails: DEP-3 fields from the headers, one patch per mail."""
from __future__ import annotations

import email.header
import email.policy
import email.utils
import re
from email.parser import BytesHeaderParser

from ..queue.hunks import split_lines

MBOX_FROM = re.compile(rb"^From [0-9a-f]{40} ")
_SUBJECT_TAG = re.compile(r"^\s*\[[^\]]*\]\s*")


def mail_header(pre: list[bytes]) -> bytes:
    """DEP-3 fields from a `git format-patch` mail: Description (subject + body), Author, Last-Update."""
    text = b"".join(pre[1:])
    head, sep, body = text.partition(b"\n\n")
    # compat32 and an explicit decode: the `default` policy's header registry costs ~5 ms a mail
    msg = BytesHeaderParser(policy=email.policy.compat32).parsebytes(head + b"\n\n")

    subject = " ".join(_untagged(_field(msg, "Subject")).split())
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
    if _field(msg, "From"):
        out.append(f"Author: {' '.join(_field(msg, 'From').split())}")
    if _field(msg, "Date"):
        try:
            out.append(f"Last-Update: {email.utils.parsedate_to_datetime(_field(msg, 'Date')).date().isoformat()}")
        except (TypeError, ValueError):
            pass
    return ("\n".join(out) + "\n\n").encode("utf-8", "surrogateescape")


def split_mbox(data: bytes) -> list[bytes]:
    """`git format-patch --stdout` output holds one mail per patch: split at each `From <sha>` line."""
    lines = split_lines(data)
    starts = [k for k, ln in enumerate(lines) if MBOX_FROM.match(ln)]
    if len(starts) < 2:
        return [data]
    bounds = starts + [len(lines)]
    return [b"".join(lines[a:b]) for a, b in zip(bounds, bounds[1:])]


_COVER = re.compile(r"^\s*\[[^\]]*?\b0+/\d+\]")
_FILE_DIFF = re.compile(rb"^(?:diff --git |--- .*\n\+\+\+ )", re.M)


def mail_subject(data: bytes) -> str:
    """A mail's Subject line, unfolded and decoded."""
    head = data.partition(b"\n\n")[0]
    msg = BytesHeaderParser(policy=email.policy.compat32).parsebytes(head.partition(b"\n")[2] + b"\n\n")
    return " ".join(_field(msg, "Subject").split())


def _field(msg, name: str) -> str:
    """A header field, its RFC 2047 encoded words decoded ("" when it is not there)."""
    raw = msg.get(name)
    if raw is None:
        return ""
    parts = email.header.decode_header(str(raw))
    try:
        return str(email.header.make_header(parts))
    except (LookupError, UnicodeDecodeError):  # a charset Python does not know, or bytes not in it: shown, not refused
        return "".join(t if isinstance(t, str) else t.decode(_known(c), "replace") for t, c in parts)


def _untagged(subject: str) -> str:
    """A subject without its leading `[PATCH 1/3]`-style tags, as `git am` takes it."""
    while _SUBJECT_TAG.match(subject):
        subject = _SUBJECT_TAG.sub("", subject)
    return subject


def _known(charset: str | None) -> str:
    """`charset` where Python has a codec for it; latin-1 (every byte a letter) otherwise."""
    import codecs

    try:
        return codecs.lookup(charset or "ascii").name
    except LookupError:
        return "latin-1"


def is_cover_letter(data: bytes) -> bool:
    """`git format-patch --cover-letter`'s mail: `[PATCH 0/N]`, and no file diff (`git am` skips it too)."""
    return bool(_COVER.match(mail_subject(data))) and not _FILE_DIFF.search(data)


def mail_subject_name(data: bytes, number: int) -> str:
    """A file name as `git format-patch` makes it: 0001-subject-words.patch, from the subject as the
    commit has it (unfolded, its RFC 2047 encoded words decoded: `café` gives caf-, never UTF-8-q-caf-C3-A9)."""
    subject = _untagged(mail_subject(data))
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", subject).strip("-.")[:52].rstrip("-.") or "patch"
    return f"{number:04d}-{slug}.patch"
