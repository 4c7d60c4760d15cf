"""3-way merge of bytes with `git merge-file`, run as a subprocess, byte-exact.

The three inputs go to a private temp directory; the result comes back on stdout as bytes
(`-p`, never decoded), so CRLF, a missing final newline and non-UTF-8 bytes survive. The exit
status is the number of conflicts. Conflicts are marked in diff3 style by default
(`<<<<<<<` ours, `|||||||` the old base, `=======`, theirs `>>>>>>>`, as `git merge-file --diff3`),
or with the two sides only (`merge`); each marker is labelled with the patch, the old image or the
new image, so a user sees whose side is whose.

git refuses files with NUL bytes; for those only the trivial merges are made, anything else is
a conflict without markers.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from ..errors import ImgquiltError
from ..util.gitexe import require_git

# a conflict marker of either style (diff3's `|||||||` too), labelled or bare
MARKER = re.compile(rb"^(?:(?:<{7}|>{7}|\|{7})(?: |\r?\n?$)|={7}\r?\n?$)")
STYLES = ("diff3", "merge")  # --conflict-style; diff3 writes the base section too

# merge-file reads merge.conflictStyle from the user's config; a fixed style keeps output stable
_ISOLATED_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_COUNT": "0"}


@dataclass(frozen=True)
class MergeResult:
    """The merged bytes and how many conflict regions (with markers) they hold."""

    data: bytes
    conflicts: int
    binary: bool = False  # git could not merge: `data` is `theirs`, with no markers

    @property
    def clean(self) -> bool:
        return self.conflicts == 0


def _binary(*datas: bytes) -> bool:
    # git's own test (buffer_is_binary): a NUL in the first 8000 bytes
    return any(b"\0" in d[:8000] for d in datas)


def _trivial(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return None


def merge3(base: bytes, ours: bytes, theirs: bytes, *, ours_label: str = "ours", base_label: str = "base", theirs_label: str = "theirs",
           style: str = "diff3") -> MergeResult:
    """Merge the change base→ours into theirs. Conflicts are marked in `data` (`style`: diff3 with
    the base section, or merge with the two sides only)."""
    if style not in STYLES:
        raise ValueError(f"unknown conflict style {style!r}")
    easy = _trivial(base, ours, theirs)
    if easy is not None:
        return MergeResult(easy, 0)
    if _binary(base, ours, theirs):
        return MergeResult(theirs, 1, binary=True)
    with tempfile.TemporaryDirectory(prefix="imgquilt-merge-") as tmp:
        names = {"ours": ours, "base": base, "theirs": theirs}
        for name, data in names.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        cmd = [
            require_git("A 3-way merge"), "-c", f"merge.conflictStyle={style}", "merge-file", "-p",
            *(["--diff3"] if style == "diff3" else []),
            "-L", _label(ours_label), "-L", _label(base_label), "-L", _label(theirs_label),
            "ours", "base", "theirs",
        ]
        # GitPython would add nothing here: one command, bytes in and out
        r = subprocess.run(cmd, cwd=tmp, capture_output=True, env={**os.environ, **_ISOLATED_ENV})
        status, stdout, stderr = r.returncode, r.stdout, r.stderr
    # git exits with the conflict count (capped at 127); a negative status (255) is an error
    if status < 0 or status > 127:
        raise ImgquiltError(f"git merge-file failed (status {status}): {_text(stderr)}")
    return MergeResult(bytes(stdout), int(status))


def _label(text: str) -> str:
    # a label is one line of the marker; keep it on one line
    return " ".join(text.split()) or "-"


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def leftover_markers(resolved: bytes, *sides: bytes) -> list[int]:
    """1-based line numbers of conflict markers in `resolved` that none of `sides` had already.

    A line like `=======` is legitimate in reStructuredText; it only counts when it is new.
    """
    known = {ln for side in sides for ln in side.splitlines() if MARKER.match(ln + b"\n")}
    return [i for i, ln in enumerate(resolved.splitlines(), 1) if MARKER.match(ln + b"\n") and ln not in known]
