"""The `audit` verb: one request (AuditRequest), fanned out over profiles, platforms or a fleet, each
image judged by verbs/audit.py."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ImgquiltError, UsageError
from ..fs.types import Source
from ..queue.queue import Queue
from .audit import LIVE, AuditReport, PatchAudit, judge_process, matches, not_in_state


# --- the verb: one request, fanned out over profiles, platforms or a fleet ----------------------
@dataclass(frozen=True)
class Audit:
    """The states of the queue's patches in a filesystem, the queue's git history if asked.

    `error` (NotLive, exit 5) when some patch is not in the `expect`ed state.
    """

    report: AuditReport | None
    history: Any
    expect: str
    failing: tuple[PatchAudit, ...] = ()
    error: ImgquiltError | None = None
    profile: str | None = None  # the profile judged (None: the default)

    @property
    def matches(self) -> bool:
        """Is the filesystem this profile, in the expected state: every patch in it, every environment
        default set (live), and an apply record, if any, that agrees?"""
        return self.report is not None and matches(self.report, self.expect)


@dataclass(frozen=True)
class PlatformsAudited:
    """`audit --platform all`: the image and each platform's audit (verbs.platforms)."""

    ref: str
    audits: tuple[Any, ...]  # verbs.platforms.PlatformAudit, in the index's order


@dataclass(frozen=True)
class FleetAudited:
    """A fleet audit (several --image, or --images-from): each image's entry (verbs.fleet.FleetEntry)."""

    entries: tuple[Any, ...]
    platform: str | None


@dataclass(frozen=True)
class FleetMerged:
    """`audit --merge`: the one fleet document of the shards' documents (verbs.fleet.merge_documents)."""

    doc: dict[str, Any]


@dataclass(frozen=True)
class AuditRequest:
    """`imgquilt audit` as asked (api.audit's keywords; `images` and `images_from` name a fleet,
    `merge` the shards' documents to merge; `expect` None: live, or a merge's own)."""

    queue: str | os.PathLike[str] | None = None
    images: tuple[str, ...] = ()
    root: str | os.PathLike[str] | None = None
    platform: str | None = None
    history: bool = False
    expect: str | None = "live"
    progress: Any = None
    trust_attestation: str | os.PathLike[str] | None = None
    pid: int | None = None
    profile: str | None = None
    strict: bool = False
    images_from: Path | None = None
    merge: tuple[Path, ...] = ()
    merge_more: tuple[Path, ...] = ()
    progress_of: Callable[[str], Any] | None = None  # the progress of one reference's reads, by name

    @property
    def image(self) -> str | None:
        return self.images[0] if self.images else None


def refuse_audit(req: AuditRequest) -> Any:
    """The combinations `audit` refuses before reading an image; the Selection the request names
    (verbs.fanout: --images-from read once, here), None for --merge."""
    from .fanout import select

    if req.merge_more and not req.merge:
        raise UsageError(f"Unexpected argument {req.merge_more[0]}.", hint="Documents to merge follow --merge.")
    if req.merge:
        if req.images or req.images_from or req.root or req.history or req.trust_attestation or req.pid is not None:
            raise UsageError("--merge reads audit documents, not images: give it no --image, --images-from, --root, "
                             "--pid, --history or --trust-attestation.")
        return None
    sel = select(req.profile, req.platform, req.images, req.images_from)
    if sel.fleet:
        if req.profile is not None:
            raise UsageError("A fleet audit judges each image by its own profile (the one its apply record or digest "
                             "names, else the one it matches); --profile takes one image.",
                             hint="Leave --profile out, or audit one image with --profile all.")
        if req.root or req.history or sel.every_platform or req.pid is not None:
            raise UsageError("A fleet audit (several images) takes no --root, --pid, --history or --platform all.",
                             hint="Audit a multi-platform image's platforms on its own: --image REF --platform all.")
        return sel
    if sel.every_profile:
        if req.history or sel.every_platform:
            raise UsageError("`audit --profile all` judges one image, root or process per profile; it takes no --history or --platform all.")
        return sel
    if sel.every_platform:
        if req.profile is not None:
            raise UsageError("--platform all judges the default selection; give one of --platform all and --profile.")
        if req.root is not None or req.history or req.pid is not None:
            raise UsageError("--platform all audits an image's platforms; it takes no --root, --pid or --history.")
    return sel


def run_audit(req: AuditRequest) -> Audit | tuple[Audit, ...] | PlatformsAudited | FleetAudited | FleetMerged:
    """The CLI's `audit`: merged shards (FleetMerged), a fleet (FleetAudited), every profile
    (`--profile all`: a tuple), every platform (PlatformsAudited), else one Audit."""
    from dataclasses import replace as _with

    sel = refuse_audit(req)
    if sel is None:
        from .fleet import merge_files

        return FleetMerged(merge_files([*req.merge, *req.merge_more], req.expect))
    req = _with(req, expect=req.expect or LIVE)
    if sel.fleet:
        return audit_fleet_of(req, sel)
    req = _with(req, images=sel.images)
    if sel.every_profile:
        return audit_profiles(req)
    if sel.every_platform:
        return audit_platforms_of(req)
    return audit(req)


def _check_expect(req: AuditRequest) -> None:
    if req.expect not in ("live", "pending"):
        raise UsageError(f"expect must be live or pending, not {req.expect!r}.")


def audit(req: AuditRequest) -> Audit:
    """One selection judged in one filesystem (api.audit says how)."""
    from .profiles import ALL
    from .refs import load_queue, public_key

    image, root, pid = req.image, req.root, req.pid
    _check_expect(req)
    if pid is not None and (image or root is not None):
        raise UsageError("--pid audits the root of a running process: give it no --image or --root.")
    if req.trust_attestation is not None and (root is not None or pid is not None):
        raise UsageError(f"--trust-attestation reads an image's attestations; a {'--root' if root is not None else '--pid'} has none.",
                         hint="Audit the image the root came from with --image REF --trust-attestation KEY.")
    if req.profile == ALL:
        raise UsageError("`audit --profile all` judges every profile: use audit_profiles().")
    pub = public_key(req.trust_attestation) if req.trust_attestation is not None else None
    q = load_queue(req.queue)
    process = None
    if pid is not None:
        from ..rootfs.process import pin_process

        process = pin_process(pid)  # every read below goes through its root fd, never /proc/PID/root again
        root = process.root
    try:
        return _audit(q, req, root, pub, process)
    finally:
        if process is not None:
            process.close()


def _audit(q: Queue, req: AuditRequest, root: Any, pub: Any, process: Any) -> Audit:
    from .profiles import identify, lock_file, resolve, with_record_owner

    image, platform, progress, history, expect, profile = req.image, req.platform, req.progress, req.history, str(req.expect), req.profile
    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf) if profile is not None or not lf.profiles else None
    pinned = chosen.lock if chosen is not None else (lf.default or lf.profiles[0].lock)
    if process is not None:
        from ..rootfs.source import RootfsSource

        source: Source | None = RootfsSource(process.root, ref=f"rootfs:{process.shown}")
    else:
        source = audit_source_of(q.root, image, Path(root) if root is not None else None, platform, pinned, progress)
    if source is None and not history:
        raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF or --root DIR.")
    if chosen is None:
        chosen = identify(q, lf, source) if source is not None else resolve(q, None, lf)
    hist = None
    if history:
        from .history import queue_history

        hist = queue_history(q.root, q.names)
    environ = process.environ() if process is not None and chosen.env else None
    report = audit_one(chosen, source, pub, environ) if source is not None else None
    if report is not None:
        report = with_record_owner(report, q, lf, chosen)
    if report is not None and process is not None:
        report = judge_process(report, source.change_times, process.pid, process.started, process.shown)  # type: ignore[union-attr]
        process.check()  # still the process pinned, after every read: else nothing is said about it
    failing = tuple(p for p in report.patches if p.state != expect) if report is not None else ()
    error = not_in_state(report, expect, strict=req.strict) if report is not None else None
    return Audit(report, hist, expect, failing, error, chosen.name)


def audit_one(chosen: Any, source: Source, pub: Any, environ: dict[str, str] | None = None) -> AuditReport:
    """One selection audited in `source`: its patches, and with a profile its environment defaults
    (in the image config, or in `environ`: a running process's)."""
    from .profiles import audit_as

    return audit_as(chosen, source, pub, environ)


def audit_profiles(req: AuditRequest) -> tuple[Audit, ...]:
    """`audit --profile all` (api.audit_profiles says how): every profile judged in one filesystem,
    or each in the image it pins."""
    from .fanout import Selection, fan_out
    from .profiles import ALL, lock_file
    from .refs import load_queue, open_ref, pick_ref, public_key

    image, root, pid, platform, progress, expect = req.image, req.root, req.pid, req.platform, req.progress, str(req.expect)
    _check_expect(req)
    if pid is not None and (image or root is not None):
        raise UsageError("--pid audits the root of a running process: give it no --image or --root.")
    if req.trust_attestation is not None and (root is not None or pid is not None):
        raise UsageError(f"--trust-attestation reads an image's attestations; a {'--root' if root is not None else '--pid'} has none.")
    pub = public_key(req.trust_attestation) if req.trust_attestation is not None else None
    q = load_queue(req.queue)
    lf = lock_file(q.root)
    chosen = [c.profile for c in fan_out(Selection(ALL), q, lf)]  # one platform: --platform as given
    process = None
    if pid is not None:
        from ..rootfs.process import pin_process

        process = pin_process(pid)
    try:
        shared = None
        environ = None
        if process is not None:
            from ..rootfs.source import RootfsSource

            shared = RootfsSource(process.root, ref=f"rootfs:{process.shown}")
            environ = process.environ()
        elif image or root is not None:
            shared = audit_source_of(q.root, image, Path(root) if root is not None else None, platform, None, progress)
        out = []
        for r in chosen:
            assert r is not None
            source = shared or open_ref(pick_ref(None, r.lock, q.root), platform, root=q.root, progress=progress)
            report = audit_one(r, source, pub, environ)
            if process is not None:
                report = judge_process(report, source.change_times, process.pid, process.started, process.shown)  # type: ignore[attr-defined]
            failing = tuple(p for p in report.patches if p.state != expect)
            out.append(Audit(report, None, expect, failing, not_in_state(report, expect, strict=req.strict), r.name))
        if process is not None:
            process.check()  # still the process pinned, after every read
        return tuple(out)
    finally:
        if process is not None:
            process.close()


def audit_source_of(qroot: Path, image: str | None, root: Path | None, platform: str | None, pinned: Any,
                    progress: Any) -> Source | None:
    """What an audit reads: `root` (a directory), else `image`, else the image `pinned` names (None: none)."""
    from ..errors import os_error

    if image and root:
        raise UsageError("Give --image or --root, not both.")
    if root is not None:
        from ..rootfs.source import RootfsSource

        try:
            if not root.is_dir():
                raise UsageError(f"--root {root}: not a directory.")
        except OSError as exc:
            raise os_error(exc, f"--root {str(root)!r}") from None
        return RootfsSource(root, ref=f"rootfs:{root}")
    if not image and pinned is None:
        return None
    from .refs import open_ref, pick_ref

    return open_ref(pick_ref(image, pinned, qroot), platform, root=qroot, progress=progress)


def audit_platforms_of(req: AuditRequest) -> PlatformsAudited:
    """`audit --platform all`: each platform of the image audited on its own (verbs.platforms)."""
    from .fanout import fan_out, select
    from .platforms import audit_platforms
    from .refs import load_queue, open_ref, pick_ref, public_key

    q = load_queue(req.queue)
    ref = pick_ref(req.image, q.lock(), q.root)
    trust = public_key(req.trust_attestation) if req.trust_attestation is not None else None
    cells = fan_out(select(None, req.platform), q, ref=ref)
    shown = req.progress_of or (lambda _ref: req.progress)
    audits = audit_platforms(q, [str(c.platform) for c in cells], lambda p: open_ref(ref, p, root=q.root, progress=shown(ref)), trust)
    return PlatformsAudited(ref, tuple(audits))


def audit_fleet_of(req: AuditRequest, sel: Any) -> FleetAudited:
    """A fleet audit: every image of `sel` read concurrently, each judged by its own profile (verbs.fleet)."""
    from .fanout import fan_out
    from .fleet import audit_fleet
    from .refs import load_queue, open_ref, public_key

    trust = public_key(req.trust_attestation) if req.trust_attestation is not None else None
    if not sel.images:
        raise UsageError("No image to audit.", hint="Pass --image REF (repeatable) or --images-from FILE.")
    q = load_queue(req.queue)
    refs = [str(c.image) for c in fan_out(sel, q)]
    shown = req.progress_of or (lambda _ref: req.progress)
    entries = audit_fleet(q, refs, lambda ref: open_ref(ref, req.platform, root=q.root, progress=shown(ref)), trust=trust,
                          expect=str(req.expect))
    return FleetAudited(tuple(entries), req.platform)
