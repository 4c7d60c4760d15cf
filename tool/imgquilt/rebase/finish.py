"""The end of a rebase: verify the rebased queue on the new image, then write it and drop the state.

Until the state directory is removed, --abort can still restore the backup and --continue
redoes this step, so a crash half-way through the writes loses nothing.
"""
from __future__ import annotations

import stat
from pathlib import Path

from ..errors import BadInput
from ..queue.lock import render_lock
from ..queue.patchfile import Patch, parse_patch
from ..queue.queue import Queue
from ..queue.series import parse_series
from ..store import ObjectStore
from ..util.atomic import atomic_write
from ..verbs.lock import lock_queue
from ..work.queuefiles import QueueFiles
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
    """Verify the rebased queue on the new image, then write patches, series and targets.lock."""
    store = ObjectStore(root)
    st.phase = "finishing"
    save_state(root, st)
    kept = {d["name"]: d["raw_sha"] for d in st.done if not d["dropped"]}
    dropped = [d["name"] for d in st.done if d["dropped"]]
    patches: list[Patch] = []
    for e in old.entries:
        if e.name in kept:
            data = store.get(kept[e.name])
            if data is None:
                raise BadInput(f"The object store lost the rebased {e.name}.", hint="`imgquilt rebase --abort` and start again.")
            patches.append(parse_patch(data, e.name))
    series_bytes = _drop_series_lines(old.series_bytes, {e.line for e in old.entries if e.name in dropped})
    new_q = Queue(root, series_bytes, tuple(parse_series(series_bytes)), tuple(patches))
    source = opener(st.new_ref, st.platform)
    lock = lock_queue(new_q, source, st.new_ref)  # verifies the whole rebased series on the new image
    st.new_image = {"ref": st.new_ref, "digest": lock.image.digest}
    for p in patches:
        dest = root / "patches" / p.name
        if not dest.is_file() or dest.read_bytes() != p.raw:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, p.raw, mode=_mode_of(dest))
    for name in dropped:
        QueueFiles(root).remove_patch(name, missing_ok=True)  # a patch name (load_state checked), in patches/ only
    if not (root / "series").is_file() or (root / "series").read_bytes() != series_bytes:
        atomic_write(root / "series", series_bytes, mode=_mode_of(root / "series"))
    atomic_write(root / "targets.lock", render_lock(lock), mode=_mode_of(root / "targets.lock"))
    report = st.report("done")
    release_work(root, st, list(st.work_written))
    remove_state(root)
    return report
