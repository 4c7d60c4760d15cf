"""An extracted filesystem (a directory, or /proc/PID/root of a running container) as a Source."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Sequence

from ..errors import BadInput
from ..fs.paths import check_member_path
from ..fs.resolve import resolve
from ..fs.types import DirMeta, ImageInfo, Node, TargetFile
from .dirfd import lstat_at, open_root, read_at, readlink_at


def _node(st: os.stat_result, linkname: str = "") -> Node:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return Node(kind, mode, st.st_uid, st.st_gid, linkname)


class RootfsSource:
    """Reads target files from a directory tree, resolving symlinks inside it."""

    def __init__(self, root: Path, *, ref: str | None = None) -> None:
        self.root = Path(root)
        self.ref = ref or f"rootfs:{root}"

    def info(self) -> ImageInfo:
        return ImageInfo(ref=self.ref, digest=None, platform=None, kind="rootfs")

    def read_targets(self, paths: Sequence[str]) -> dict[str, TargetFile]:
        root_fd = open_root(self.root)
        try:
            return {p: self._read(root_fd, p) for p in paths}
        finally:
            os.close(root_fd)

    def _read(self, root_fd: int, path: str) -> TargetFile:
        named = check_member_path(path)

        def lookup(rel: str) -> Node | None:
            st = lstat_at(root_fd, rel)
            if st is None:
                return None
            return _node(st, readlink_at(root_fd, rel) if stat.S_ISLNK(st.st_mode) else "")

        r = resolve(named, lookup)
        parents = tuple(DirMeta(p, n.mode, n.uid, n.gid) for p, n in r.parents)
        if r.node is None:
            return TargetFile(named, r.resolved, None, parents=parents)
        if r.node.kind != "file":
            raise BadInput(
                f"Target {named!r} (resolved {r.resolved!r}) is a {r.node.kind}, not a regular file.",
                hint="Patches can only change regular files.",
            )
        data = read_at(root_fd, r.resolved)
        return TargetFile(named, r.resolved, data, r.node.mode, r.node.uid, r.node.gid, None, parents)
