"""new, delete, rename and move: the commands that change which patches series lists, or their order.

`new` (like import) inserts after the top patch, at the start of series when none is applied, as
quilt does.

`delete`, `rename` and `move` change several files (the patch files, other patches' Requires, the
applied state, series), so each is one transaction (queue.interrupted.QueueJournal): every change
computed first, in memory (a pop on a work tree whose writes are held: work.staged), then written
with a journal, together with the targets.lock that follows them (work.relock.commit). A kill at any
point leaves a queue the next command puts back exactly as it was, or, past the commit, exactly as
the command left it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BadInput, Refused, UsageError
from ..queue.interrupted import Change
from ..queue.patchfile import Header, Patch, renamed, with_header
from .patchtext import check_header, check_patch_name
from .pop import pop_one
from .relock import commit
from .staged import Staged

if TYPE_CHECKING:
    from .tree import WorkTree


def new(wt: WorkTree, name: str, header: Header, guards: tuple[str, ...] = (), *, new_guard: bool = False) -> Patch:
    """Create patches/NAME (header only), insert it after the top patch and make it the top. With
    `guards` (`+G`/`-G`, checked as `guard` checks them) its series line carries them; when they keep
    it out of the work tree's selection it is inserted there but not applied."""
    from ..queue.series import check_guard, pushable

    check_patch_name(name)
    for g in guards:
        check_guard(g)
    if guards and not new_guard:
        _selected_guards(wt, list(guards))
    with wt.locked():
        applied = wt.consistent()
        if name in wt.series():
            raise UsageError(f"Patch {name} is already in series.", hint="Pick another name.")
        if wt.queue.exists(name):
            raise UsageError(f"patches/{name} already exists (not in series).", hint="Import it with `imgquilt import`, or pick another name.")
        raw = check_header(header.raw, name).raw
        patch = Patch(name, Header(raw), (), raw)
        guards = tuple(dict.fromkeys(guards))
        series = wt.queue.inserted([name], applied[-1] if applied else None, {name: guards})
        staged = Staged(wt, {name: patch})
        if pushable(guards, wt.guards())[0]:
            staged.tree.record.write_snapshot(name, [])
            staged.tree.record.write_applied(applied + [name])
        changes = [Change(f"patches/{name}", raw), *staged.changes(), Change("series", series)]
        commit(wt, "new", changes, series=series, patches={name: patch})
        return patch


def delete(wt: WorkTree, name: str | None = None, *, remove: bool = False, force: bool = False) -> str:
    """Remove a patch (the top by default) from series, popping it first when it is the applied top;
    `remove`: its patch file too. One transaction (see the module docstring)."""
    from .staged import Staged

    with wt.locked():
        applied = wt.consistent()
        name = name or wt.need_top()
        if name not in wt.series():
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        staged = Staged(wt, {})
        if name in applied:
            if name != applied[-1]:
                raise UsageError(f"Patch {name} is applied below the top.", hint=f"Pop to it first: `imgquilt pop {name}`, then `imgquilt pop`.")
            pop_one(staged.tree, applied, force)
        series = wt.queue.removed(name)
        changes = [*staged.changes(), *([Change(f"patches/{check_patch_name(name)}", None)] if remove else []),
                   Change("series", series, wt.queue.series_mode())]
        commit(wt, "delete", changes, series=series, patches={name: None})
        return name


def rename(wt: WorkTree, new: str, old: str | None = None) -> tuple[str, list[str]]:
    """Rename a patch everywhere: patches/, series, the applied state and other patches' Requires.
    One transaction (see the module docstring)."""
    from .staged import Staged

    check_patch_name(new)
    with wt.locked():
        applied = wt.consistent()
        old = old or wt.need_top()
        names = wt.series()
        if old not in names:
            raise UsageError(f"Patch {old} is not in series.", hint="`imgquilt series` lists the patches.")
        if new in names or wt.queue.exists(new):
            raise UsageError(f"Patch {new} already exists.", hint="Pick another name.")
        moved = renamed(wt.read_patch(old), new)
        series = wt.queue.renamed(old, new)
        staged = Staged(wt, {})
        if old in applied:
            staged.tree.record.write_snapshot(new, wt.snapshot(old))
            staged.tree.record.drop_snapshot(old)
            staged.tree.record.write_applied([new if n == old else n for n in applied])
        rewritten: dict[str, Patch | None] = {new: moved, old: None}
        touched = []
        token = re.compile(r"(?<![^\s,])" + re.escape(old) + r"(?![^\s,])")
        for other in names:
            if other == old:
                continue
            try:
                p = wt.read_patch(other)
            except BadInput:
                continue
            if old in p.header.requires:
                value = token.sub(new, p.header.get("Requires") or "")
                rewritten[other] = with_header(p, p.header.with_field("Requires", value))
                touched.append(other)
        # the new file first, the old one gone, the Requires: lines, the state, then series (and the lock)
        changes = [Change(f"patches/{new}", moved.raw, wt.queue.patch_mode(old)), Change(f"patches/{check_patch_name(old)}", None),
                   *(Change(f"patches/{n}", rewritten[n].raw, wt.queue.patch_mode(n)) for n in touched),  # type: ignore[union-attr]
                   *staged.changes(), Change("series", series, wt.queue.series_mode())]
        commit(wt, "rename", changes, series=series, patches=rewritten)
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
    patches after them re-chained, as `refresh --rehash` does (work.rehash), over the work tree's
    selection (as rehash, with guards: its profile's patches); the series is verified as `lock` does
    and the selection's pin in targets.lock rewritten. Applied patches stay a prefix of the selection:
    the applied stack after the move is the selection up to the old top (with the moved patch when it
    lands below it, or with `top`); the work tree follows (popped and pushed in memory). One
    transaction: series, the patch files, targets.lock and the work tree, all or nothing."""
    from .rehash import follow_work, rechain, verified_lock
    from ..queue.interrupted import Change, QueueJournal
    from ..queue.lock import lock_with
    from ..queue.queue import Queue
    from ..util.regular import read_regular_file
    from .refresh import unrefreshed

    if sum(x is not None for x in (after, before)) + int(top) != 1:
        raise UsageError("Say where the patch goes: one of --after PATCH, --before PATCH or --top.",
                         hint="imgquilt move PATCH --before OTHER (see `imgquilt move --help`).")
    with wt.locked():
        applied = wt.consistent()
        full = wt.series()
        series = wt.selected()  # the order the work tree walks: the chains move re-pins
        if name not in full:
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        if name not in series:
            raise UsageError(f"Patch {name} is guarded out of the work tree's selection.",
                             hint="Move it in a profile that selects it: `imgquilt select NAME`, then move it again.")
        for opt, other in (("--after", after), ("--before", before)):
            if other is not None and other not in full:
                raise UsageError(f"{opt} {other}: no such patch in series.", hint="`imgquilt series` lists the patches.")
            if other == name:
                raise UsageError(f"{opt} names the patch being moved.", hint="Name another patch.")
        rest = [n for n in full if n != name]
        below = [n for n in applied if n != name]  # the old top, without the moved patch
        if top:
            anchor = below[-1] if below else None
        elif after is not None:
            anchor = after
        else:
            k = rest.index(before)  # type: ignore[arg-type]
            anchor = rest[k - 1] if k else None
        at = rest.index(anchor) + 1 if anchor is not None else 0
        new_full = rest[:at] + [name] + rest[at:]
        order = [n for n in new_full if n in series]
        if new_full == full and not (top and name not in applied):
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
        i = new_full.index(name)
        series_bytes = wt.queue.moved(name, new_full[i - 1] if i else None)
        everything = {n: new[n] if n in new else wt.read_patch(n) for n in new_full}
        queue = Queue(wt.root, series_bytes, tuple(_entries(series_bytes)), tuple(everything[n] for n in new_full)).selection(wt.guards())
        lock = verified_lock(wt, queue, named, python_check=python_check)
        written = [n for n in order if new[n].raw != wt.read_patch(n).raw]
        changes = follow_work(wt, applied[depth:], applied, new_applied[depth:], new)
        changes += [Change(f"patches/{n}", new[n].raw) for n in written]
        changes.append(Change("series", series_bytes))
        current = read_regular_file(wt.root / "targets.lock")
        wrote_lock = lock is not None and lock_with(current, lock, wt.profile()) != current
        if wrote_lock:
            changes.append(Change("targets.lock", lock_with(current, lock, wt.profile())))  # last: it commits the move
        QueueJournal(wt.root, "move").run(changes)
        return Moved(name, new_full[i - 1] if i else None, tuple(new_applied), tuple(n for n in written if n != name),
                     wrote_lock)


def _entries(series_bytes: bytes):
    from ..queue.series import parse_series

    return parse_series(series_bytes)


def set_guards(wt: WorkTree, name: str | None, guards: list[str], *,
               new_guard: bool = False) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Replace the guards of a patch (the top by default) in series, as `hg qguard` does: (name, old
    guards, new guards). The rest of its line and every other line are kept. Refused when the change
    would take an applied patch out of the work tree's selection (pop it first), and when a guard is
    one no profile of targets.lock selects (a typo would drop the fix everywhere) unless `new_guard`."""
    from ..queue.series import check_guard, parse_series, selected_entries

    for g in guards:
        check_guard(g)
    if not new_guard:
        _selected_guards(wt, guards)
    with wt.locked():
        applied = wt.consistent()
        name = name or wt.need_top()
        entries = wt.queue.entries()
        entry = next((e for e in entries if e.name == name), None)
        if entry is None:
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        new_guards = tuple(dict.fromkeys(guards))
        if new_guards == entry.guards:
            return name, entry.guards, new_guards
        data = wt.queue.guarded(name, list(new_guards))
        after = [e.name for e in selected_entries(parse_series(data), wt.guards())]
        if after[: len(applied)] != applied:
            raise UsageError(f"Patch {name} is applied (or an applied patch follows it): these guards would change which "
                             "patches the work tree's selection applies under it.",
                             hint=f"`imgquilt pop {name}` and `imgquilt pop` first, then set the guards.")
        commit(wt, "guard", [Change("series", data)], series=data)  # series and the pins that follow, as one
        return name, entry.guards, new_guards


def select_profile(wt: WorkTree, name: str | None, *, pop: bool = False) -> list[str]:
    """Make the work tree follow profile `name` (None: the default): push and pop walk the patches its
    guards select, and bases come from its pin. With patches applied it is refused (their bases may
    be another image's), unless `pop`: then they are popped first (refused, as pop is, when the top
    has changes not refreshed). Returns the patches popped."""
    with wt.locked():
        if name is not None:
            _declared(wt, name)
        applied = wt.consistent() if wt.applied() else []
        if applied and name != wt.profile():
            if not pop:
                raise UsageError(f"{len(applied)} patch(es) are applied ({', '.join(applied)}); their bases are "
                                 f"{_whose_bases(wt)}.",
                                 hint="`imgquilt pop -a` first (refresh what you want to keep), or `imgquilt select NAME --pop`.")
        popped: list[str] = []
        if name != wt.profile():
            while applied:
                popped.append(pop_one(wt, applied, False))
                applied = applied[:-1]
        wt.record.write_profile(name)
        return popped


def _whose_bases(wt: WorkTree) -> str:
    """Where the applied patches' bases came from: the followed profile's pin, the default pin, or
    (no default pin) the image push was given."""
    from ..verbs.profiles import lock_file

    if wt.profile():
        return f"profile {wt.profile()}'s"
    if lock_file(wt.root).default is not None:
        return "the default pin's"
    return "the default selection's (targets.lock has no default pin: the image push was given)"


def _selected_guards(wt: WorkTree, guards: list[str]) -> None:
    """Every guard is one a declared profile selects (the default pin selects none), else exit 2
    naming the nearest selected name: `+rcom` would keep a fix out of every profile, `-rcom` in all."""
    from ..util.names import did_you_mean
    from ..verbs.profiles import lock_file

    lf = lock_file(wt.root)
    selected = list(dict.fromkeys(g for p in lf.profiles for g in p.select))
    for g in guards:
        if g[1:] in selected:
            continue
        if lf.profiles:
            who = "; ".join(f"{p.name} selects {', '.join(p.select) or 'no guard'}" for p in lf.profiles)
            why = f"No profile selects guard {g[1:]!r} ({who})."
        else:
            why = f"No profile selects guard {g[1:]!r}: targets.lock declares no profile."
        raise UsageError(why + (" With it the patch would be in no deployment." if g[0] == "+" else
                                " It would keep the patch out of no deployment.") + did_you_mean(g[1:], [*selected, *lf.names]),
            hint=f"Correct the name, or declare a profile that selects it (`imgquilt lock --profile NAME --image REF "
                 f"--select {g[1:]}`), or keep it anyway with `imgquilt guard --new-guard ...`. Nothing was changed.")


def _declared(wt: WorkTree, name: str) -> None:
    from ..verbs.profiles import lock_file, unknown

    lf = lock_file(wt.root)
    if lf.profile(name) is None:
        raise unknown(name, lf)
