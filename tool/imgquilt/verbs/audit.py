"""Audit: which patches of the queue are live in a filesystem, and does the apply record agree.

Pure functions over a Queue and the TargetFiles read from a source: nothing here reads or writes
anything else. `audit_source` is the one entry point that touches a Source (through the same
`read_targets` as apply, so only the target files are ever read). At the end, the verb itself: an
AuditRequest fanned out (verbs.fanout) over profiles, platforms or a fleet.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Sequence

from ..fs.content import held, held_if_small, held_or_none, in_memory_max
from ..queue.streamed import StreamedHunks
from ..engine.apply import HunkError, apply_hunks, nearest_match, reverse_hunks
from ..fs.pycache import find_bytecode, is_python_source
from ..pycheck import judge_bytecode as judge
from ..pycheck.bytecode import CANNOT_TELL, STALE, Seen, Verdict
from ..engine.record import RecordSeen, read_record_target, read_record_seen
from ..engine.result import RECORD_PATH
from ..errors import BadImage, BadInput, NotLive, SpoolFull, shown_env
from ..fs.types import ImageInfo, Source, TargetFile, read_targets
from ..image.base_image import BaseImage, base_of_source
from ..queue.hunks import ABSENT, Hunk, sha256_hex, split_lines
from ..queue.patchfile import FileSection, Patch
from ..queue.queue import Queue
from ..store import remember_named

LIVE = "live"
PENDING = "pending"
DRIFTED_LIVE = "drifted-live"
DRIFTED = "drifted"
MISSING = "missing"
SHADOWED = "shadowed"  # the bytes are the patch's result, but CPython would run bytecode of other bytes
RESTART_PENDING = "restart-pending"  # live on disk, but changed after the audited process started
CANNOT_TELL_DETAIL = "cannot tell which code CPython runs: "  # a live file's detail: a pyc it would load could not be judged
UNREADABLE = "cannot be read: "  # a detail that starts so: the source refused the path (missing, whatever the chain)
PARTIAL = "partial"
STATES = (LIVE, PENDING, DRIFTED_LIVE, DRIFTED, MISSING, SHADOWED, RESTART_PENDING, PARTIAL)
RUNTIME_STATES = (SHADOWED, RESTART_PENDING)  # counted in a summary only when some patch is in one


@dataclass(frozen=True)
class FileAudit:
    """One file of one patch: its state and the hashes that decided it."""

    path: str  # as the patch names it
    resolved: str
    state: str
    expected_base: str
    expected_patched: str
    actual: str
    detail: str = ""  # why, when the hashes alone do not say (whiteout, unreadable node, ...)
    recorded: str | None = None  # the patched sha256 the apply record holds for this file, if any
    bytecode: tuple[Verdict, ...] = ()  # every bytecode file CPython could load for it, judged (live .py files)


@dataclass(frozen=True)
class PatchAudit:
    name: str
    state: str
    files: tuple[FileAudit, ...]
    record: str | None = None  # "applied" / "not-recorded"; None when there is no record

    @property
    def first_divergent(self) -> FileAudit | None:
        """The first file that is not live (what a person looks at first)."""
        return next((f for f in self.files if f.state != LIVE), None)


@dataclass(frozen=True)
class RecordProblem:
    """A place where the apply record and the bytes (or the queue) disagree."""

    kind: str  # "series", "not-live", "unrecorded", "not-in-series", "not-in-patch", "unreadable"
    patch: str
    path: str
    message: str


@dataclass(frozen=True)
class RecordCheck:
    """The record found at RECORD_PATH (var/lib/imgquilt/applied.json) and how it compares."""

    path: str
    series_sha256: str | None
    series_matches: bool
    image_ref: str | None
    image_digest: str | None
    imgquilt_version: str | None
    patches: tuple[str, ...]
    problems: tuple[RecordProblem, ...] = ()
    written_by: tuple[str, str] | None = None  # another pin's apply wrote it: (who, the --profile flag that judges it)


@dataclass(frozen=True)
class ProcessCheck:
    """`audit --pid`: the process whose root was audited, and when it started (seconds since the epoch)."""

    pid: int
    started: float
    root: str


@dataclass(frozen=True)
class TrustCheck:
    """audit --trust-attestation: where the states came from, and why the attestations that did not answer did not."""

    answered_from: str  # "attestation" or "layers"
    attestation: str | None  # the referrer manifest digest that answered
    key_id: str
    rejected: tuple[tuple[str, str], ...]  # (referrer digest, why it did not answer)
    note: str  # one line for people


@dataclass(frozen=True)
class EnvCheck:
    """A profile's environment defaults against the image's config `Env` (docs/profiles.md)."""

    expected: tuple[tuple[str, str], ...]
    found: dict[str, str] | None  # the config's Env (or the process's); None: not checked (a root has no config)
    source: str = "config"  # "config": the image config's Env; "process": /proc/PID/environ (audit --pid)

    @property
    def where(self) -> str:
        """What held the values, for people: "the image's Env" or "the process's environment"."""
        return "the process's environment" if self.source == "process" else "the image's Env"

    @property
    def missing(self) -> list[tuple[str, str, str | None]]:
        """(key, the profile's value, the image's value or None) of each default the config does not set."""
        if self.found is None:
            return []
        return [(k, v, self.found.get(k)) for k, v in self.expected if self.found.get(k) != v]


@dataclass(frozen=True)
class AuditReport:
    info: ImageInfo
    series_sha256: str
    patches: tuple[PatchAudit, ...]
    record: RecordCheck | None
    process: ProcessCheck | None = None
    trust: TrustCheck | None = None  # only with --trust-attestation
    profile: str | None = None  # the profile judged (None: the default, or no profiles)
    env: EnvCheck | None = None  # with a profile that has environment defaults
    base: BaseImage | None = None  # the base the image's manifest names (image.base_image), if any

    @property
    def summary(self) -> dict[str, int]:
        """Patches per state: every state of the design always, a runtime state when it occurs."""
        counts = {s: 0 for s in STATES}
        for p in self.patches:
            counts[p.state] += 1
        return {s: n for s, n in counts.items() if n or s not in RUNTIME_STATES}

    def all_in(self, state: str) -> bool:
        return all(p.state == state for p in self.patches)


# --- where is the change? ---------------------------------------------------------------------
def undo_change(data: bytes, hunks: Sequence[Hunk]) -> bytes | None:
    """`data` with the change of `hunks` taken out, or None when the change is not there.

    The change is there when every hunk's result (context plus added lines, byte-exact) is in the
    file in order: at the place the hunk names, else at the nearest offset (the file may have
    changed elsewhere, which shifts lines, as `patch -R` allows). No fuzz: context must match
    whole. The undo itself is the engine's exact reverse-apply at those places.
    """
    lines = split_lines(data)
    placed: list[Hunk] = []
    lo = 0
    shift = 0
    for h in hunks:
        post = h.new_lines
        named = (h.new_start - 1 if h.new_len else h.new_start) + shift
        if post:
            at = nearest_match(lines, post, named, lo, earlier_on_tie=True)
            if at is None:
                return None
            new_start = at + 1
            lo = at + len(post)
        else:
            # a hunk that removes lines with no context left: its removed lines must be gone
            if h.old_lines and nearest_match(lines, h.old_lines, 0, 0) is not None:
                return None
            at = min(max(named, lo), len(lines))
            new_start = at
            lo = at
        shift = at - (h.new_start - 1 if h.new_len else h.new_start)
        placed.append(Hunk(h.old_start, h.old_len, new_start, h.new_len, h.lines))
    try:
        return apply_hunks(data, reverse_hunks(tuple(placed)))
    except HunkError:
        return None


def _drift_states(data: bytes, chain: list[FileSection]) -> list[str]:
    """For a file at a hash on no chain: per section, is its change there? Peel from the last.

    Undoing a later patch that is present first lets an earlier patch under it be tested on the
    bytes it produced (a later patch may rewrite the lines an earlier one added).
    """
    states = [DRIFTED] * len(chain)
    cur: bytes | None = data
    for i in range(len(chain) - 1, -1, -1):
        s = chain[i]
        if cur is None:
            # a later section created the file: what came before cannot be seen in these bytes
            if s.is_delete:
                states[i] = DRIFTED_LIVE
            continue
        if s.is_delete:
            continue  # the file is here: the deletion is not
        if s.binary is not None:
            continue  # a binary section is a whole file: only its hashes tell
        if not s.hunks and not s.is_new:
            continue  # nothing to look for
        if isinstance(s.hunks, StreamedHunks) and s.hunks.end - s.hunks.start > in_memory_max():
            continue  # a section too large to hold: only its hashes tell
        undone = undo_change(cur, s.hunks)
        if s.is_new and (undone is not None or not s.hunks):
            states[i] = DRIFTED_LIVE
            cur = None
        elif undone is not None:
            states[i] = DRIFTED_LIVE
            cur = undone
    return states


def _positions(chain: list[FileSection], actual: str) -> list[int]:
    """Every k such that the file looks like "after the first k sections of the chain"."""
    ks = []
    for k in range(len(chain) + 1):
        after = chain[k - 1].patched_sha256 if k else None
        before_next = chain[k].base_sha256 if k < len(chain) else None
        if actual in (after, before_next):
            ks.append(k)
    return ks


def chain_states(chain: list[FileSection], data: bytes | None, recorded: Sequence[bool]) -> list[str]:
    """The state of every section of one file's chain (series order), given the file's bytes.

    `recorded[i]`: the apply record lists section i's patch. It only breaks ties, when the hash
    sits at more than one place on the chain (a later patch reverts an earlier one).
    """
    actual = sha256_hex(data)
    ks = _positions(chain, actual)
    if ks:
        k = ks[0]
        for cand in reversed(ks):
            if all(recorded[:cand]):
                k = cand
                break
        return [LIVE] * k + [PENDING] * (len(chain) - k)
    if data is None:
        return [MISSING] * len(chain)
    small = held_if_small(data)
    if small is None:
        return [DRIFTED] * len(chain)  # too large to look for each change in: its hash says drifted
    return _drift_states(small, chain)


def patch_state(files: Sequence[FileAudit]) -> str:
    states = {f.state for f in files}
    return states.pop() if len(states) == 1 else PARTIAL


# --- the audit --------------------------------------------------------------------------------
def audit_files(queue: Queue, targets: dict[str, TargetFile], record: RecordSeen | None = None,
                details: dict[str, str] | None = None) -> list[PatchAudit]:
    """Per patch and file, the state of the queue in these targets (keyed by named path)."""
    details = details or {}
    chains: dict[str, list[tuple[Patch, FileSection]]] = {}
    for p in queue.patches:
        for s in p.sections:
            chains.setdefault(targets[s.path].resolved, []).append((p, s))
    state_of: dict[tuple[str, str], str] = {}
    for resolved, chain in chains.items():
        sections = [s for _, s in chain]
        recorded = [record is not None and s.path in record.files.get(p.name, {}) for p, s in chain]
        t = targets[sections[0].path]
        # another kind of file than the chain ends with (a symlink for a regular file's chain, or the
        # reverse): its bytes say nothing about the patches
        wrong_kind = t.data is not None and all(s.link != t.link for s in sections)
        for (p, s), st in zip(chain, chain_states(sections, t.data, recorded)):
            unreadable = details.get(s.path, "").startswith(UNREADABLE)
            state_of[(p.name, s.path)] = MISSING if unreadable else DRIFTED if wrong_kind else st
            if wrong_kind:
                details.setdefault(s.path, f"it is a {'symlink' if t.link else 'regular file'}, and the patches change a "
                                           f"{'regular file' if t.link else 'symlink'}")
    out = []
    for p in queue.patches:
        rec_files = record.files.get(p.name) if record is not None else None
        files = tuple(
            FileAudit(
                path=s.path,
                resolved=targets[s.path].resolved,
                state=state_of[(p.name, s.path)],
                expected_base=s.base_sha256,
                expected_patched=s.patched_sha256,
                actual=sha256_hex(targets[s.path].data),
                detail=details.get(s.path, ""),
                recorded=rec_files.get(s.path) if rec_files is not None else None,
            )
            for s in p.sections
        )
        rec = None if record is None else ("applied" if rec_files is not None else "not-recorded")
        out.append(PatchAudit(p.name, patch_state(files), files, rec))
    return out


_SAYS = {
    PENDING: "is at its base (the patch is not applied)",
    SHADOWED: "is shadowed by bytecode of other bytes",
    RESTART_PENDING: "changed after the process started",
    DRIFTED: "drifted (its hash is on no chain and the change is not there)",
    DRIFTED_LIVE: "drifted (its change is there, but the file changed elsewhere)",
    MISSING: "is missing",
}


def check_record(queue: Queue, record: RecordSeen, patches: Sequence[PatchAudit]) -> list[RecordProblem]:
    """Every disagreement between the record, the queue and the bytes."""
    problems: list[RecordProblem] = []
    if record.series_sha256 != queue.series_sha256:
        problems.append(RecordProblem(
            "series", "-", RECORD_PATH,
            f"the record was written for series sha256 {record.series_sha256}, but the queue is now {queue.series_sha256} "
            "(the queue changed since this apply).",
        ))
    names = set(queue.names)
    for name in record.files:
        if name not in names:
            problems.append(RecordProblem("not-in-series", name, "", f"{name}: recorded as applied, but no longer in the series."))
    for p in patches:
        if p.record == "not-recorded":
            if p.state == LIVE:
                problems.append(RecordProblem("unrecorded", p.name, "", f"{p.name}: live in the bytes, but not in the record."))
            continue
        if p.record != "applied":
            continue
        rec_files = record.files[p.name]
        for path in rec_files:
            if path not in {f.path for f in p.files}:
                problems.append(RecordProblem("not-in-patch", p.name, path, f"{p.name}: {path}: recorded as applied, but the patch no longer touches it."))
        for f in p.files:
            if f.state in (LIVE, SHADOWED, RESTART_PENDING) or f.recorded is None:
                continue  # the bytes are the recorded result: what runs is another matter
            where = f.path if f.path == f.resolved else f"{f.path} (resolved: {f.resolved})"
            msg = f"{p.name}: {where}: recorded as applied, but the file {_SAYS[f.state]}: expected sha256 {f.expected_patched}, found {f.actual}."
            if f.actual == f.recorded and f.recorded != f.expected_patched:
                msg += " It is at the result the record names: the patch changed since it was applied."
            problems.append(RecordProblem("not-live", p.name, f.path, msg))
    return problems


def _read(source: Source, paths: list[str], links: Collection[str] = ()) -> tuple[dict[str, TargetFile], dict[str, str]]:
    """Read every target (`links`: read as themselves, see fs.types.Source); a path the source refuses
    (not a regular file, a symlink out of the root) reads as absent, with the reason: a running
    container's root is reported on, not refused."""
    try:
        return read_targets(source, paths, links), {}
    except (BadImage, SpoolFull):
        raise  # the image itself cannot be read, or imgquilt has no room to read it: an error, not a state
    except BadInput:
        pass
    targets: dict[str, TargetFile] = {}
    details: dict[str, str] = {}
    for p in paths:
        try:
            targets.update(read_targets(source, [p], links))
        except (BadImage, SpoolFull):
            raise
        except BadInput as exc:
            targets[p] = TargetFile(p, p, None)
            details[p] = UNREADABLE + exc.message
    return targets, details


def _deleted_notes(source: Source, targets: dict[str, TargetFile]) -> dict[str, str]:
    by = getattr(source, "deleted_by", None)
    if not callable(by):
        return {}
    notes = {}
    for path, t in targets.items():
        if t.data is None:
            layer = by(path)
            if layer:
                notes[path] = f"deleted (whited out) by layer {layer}"
    return notes


def audit_targets(queue: Queue, targets: dict[str, TargetFile], record_target: TargetFile | None, info: ImageInfo,
                  details: dict[str, str] | None = None) -> AuditReport:
    """The whole audit over targets already read (`record_target`: RECORD_PATH as read, or None)."""
    record: RecordSeen | None = None
    unreadable: RecordProblem | None = None
    if record_target is not None and record_target.data is not None:
        try:
            record = read_record_seen(record_target.data)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            unreadable = RecordProblem("unreadable", "-", RECORD_PATH, f"{RECORD_PATH} is not a readable apply record: {exc}.")
    patches = audit_files(queue, targets, record, details)
    check: RecordCheck | None = None
    if record is not None:
        check = RecordCheck(
            RECORD_PATH, record.series_sha256, record.series_sha256 == queue.series_sha256, record.image_ref,
            record.image_digest, record.version, tuple(record.files), tuple(check_record(queue, record, patches)),
        )
    elif unreadable is not None:
        check = RecordCheck(RECORD_PATH, None, False, None, None, None, (), (unreadable,))
    return AuditReport(info, queue.series_sha256, tuple(patches), check)


def audit_source(queue: Queue, source: Source) -> AuditReport:
    """Read only the target files (and the record) from `source` and audit them; a live Python file
    whose bytecode would run other bytes is `shadowed`."""
    paths = queue.target_paths()
    targets, details = _read(source, paths, queue.link_paths())
    record_target = read_record_target(source)
    for path, note in _deleted_notes(source, targets).items():
        details.setdefault(path, note)
    remember_named(queue, [t.data for t in targets.values()])
    report = replace(audit_targets(queue, targets, record_target, source.info(), details), base=base_of_source(source))
    return judge_bytecode(report, source, targets)


# --- what runs: bytecode, processes -------------------------------------------------------------
def _restate(report: AuditReport, change: dict[tuple[str, str], FileAudit]) -> AuditReport:
    """`report` with the files in `change` (by patch name and path) replaced, patch states redone."""
    patches = []
    for p in report.patches:
        files = tuple(change.get((p.name, f.path), f) for f in p.files)
        patches.append(replace(p, files=files, state=patch_state(files)))
    return replace(report, patches=tuple(patches))


def judge_bytecode(report: AuditReport, source: Source, targets: dict[str, TargetFile]) -> AuditReport:
    """Judge the bytecode CPython could load for every live .py file: a stale one makes it shadowed.
    Only bytecode the source shows without reading deeper than its targets is looked at."""
    live = {f.resolved for p in report.patches for f in p.files if f.state == LIVE and is_python_source(f.resolved)}
    found: dict[str, list] = {}
    for named, t in targets.items():
        if t.resolved in live and not t.link:
            for b in find_bytecode(source, named, t.resolved, source_gone=t.data is None, kinds=("file", "symlink")):
                if all(b.path != x.path for x in found.setdefault(t.resolved, [])):
                    found[t.resolved].append(b)
    if not found:
        return report
    by_resolved = {t.resolved: t for t in targets.values()}
    # one read for all (a layer holding several is passed over once); one CPython cannot read counts as none
    pycs, _ = _read(source, sorted({b.path for bs in found.values() for b in bs}))
    seen = [Seen(b, held(pycs[b.path].data, b.path), held_or_none(by_resolved[r].data, r), by_resolved[r].mtime)  # type: ignore[arg-type]
            for r, bs in found.items() for b in bs if b.path in pycs and pycs[b.path].data is not None]
    verdicts: dict[str, list[Verdict]] = {}
    for v in judge(seen):
        verdicts.setdefault(v.bytecode.source, []).append(v)
    change: dict[tuple[str, str], FileAudit] = {}
    for p in report.patches:
        for f in p.files:
            vs = verdicts.get(f.resolved)
            if f.state != LIVE or not vs:
                continue
            stale = [v for v in vs if v.verdict == STALE]
            unknown = [v for v in vs if v.verdict == CANNOT_TELL]
            if stale:
                detail = "CPython would run other bytes: " + "; ".join(f"{v.bytecode.path}: {v.reason}" for v in stale)
                change[(p.name, f.path)] = replace(f, state=SHADOWED, detail=detail, bytecode=tuple(vs))
            else:
                detail = f.detail
                if unknown:
                    detail = CANNOT_TELL_DETAIL + "; ".join(f"{v.bytecode.path}: {v.reason}" for v in unknown)
                change[(p.name, f.path)] = replace(f, detail=detail, bytecode=tuple(vs))
    return _restate(report, change)


def judge_process(report: AuditReport, change_times, pid: int, started: float, root: str) -> AuditReport:
    """`audit --pid`: a live file changed after the process started is not what it runs (it loaded
    its modules before): restart-pending. `change_times(resolved paths)` gives each path's ctime (a
    deleted file is judged by its directory's, which its removal changed)."""
    when = iso_time
    live = [f for p in report.patches for f in p.files if f.state == LIVE]
    paths = {f.resolved if f.actual != ABSENT else f.resolved.rpartition("/")[0] for f in live}
    times = change_times(sorted(p for p in paths if p))
    change: dict[tuple[str, str], FileAudit] = {}
    for p in report.patches:
        for f in p.files:
            if f.state != LIVE:
                continue
            where = f.resolved if f.actual != ABSENT else f.resolved.rpartition("/")[0]
            ctime = times.get(where)
            if ctime is not None and ctime > started:
                what = "changed" if f.actual != ABSENT else f"deleted (its directory {where} changed)"
                detail = (f"{what} at {when(ctime)}, after process {pid} started at {when(started)}: "
                          f"it still runs what it loaded before; restart {pid} to run it")
                change[(p.name, f.path)] = replace(f, state=RESTART_PENDING, detail=detail)
    return replace(_restate(report, change), process=ProcessCheck(pid, started, root))


# --- JSON ---------------------------------------------------------------------------------------
def iso_time(t: float) -> str:
    """Seconds since the epoch as ISO 8601 in UTC, to the millisecond."""
    import datetime

    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


def with_env(report: AuditReport, source: Source, env: tuple[tuple[str, str], ...], profile: str | None,
             environ: dict[str, str] | None = None) -> AuditReport:
    """`report` naming the profile judged and, when it has environment defaults, how the image's
    config Env holds them (a root has no config: not checked), or with `environ` (audit --pid: the
    running process's environment) how the process holds them."""
    if profile is None and not env:
        return report
    check = None
    if env and environ is not None:
        check = EnvCheck(tuple(env), dict(environ), "process")
    elif env:
        from ..image.sinks.mutate import config_env

        image = getattr(source, "image", None)
        found = (config_env(image.config_bytes) or {}) if image is not None else None
        check = EnvCheck(tuple(env), found)
    return replace(report, profile=profile, env=check)


def matches(report: AuditReport, want: str) -> bool:
    """Is the filesystem this report's selection in the `want`ed state: every patch in it; for live,
    every environment default set and the apply record (if any) agreeing with the bytes and the queue?"""
    if not_in_state(report, want) is not None:
        return False
    return want != LIVE or report.record is None or not report.record.problems


__all__ = [
    "ABSENT", "AuditReport", "EnvCheck", "matches", "with_env", "FileAudit", "PatchAudit", "RecordCheck", "RecordProblem", "STATES", "TrustCheck",
    "audit_files", "audit_source", "audit_targets", "chain_states", "check_record", "read_record_seen",
    "patch_state", "undo_change",
]


def cannot_tell(report: AuditReport) -> list[tuple[PatchAudit, FileAudit]]:
    """Every live file with a pyc CPython would load whose code imgquilt could not judge."""
    return [(p, f) for p in report.patches for f in p.files if any(v.verdict == CANNOT_TELL for v in f.bytecode)]


def _live_hint(report: AuditReport) -> str:
    """The way to make the patches live: judge it as the pin that wrote it, rebuild what an older queue
    built (its base did not change: not a rebase), or apply (or rebase onto) an image never applied."""
    rec = report.record
    if rec is not None and rec.written_by is not None:
        who, flag = rec.written_by
        return f"It was applied as {who}: judge it with {flag}, or apply this deployment to its base."
    if rec is not None and rec.series_sha256 is not None and not rec.series_matches:
        profile = f" --profile {report.profile}" if report.profile else ""
        if report.info.kind == "rootfs":
            return (f"It was built by an older version of this queue (its apply record: series {rec.series_sha256[:12]}). "
                    f"Not a rebase, its base did not change: rebuild it, `imgquilt apply{profile} --reverse --root ROOT` "
                    f"then `imgquilt apply{profile} --root ROOT`.")
        image = f" --image {rec.image_ref}" if rec.image_ref else ""
        pinned = "" if rec.image_ref else " (the image the queue pins; --image REF for another)"
        return (f"It was built by an older version of this queue (its apply record: series {rec.series_sha256[:12]}, "
                f"from {rec.image_ref or rec.image_digest}). Not a rebase, its base did not change: rebuild it from that base, "
                f"`imgquilt apply{profile}{image} --output-image REF`{pinned}.")
    return "Apply the queue (`imgquilt apply`), or carry it onto this image (`imgquilt rebase`)."


def not_in_state(report: AuditReport, want: str, *, strict: bool = False) -> NotLive | None:
    """The exit-5 error when a patch of `report` is not in the `want`ed state, or (live) the image's
    config lacks an environment default of the profile judged (None: all are as wanted).
    `strict` (audit --strict): a file whose running code imgquilt cannot tell fails too."""
    failing = [p for p in report.patches if p.state != want]
    unset = report.env.missing if report.env is not None and want == LIVE else []
    whose = f" of profile {report.profile}" if report.profile else ""
    if unset and not failing:
        assert report.env is not None
        has = "it has" if report.env.source == "process" else "the image has"
        keys = "; ".join(f"{shown_env(k, v)} ({has} {shown_env(k, got)})" for k, v, got in unset)
        hint = ("Start the process with the profile's environment (`imgquilt overlay-args` renders it; an image applied "
                "for the profile carries it in its config)." if report.env.source == "process"
                else "Apply the profile again (`imgquilt apply --profile NAME --output-image REF`) to set them.")
        return NotLive(f"Every patch{whose} is live, but {report.env.where} lacks {len(unset)} of its default(s): {keys}.", hint=hint)
    if not failing and strict and cannot_tell(report):
        unknown = cannot_tell(report)
        names = "; ".join(f"{p.name}: {f.path}" for p, f in unknown)
        return NotLive(f"--strict: for {len(unknown)} file(s) imgquilt cannot tell which code CPython runs ({names}): "
                       "a pyc it would load could not be judged.",
                       hint="The note under each file says why. Remove that bytecode (an `imgquilt apply` of the queue "
                            "removes the bytecode of every source it changes), or audit without --strict.")
    if not failing:
        return None
    names = ", ".join(f"{p.name} ({p.state})" for p in failing)
    hint = (_live_hint(report) if want == LIVE else "This filesystem already carries changes of the queue.")
    states = {f.state for p in failing for f in p.files}
    if want == LIVE and SHADOWED in states:
        hint += ("\nShadowed: remove the stale bytecode named above (an `imgquilt apply` of the queue removes the bytecode "
                 "of every source it changes).")
    if want == LIVE and RESTART_PENDING in states and report.process is not None:
        hint += f"\nRestart process {report.process.pid} to run the patched files."
    if unset:
        assert report.env is not None
        names += f"; {report.env.where} lacks " + ", ".join(shown_env(k, v) for k, v, _ in unset)
    return NotLive(f"{len(failing)} of {len(report.patches)} patch(es){whose} are not {want}: {names}.", hint=hint)
