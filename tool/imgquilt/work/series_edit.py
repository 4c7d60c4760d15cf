"""new, delete, rename and move: the commands that change which patches series lists, or their order.

`new` (like import) inserts after the top patch, at the start of series when none is applied, as
quilt does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BadInput, Refused, UsageError
from ..queue.patchfile import Header, Patch, renamed, with_header
from .patchtext import check_header, check_patch_name
from .pop import pop_one

if TYPE_CHECKING:
    from .tree import WorkTree


def new(wt: WorkTree, name: str, header: Header) -> Patch:
    """Create patches/NAME (header only), insert it after the top patch and make it the top."""
    check_patch_name(name)
    with wt.locked():
        applied = wt.consistent()
        if name in wt.series():
            raise UsageError(f"Patch {name} is already in series.", hint="Pick another name.")
        if wt.queue.exists(name):
            raise UsageError(f"patches/{name} already exists (not in series).", hint="Import it with `imgquilt import`, or pick another name.")
        raw = check_header(header.raw, name).raw
        patch = Patch(name, Header(raw), (), raw)
        wt.queue.write_patch(patch)
        wt.queue.insert([name], applied[-1] if applied else None)
        wt.record.write_snapshot(name, [])
        wt.record.write_applied(applied + [name])
        return patch


def delete(wt: WorkTree, name: str | None = None, *, remove: bool = False, force: bool = False) -> str:
    """Remove a patch (the top by default) from series, popping it first when it is the applied top."""
    with wt.locked():
        applied = wt.consistent()
        name = name or wt.need_top()
        if name not in wt.series():
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        if name in applied:
            if name != applied[-1]:
                raise UsageError(f"Patch {name} is applied below the top.", hint=f"Pop to it first: `imgquilt pop {name}`, then `imgquilt pop`.")
            pop_one(wt, applied, force)
        wt.queue.remove(name)
        if remove:
            wt.queue.remove_patch(name, missing_ok=True)
        return name


def rename(wt: WorkTree, new: str, old: str | None = None) -> tuple[str, list[str]]:
    """Rename a patch everywhere: patches/, series, the applied state and other patches' Requires."""
    check_patch_name(new)
    with wt.locked():
        applied = wt.consistent()
        old = old or wt.need_top()
        names = wt.series()
        if old not in names:
            raise UsageError(f"Patch {old} is not in series.", hint="`imgquilt series` lists the patches.")
        if new in names or wt.queue.exists(new):
            raise UsageError(f"Patch {new} already exists.", hint="Pick another name.")
        wt.queue.write_patch(renamed(wt.read_patch(old), new))
        wt.queue.rename(old, new)
        if old in applied:
            wt.record.write_snapshot(new, wt.snapshot(old))
            wt.record.drop_snapshot(old)
            wt.record.write_applied([new if n == old else n for n in applied])
        wt.queue.remove_patch(old)
        touched = []
        token = re.compile(r"(?<![^\s,])" + re.escape(old) + r"(?![^\s,])")
        for other in wt.series():
            if other == new:
                continue
            try:
                p = wt.read_patch(other)
            except BadInput:
                continue
            if old in p.header.requires:
                value = token.sub(new, p.header.get("Requires") or "")
                wt.queue.write_patch(with_header(p, p.header.with_field("Requires", value)))
                touched.append(other)
        return old, touched


@dataclass(frozen=True)
class Moved:
    """What `move` did: the patch, the one it now follows (None: first), the applied stack after it, the
    patch files it re-chained (as `refresh --rehash` does) and whether targets.lock was rewritten."""

    name: str
    after: str | None
    applied: tuple[str, ...]
    rechained: tuple[str, ...]
    lock: bool
    notes: tuple[str, ...] = ()


def move(wt: WorkTree, name: str, *, after: str | None = None, before: str | None = None, top: bool = False,
         python_check: bool = True) -> Moved:
    """Move a patch in series (MQ's `qpush --move`, StGit's `float`/`sink`): right after `after`, right
    before `before`, or (`top`) right after the top patch, pushed as the new top.

    The patches whose order changes against it are carried onto what is below them now, and the
    patches after them re-chained, as `refresh --rehash` does (work.rehash); the series is verified
    as `lock` does and targets.lock rewritten. Applied patches stay a prefix of series: the applied
    stack after the move is series up to the old top (with the moved patch when it lands below it,
    or with `top`); the work tree follows (popped and pushed in memory). One transaction: series,
    the patch files, targets.lock and the work tree, all or nothing."""
    from .rehash import follow_work, rechain, verified_lock
    from ..queue.interrupted import Change, QueueJournal
    from ..queue.lock import render_lock
    from ..queue.queue import Queue
    from ..util.regular import read_regular_file
    from .refresh import unrefreshed

    if sum(x is not None for x in (after, before)) + int(top) != 1:
        raise UsageError("Say where the patch goes: one of --after PATCH, --before PATCH or --top.",
                         hint="imgquilt move PATCH --before OTHER (see `imgquilt move --help`).")
    with wt.locked():
        applied = wt.consistent()
        series = wt.series()
        if name not in series:
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        for opt, other in (("--after", after), ("--before", before)):
            if other is not None and other not in series:
                raise UsageError(f"{opt} {other}: no such patch in series.", hint="`imgquilt series` lists the patches.")
            if other == name:
                raise UsageError(f"{opt} names the patch being moved.", hint="Name another patch.")
        rest = [n for n in series if n != name]
        below = [n for n in applied if n != name]  # the old top, without the moved patch
        if top:
            anchor = below[-1] if below else None
        elif after is not None:
            anchor = after
        else:
            k = rest.index(before)  # type: ignore[arg-type]
            anchor = rest[k - 1] if k else None
        at = rest.index(anchor) + 1 if anchor is not None else 0
        order = rest[:at] + [name] + rest[at:]
        if order == series and not (top and name not in applied):
            raise UsageError(f"Patch {name} is already there.", hint="Nothing to move.")
        keep = order.index(below[-1]) + 1 if below else 0
        new_applied = order[:keep] + ([name] if top and name not in order[:keep] else [])
        # the patches whose order against the moved one changes, and the moved one: carried onto what is below them
        old_i, new_i = series.index(name), order.index(name)
        swapped = series[old_i + 1:new_i + 1] if new_i > old_i else series[new_i:old_i]
        named = sorted({name, *swapped}, key=order.index)
        new = rechain(wt, order, {}, named, carry=frozenset(named))
        depth = next((k for k, (a, b) in enumerate(zip(applied, new_applied)) if a != b or new[a].raw != wt.read_patch(a).raw),
                     min(len(applied), len(new_applied)))
        for n in applied[depth:]:
            dirty = unrefreshed(wt, n, wt.read_patch(n))
            if dirty:
                raise Refused(
                    f"Refused: {n} has changes in .imgquilt/work/ not refreshed into it: {', '.join(dirty)}; moving {name} "
                    f"pops it. Nothing was changed.",
                    hint=f"`imgquilt refresh` (or `imgquilt pop -f` to discard them), then move {name} again.",
                )
        series_bytes = wt.queue.moved(name, order[order.index(name) - 1] if order.index(name) else None)
        queue = Queue(wt.root, series_bytes, tuple(_entries(series_bytes)), tuple(new[n] for n in order))
        lock = verified_lock(wt, queue, named, python_check=python_check)
        written = [n for n in order if new[n].raw != wt.read_patch(n).raw]
        changes = follow_work(wt, applied[depth:], applied, new_applied[depth:], new)
        changes += [Change(f"patches/{n}", new[n].raw) for n in written]
        changes.append(Change("series", series_bytes))
        wrote_lock = lock is not None and render_lock(lock) != read_regular_file(wt.root / "targets.lock")
        if wrote_lock:
            changes.append(Change("targets.lock", render_lock(lock)))  # last: it commits the move
        QueueJournal(wt.root, "move").run(changes)
        return Moved(name, order[new_i - 1] if new_i else None, tuple(new_applied), tuple(n for n in written if n != name),
                     wrote_lock)


def _entries(series_bytes: bytes):
    from ..queue.series import parse_series

    return parse_series(series_bytes)
