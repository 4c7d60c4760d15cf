"""The end of a rebase: verify the rebased queue on the new image, then write it and drop the state.

Until the state directory is removed, --abort can still restore the backup and --continue
redoes this step, so a crash half-way through the writes loses nothing.
"""
from __future__ import annotations

import stat
from pathlib import Path

from ..errors import BadInput
from ..queue.lock import lock_with
from ..queue.patchfile import Patch, parse_patch
from ..queue.queue import Queue
from ..queue.series import parse_series
from ..store import ObjectStore
from ..util.atomic import atomic_write
from ..util.regular import read_regular_file
from ..verbs.lock import lock_queue
from ..work.queuefiles import QueueFiles
from .lanes import together
from .options import Opener
from .report import RebaseReport
from .state import RebaseState, remove_state, save_state
from .work_files import release_work


def _mode_of(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o644


def _drop_series_lines(series: bytes, lines: set[int]) -> bytes:
    """series without the given (1-based) lines; every other byte, comments included, kept."""
    if not lines:
        return series
    return b"".join(ln for i, ln in enumerate(series.splitlines(keepends=True), 1) if i not in lines)


def finish(root: Path, st: RebaseState, old: Queue, opener: Opener) -> RebaseReport:
    """Verify the rebased queue on the new image, then write patches, series and targets.lock.

    `old` is the whole queue as backed up; the rebase carried the patches its pin selects
    (`st.select`; with several pins, each one's), the others are kept as they are. Before anything is
    written, every pin's selection is verified on its own new image, and every other pin of
    targets.lock (the default, the other profiles) that selects a rewritten or dropped patch must
    still chain over its own image (ProfileChainBroken otherwise); the rebased pins are re-pinned
    together, in one write of targets.lock."""
    store = ObjectStore(root)
    st.phase = "finishing"
    save_state(root, st)
    kept = {d["name"]: d["raw_sha"] for d in st.done if not d["dropped"]}
    dropped = [d["name"] for d in st.done if d["dropped"]]
    patches: list[Patch] = []
    for e, p in zip(old.entries, old.patches):
        if e.name in kept:
            data = store.get(kept[e.name])
            if data is None:
                raise BadInput(f"The object store lost the rebased {e.name}.", hint="`imgquilt rebase --abort` and start again.")
            patches.append(parse_patch(data, e.name))
        elif e.name not in dropped:
            patches.append(p)  # outside the rebased selection: as it is
    series_bytes = _drop_series_lines(old.series_bytes, {e.line for e in old.entries if e.name in dropped})
    new_whole = Queue(root, series_bytes, tuple(parse_series(series_bytes)), tuple(patches))
    locks = []
    for pin in st.pins:  # every pin's selection verified on its own new image before anything is written
        st.focus(pin)
        source = opener(st.new_ref, st.platform)
        lock = lock_queue(new_whole.selection(st.select), source, st.new_ref, python_check=st.python_check)
        st.new_image = {"ref": st.new_ref, "digest": lock.image.digest}
        locks.append((pin, lock))
    current = read_regular_file(root / "targets.lock")
    changed = {n for n in kept if store.get(kept[n]) != old.patch(n).raw} | set(dropped) | set(st.copies) | set(st.copies.values())
    _refuse_broken_pins(current, new_whole, st, changed)
    for p in patches:
        dest = root / "patches" / p.name
        if not dest.is_file() or dest.read_bytes() != p.raw:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, p.raw, mode=_mode_of(dest))
    for name in dropped:
        QueueFiles(root).remove_patch(name, missing_ok=True)  # a patch name (load_state checked), in patches/ only
    if not (root / "series").is_file() or (root / "series").read_bytes() != series_bytes:
        atomic_write(root / "series", series_bytes, mode=_mode_of(root / "series"))
    new_lock = current
    for pin, lock in locks:
        new_lock = lock_with(new_lock, lock, pin)
    atomic_write(root / "targets.lock", new_lock, mode=_mode_of(root / "targets.lock"))  # every pin at once
    report = st.report("done")
    release_work(root, st, list(st.work_written))
    remove_state(root)
    return report


def _refuse_broken_pins(current: bytes | None, new: Queue, st: RebaseState, changed: set[str]) -> None:
    """Every other pin that selects a patch the rebase rewrote or dropped must still chain on its
    own image with the rebased patches; otherwise name each break and the profile to rebase too."""
    if not current or not changed:
        return
    from ..errors import ProfileChainBroken
    from ..queue.check import selection_breaks
    from ..queue.lock import parse_lock_file
    from ..queue.series import selected_entries

    lf = parse_lock_file(current)
    pins = ([(None, (), lf.default)] if lf.default is not None else []) + [(p.name, p.select, p.lock) for p in lf.profiles]
    problems: list[str] = []
    others: list[str] = []
    for name, select, lock in pins:
        if name in st.pins:
            continue
        chosen = {e.name for e in (selected_entries(new.entries, select) if new.guarded else new.entries)}
        if not chosen & changed:
            continue
        label = f"profile {name}" if name is not None else "the default pin"
        found = selection_breaks(label, list(new.entries), list(new.patches), chosen, lock)
        if found:
            problems += found
            others.append(name if name is not None else "(default)")
    if problems:
        which = ", ".join(sorted(changed))
        raise ProfileChainBroken(
            f"Refused: the rebase rewrites {which}, which other pins select too, and there the rebased patch no longer "
            f"chains on their image; nothing was written:\n" + "\n".join(f"  - {p}" for p in problems),
            hint=f"Rebase those pins in the same rebase, each onto its own new image (`{together([(p, st.lane(p)['new_ref']) for p in st.pins], others)}`; "
            "add --split if their new images differ in a file the shared patch changes), or give this profile its own copy of the "
            "shared patch (`imgquilt guard`), then rebase again.",
            problems=problems)
