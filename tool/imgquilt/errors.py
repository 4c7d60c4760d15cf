"""The whole error tree of imgquilt; every class carries the exit code the CLI returns for it. And
`shown()`, the one rule for showing a string imgquilt did not write (in a message or any output).

Grouped as in docs/exit-codes.md: usage (2), refused (3), conflict (4), not live (5),
bad input (6). Anything that is not an ImgquiltError is a bug (exit 1).
"""
from __future__ import annotations


# --- how a string imgquilt did not write is shown ----------------------------------------------
# A patch or guard name from a cloned queue, a profile's `select` or env value from targets.lock, a
# path or link target from an image, a registry's own words: one rule for every output. A character
# that is not printable (ESC, a newline, a carriage return, a bidi override, a byte that is not UTF-8)
# is written as its Python escape (`\x1b`, `\n`, `\u202e`, `\udcff`), so no input can colour, move or
# clear the terminal, or start a line of its own; printable text is left as it is, so
# shown(shown(s)) == shown(s). The CLI's output functions (plain lines, tables, error paragraphs,
# progress lines) pass everything they print through shown_lines, which keeps only the line breaks
# and tabs imgquilt writes itself; a value that may hold a newline (an env value of a hand-edited
# lock) goes through shown where it is put in a line. The rule lives here, beside the errors whose
# messages carry such strings, because the CLI starts without loading any module but these two.
def shown(text: str, *, keep: str = "") -> str:
    """`text` with every character that is not printable, apart from those in `keep`, as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)


def shown_lines(text: str) -> str:
    """Text imgquilt prints (lines it wrote, values in them): `shown`, keeping its newlines and tabs."""
    return shown(text, keep="\n\t")


def control_character(text: str) -> str | None:
    """The first character of `text` that `shown` would escape (None: it prints as it is)."""
    return next((c for c in text if not c.isprintable()), None)


def in_words(exc: BaseException) -> str:
    """Why a document imgquilt reads (JSON, TOML) did not have the shape it needs, in words for the
    user: the missing key or the mistyped value, never only a Python exception's class."""
    if isinstance(exc, KeyError):
        return f"a required key, {exc.args[0]!r}, is missing" if exc.args else "a required key is missing"
    if isinstance(exc, (TypeError, AttributeError)):
        return f"a value is not of the type the format says ({exc})"
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    return str(exc).rstrip(".") or exc.__class__.__name__


def shown_env(key: str, value: str | None) -> str:
    """`KEY=VALUE` of an env default or an image's Env (`no KEY` when unset), escaped as one word."""
    return shown(f"no {key}" if value is None else f"{key}={value}")


class ImgquiltError(Exception):
    """Base of every error imgquilt reports to a user."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """One paragraph: what happened, then what to do next."""
        return f"{self.message}\n{self.hint}" if self.hint else self.message


# --- 2: usage -------------------------------------------------------------------------------
class UsageError(ImgquiltError):
    """The command line or the queue state does not allow this command."""

    exit_code = 2


class QueueNotFound(UsageError):
    """No queue directory (a directory holding `series`) was found."""


# --- 3: refused -----------------------------------------------------------------------------
class Refused(ImgquiltError):
    """Verification failed; nothing was written."""

    exit_code = 3


class BaseDrift(Refused):
    """A file's bytes are not the base a patch section expects."""


class ResultMismatch(Refused):
    """Applying a section did not produce the pinned result hash."""


class HunkMismatch(Refused):
    """`import`: a foreign hunk's context or removed lines fit nowhere in the base (nothing imported)."""


class ChainConflict(Refused):
    """`refresh --rehash`: a later patch's hunk no longer fits what the re-pinned patch now leaves; nothing was written."""


class PythonCheckFailed(Refused):
    """The patched Python source has an error its base did not have."""


class SplitNeeded(Refused):
    """`rebase` of several profiles: a patch they share changes a file their new images hold at different bases
    (decided before any merge; `--split` makes a guarded copy), or that split cannot be made."""


class LineageBroken(Refused):
    """`rebase --profile`: the new image is another profile's pin, or from another repository than the old pin
    (`--force` takes it)."""


class ProfileChainBroken(Refused):
    """A profile's selected patches do not chain: a Base that only a patch outside the profile produces, a Requires it
    leaves out (`check`), or a shared patch a rebase would rewrite under another profile (`rebase --profile`)."""

    def __init__(self, message: str, *, hint: str | None = None, problems: list[str] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class UnselectedPatches(Refused):
    """`check`: a patch that no pin of targets.lock selects (its guards keep it out of every deployment)."""

    def __init__(self, message: str, *, hint: str | None = None, problems: list[str] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class BootFailed(Refused):
    """`boot`: a patched module fails to import (or the command fails) on the patched tree where the base boots."""

    def __init__(self, message: str, *, hint: str | None = None, problems: list[str] | None = None) -> None:
        super().__init__(message, hint=hint)
        self.problems = problems or []


class NotAttested(Refused):
    """No attestation of the image verifies with the key and matches the queue (each candidate's reason is listed)."""


# --- 4: conflict ----------------------------------------------------------------------------
class RebaseConflict(ImgquiltError):
    """A 3-way merge during rebase (or port) left conflicts to resolve by hand."""

    exit_code = 4


# --- 5: audit -------------------------------------------------------------------------------
class NotLive(ImgquiltError):
    """Audit found a patch not in the expected state."""

    exit_code = 5


# --- 6: bad input ---------------------------------------------------------------------------
class BadInput(ImgquiltError):
    """Input imgquilt cannot accept: malformed, unsafe or missing."""

    exit_code = 6


class MalformedSeries(BadInput):
    """The series file has a line imgquilt cannot read."""


class MalformedPatch(BadInput):
    """A patch file is not in the imgquilt patch format."""


class MalformedLock(BadInput):
    """targets.lock cannot be read."""


class StaleLock(BadInput):
    """targets.lock does not match the queue or is required but missing."""


class UnsafePath(BadInput):
    """A path escapes the root, is absolute, or holds `..`, NUL or a backslash."""


class LinkedState(UnsafePath):
    """A symlink where imgquilt keeps its own state or writes a file (`.imgquilt/work -> $HOME`); never followed."""


class StateWriteFailed(BadInput):
    """The filesystem refused imgquilt's own state in the queue's `.imgquilt/` (read-only, full, a name too long)."""


class PathRefused(BadInput):
    """The system refused a path imgquilt was given or keeps (a name too long, too many symlinks, permission denied)."""


class BadCacheKey(BadInput):
    """IMGQUILT_CACHE_KEY is set but too short to be a secret (at least 32 characters)."""


class UnsafeCache(BadInput):
    """The shared cache, or a part of it, is not the user's own (a link, another owner, writable by others); never used."""


class MissingTarget(BadInput):
    """A file the queue needs does not exist in the image or root."""


class BadImage(BadInput):
    """An image reference, archive, manifest or blob cannot be used."""


class DigestMismatch(BadImage):
    """A blob's bytes do not match its digest."""


class StoreNotPodmans(BadImage):
    """A `containers-storage:` image skopeo wrote is not listed by podman (another driver, store or mount
    namespace); removed again, nothing written."""


class AttestationNotStored(BadImage):
    """The image was written, but the registry (or destination) refused its attestation."""


class BadKey(BadInput):
    """A signing or verification key file that is not a PEM key imgquilt can use (Ed25519, ECDSA P-256)."""


class QueueProblems(BadInput):
    """`check` found problems in the queue (all are listed)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(
            f"The queue has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems)
        )
        self.problems = problems


class ForeignJournal(BadInput):
    """An in-place journal in a root (or an import or rehash journal in a queue) that imgquilt did not write there; never acted on."""


class ForeignState(BadInput):
    """A rebase journal or backup manifest (`.imgquilt/rebase/`) that imgquilt did not write and seal in this queue; never acted on."""


class ForeignRecord(BadInput):
    """A root's apply record that is not a version of this queue, or names what the queue does not pin
    (`apply --reverse`); never obeyed."""


class UnsafeStateKey(BadInput):
    """The key that seals imgquilt's journals (`~/.local/state/imgquilt/journal.key`) is not the user's own, or cannot be made."""


class QueueWriteFailed(BadInput):
    """The filesystem refused a write of `import` or `refresh --rehash` (read-only, full); what it had written was put back."""


class RootWriteFailed(BadInput):
    """The filesystem refused an in-place write (read-only, full, immutable, raced); the root was rolled back."""


class GitMissing(BadInput):
    """`git` is not on PATH, and rebase (merge-file) or audit --history needs it."""


class SpoolFull(BadInput):
    """The directory imgquilt sets large contents aside in (IMGQUILT_SPOOL_DIR, the queue's .imgquilt/tmp,
    else the system's temp) has no room left: named as such, never as a read error of what was read."""


class SandboxUnavailable(BadInput):
    """`boot`: no sandbox could be made to run the image's Python in (each way tried is named, with why it failed)."""


class TooLargeToHold(BadInput):
    """A step needs a file whole in memory (the Python check, a merge, a diff) and it is larger than
    IMGQUILT_IN_MEMORY_MAX (docs/performance.md)."""


_OS_WHY = {"ENAMETOOLONG": "a name in it is longer than the filesystem allows (255 bytes a component, 4096 a path)",
           "ELOOP": "it goes through too many symbolic links (or a loop of them)",
           "EACCES": "permission denied", "EPERM": "the operation is not permitted",
           "ENOTDIR": "a component of it is not a directory", "ENOENT": "it does not exist",
           "EISDIR": "it is a directory", "EROFS": "it is on a read-only filesystem",
           "ENOSPC": "the filesystem is full", "EIO": "the disk reported an I/O error"}


def os_why(exc: OSError) -> tuple[str, str]:
    """Why the system refused a path, in words, and the errno's name ("" when it has none)."""
    import errno

    code = errno.errorcode.get(exc.errno or 0, "")
    return _OS_WHY.get(code) or (exc.strerror or str(exc)), code


def os_error(exc: OSError, what: str, *, hint: str | None = None) -> PathRefused:
    """An OSError on a path imgquilt was given (or keeps) as the error a user reads (exit 6), naming
    `what` it was and why the system refused it."""
    why, code = os_why(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) not in what else ""
    return PathRefused(f"Cannot use {what}{where}: {why}" + (f" ({code})." if code else "."),
                       hint=hint or "Check the path (its length, its links, its permissions) and run again.")
