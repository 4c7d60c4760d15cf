"""header: read or change a patch's header; its sections are kept byte for byte."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..queue.interrupted import Change
from ..queue.patchfile import Header, Patch, with_header
from .patchtext import check_header
from .relock import commit

if TYPE_CHECKING:
    from .tree import WorkTree

# the fields the sections own; a header may not set them
_SECTION_FIELDS = ("Index", "Base-SHA256", "Patched-SHA256")


def header(wt: WorkTree, name: str | None = None) -> tuple[str, Header]:
    """(name, header) of a patch in series, the top by default."""
    name = name or wt.need_top()
    if name not in wt.series():
        raise UsageError(f"Patch {name} is not in series.")
    return name, wt.read_patch(name).header


def set_header(wt: WorkTree, name: str, new: Header) -> Patch:
    with wt.locked():
        patch = wt.read_patch(name)
        changed = with_header(patch, check_header(new.raw, name))
        if changed.raw != patch.raw:  # the patch file and the lock that follows it, as one transaction
            commit(wt, "header", [Change(f"patches/{name}", changed.raw)], patches={name: changed})
        return changed


def set_fields(wt: WorkTree, name: str | None, changes: list[tuple[str, str | None]]) -> Patch:
    """Set (value) or remove (None) header fields, keeping every other byte."""
    name, hdr = header(wt, name)
    for key, value in changes:
        hdr = hdr.with_field(check_field_name(key), value)
    return set_header(wt, name, hdr)


def check_field_name(key: str) -> str:
    """A name a header field can be written under and read back as one (exit 2 otherwise): a file
    section's own fields (`Index`, the hashes, `Mode`) would start or change a section."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key) or key in _SECTION_FIELDS:
        raise UsageError(f"Unusable header field name {key!r}.",
                         hint="A field name is letters, digits, `_` and `-`, starting with a letter (e.g. Bug-Id), "
                              "and not one of a file section's: " + ", ".join(sorted(_SECTION_FIELDS)) + ".")
    return key
