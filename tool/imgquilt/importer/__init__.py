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

from ..queue.binarypatch import git_blob_sha1
from ..queue.hunks import ABSENT
from .convert import Prefixes, apply_foreign, file_paths
from .mail import is_cover_letter, mail_header, mail_subject, mail_subject_name, split_mbox
from .names import strip_path
from .parse import parse_foreign
from .values import Base, Converted, FileChange, ForeignFile, ForeignPatch, Pin

__all__ = [
    "ABSENT", "Base", "Converted", "FileChange", "ForeignFile", "ForeignPatch", "Pin", "Prefixes", "apply_foreign",
    "file_paths", "git_blob_sha1", "is_cover_letter", "mail_header", "mail_subject", "mail_subject_name", "parse_foreign",
    "split_mbox", "strip_path",
]
