"""Start, continue and abort a rebase: run the patches in series order until the end or a conflict.

Transaction: `series`, `patches/` and `targets.lock` are not touched until every patch is
carried. At the start they are copied to `.imgquilt/rebase/backup/`, and `state.json` journals
the progress. The finish writes the queue and then removes the state directory, so until that
removal `--abort` restores the old queue byte for byte, also after a crash, and `--continue`
redoes an interrupted finish.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..engine.plan import run_series
from ..fs.types import read_targets
from ..image.base_image import base_of_source
from ..errors import BadInput, BaseDrift, ImgquiltError, RebaseConflict, UsageError
from ..queue.check import chain_breaks
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.interrupted import sweep
from ..queue.lock import read_lock_file
from ..queue.queue import Queue, load_queue
from ..store import ObjectStore
from ..util.gitexe import require_git
from ..work import WorkTree
from .backup import backup, backup_queue, restore
from .boot import NewImage, locate_moves, step_findings, with_findings
from .bootprobe import boot_step, refuse_boot
from .carry import finish_patch, rebase_section
from .finish import finish
from .kept import FORGET, keep_abandoned, keep_taken, reuse_kept
from .moves import plan_paths
from .lanes import (
    Lane, carried, disagreements, left_out, lineage, outside_breaks, plan_split, refuse_disagreements, selecting, together, with_copies,
)
from .options import Opener, RebaseOptions
from .report import CONFLICT, PatchOutcome, RebaseReport, patch_state
from .resolve import take_resolutions
from .state import (
    CarriedSection, RebaseState, clear_leftovers, load_state, rebase_in_progress, rebase_dir, remove_state, save_state,
)
from .work_files import release_work


def _fill_from_old(q: Queue, store: ObjectStore, ref: str, opener: Opener, platform: str | None, *, what: str = "--from") -> None:
    """Read the old image's targets, check the series verifies on it, store every base and result."""
    source = opener(ref, platform)
    targets = read_targets(source, q.target_paths(), q.link_paths())
    states, problems = run_series(q, targets, source=source)
    if problems:
        raise BaseDrift(
            f"{what} {ref} is not the image this queue was made for:\n" + "\n".join(f"  - {p.render()}" for p in problems),
            hint="Pass the image the queue applies to with --from OLDREF (targets.lock's reference may name another image now).",
        )
    for data in [t.data for t in targets.values()] + [s.data for s in states.values()]:
        if data is not None:
            store.put(data)


def start_rebase(root: Path, opts: RebaseOptions, opener: Opener) -> RebaseReport:
    """Begin a rebase of the queue at `root` onto `opts.new_ref` (and of each further pin of
    `opts.more` onto its own new image, in the same transaction) and run it as far as it goes."""
    require_git("rebase")  # before any state exists: merges need `git merge-file`
    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is already in progress.",
            hint="Resolve and run `imgquilt rebase --continue`, or `imgquilt rebase --abort`.",
        )
    _refuse_applied_work(root)
    clear_leftovers(root)
    whole = load_queue(root)
    wanted = [(opts.profile, opts.select, opts.new_ref), *opts.more]
    if opts.from_ref and len(wanted) > 1:
        raise UsageError("--from names one old image; a rebase of several profiles takes each one's from its pin in targets.lock.")
    lanes: list[dict] = []
    found: list[Lane] = []
    notes: list[str] = []
    vendor: dict[str, str] = {}
    for pin, select, new_ref in wanted:  # every check of every pin before the first merge
        lane, more, other = _prepare(root, whole, replace(opts, profile=pin, select=select, new_ref=new_ref), opener)
        lanes.append(lane)
        found.append(Lane(pin, tuple(select), lane["paths"], lane["new_chain"]))
        notes += more
        if other is not None and pin is not None:
            vendor[pin] = other
            notes.append(f"profile {pin} is re-pinned onto the image profile {other} pins (--force): what this report says "
                         f"changed under a patch is profile {other}'s image, not upstream's.")
    _refuse_outside(root, whole, found, wanted)
    series: str | None = None
    copies: dict[str, str] = {}
    split = disagreements(whole, found)
    if split and not opts.split:
        raise refuse_disagreements(split, _command(opts))
    if split:
        data, copies, more = plan_split(whole, found, split)
        notes += more
        series = data.decode("utf-8", "surrogateescape")
        planned = with_copies(whole, data, copies)
        if disagreements(planned, found):  # the copies must take every disagreeing pin off the shared patch
            raise refuse_disagreements(disagreements(planned, found), _command(opts))
    if len(wanted) > 1:
        planned = with_copies(whole, series.encode("utf-8", "surrogateescape"), copies) if series is not None else whole
        out = left_out(planned, [ln.select for ln in found])
        if out:
            notes.append("Not selected by any profile rebased here, left as they are: " + ", ".join(out) + ".")
    first = lanes[0]
    st = RebaseState(
        keep_empty=opts.keep_empty,
        notes=notes,
        conflict_style=opts.conflict_style,
        python_check=opts.python_check,
        boot=opts.boot,
        others=lanes[1:],
        series=series,
        copies=copies,
        vendor=vendor,
        **first,
    )
    rebase_dir(root).ensure()
    backup(root, whole, created=list(copies))
    save_state(root, st)  # from here on, --abort restores the backup
    try:
        return _advance(root, st, opener)
    except RebaseConflict:
        raise
    except ImgquiltError as exc:  # refused before any conflict was handed to the user: no rebase stays behind
        abort_rebase(root)
        more_hint = "No rebase was started: series, patches/ and targets.lock are as they were."
        exc.hint = f"{exc.hint}\n{more_hint}" if exc.hint else more_hint
        raise


def _refuse_outside(root: Path, whole: Queue, found: list[Lane], wanted: list) -> None:
    """Before any merge: a pin left out of the rebase that would surely no longer chain (lanes.outside_breaks)."""
    from ..errors import ProfileChainBroken

    lf = read_lock_file(root / "targets.lock")
    rebased = {pin for pin, _, _ in wanted}
    outside = ([(None, (), lf.default)] if lf.default is not None and None not in rebased else []) + [
        (p.name, p.select, p.lock) for p in lf.profiles if p.name not in rebased]
    problems, others = outside_breaks(whole, found, outside)
    if problems:
        raise ProfileChainBroken(
            "Refused before any merge: the rebase rewrites patches other pins select too, and there they would no longer "
            "chain on their own image; nothing was changed:\n" + "\n".join(f"  - {p}" for p in problems),
            hint=f"Rebase those pins in the same rebase, each onto its own new image (`{together([(p, r) for p, _, r in wanted], others)}`; "
                 "add --split if their new images differ in a file a shared patch changes), or give this profile its own copy "
                 "of the shared patch (`imgquilt guard`), then rebase again.",
            problems=problems)


def _command(opts: RebaseOptions) -> str:
    """The rebase command line as given (for a hint)."""
    if not opts.more:
        return f"imgquilt rebase{f' --profile {opts.profile}' if opts.profile else ''} --image {opts.new_ref}"
    pins = [(opts.profile, opts.new_ref), *((p, ref) for p, _, ref in opts.more)]
    return "imgquilt rebase --profile " + ",".join(str(p) for p, _ in pins) + "".join(f" --image {p}={ref}" for p, ref in pins)


def _prepare(root: Path, whole: Queue, opts: RebaseOptions, opener: Opener) -> tuple[dict, list[str], str | None]:
    """One pin's lane (the journal's LANE_KEYS): where its targets are in its new image, their bytes
    there and the old bases (into the object store); the pin's lineage checked. Nothing of the queue
    is written. Returns (lane, notes, the other profile whose image it is, when --force took that)."""
    q = whole.selection(opts.select)  # the patches this pin applies (the whole queue when series has no guards)
    breaks = chain_breaks(q.patches)
    if breaks:
        raise BadInput("Rebase needs a sound queue; no rebase was started:\n" + "\n".join(f"  - {b}" for b in breaks),
                       hint="Fix what is named above (`imgquilt check` lists every problem), then rebase again.")
    store = ObjectStore(root)
    old_lock = _pin(root, opts.profile)
    source = opener(opts.new_ref, opts.platform)
    info = source.info()
    other = lineage(read_lock_file(root / "targets.lock"), opts.profile, opts.new_ref, info.digest, force=opts.force,
                    base=base_of_source(source) if opts.profile is not None else None)
    paths, new_data, notes = plan_paths(q, source, opts.maps)
    if opts.more:
        notes = [f"profile {opts.profile}: {n}" for n in notes]
    firsts = q.first_bases()
    new_chain = {p: sha256_hex(d) for p, d in new_data.items()}
    for data in new_data.values():
        if data is not None:
            store.put(data)  # unlike remember(), failing to store here must stop the rebase
    # the old bytes are only needed where the base changed; a chain on an unchanged base is carried
    needed = [p for p, base in firsts.items() if new_chain[p] != base and base != ABSENT and not store.has(base)]
    if needed and opts.from_ref:
        _fill_from_old(q, store, opts.from_ref, opener, opts.platform)
        needed = [p for p in needed if not store.has(firsts[p])]
    unreachable = ""
    if needed and not opts.from_ref and old_lock is not None:
        # the object store is a cache: the image targets.lock pins has the old bases, when it is reachable
        pinned_ref = _reachable(old_lock.image.ref, root)
        if pinned_ref is None:
            unreachable = f" It could not be read from {old_lock.image.ref}: that path is not there."
        else:
            try:
                _fill_from_old(q, store, pinned_ref, opener, opts.platform or old_lock.image.platform,
                               what="The image targets.lock pins,")
            except BaseDrift:
                raise  # it is there, but not the image the queue was made for: say so
            except ImgquiltError as exc:
                unreachable = f" It could not be read from {old_lock.image.ref}: {exc.message}"
            needed = [p for p in needed if not store.has(firsts[p])]
    if needed:
        pinned = f" (targets.lock pins {old_lock.image.ref})" if old_lock else ""
        raise BadInput(
            "The object store has no copy of the old base of " + ", ".join(f"{p} ({firsts[p][:12]}…)" for p in needed)
            + ", which a 3-way merge needs." + unreachable,
            hint=f"Pass --from OLDREF, the image the queue was made for{pinned}: `imgquilt rebase --image {opts.new_ref} --from OLDREF`.",
        )
    lane = {
        "profile": opts.profile,
        "select": list(opts.select),
        "new_ref": opts.new_ref,
        "platform": opts.platform,
        "paths": paths,
        "old_chain": dict(firsts),
        "new_chain": new_chain,
        "old_image": {"ref": old_lock.image.ref, "digest": old_lock.image.digest} if old_lock else {"ref": None, "digest": None},
        "new_image": {"ref": opts.new_ref, "digest": info.digest},
    }
    return lane, notes, other


def _reachable(ref: str, root: Path) -> str | None:
    """The lock's reference as it opens from here (a path in it is the queue directory's), or None
    when it names a local path that is not there."""
    from ..sources import ref_in_queue

    try:
        return ref_in_queue(ref, root)
    except ImgquiltError:
        return None


def _pin(root: Path, profile: str | None):
    """The pin a rebase starts from: the profile's, else the default."""
    from ..queue.lock import read_lock_file

    lf = read_lock_file(root / "targets.lock")
    if profile is None:
        return lf.default
    found = lf.profile(profile)
    return found.lock if found is not None else None


def _refuse_applied_work(root: Path) -> None:
    """Rebase rewrites patches; ones pushed in the quilt work tree would be left on stale bases."""
    applied = WorkTree(root).applied()
    if applied:
        raise UsageError(
            f"{len(applied)} patch(es) are applied in the work tree ({', '.join(applied)}); rebase rewrites them.",
            hint="`imgquilt refresh` what you want to keep, then `imgquilt pop -a`, and rebase again.",
        )


def _guarded(step: Callable[..., RebaseReport], *args: object) -> RebaseReport:
    """Run a step of a started rebase; an error tells the user the rebase is still there to abort."""
    try:
        return step(*args)
    except RebaseConflict:
        raise  # its own hint already names --continue and --abort
    except ImgquiltError as exc:
        more = "The rebase is still in progress: fix the cause and `imgquilt rebase --continue`, or `imgquilt rebase --abort`."
        exc.hint = f"{exc.hint}\n{more}" if exc.hint else more
        raise


def planned(root: Path, st: RebaseState) -> Queue:
    """The whole queue the rebase carries: the backup's, as --split rewrote it."""
    whole = backup_queue(root)
    if st.series is None:
        return whole
    return with_copies(whole, st.series.encode("utf-8", "surrogateescape"), st.copies)


def _carried(whole: Queue, st: RebaseState) -> Queue:
    return carried(whole, [st.lane(p)["select"] for p in st.pins])


def _pins_of(st: RebaseState, q: Queue, i: int) -> list[str | None]:
    """The pins that carry patch `i` of the carried queue (by name), the first of them in focus."""
    pins = sorted(selecting(q.entries[i], [(p, st.lane(p)["select"]) for p in st.pins]), key=lambda p: p or "")
    st.focus(pins[0])
    return pins


def _agree(st: RebaseState, patch, pins: list[str | None]) -> None:
    """A patch several pins carry is merged once: each of them must rebase it onto the same bytes
    (the start made sure of it image by image; a lane's own earlier merge can still differ)."""
    for pin in pins[1:]:
        lane = st.lane(pin)
        for s in patch.sections:
            mine = (st.paths[s.path], st.old_chain[s.path], st.new_chain[s.path])
            theirs = (lane["paths"][s.path], lane["old_chain"][s.path], lane["new_chain"][s.path])
            if mine != theirs:
                from ..errors import SplitNeeded

                raise SplitNeeded(
                    f"{patch.name}: {s.path}: profiles {st.profile} and {pin} rebase this shared patch onto different "
                    f"bytes ({mine[2][:12]}… and {theirs[2][:12]}…): their own earlier patches of the file merged differently.",
                    hint="`imgquilt rebase --abort`, then give one profile its own copy of the patch (`imgquilt guard`), and rebase again.")


def _carry_on(st: RebaseState, pins: list[str | None], sections: list[CarriedSection]) -> None:
    """The other pins of a shared patch move past it as the one in focus did."""
    if len(st.pins) > 1:
        st.done[-1]["profiles"] = [str(p) for p in pins]
    for pin in pins[1:]:
        lane = st.lane(pin)
        for s in sections:
            lane["old_chain"][s.old_path] = s.outcome.old_patched
            lane["new_chain"][s.old_path] = s.outcome.new_patched or ABSENT


def _images(opener: Opener, st: RebaseState, whole: Queue) -> dict[str | None, NewImage]:
    out = {}
    for pin in st.pins:
        st.focus(pin)
        out[pin] = NewImage(opener, st, whole.link_paths())
    return out


def _advance(root: Path, st: RebaseState, opener: Opener) -> RebaseReport:
    """Run patches from `st.next` until the end (then finish) or a conflict."""
    store = ObjectStore(root)
    whole = planned(root, st)
    q = _carried(whole, st)
    images = _images(opener, st, whole)
    while st.next < len(q.patches):
        patch = q.patches[st.next]
        strip = q.entries[st.next].strip
        pins = _pins_of(st, q, st.next)
        _agree(st, patch, pins)
        sections = [rebase_section(root, st, store, patch, s, strip) for s in patch.sections]
        sections = locate_moves(sections, images[pins[0]])
        for pin in pins:  # the Python checks (and --boot's probes) on each pin's own new image
            st.focus(pin)
            sections = with_findings(root, st, store, patch, sections, step_findings(st, store, patch, sections, images[pin]))
            sections = boot_step(root, st, store, patch, sections, images[pin])
        st.focus(pins[0])
        if any(s.outcome.state == CONFLICT for s in sections):
            st.phase = "conflict"
            st.current = {"name": patch.name, "sections": [s.to_json() for s in sections]}
            if len(st.pins) > 1:
                st.current["profiles"] = [str(p) for p in pins]
            every = reuse_kept(root, st, sections)  # resolved before (rebase.rerere): taken as the user's
            save_state(root, st)
            if every:
                return _resolve_and_go_on(root, st, opener)
            return st.report("stopped")
        finish_patch(st, store, patch, sections, strip)
        _carry_on(st, pins, sections)
        save_state(root, st)
    return finish(root, st, whole, opener)


def continue_rebase(root: Path, opener: Opener, *, python_check: bool = True) -> RebaseReport:
    """Take the resolved work-tree files of the stopped patch, then go on (`python_check=False`: the
    Python checks stay off for the rest of this rebase)."""
    require_git("rebase --continue")
    sweep(root)  # the temps a killed finish left
    st = load_state(root)
    if not python_check and st.python_check:
        st.python_check = False
        save_state(root, st)
    if st.phase != "conflict" or st.current is None:
        # an interrupted run or finish: redo from the journal
        return _guarded(_advance, root, st, opener)
    return _guarded(_resolve_and_go_on, root, st, opener)


def _resolve_and_go_on(root: Path, st: RebaseState, opener: Opener) -> RebaseReport:
    store = ObjectStore(root)
    whole = planned(root, st)
    q = _carried(whole, st)
    patch = q.patches[st.next]
    strip = q.entries[st.next].strip
    pins = _pins_of(st, q, st.next)
    sections = [CarriedSection.from_json(d) for d in st.current["sections"]]
    resolved = take_resolutions(root, store, patch, sections, strip, frozenset(st.current.get("reused", ())),
                                python_check=st.python_check)
    for pin in pins:  # a resolution must hold on every image it stands in
        st.focus(pin)
        image = NewImage(opener, st, whole.link_paths())
        resolved = _refuse_findings(st, store, patch, sections, resolved, image)
        resolved = refuse_boot(st, store, patch, sections, resolved, image)
    st.focus(pins[0])
    keep_taken(root, store, sections, resolved)  # from now on an abort, a refusal or a kill loses none of them
    finish_patch(st, store, patch, resolved, strip)
    _carry_on(st, pins, resolved)
    st.phase = "running"
    save_state(root, st)  # journal the resolution before its files leave the work tree
    release_work(root, st, [s.outcome.path for s in sections if s.outcome.state == CONFLICT])
    save_state(root, st)
    return _advance(root, st, opener)


def _refuse_findings(st: RebaseState, store: ObjectStore, patch, before: list[CarriedSection], resolved: list[CarriedSection],
                     image: NewImage) -> list[CarriedSection]:
    """A resolution must not leave a new cross-module finding on the new image either; the resolved
    sections come back with their findings ("cannot tell"s) as they are now."""
    redo = [i for i, s in enumerate(before) if s.outcome.state == CONFLICT]
    found = step_findings(st, store, patch, resolved, image)
    left = [f"{resolved[i].outcome.work or before[i].outcome.work}: on the new image: {'; '.join(found[i].located())}"
            for i in redo if i in found and found[i].problems]
    if left:
        raise RebaseConflict(
            f"{patch.name} is still conflicted:\n" + "\n".join(f"  - {x}" for x in left),
            hint="Edit the file(s), then `imgquilt rebase --continue`; or `imgquilt rebase --skip`, or `imgquilt rebase --abort`.",
        )
    out = list(resolved)
    for i in redo:
        oc = out[i].outcome
        out[i] = replace(out[i], outcome=replace(oc, findings=found[i].json() if i in found else ()))
    return out


def skip_rebase(root: Path, opener: Opener) -> RebaseReport:
    """Drop the conflicted patch from the rebased series (its files in the work tree are discarded), then go on."""
    require_git("rebase --skip")
    st = load_state(root)
    if st.phase != "conflict" or st.current is None:
        raise UsageError("The rebase is not stopped on a conflict: there is no patch to skip.",
                         hint="`imgquilt rebase --continue` goes on, `imgquilt rebase --abort` gives up.")
    return _guarded(_skip_and_go_on, root, st, opener)


def _skip_and_go_on(root: Path, st: RebaseState, opener: Opener) -> RebaseReport:
    name = st.current["name"]  # type: ignore[index]
    sections = [CarriedSection.from_json(d) for d in st.current["sections"]]  # type: ignore[index]
    outcomes = tuple(s.outcome for s in sections)
    for pin in st.current.get("profiles") or [st.profile]:  # type: ignore[union-attr]
        lane = st.lane(pin)
        for s in sections:  # the old series moves past the patch; the new one stays where it is
            lane["old_chain"][s.old_path] = s.outcome.old_patched
    note = "Skipped (rebase --skip): dropped from series; the old version stays in git and in the backup until the rebase ends."
    st.done.append({**PatchOutcome(name, patch_state(outcomes), outcomes, True, (note,),
                                   tuple(st.current.get("profiles", ()))).to_json(), "raw_sha": None})  # type: ignore[union-attr]
    st.next += 1
    st.current = None
    st.phase = "running"
    save_state(root, st)
    release_work(root, st, [s.outcome.path for s in sections if s.outcome.state == CONFLICT])
    save_state(root, st)
    return _advance(root, st, opener)


def abort_rebase(root: Path) -> tuple[RebaseReport | None, list[str]]:
    """Restore series, patches/ and targets.lock as they were; end the rebase."""
    if not rebase_dir(root).exists():
        raise UsageError("No rebase in progress.", hint="Nothing to abort.")
    sweep(root)  # the temps a killed finish left
    if not rebase_in_progress(root):
        remove_state(root)  # crashed before its journal existed: nothing was changed
        return None, []
    try:
        st: RebaseState | None = load_state(root)
    except ImgquiltError:
        st = None
    kept = keep_abandoned(root, st, ObjectStore(root)) if st is not None else []
    restored = restore(root)
    report = None
    if st is not None:
        if kept:
            st.notes.append(f"Kept the resolution of {', '.join(kept)} for the next rebase that meets the same three sides; {FORGET}.")
        report = st.report("aborted")
        release_work(root, st, list(st.work_written))
    remove_state(root)
    return report, restored
