"""Resolve a path inside a root the way the container would, never leaving the root.

The resolver works on any filesystem view through a `lookup` callable that returns the Node at a
path whose parents are already resolved (no symlink in them), or None. Absolute symlinks are
re-rooted at the image root, and `..` at the root stays at the root, as the kernel resolves them in
the container (its root is `/`): `__pycache__/m.pyc -> ../../../../x/m.pyc` is `x/m.pyc` of the
root for the CPython that runs there, so it is what imgquilt reads and judges too. Nothing is ever
looked up outside the root. (Below a directory that does not exist, `..` cannot be walked by the
kernel at all: the rest of the path is then left as the caller's to judge, see Resolved.resolved.)
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable

from ..errors import BadInput, UnsafePath
from .types import Node

MAX_SYMLINKS = 40  # as Linux's ELOOP limit

Lookup = Callable[[str], "Node | None"]


@dataclass(frozen=True)
class Resolved:
    """Result of resolving a named path: the in-root path and the node there (None: absent)."""

    named: str
    resolved: str
    node: Node | None
    parents: tuple[tuple[str, Node], ...]  # existing directories on the way, root first
    via: tuple[str, ...] = ()  # the in-root paths of the symlinks followed on the way, in order


KnownDirs = dict[str, tuple[tuple[str, Node], ...]]


def resolve(named: str, lookup: Lookup, *, follow_final: bool = True, known: KnownDirs | None = None) -> Resolved:
    """Resolve `named` (already checked by check_member_path) inside the root through `lookup`.

    `known`: directories resolved before through the same, unchanging view (see remember_dirs), by
    their in-root path: `named` is resolved from the longest of them it starts with, as the walk from
    the root would reach it (a known path holds no symlink), without looking its components up again
    (1000 targets under the same tree: most of their lookups)."""
    pending = [p for p in named.split("/") if p not in ("", ".")]
    done: list[str] = []
    parents: list[tuple[str, Node]] = []
    if known:
        stop = pending.index("..") if ".." in pending else len(pending) - 1
        for k in range(stop, 0, -1):
            hit = known.get("/".join(pending[:k]))
            if hit is not None:
                done, parents, pending = pending[:k], list(hit), pending[k:]
                break
    hops = 0
    via: list[str] = []
    node: Node | None = None
    while pending:
        part = pending.pop(0)
        if part == "..":
            # only reachable through a symlink's target; at the root it stays there, as the kernel does
            if done:
                done.pop()
            parents = parents[: len(done)]
            continue
        cur = "/".join(done + [part])
        node = lookup(cur)
        is_last = not pending
        if node is not None and node.kind == "symlink" and (follow_final or not is_last):
            hops += 1
            via.append(cur)
            if hops > MAX_SYMLINKS:
                raise BadInput(f"Too many levels of symbolic links resolving {named!r} (at {cur!r}).",
                               hint="A symlink loop (or a chain longer than 40 links) in the image or root: name the file by its real path.")
            target = node.linkname
            if target.startswith("/"):
                done, parents = [], []
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            node = None
            continue
        if not is_last:
            if node is None:
                # a missing parent: the rest does not exist either
                rest = "/".join([cur] + pending)
                return Resolved(named, posixpath.normpath(rest), None, tuple(parents), tuple(via))
            if node.kind != "dir":
                raise BadInput(f"Cannot resolve {named!r}: {cur!r} is not a directory.",
                               hint="Check the path: a file stands where it names a directory.")
            parents.append((cur, node))
        done.append(part)
    resolved = "/".join(done)
    if not resolved:
        raise UnsafePath(f"Path {named!r} resolves to the image root itself, not a file.",
                         hint="Name a file inside the root (a symlink on the way points at the root).")
    return Resolved(named, resolved, node, tuple(parents), tuple(via))


def remember_dirs(known: KnownDirs, res: Resolved) -> None:
    """Put the directories `res` went through in `known` (each with the ones above it), for the next
    resolve(known=...). Only for an answer that later reads cannot change (the caller's to say)."""
    for i, (path, _) in enumerate(res.parents):
        if path not in known:
            known[path] = res.parents[: i + 1]
