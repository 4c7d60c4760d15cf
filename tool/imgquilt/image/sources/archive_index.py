"""An index of the members of an uncompressed tar archive (oci-archive, docker-archive): name → offset.

Built once by walking the headers and seeking past the data; blobs are then read in place, by
offset, never extracted. Symlinked and hard-linked members (docker save links duplicate layers)
are followed inside the archive.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadImage, UnsafePath
from ..layers.blobio import BlobLocation, FileRange
from ..layers.compression import detect
from ..layers.tarwalk import DIRECTORY, HARDLINK, SYMLINK, TarWalker, member_path


@dataclass(frozen=True)
class Member:
    name: str
    type: str
    offset: int
    size: int
    linkname: str


class ArchiveIndex:
    """The members of one archive file, by normalized name."""

    def __init__(self, path: Path, members: dict[str, Member]) -> None:
        self.path = path
        self.members = members

    @classmethod
    def build(cls, path: Path, *, what: str, stop_when=None) -> "ArchiveIndex":
        """Walk the archive's headers. `stop_when(name)` may end the walk early (for detection)."""
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise BadImage(f"Cannot read {what} {path}: {exc.strerror}.") from None
        members: dict[str, Member] = {}
        with FileRange(BlobLocation(path, 0, size), what=what) as f:
            if detect(f.peek(8), what=what) != "none":
                raise BadImage(
                    f"The {what} {path} is compressed; imgquilt reads image archives uncompressed.",
                    hint=f"Decompress it first (e.g. `gunzip -k {path}` or `zstd -d {path}`).",
                )
            walker = TarWalker(f, what=f"{what} {path}")
            for entry in walker:
                if entry.offset + entry.size > size:
                    raise BadImage(
                        f"The {what} {path} is truncated: member {entry.name!r} should end at byte "
                        f"{entry.offset + entry.size} but the file has {size} bytes.",
                        hint="The archive is incomplete; write or copy it again.",
                    )
                try:
                    name = member_path(entry.name)
                except UnsafePath:
                    raise BadImage(f"The {what} {path} holds an unsafe member name {entry.name!r}.") from None
                if name is None:
                    continue
                members[name] = Member(name, entry.type, entry.offset, entry.size, entry.linkname)
                if stop_when is not None and stop_when(name):
                    break
        return cls(path, members)

    def names(self) -> list[str]:
        return list(self.members)

    def find(self, name: str) -> Member | None:
        """The regular-file member at `name`, following member links inside the archive."""
        seen = 0
        try:
            current = member_path(name) or ""
        except UnsafePath:
            return None
        while seen < 16:
            member = self.members.get(current)
            if member is None or member.type == DIRECTORY:
                return None
            if member.type == SYMLINK:
                current = posixpath.normpath(posixpath.join(posixpath.dirname(current), member.linkname))
            elif member.type == HARDLINK:
                current = member.linkname
            else:
                return member
            try:
                current = member_path(current) or ""
            except UnsafePath:
                return None
            seen += 1
        return None

    def location(self, name: str) -> BlobLocation | None:
        member = self.find(name)
        return None if member is None else BlobLocation(self.path, member.offset, member.size)

    def read(self, name: str, *, limit: int = 64 << 20) -> bytes | None:
        """A small member's bytes (a manifest, index, config), or None if absent."""
        loc = self.location(name)
        if loc is None:
            return None
        if loc.size > limit:
            raise BadImage(f"Member {name!r} of {self.path} is {loc.size} bytes; too large for metadata.")
        with FileRange(loc) as f:
            return f.read()
