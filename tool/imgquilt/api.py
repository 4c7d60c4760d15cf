"""imgquilt's Python API: the verbs of the command line as functions, for scripts and CI.

Every function takes the queue directory as `queue` (a path; None: IMGQUILT_QUEUE, else the nearest
directory at or above the current one holding `series`, as the CLI finds it), returns frozen
dataclasses, and raises the error tree of `imgquilt.errors` (each error carries the exit code the CLI
would use: `exc.exit_code`, a `message` and a `hint`). The CLI calls these functions and only renders
what they return, so both say the same. Stable: names and fields are only added to.

    >>> from imgquilt import api
    >>> q = api.load_queue("path/to/queue")
    >>> applied = api.apply(q.root, layer="fix.tar.gz")   # image from targets.lock
    >>> applied.outputs["layer"]["digest"]

A stopped rebase is a result, not an error: `rebase()` returns a report whose `status` is
"stopped" (the CLI then exits 4); the report names the conflicted files to resolve.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from .errors import BadInput, ImgquiltError, QueueProblems, UsageError
from .verbs.init import InitResult as Initialized, init_queue

if TYPE_CHECKING:
    from .audit import AuditReport, PatchAudit
    from .engine.result import ApplyResult
    from .fs.types import Source
    from .history import History
    from .queue.lock import Lock
    from .queue.queue import Queue
    from .rebase import RebaseReport
    from .verbs.attest import Verification
    from .verbs.restore import Restored
    from .work import ImportItem, Imported

__all__ = [
    "Applied", "Audit", "CheckResult", "Initialized", "Locked", "Progress", "RebaseAborted",
    "apply", "audit", "check", "import_items", "import_patches", "init", "load_queue", "lock",
    "overlay_args", "rebase", "restore", "reverse", "rebase_abort", "rebase_continue", "rebase_in_progress", "rebase_skip", "rebase_status", "verify",
]

Progress = Callable[[int, int, str], None]
"""Called as each image layer starts to be read: (index from the top, count, digest)."""


# --- values -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    """The lint of a queue (and, with an image, the verification apply would make).

    `error` is the error the CLI exits with when `ok` is False (QueueProblems: 6, drift: 3, ...).
    """

    problems: tuple[str, ...]
    patches: tuple[str, ...]
    error: ImgquiltError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Locked:
    """The targets.lock written: where, the image it pins and how many targets."""

    path: Path
    ref: str
    digest: str
    platform: str | None
    series_sha256: str
    targets: int
    patches: int


@dataclass(frozen=True)
class Applied:
    """A verified apply and what it wrote, per output kind ("layer", "image", "root", "overlay")."""

    result: ApplyResult
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Audit:
    """The states of the queue's patches in a filesystem, the queue's git history if asked.

    `error` (NotLive, exit 5) when some patch is not in the `expect`ed state.
    """

    report: AuditReport | None
    history: History | None
    expect: str
    failing: tuple[PatchAudit, ...] = ()
    error: ImgquiltError | None = None


@dataclass(frozen=True)
class RebaseAborted:
    """An aborted rebase: the report so far (None when it stopped before changing anything) and the files restored."""

    report: RebaseReport | None
    restored: tuple[str, ...]


# --- the queue ----------------------------------------------------------------------------------
def queue_root(queue: str | os.PathLike[str] | None = None) -> Path:
    """The queue directory: `queue`, else IMGQUILT_QUEUE, else the nearest with a `series` file."""
    from .queue.locate import find_queue

    return find_queue(queue)


def load_queue(queue: str | os.PathLike[str] | None = None) -> Queue:
    """The queue, parsed: series, every listed patch, the lock (`.lock()`)."""
    from .queue.queue import load_queue as _load

    return _load(queue_root(queue))


def init(path: str | os.PathLike[str] = ".") -> Initialized:
    """Make a queue in `path`: `series`, `patches/`, and a .gitignore for `.imgquilt/`. Keeps what exists;
    a file in the way is BadInput, checked before anything is made."""
    return init_queue(Path(path))


def refuse_during_rebase(root: Path) -> None:
    """A stopped rebase owns series, patches/ and the work tree until --continue or --abort."""
    from .rebase.state import rebase_in_progress

    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is in progress in this queue.",
            hint="See the conflicts with `imgquilt rebase --status`; resolve them, then `imgquilt rebase --continue`, "
            "or give up with `imgquilt rebase --abort`.",
        )


# --- images -------------------------------------------------------------------------------------
def cache_dir(root: Path | None) -> Path | None:
    """The queue's own cache dir; the queue is untrusted, so no link may stand on the way to what it writes."""
    if root is None:
        return None
    from .util.statedir import StateDir

    for sub in ("verified", "skopeo"):
        StateDir(root, "cache", sub).exists()
    return root / ".imgquilt" / "cache"


def open_ref(ref: str, platform: str | None = None, *, root: Path | None = None, progress: Progress | None = None) -> Source:
    """Open an image reference (or rootfs:DIR) for reading targets; `root`'s cache keeps copies and verified blobs."""
    from .sources import open_source

    source = open_source(ref, platform=platform, cache_dir=cache_dir(root))
    if progress is not None and hasattr(source, "on_layer"):
        source.on_layer = progress
        sized = getattr(progress, "sized", None)  # the CLI's bars: totals from the manifest
        if sized is not None and hasattr(source, "on_layer_sized"):
            source.on_layer_sized = sized
    return source


def pick_ref(image: str | None, lock: Lock | None, root: Path, remembered: str | None = None) -> str:
    """`image`, else the image targets.lock pins (a path in it is the queue directory's), else `remembered`."""
    if image:
        return image
    if lock is not None:
        from .sources import ref_in_queue

        return ref_in_queue(lock.image.ref, root)
    if remembered:
        return remembered
    raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF.")


# --- verbs --------------------------------------------------------------------------------------
def check(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, platform: str | None = None,
          progress: Progress | None = None) -> CheckResult:
    """Lint the queue; with `image`, also verify the whole series on it (drift is exit 3, as in apply)."""
    from .queue.check import check_queue
    from .work.rehash import stale_results

    root = queue_root(queue)
    problems, patches = check_queue(root, stale_results)
    failure: ImgquiltError | None = QueueProblems(problems) if problems else None
    if image and not problems:
        from .engine.plan import plan_apply

        q = load_queue(root)
        try:
            from .store import ObjectStore
            from .verbs.restore import ImageBytes

            plan_apply(q, open_ref(image, platform, root=root, progress=progress), q.lock(),
                       image_bytes=ImageBytes(ObjectStore(root), fallback=_pinned_image(q, platform, progress)))
        except ImgquiltError as exc:  # the refusal apply would meet, with its exit code
            failure = exc
            found = getattr(exc, "problems", None)
            problems = [p.render() for p in found] if found else [exc.message]
    return CheckResult(tuple(problems), tuple(p.name for p in patches), failure)


def lock(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, platform: str | None = None,
         python_check: bool = True, progress: Progress | None = None) -> Locked:
    """Verify the series on the image (`image`, else the one targets.lock pins) and write targets.lock.

    A local path in the reference is kept relative to the queue directory (docs/targets-lock.md)."""
    from .queue.lock import render_lock
    from .sources import ref_for_lock
    from .util.atomic import atomic_write
    from .verbs.lock import lock_queue

    q = load_queue(queue)
    refuse_during_rebase(q.root)
    ref = pick_ref(image, q.lock(), q.root)
    stored = ref_for_lock(ref, q.root)
    new = lock_queue(q, open_ref(ref, platform, root=q.root, progress=progress), stored, python_check=python_check)
    atomic_write(q.lock_path, render_lock(new))
    return Locked(q.lock_path, stored, new.image.digest, new.image.platform, new.series_sha256, len(new.targets), len(q.patches))


def apply(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, layer: str | os.PathLike[str] | None = None,
          output_image: str | None = None, root: str | os.PathLike[str] | None = None, overlay: str | os.PathLike[str] | None = None,
          platform: str | None = None, locked: bool = False, python_check: bool = True, progress: Progress | None = None,
          attest: str | os.PathLike[str] | None = None, compression: str | None = None) -> Applied:
    """Verify every base, apply the series in memory, verify every result, then write the outputs asked for.

    The bases come from `image`, else from `root` (patched in place), else the image targets.lock pins.
    With no output, it only verifies. Nothing is written unless everything verifies. `attest`: a PEM
    private key (Ed25519 or ECDSA P-256) that signs an attestation of `output_image` (docs/provenance.md).
    `compression`: the new layer's in `output_image` (gzip, zstd, zstd:chunked, none; default gzip, none
    for docker-archive).
    """
    from .outputs import Outputs, apply_queue
    from .sources import open_image

    key = signing_key(attest)
    q = load_queue(queue)
    pinned = q.lock()
    root_dir = Path(root) if root is not None else None
    ref = f"rootfs:{root_dir}" if image is None and root_dir is not None else pick_ref(image, pinned, q.root)
    source = open_ref(ref, platform, root=q.root, progress=progress)
    outputs = Outputs(layer=Path(layer) if layer is not None else None, image=output_image, root=root_dir,
                      overlay=Path(overlay) if overlay is not None else None, compression=compression)  # type: ignore[arg-type]

    def open_base():
        # reuse the image the source already opened (a skopeo transport would be copied twice)
        return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir(q.root))

    from .store import ObjectStore
    from .verbs.restore import ImageBytes

    image_bytes = ImageBytes(ObjectStore(q.root), fallback=_pinned_image(q, platform, progress))  # for the diff of a hand edit
    result, written = apply_queue(q, source, pinned, outputs, open_base, locked=locked, python_check=python_check, attest=key,
                                  image_bytes=image_bytes)
    return Applied(result, written)


def restore(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], paths: Sequence[str],
            image: str | None = None, platform: str | None = None, progress: Progress | None = None) -> Restored:
    """Put files of a root back as the image has them (`image`, else the lock's pins from the object
    store, else the lock's image), journaled as an in-place apply."""
    from .verbs.restore import restore as restore_root

    q = load_queue(queue)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return restore_root(q, Path(root), paths, src, _pinned_image(q, platform, progress))


def reverse(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], image: str | None = None,
            platform: str | None = None, progress: Progress | None = None) -> Restored:
    """`apply --reverse --root ROOT`: take off what imgquilt applied to the root (its record says what),
    leaving it as the image has it; journaled as an in-place apply."""
    from .verbs.restore import reverse as reverse_root

    q = load_queue(queue)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return reverse_root(q, Path(root), src, _pinned_image(q, platform, progress))


def _pinned_image(q: Queue, platform: str | None, progress: Progress | None) -> Callable[[], Source] | None:
    """Opens the image targets.lock pins (None: no lock, or the lock pins a rootfs)."""
    lock = q.lock()
    if lock is None or lock.image.kind == "rootfs":
        return None
    return lambda: open_ref(pick_ref(None, lock, q.root), platform or lock.image.platform, root=q.root, progress=progress)


def signing_key(path: str | os.PathLike[str] | None):
    """What signs with the private key `path` names (None: none), the key checked before anything is read."""
    if path is None:
        return None
    from .util.dsse import load_private_key
    from .verbs.attest import Attester

    return Attester(load_private_key(Path(path)))


def public_key(path: str | os.PathLike[str]):
    from .util.dsse import load_public_key

    return load_public_key(Path(path))


def verify(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, key: str | os.PathLike[str],
           platform: str | None = None) -> tuple[Verification, ...]:
    """Find the attestations of the image (`image`, else the lock's) and check each with the public `key`:
    the signature, the subject digest, and that the attested record matches the queue. One Verification
    per platform (`platform="all"`: every platform of the index). The CLI exits 3 (NotAttested,
    `v.failure()`) when one has no `verified` candidate."""
    from .sources import open_image, platforms_of
    from .verbs.attest import verify_image

    pub = public_key(key)
    q = load_queue(queue)
    pinned = q.lock()
    ref = pick_ref(image, pinned, q.root)
    platforms = platforms_of(ref, cache_dir=cache_dir(q.root)) if platform == "all" else [platform]
    return tuple(verify_image(q, open_image(ref, platform=p, cache_dir=cache_dir(q.root)), ref, pub) for p in platforms)


def audit(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, root: str | os.PathLike[str] | None = None,
          platform: str | None = None, history: bool = False, expect: Literal["live", "pending"] = "live",
          progress: Progress | None = None, trust_attestation: str | os.PathLike[str] | None = None,
          pid: int | None = None) -> Audit:
    """The state of each patch and file in an image (`image`, else the lock's) or a root filesystem (`root`,
    e.g. /proc/PID/root of a running container); with `history`, when each patch entered and left the series.
    `trust_attestation`: a public key; an attestation it verifies that matches the queue answers
    without reading a layer (`report.trust` says where the states came from).
    `pid`: audit the root of that running process, and count a file changed after it started as
    restart-pending (the process still runs what it loaded)."""
    from .audit import audit_source, judge_process, not_in_state

    if expect not in ("live", "pending"):
        raise UsageError(f"expect must be live or pending, not {expect!r}.")
    if pid is not None and (image or root is not None):
        raise UsageError("--pid audits the root of a running process: give it no --image or --root.")
    if trust_attestation is not None and (root is not None or pid is not None):
        raise UsageError(f"--trust-attestation reads an image's attestations; a {'--root' if root is not None else '--pid'} has none.",
                         hint="Audit the image the root came from with --image REF --trust-attestation KEY.")
    pub = public_key(trust_attestation) if trust_attestation is not None else None
    q = load_queue(queue)
    pinned = q.lock()
    started = None
    if pid is not None:
        from .rootfs.process import process_root, process_started

        root = process_root(pid)
        started = process_started(pid)
    source = _audit_source(q.root, image, Path(root) if root is not None else None, platform, pinned, progress)
    if source is None and not history:
        raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF or --root DIR.")
    hist = None
    if history:
        from .history import queue_history

        hist = queue_history(q.root, q.names)
    if source is not None and pub is not None:
        from .verbs.attest import audit_trusting

        report = audit_trusting(q, source, pub)
    else:
        report = audit_source(q, source) if source is not None else None
    if report is not None and pid is not None and started is not None:
        report = judge_process(report, source.change_times, pid, started, str(root))  # type: ignore[union-attr]
    failing = tuple(p for p in report.patches if p.state != expect) if report is not None else ()
    error = not_in_state(report, expect) if report is not None else None
    return Audit(report, hist, expect, failing, error)


def _audit_source(qroot: Path, image: str | None, root: Path | None, platform: str | None, pinned: Lock | None,
                  progress: Progress | None) -> Source | None:
    if image and root:
        raise UsageError("Give --image or --root, not both.")
    if root is not None:
        from .rootfs.source import RootfsSource

        if not root.is_dir():
            raise UsageError(f"--root {root}: not a directory.")
        return RootfsSource(root, ref=f"rootfs:{root}")
    if not image and pinned is None:
        return None
    return open_ref(pick_ref(image, pinned, qroot), platform, root=qroot, progress=progress)


def _opener(root: Path, progress: Progress | None):
    """Opens the references a rebase keeps (relative to the queue directory, as targets.lock does)."""
    from .sources import ref_in_queue

    return lambda ref, platform: open_ref(ref_in_queue(ref, root, "the rebase reads the image"), platform, root=root,
                                          progress=progress)


def rebase(queue: str | os.PathLike[str] | None = None, *, image: str, from_ref: str | None = None, maps: Sequence[str] = (),
           keep_empty: bool = False, platform: str | None = None, progress: Progress | None = None) -> RebaseReport:
    """Carry the queue onto `image` with 3-way merges. status "done", or "stopped" on a conflict.

    `maps`: "OLD=NEW" target paths or directory prefixes that moved. Needs git on PATH (GitMissing, exit 6).
    """
    from .rebase import RebaseOptions, parse_map, rebase_in_progress, start_rebase

    root = queue_root(queue)
    if not image:
        if rebase_in_progress(root):
            raise UsageError("A rebase is in progress.", hint="Resolve the conflicts (`imgquilt rebase --status` lists them), "
                             "then `imgquilt rebase --continue`; or `imgquilt rebase --abort`.")
        raise UsageError("Which image? Pass --image NEWREF.", hint="Example: imgquilt rebase --image oci:vllm:0.10.2")
    from .sources import ref_for_lock

    opts = RebaseOptions(ref_for_lock(image, root), platform, ref_for_lock(from_ref, root) if from_ref else None, keep_empty,
                         tuple(parse_map(m) for m in maps))
    return start_rebase(root, opts, _opener(root, progress))


def rebase_continue(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None) -> RebaseReport:
    """Take the resolved files of the stopped patch from .imgquilt/work/ and go on."""
    from .rebase import continue_rebase

    root = queue_root(queue)
    return continue_rebase(root, _opener(root, progress))


def rebase_skip(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None) -> RebaseReport:
    """Drop the conflicted patch from the rebased series and go on."""
    from .rebase import skip_rebase

    root = queue_root(queue)
    return skip_rebase(root, _opener(root, progress))


def rebase_abort(queue: str | os.PathLike[str] | None = None) -> RebaseAborted:
    """Restore series, patches/ and targets.lock as they were before the rebase."""
    from .rebase import abort_rebase

    report, restored = abort_rebase(queue_root(queue))
    return RebaseAborted(report, tuple(restored))


def rebase_in_progress(queue: str | os.PathLike[str] | None = None) -> bool:
    """Is a rebase stopped (or interrupted) in this queue?"""
    from .rebase.state import rebase_in_progress as in_progress

    return in_progress(queue_root(queue))


def overlay_args(overlay: str | os.PathLike[str], format: str = "podman") -> list[str] | dict[str, list[dict]]:
    """An overlay's mounts.tsv as `podman` (-v HOST:CTR:ro) or `docker` (--mount ...) arguments, or as
    a Kubernetes pod's `volumes` and container's `volumeMounts` (`k8s`). Reads no queue."""
    from .image.sinks.overlay import MOUNT_FORMATS, k8s_volumes, mount_args, read_mounts

    if format not in MOUNT_FORMATS:
        raise UsageError(f"Unknown format {format!r}: use one of {', '.join(MOUNT_FORMATS)}.")
    mounts = read_mounts(Path(overlay))
    return k8s_volumes(mounts) if format == "k8s" else mount_args(mounts, format)


def rebase_status(queue: str | os.PathLike[str] | None = None) -> RebaseReport:
    """Where a stopped (or interrupted) rebase stands: each patch so far, the conflicted files."""
    from .rebase.state import load_state

    st = load_state(queue_root(queue))
    return st.report("stopped" if st.phase == "conflict" else st.phase)


def import_items(files: Sequence[str | os.PathLike[str]], *, name: str | None = None, strip: int = 1,
                 series: str | os.PathLike[str] | None = None) -> list[ImportItem]:
    """What to import: each file (a multi-mail `git format-patch --stdout` file gives one patch per mail),
    or every patch a quilt `series` file lists, with its -pN."""
    from .importer import mail_subject_name, split_mbox
    from .queue.series import parse_series
    from .work import ImportItem

    if strip < 0:
        raise UsageError("-p wants a number >= 0.")
    items: list[ImportItem] = []
    if series is not None:
        if files or name:
            raise UsageError("--series imports the patches that series lists; give no FILE and no -P with it.")
        sfile = Path(series)
        if sfile.is_dir():
            sfile = sfile / "series"
        for e in parse_series(_read(sfile), source=str(sfile)):
            f = sfile.parent / e.name
            items.append(ImportItem(e.name, _read(f), e.strip, str(f)))
        if not items:
            raise UsageError(f"{sfile} lists no patch.")
        return items
    if not files:
        raise UsageError("Name a patch FILE to import, or --series DIR/series.")
    if name and len(files) > 1:
        raise UsageError("-P NAME names one imported patch; give one FILE with it.")
    for f in map(str, files):
        data = _read(Path(f))
        mails = split_mbox(data)
        if len(mails) > 1:
            if name:
                raise UsageError(f"{f} holds {len(mails)} mails (git format-patch --stdout); -P cannot name them all.")
            items += [ImportItem(mail_subject_name(m, k), m, strip, f"{f} (mail {k})") for k, m in enumerate(mails, 1)]
            continue
        items.append(ImportItem(name or Path(f).name, data, strip, f))
    return items


def _read(path: Path) -> bytes:
    """A file to import (or a quilt series): read as every queue file is, only if it is a regular file
    of at most 64 MiB (a FIFO never blocks, /dev/zero is refused)."""
    from .util.regular import read_regular_file

    if path.is_dir():
        raise BadInput(f"{path} is a directory.", hint="For a quilt patches directory, pass --series DIR/series.")
    data = read_regular_file(path)
    if data is None:
        raise BadInput(f"{path} does not exist.")
    return data


def import_patches(files: Sequence[str | os.PathLike[str]] = (), *, queue: str | os.PathLike[str] | None = None,
                   name: str | None = None, strip: int = 1, series: str | os.PathLike[str] | None = None,
                   fields: Sequence[tuple[str, str | None]] = (), replace: bool = False, check_git_index: bool = True,
                   image: str | None = None, platform: str | None = None) -> tuple[Imported, ...]:
    """Import patches (diff -u, git diff, format-patch mails, a quilt series) after the top patch, in the
    imgquilt format with real hashes. All or nothing. Bases: the work tree, else `image`, else the lock's."""
    from .queue.lock import read_lock
    from .work import WorkTree

    items = import_items(files, name=name, strip=strip, series=series)
    root = queue_root(queue)
    refuse_during_rebase(root)

    def opener():
        pinned = read_lock(root / "targets.lock")
        return open_ref(pick_ref(image, pinned, root, wt.remembered_image()), platform, root=root)

    wt = WorkTree(root, open_image=opener, image_explicit=image is not None)
    return tuple(wt.import_patches(items, fields=list(fields), replace=replace, check_git_index=check_git_index))
