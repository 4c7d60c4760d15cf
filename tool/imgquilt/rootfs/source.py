"""An extracted filesystem (a directory, or /proc/PID/root of a running container) as a Source."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Collection, Sequence

from ..errors import BadInput, UnsafePath
from ..fs.paths import check_member_path
from ..fs.resolve import resolve
from ..fs.types import DirListing, DirMeta, ImageInfo, Node, TargetFile
from .dirfd import lstat_at, open_dir, open_root, read_at, readlink_at


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

    def list_paths(self) -> list[str]:
        """Every non-directory path under the root (symlinks listed, never followed)."""
        out: list[str] = []
        for top, dirs, names in os.walk(self.root, followlinks=False):
            rel = os.path.relpath(top, self.root)
            prefix = "" if rel == "." else rel + "/"
            out += [prefix + n for n in names]
            out += [prefix + d for d in dirs if os.path.islink(os.path.join(top, d))]
        return sorted(out)

    def read_targets(self, paths: Sequence[str], *, links: Collection[str] = ()) -> dict[str, TargetFile]:
        root_fd = open_root(self.root)
        nofollow = set(links)
        try:
            return {p: self._read_reporting(root_fd, p, p in nofollow) for p in paths}
        finally:
            os.close(root_fd)

    def peek_dir(self, path: str) -> DirListing | None:
        """The directory at `path` (symlinks resolved inside the root) and its entries, never following
        a link out of it; None when there is no directory there or it cannot be read."""
        root_fd = open_root(self.root)
        try:
            if path:
                r = resolve(check_member_path(path, what="directory path"), self._lookup(root_fd))
                if r.node is None or r.node.kind != "dir":
                    return None
                resolved = r.resolved
                parents = tuple(DirMeta(p, n.mode, n.uid, n.gid) for p, n in r.parents)
                parents += (DirMeta(resolved, r.node.mode, r.node.uid, r.node.gid),)
            else:
                resolved, parents = "", ()
            fd = open_dir(root_fd, resolved.split("/") if resolved else [])
            try:
                entries = {}
                for name in os.listdir(fd):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    entries[name] = _node(st, os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else "")
            finally:
                os.close(fd)
        except (OSError, BadInput):
            return None  # gone, unreadable or swapped meanwhile: nothing to say about it
        finally:
            os.close(root_fd)
        return DirListing(resolved, parents, entries)

    def change_times(self, resolved: Sequence[str]) -> dict[str, float | None]:
        """The ctime of each resolved path (never following a final symlink); None: not there."""
        root_fd = open_root(self.root)
        try:
            out: dict[str, float | None] = {}
            for rel in resolved:
                try:
                    st = lstat_at(root_fd, rel)
                except (OSError, BadInput):
                    st = None
                out[rel] = None if st is None else st.st_ctime
            return out
        finally:
            os.close(root_fd)

    @staticmethod
    def _lookup(root_fd: int):
        def lookup(rel: str) -> Node | None:
            st = lstat_at(root_fd, rel)
            if st is None:
                return None
            return _node(st, readlink_at(root_fd, rel) if stat.S_ISLNK(st.st_mode) else "")

        return lookup

    def _read_reporting(self, root_fd: int, path: str, as_link: bool = False) -> TargetFile:
        try:
            return self._read(root_fd, path, as_link)
        except OSError as exc:
            # a name too long, a file swapped or unreadable: bad input naming the path, never a traceback
            raise BadInput(
                f"Cannot read {path!r} in {self.root}: {exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, 'error')}).",
                hint="Check the path and the root's permissions; if something else is changing the root, stop it and re-run.",
            ) from None

    def _read(self, root_fd: int, path: str, as_link: bool = False) -> TargetFile:
        named = check_member_path(path)
        r = resolve(named, self._lookup(root_fd), follow_final=not as_link)
        parents = tuple(DirMeta(p, n.mode, n.uid, n.gid) for p, n in r.parents)
        if r.node is None:
            if ".." in r.resolved.split("/"):
                # a dangling link such as `lnk -> nonexist/../../outside` would climb out once created
                raise UnsafePath(
                    f"Unsafe path {named!r}: it resolves to {r.resolved!r}, above the root, through a dangling symlink.",
                    hint="Fix the symlink in the root, or name the file by its real path.",
                )
            return TargetFile(named, r.resolved, None, parents=parents, via=r.via)
        if r.node.kind == "symlink":  # read as itself (as_link): the target's bytes, never followed
            target = os.fsencode(r.node.linkname)
            return TargetFile(named, r.resolved, target, 0o777, r.node.uid, r.node.gid, None, parents, link=True, via=r.via)
        if r.node.kind != "file":
            raise BadInput(
                f"Target {named!r} (resolved {r.resolved!r}) is a {r.node.kind}, not a regular file.",
                hint="Patches can only change regular files.",
            )
        data, mtime = read_at(root_fd, r.resolved, with_mtime=True)
        return TargetFile(named, r.resolved, data, r.node.mode, r.node.uid, r.node.gid, None, parents, mtime, via=r.via)
