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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, Sequence

from .errors import BadInput, BaseDrift, ImgquiltError, QueueProblems, UsageError, os_error
from .verbs.init import InitResult as Initialized, init_queue

if TYPE_CHECKING:
    from .verbs.lock import Locked
    from .verbs.audit import AuditReport, PatchAudit
    from .engine.result import ApplyResult
    from .fs.types import Source
    from .verbs.history import History
    from .queue.lock import Lock, Profile
    from .queue.queue import Queue
    from .rebase import RebaseReport
    from .verbs.attest import Verification
    from .verbs.restore import Restored
    from .work import ImportItem, Imported

__all__ = [
    "Applied", "Audit", "CheckResult", "Initialized", "Locked", "Progress", "RebaseAborted",
    "apply", "apply_profiles", "audit", "audit_profiles", "boot", "check", "diff_upstream", "import_items", "import_patches", "init",
    "load_queue", "lock", "lock_profiles", "overlay_args", "profiles", "rebase", "rebase_abort", "rebase_continue",
    "port", "port_abort", "port_continue", "rebase_forget", "rebase_in_progress", "rebase_skip", "rebase_status", "restore", "reverse", "verify",
]

Progress = Callable[[int, int, str], None]
"""Called as each image layer starts to be read: (index from the top, count, digest)."""

# the values of the verbs that live in verbs/, named here as before; imported when first asked for
# (the verbs' modules read the engine and images: `import imgquilt.api` stays light)
_MOVED = {"Locked": "verbs.lock"}


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{where}", __package__), name)


# --- values -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    """The lint of a queue (and, with an image, the verification apply would make).

    `error` is the error the CLI exits with when `ok` is False (QueueProblems: 6, drift: 3, ...).
    """

    problems: tuple[str, ...]
    patches: tuple[str, ...]
    error: ImgquiltError | None = None
    profiles: tuple[str, ...] = ()  # the profiles verified on their images (--profile)
    unchecked: tuple[str, ...] = ()  # patches written with --no-python-check (`Python-Check: skipped`)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Applied:
    """A verified apply and what it wrote, per output kind ("layer", "image", "root", "overlay")."""

    result: ApplyResult
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: str | None = None  # the profile applied (None: the default)
    boot: Any = None  # with boot=True: the verbs.boot.BootReport that let the outputs be written


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
    profile: str | None = None  # the profile judged (None: the default)

    @property
    def matches(self) -> bool:
        """Is the filesystem this profile, in the expected state: every patch in it, every environment
        default set (live), and an apply record, if any, that agrees?"""
        from .verbs.audit import matches

        return self.report is not None and matches(self.report, self.expect)


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


def profiles(queue: str | os.PathLike[str] | None = None) -> tuple[Profile, ...]:
    """The profiles targets.lock declares, by name: each with its `select`ed guards, its `env`
    defaults and its pin (`lock`: image, targets, series_sha256 over its selection)."""
    from .verbs.profiles import lock_file

    return lock_file(queue_root(queue)).profiles


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
        downloads = getattr(progress, "download", None)  # the CLI's bars: registry downloads too
        if downloads is not None and hasattr(source, "watch_downloads"):
            source.watch_downloads(downloads)
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
          progress: Progress | None = None, profile: str | None = None, allow_unselected: bool = False,
          strict: bool = False) -> CheckResult:
    """Lint the queue (every profile's chain too); with `image`, also verify the whole series on it
    (drift is exit 3, as in apply). `profile`: NAME or "all": also verify that selection on its own
    pinned image (`image` instead, for one profile). A profile whose patches do not chain is
    ProfileChainBroken (exit 3), a patch no pin selects UnselectedPatches (3, unless
    `allow_unselected`), other problems QueueProblems (6). `unchecked` names the patches
    written with --no-python-check; `strict`: each of them is a problem too (QueueProblems)."""
    from .errors import UnselectedPatches
    from .queue.check import lint_queue
    from .work.rehash import stale_results

    root = queue_root(queue)
    lint = lint_queue(root, stale_results)
    unselected = [] if allow_unselected else list(lint.unselected)
    problems = [*lint.problems, *lint.selections, *unselected]
    unchecked = tuple(p.name for p in lint.patches if p.header.python_unchecked)
    if strict:
        problems += [f"{n}: never Python-checked (`Python-Check: skipped`: refreshed or rebased with --no-python-check)"
                     for n in unchecked]
    failure: ImgquiltError | None = None
    if unselected and not lint.selections:
        failure = UnselectedPatches(
            f"The queue has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="A guard no profile selects is usually a typo (`imgquilt guard PATCH +NAME` to correct it); declare a "
                 "profile that selects it (`imgquilt lock --profile NAME --image REF --select GUARD`), or accept it with "
                 "`imgquilt check --allow-unselected`.",
            problems=problems)
    elif lint.selections:
        from .errors import ProfileChainBroken

        failure = ProfileChainBroken(
            f"The queue has {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems),
            hint="A profile's patch depends on a patch that profile does not select: select that patch in the profile "
                 "too (`imgquilt guard PATCH ...`), or give the profile its own patch built on its own chain.",
            problems=problems)
    elif problems:
        failure = QueueProblems(problems)
        if strict and unchecked:
            failure.hint = ("--strict refuses a patch written with --no-python-check: push it and `imgquilt refresh` "
                            "(the checks run, and the field goes), or, once it is checked by other means, "
                            "`imgquilt header NAME --unset Python-Check`.")
    names = [p.name for p in lint.patches]
    if (image or profile) and not problems:
        from .engine.plan import plan_apply
        from .pycheck import Checks
        from .verbs.profiles import resolve_many

        python = Checks()  # the check as apply would run it, without the screen and the cache (as before)
        q = load_queue(root)
        chosen = resolve_many(q, profile)
        if image and len(chosen) > 1:
            raise UsageError("--profile all verifies each profile on the image it pins; give no --image with it.")
        failed: list[tuple[str | None, ImgquiltError]] = []
        for r in chosen:
            try:
                plan_apply(r.queue, open_ref(pick_ref(image, r.lock, root), platform, root=root, progress=progress), r.lock,
                           python=python, image_bytes=_image_bytes(root, r.lock, platform, progress))
            except ImgquiltError as exc:  # the refusal apply would meet, with its exit code
                failed.append((r.name, exc))
        for name, exc in failed:
            found = getattr(exc, "problems", None)
            lines = [p.render() for p in found] if found else [exc.message]
            problems += [f"profile {name}: {x}" if name else x for x in lines]
        if failed:
            failure = failed[0][1]
            if profile is not None:
                failure.message = "\n".join(f"Profile {n}: {e.message}" for n, e in failed)
        return CheckResult(tuple(problems), tuple(names), failure, tuple(r.name for r in chosen if r.name), unchecked)
    return CheckResult(tuple(problems), tuple(names), failure, unchecked=unchecked)


def lock(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, platform: str | None = None,
         python_check: bool = True, progress: Progress | None = None, profile: str | None = None,
         select: Sequence[str] | None = None, env: Sequence[str] = (), unset_env: Sequence[str] = (),
         new: bool = False) -> Locked:
    """Verify the series on the image (`image`, else the one targets.lock pins) and write targets.lock.

    `profile`: declare or re-pin that profile instead of the default pin: the patches its guards
    `select` (default: what it selected, a new one its own name) verified on `image` (default: its
    pinned image), with `env` (KEY=VALUE) set and `unset_env` keys removed from its defaults. Every
    other section of targets.lock is kept. A local path in the reference is kept relative to the
    queue directory (docs/targets-lock.md). A new profile within two edits of a declared one is
    refused (a typo would declare a second deployment) unless `new`."""
    from .verbs.lock import LockRequest, lock as run

    return run(LockRequest(queue, image, platform, python_check, progress, profile, select, env, unset_env, new))


def lock_profiles(queue: str | os.PathLike[str] | None = None, *, platform: str | None = None, python_check: bool = True,
                  progress: Progress | None = None) -> tuple[Locked, ...]:
    """`lock --profile all`: re-pin every profile on the image it is pinned to; targets.lock is written
    once, when every profile verified (nothing is written otherwise)."""
    from .verbs.lock import LockRequest, lock_profiles as run

    return run(LockRequest(queue, platform=platform, python_check=python_check, progress=progress, profile="all"))


def apply(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, layer: str | os.PathLike[str] | None = None,
          output_image: str | None = None, root: str | os.PathLike[str] | None = None, overlay: str | os.PathLike[str] | None = None,
          platform: str | None = None, locked: bool = False, python_check: bool = True, progress: Progress | None = None,
          attest: str | os.PathLike[str] | None = None, compression: str | None = None, profile: str | None = None,
          compression_level: int | None = None, boot_check: bool = False, boot_timeout: float = 120.0) -> Applied:
    """Verify every base, apply the series in memory, verify every result, then write the outputs asked for.

    The bases come from `image`, else from `root` (patched in place), else the image targets.lock pins.
    With no output, it only verifies. Nothing is written unless everything verifies. `attest`: a PEM
    private key (Ed25519 or ECDSA P-256) that signs an attestation of `output_image` (docs/provenance.md).
    `compression`: the new layer's in `output_image` (gzip, zstd, zstd:chunked, none; default gzip, none
    for docker-archive). `profile`: apply the patches that profile selects, on its pinned image (unless
    `image` or `root`), its environment defaults set in `output_image`'s config (docs/profiles.md);
    every profile at once: apply_profiles(). `compression_level`: the new layer's level, in `layer` and
    `output_image` (gzip 1-9, default 1; zstd 1-19, default 3; docs/performance.md). `boot_check`: first
    import the patched modules with the image's own Python in a sandbox (boot(), docs/boot.md); when a
    patch fails to boot, BootFailed (exit 3) and nothing is written.
    """
    from .verbs.apply import Outputs, apply_queue
    from .sources import open_image
    from .verbs.profiles import fill, lock_file, need_profile, other_pins, resolve

    key = signing_key(attest)
    q = load_queue(queue)
    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf)
    need_profile(chosen, lf)  # stricter than need_pin: also with --image or --root
    pinned = chosen.lock
    # `--profile NAME` fills {profile} in an output path as --profile all does
    layer, output_image, overlay = fill(layer, chosen.name), fill(output_image, chosen.name), fill(overlay, chosen.name)
    root_dir = Path(root) if root is not None else None
    ref = f"rootfs:{root_dir}" if image is None and root_dir is not None else pick_ref(image, pinned, q.root)
    source = open_ref(ref, platform, root=q.root, progress=progress)
    outputs = Outputs(layer=Path(layer) if layer is not None else None, image=output_image, root=root_dir,
                      overlay=Path(overlay) if overlay is not None else None, compression=compression,  # type: ignore[arg-type]
                      compression_level=compression_level)
    theirs = other_pins(chosen, lf, source.info().digest)

    def open_base():
        # reuse the image the source already opened (a skopeo transport would be copied twice)
        return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir(q.root))

    booted = None
    if boot_check:  # before any output: a patch that fails to boot writes nothing
        from .verbs.apply import check_destinations

        check_destinations(outputs, source.info(), key)
        booted = boot(q.root, image=ref, platform=platform, profile=profile, timeout=boot_timeout, progress=progress)
        failure = booted.failure()
        if failure is not None:
            failure.message += " Nothing was written (apply --boot)."
            raise failure
        if key is not None:  # the attestation carries the boot result as an in-toto test-result predicate
            from dataclasses import replace as _with

            key = _with(key, boot=booted)
    with _naming(chosen.name), _other_pin(chosen, theirs):
        result, written = apply_queue(chosen.queue, source, pinned, outputs, open_base, locked=locked, python_check=python_check,
                                      attest=key, env=chosen.env, image_bytes=_image_bytes(q.root, pinned, platform, progress),
                                      boot=booted.record() if booted is not None else None)
    return Applied(result, written, chosen.name, booted)


@contextmanager
def _other_pin(chosen, theirs: Sequence[str]) -> Iterator[None]:
    """Drift onto an image another pin names is not an image that changed under the queue: say whose
    image it is (a rebase would re-pin this deployment onto another's)."""
    try:
        yield
    except ImgquiltError as exc:
        drifted = any(getattr(p, "kind", None) in ("drift", "missing", "type") for p in getattr(exc, "problems", None) or ())
        if theirs and (drifted or isinstance(exc, BaseDrift)):
            who = " and ".join(f"profile {n}" if n else "the default pin" for n in theirs)
            way = " or ".join(f"`imgquilt apply --profile {n}`" if n else "`imgquilt apply` (no --profile)" for n in theirs)
            exc.message += f" This is the image {who} pins, not {chosen.label}'s."
            exc.hint = (f"Apply that deployment's own selection to it ({way}), or apply {chosen.label} to its own "
                        "image (drop --image); `imgquilt rebase` would re-pin this deployment onto another's image.")
        raise


@contextmanager
def _naming(profile: str | None) -> Iterator[None]:
    """A refusal while working on a profile names it, and the command that re-pins it."""
    try:
        yield
    except ImgquiltError as exc:
        if profile is not None:
            exc.message = f"Profile {profile}: {exc.message}"
            if exc.hint:
                exc.hint = exc.hint.replace("`imgquilt lock`", f"`imgquilt lock --profile {profile}`")
        raise


def apply_profiles(queue: str | os.PathLike[str] | None = None, *, profile: str = "all", layer: str | None = None,
                   output_image: str | None = None, overlay: str | None = None, platform: str | None = None,
                   locked: bool = False, python_check: bool = True, progress: Progress | None = None,
                   attest: str | os.PathLike[str] | None = None, compression: str | None = None,
                   compression_level: int | None = None) -> tuple[Applied, ...]:
    """`apply --profile all`: each profile applied on the image it pins. Every output path must hold
    `{profile}` (replaced by each profile's name) when there is more than one profile: UsageError
    before anything is read. Every profile is verified (destinations checked) before any output is
    written; then each profile's outputs are written in turn."""
    from .engine.plan import plan_apply
    from .pycheck import checks
    from .verbs.apply import Outputs, apply_queue, check_destinations
    from .sources import open_image
    from .verbs.profiles import check_placeholders, fill, resolve_many

    q = load_queue(queue)
    chosen = resolve_many(q, profile)
    check_placeholders(len(chosen), output_image=output_image, layer=layer, overlay=overlay)
    key = signing_key(attest)
    planned = []
    python = checks(python_check)
    for r in chosen:
        ref = pick_ref(None, r.lock, q.root)
        source = open_ref(ref, platform, root=q.root, progress=progress)
        layer_i, overlay_i = fill(layer, r.name), fill(overlay, r.name)
        outputs = Outputs(layer=Path(layer_i) if layer_i is not None else None, image=fill(output_image, r.name),
                          overlay=Path(overlay_i) if overlay_i is not None else None, compression=compression,  # type: ignore[arg-type]
                          compression_level=compression_level)
        try:
            with _naming(r.name):
                check_destinations(outputs, source.info(), key)
                plan_apply(r.queue, source, r.lock, locked=locked, python=python, env=r.env)
        except ImgquiltError as exc:
            exc.hint = "\n".join(x for x in (exc.hint, "Nothing was written for any profile.") if x)
            raise
        planned.append((r, ref, source, outputs))
    done = []
    for r, ref, source, outputs in planned:
        def open_base(source=source, ref=ref):
            return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir(q.root))

        result, written = apply_queue(r.queue, source, r.lock, outputs, open_base, locked=locked, python_check=python_check,
                                      attest=key, env=r.env)
        done.append(Applied(result, written, r.name))
    return tuple(done)


def restore(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], paths: Sequence[str],
            image: str | None = None, platform: str | None = None, progress: Progress | None = None) -> Restored:
    """Put files of a root back as the image has them (`image`, else the lock's pins from the object
    store, else the lock's image), journaled as an in-place apply."""
    from .verbs.restore import restore as restore_root

    q = load_queue(queue)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return restore_root(q, Path(root), paths, src, _pinned_image(q, platform, progress))


def reverse(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], image: str | None = None,
            platform: str | None = None, progress: Progress | None = None, profile: str | None = None) -> Restored:
    """`apply --reverse --root ROOT`: take off what imgquilt applied to the root (its record says what),
    leaving it as the image has it; journaled as an in-place apply. `profile`: the apply line repeated
    with --reverse (`apply --profile NAME --root ROOT --reverse`): the bytes come from that profile's
    pin, and a root another pin's apply wrote is refused (exit 2, naming it) before any write."""
    from .verbs.restore import reverse as reverse_root

    q = load_queue(queue)
    if profile is not None:
        from .verbs.profiles import ALL, lock_file, resolve

        if profile == ALL:
            raise UsageError("A root holds one deployment: `apply --reverse` takes one --profile NAME, not all.",
                             hint="Give the --profile the root was applied with (its apply record names it; "
                                  "`imgquilt audit --root ROOT` says which).")
        chosen = resolve(q, profile, lock_file(q.root))
        src = open_ref(image, platform, root=q.root, progress=progress) if image else None
        return reverse_root(q, Path(root), src, _pin_opener(q.root, chosen.lock, platform, progress), profile=profile)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return reverse_root(q, Path(root), src, _pinned_image(q, platform, progress))


def _pinned_image(q: Queue, platform: str | None, progress: Progress | None) -> Callable[[], Source] | None:
    """Opens the image targets.lock pins (None: no lock, or the lock pins a rootfs)."""
    return _pin_opener(q.root, q.lock(), platform, progress)


def _pin_opener(root: Path, lock: Lock | None, platform: str | None, progress: Progress | None) -> Callable[[], Source] | None:
    """Opens the image `lock` pins (None: no lock, or it pins a rootfs, whose files may have changed since)."""
    if lock is None or lock.image.kind == "rootfs":
        return None
    return lambda: open_ref(pick_ref(None, lock, root), platform or lock.image.platform, root=root, progress=progress)


def _image_bytes(root: Path, lock: Lock | None, platform: str | None, progress: Progress | None):  # noqa: ANN202
    """The image's bytes of a path by sha256, to show a hand edit of a root as a diff: the object store,
    else the image `lock` pins (read only on a refusal)."""
    from .store import ObjectStore
    from .verbs.restore import ImageBytes

    return ImageBytes(ObjectStore(root), fallback=_pin_opener(root, lock, platform, progress))


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
           platform: str | None = None, profile: str | None = None) -> tuple[Verification, ...]:
    """Find the attestations of the image (`image`, else the lock's) and check each with the public `key`:
    the signature, the subject digest, and that the attested record matches the queue. One Verification
    per platform (`platform="all"`: every platform of the index). The CLI exits 3 (NotAttested,
    `v.failure()`) when one has no `verified` candidate. `profile`: the record must match the patches
    that profile selects (and carry its environment defaults); the image defaults to its pin."""
    from .sources import open_image, platforms_of
    from .verbs.attest import verify_image
    from .verbs.profiles import lock_file, need_pin, resolve

    pub = public_key(key)
    q = load_queue(queue)
    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf)
    need_pin(chosen, lf, image)
    ref = pick_ref(image, chosen.lock, q.root)
    platforms = platforms_of(ref, cache_dir=cache_dir(q.root)) if platform == "all" else [platform]
    return tuple(verify_image(chosen.queue, open_image(ref, platform=p, cache_dir=cache_dir(q.root)), ref, pub, env=chosen.env)
                 for p in platforms)


def audit(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, root: str | os.PathLike[str] | None = None,
          platform: str | None = None, history: bool = False, expect: Literal["live", "pending"] = "live",
          progress: Progress | None = None, trust_attestation: str | os.PathLike[str] | None = None,
          pid: int | None = None, profile: str | None = None, strict: bool = False) -> Audit:
    """The state of each patch and file in an image (`image`, else the lock's) or a root filesystem (`root`,
    e.g. /proc/PID/root of a running container); with `history`, when each patch entered and left the series.
    `trust_attestation`: a public key; an attestation it verifies that matches the queue answers
    without reading a layer (`report.trust` says where the states came from).
    `pid`: audit the root of that running process (pinned: a PID reused meanwhile is refused), and count
    a file changed after it started as restart-pending (the process still runs what it loaded).
    `profile`: judge the patches that profile selects (and its environment defaults, in an image's
    config); without it, a queue with profiles judges the profile the filesystem is: the one whose
    selection its apply record names, else the one pinned to its digest (audit_profiles() judges every one).
    `strict`: `error` also when imgquilt cannot tell which code CPython runs for a live file."""
    if expect not in ("live", "pending"):
        raise UsageError(f"expect must be live or pending, not {expect!r}.")
    if pid is not None and (image or root is not None):
        raise UsageError("--pid audits the root of a running process: give it no --image or --root.")
    if trust_attestation is not None and (root is not None or pid is not None):
        raise UsageError(f"--trust-attestation reads an image's attestations; a {'--root' if root is not None else '--pid'} has none.",
                         hint="Audit the image the root came from with --image REF --trust-attestation KEY.")
    from .verbs.profiles import ALL

    if profile == ALL:
        raise UsageError("`audit --profile all` judges every profile: use audit_profiles().")
    pub = public_key(trust_attestation) if trust_attestation is not None else None
    q = load_queue(queue)
    process = None
    if pid is not None:
        from .rootfs.process import pin_process

        process = pin_process(pid)  # every read below goes through its root fd, never /proc/PID/root again
        root = process.root
    try:
        return _audit(q, image, root, platform, progress, history, pub, process, expect, strict, profile)
    finally:
        if process is not None:
            process.close()


def _audit(q: Queue, image: str | None, root, platform: str | None, progress: Progress | None, history: bool, pub,
           process, expect: str, strict: bool, profile: str | None) -> Audit:
    from .verbs.audit import judge_process, not_in_state
    from .verbs.profiles import identify, lock_file, resolve

    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf) if profile is not None or not lf.profiles else None
    pinned = chosen.lock if chosen is not None else (lf.default or lf.profiles[0].lock)
    if process is not None:
        from .rootfs.source import RootfsSource

        source: Source | None = RootfsSource(process.root, ref=f"rootfs:{process.shown}")
    else:
        source = _audit_source(q.root, image, Path(root) if root is not None else None, platform, pinned, progress)
    if source is None and not history:
        raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF or --root DIR.")
    if chosen is None:
        chosen = identify(q, lf, source) if source is not None else resolve(q, None, lf)
    hist = None
    if history:
        from .verbs.history import queue_history

        hist = queue_history(q.root, q.names)
    environ = process.environ() if process is not None and chosen.env else None
    report = _audit_one(chosen, source, pub, environ) if source is not None else None
    if report is not None:
        from .verbs.profiles import with_record_owner

        report = with_record_owner(report, q, lf, chosen)
    if report is not None and process is not None:
        report = judge_process(report, source.change_times, process.pid, process.started, process.shown)  # type: ignore[union-attr]
        process.check()  # still the process pinned, after every read: else nothing is said about it
    failing = tuple(p for p in report.patches if p.state != expect) if report is not None else ()
    error = not_in_state(report, expect, strict=strict) if report is not None else None
    return Audit(report, hist, expect, failing, error, chosen.name)


def _audit_one(chosen, source: Source, pub, environ: dict[str, str] | None = None) -> AuditReport:
    """One selection audited in `source`: its patches, and with a profile its environment defaults
    (in the image config, or in `environ`: a running process's)."""
    from .verbs.profiles import audit_as

    return audit_as(chosen, source, pub, environ)


def audit_profiles(queue: str | os.PathLike[str] | None = None, *, image: str | None = None,
                   root: str | os.PathLike[str] | None = None, platform: str | None = None,
                   expect: Literal["live", "pending"] = "live", progress: Progress | None = None,
                   trust_attestation: str | os.PathLike[str] | None = None, strict: bool = False,
                   pid: int | None = None) -> tuple[Audit, ...]:
    """`audit --profile all`: every profile judged in `image` (or `root`, or the root of process `pid`,
    pinned as audit() pins it, its environment checked against each profile's defaults); without
    any, each in the image it pins. `Audit.matches` says which profiles the filesystem is (a fleet
    audit's answer to "which deployment is this container?"). `strict` as audit()'s."""
    from .verbs.audit import judge_process, not_in_state
    from .verbs.profiles import lock_file, resolve_many

    if expect not in ("live", "pending"):
        raise UsageError(f"expect must be live or pending, not {expect!r}.")
    if pid is not None and (image or root is not None):
        raise UsageError("--pid audits the root of a running process: give it no --image or --root.")
    if trust_attestation is not None and (root is not None or pid is not None):
        raise UsageError(f"--trust-attestation reads an image's attestations; a {'--root' if root is not None else '--pid'} has none.")
    pub = public_key(trust_attestation) if trust_attestation is not None else None
    q = load_queue(queue)
    lf = lock_file(q.root)
    chosen = resolve_many(q, "all", lf)
    process = None
    if pid is not None:
        from .rootfs.process import pin_process

        process = pin_process(pid)
    try:
        shared = None
        environ = None
        if process is not None:
            from .rootfs.source import RootfsSource

            shared = RootfsSource(process.root, ref=f"rootfs:{process.shown}")
            environ = process.environ()
        elif image or root is not None:
            shared = _audit_source(q.root, image, Path(root) if root is not None else None, platform, None, progress)
        out = []
        for r in chosen:
            source = shared or open_ref(pick_ref(None, r.lock, q.root), platform, root=q.root, progress=progress)
            report = _audit_one(r, source, pub, environ)  # type: ignore[arg-type]
            if process is not None:
                report = judge_process(report, source.change_times, process.pid, process.started, process.shown)  # type: ignore[attr-defined]
            failing = tuple(p for p in report.patches if p.state != expect)
            out.append(Audit(report, None, expect, failing, not_in_state(report, expect, strict=strict), r.name))
        if process is not None:
            process.check()  # still the process pinned, after every read
        return tuple(out)
    finally:
        if process is not None:
            process.close()


def _audit_source(qroot: Path, image: str | None, root: Path | None, platform: str | None, pinned: Lock | None,
                  progress: Progress | None) -> Source | None:
    if image and root:
        raise UsageError("Give --image or --root, not both.")
    if root is not None:
        from .rootfs.source import RootfsSource

        try:
            if not root.is_dir():
                raise UsageError(f"--root {root}: not a directory.")
        except OSError as exc:
            raise os_error(exc, f"--root {str(root)!r}") from None
        return RootfsSource(root, ref=f"rootfs:{root}")
    if not image and pinned is None:
        return None
    return open_ref(pick_ref(image, pinned, qroot), platform, root=qroot, progress=progress)


def _opener(root: Path, progress: Progress | None):
    """Opens the references a rebase keeps (relative to the queue directory, as targets.lock does)."""
    from .sources import ref_in_queue

    return lambda ref, platform: open_ref(ref_in_queue(ref, root, "the rebase reads the image"), platform, root=root,
                                          progress=progress)


def rebase(queue: str | os.PathLike[str] | None = None, *, image: str = "", from_ref: str | None = None, maps: Sequence[str] = (),
           keep_empty: bool = False, platform: str | None = None, progress: Progress | None = None,
           profile: str | None = None, conflict_style: str = "diff3", python_check: bool = True,
           images: Mapping[str, str] | None = None, split: bool = False, force: bool = False,
           boot: bool = False) -> RebaseReport:
    """Carry the queue onto `image` with 3-way merges. status "done", or "stopped" on a conflict.

    `maps`: "OLD=NEW" target paths or directory prefixes that moved. Needs git on PATH (GitMissing, exit 6).
    `profile`: carry the patches that profile selects and re-pin it alone; a rewritten patch that
    another pin selects must still chain there (ProfileChainBroken, exit 3, nothing written).
    `profile` "all" or "a,b" with `images` {profile: ref}: every named profile carried onto its own new
    image in one rebase (one journal, one --continue/--abort, re-pinned together); a shared patch whose
    file their new images hold at different bases is refused before any merge (SplitNeeded, exit 3)
    unless `split` (a guarded copy for the profiles that differ). A profile re-pinned onto another
    profile's image or another repository: LineageBroken (exit 3) unless `force`.
    `from_ref`: the old image, when the object store lacks the old bases and the image targets.lock
    pins cannot be opened. `conflict_style`: "diff3" (markers with the old base's section) or "merge".
    `python_check`: after every step, the Python checks (in-file and cross-module) on the new image.
    `boot`: after every step, the patch's modules imported with the new image's own Python in a sandbox
    (as `boot`, docs/boot.md); a module that fails where the new image with the queue so far imports
    it stops the rebase (a conflict of kind boot).
    """
    from .rebase import RebaseOptions, parse_map, rebase_in_progress, start_rebase

    root = queue_root(queue)
    images = dict(images or {})
    if not image and not images:
        if rebase_in_progress(root):
            raise UsageError("A rebase is in progress.", hint="Resolve the conflicts (`imgquilt rebase --status` lists them), "
                             "then `imgquilt rebase --continue`; or `imgquilt rebase --abort`.")
        raise UsageError("Which image? Pass --image NEWREF.", hint="Example: imgquilt rebase --image oci:vllm:0.10.2")
    from .sources import ref_for_lock

    from .engine.merge import STYLES

    if conflict_style not in STYLES:
        raise UsageError(f"--conflict-style {conflict_style!r}: expected one of {', '.join(STYLES)}.")
    pins = _rebase_pins(root, profile, image, images)
    first, *more = [(name, select, ref_for_lock(ref, root)) for name, select, ref in pins]
    opts = RebaseOptions(first[2], platform, ref_for_lock(from_ref, root) if from_ref else None, keep_empty,
                         tuple(parse_map(m) for m in maps), first[0], first[1], conflict_style, python_check,
                         tuple((str(n), s, r) for n, s, r in more), split, force, boot=boot)
    return start_rebase(root, opts, _opener(root, progress))


def _rebase_pins(root: Path, profile: str | None, image: str, images: dict[str, str]) -> list[tuple[str | None, tuple[str, ...], str]]:
    """The pins a rebase re-pins, each with its selection and its new image (the profiles resolved here,
    at the edge): (profile or None, select, new ref)."""
    from .verbs.profiles import ALL, lock_file, unknown

    if profile is None:
        if images:
            raise UsageError(f"--image {next(iter(images))}=REF names a profile; say which with --profile.",
                             hint="Example: imgquilt rebase --profile all --image cuda=REF --image rocm=REF")
        return [(None, (), image)]
    lf = lock_file(root)
    names = [p.name for p in lf.profiles] if profile == ALL else list(dict.fromkeys(n.strip() for n in profile.split(",")))
    if not names:
        raise UsageError("`--profile all`: targets.lock declares no profile.",
                         hint="Declare one with `imgquilt lock --profile NAME --image REF`.")
    found = []
    for name in names:
        p = lf.profile(name)
        if p is None:
            raise unknown(name, lf)
        found.append(p)
    for name in images:
        if name not in names:
            raise (unknown(name, lf) if lf.profile(name) is None else
                   UsageError(f"--image {name}=REF: profile {name} is not among those rebased ({', '.join(names)}).",
                              hint=f"Add it: --profile {','.join([*names, name])}."))
    if image and len(names) > 1:
        raise UsageError(f"--image {image}: {len(names)} profiles are rebased ({', '.join(names)}); each needs its own new image.",
                         hint="Name each: " + " ".join(f"--image {n}=REF" for n in names) + ".")
    if image and names[0] in images:
        raise UsageError(f"--image given twice for profile {names[0]}.")
    missing = [n for n in names if n not in images and not image]
    if missing:
        raise UsageError(f"No new image for profile {', '.join(missing)}: a rebase of several profiles takes each one's.",
                         hint="Name each: " + " ".join(f"--image {n}=REF" for n in names) + ".")
    return [(p.name, p.select, images.get(p.name, image)) for p in found]


def diff_upstream(queue: str | os.PathLike[str] | None = None, *, patch: str, image: str | None = None,
                  from_ref: str | None = None, platform: str | None = None, progress: Progress | None = None,
                  profile: str | None = None):
    """What upstream changed in the functions, classes and regions `patch` edits, between the old image
    (`from_ref`, else the one targets.lock pins: `profile`'s pin with a profile) and the new one
    (`image`, else a rebase's under way). While a rebase of several profiles is stopped, every profile
    carrying the patch is shown (`lanes`, each with its `profile`), or `profile`'s alone."""
    from .rebase.upstream import upstream_of
    from .sources import ref_for_lock
    from .verbs.profiles import lock_file, resolve

    from .rebase.state import rebase_in_progress

    root = queue_root(queue)
    selection = None
    if profile is not None and not rebase_in_progress(root):  # a rebase under way: its own lanes name the profiles
        chosen = resolve(load_queue(root), profile, lock_file(root))
        if patch not in chosen.queue.names:
            raise UsageError(f"Profile {profile} does not select {patch}.", hint=f"`imgquilt select {profile}` lists what it selects.")
        selection = (chosen.queue, chosen.lock)
    return upstream_of(root, patch, _opener(root, progress), image=ref_for_lock(image, root) if image else None,
                       from_ref=ref_for_lock(from_ref, root) if from_ref else None, platform=platform, selection=selection,
                       profile=profile)


def rebase_continue(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None,
                    python_check: bool = True) -> RebaseReport:
    """Take the resolved files of the stopped patch from .imgquilt/work/ and go on. `python_check=False`
    turns the Python checks off for the rest of the rebase (its final verification included)."""
    from .rebase import continue_rebase

    root = queue_root(queue)
    return continue_rebase(root, _opener(root, progress), python_check=python_check)


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


def port(queue: str | os.PathLike[str] | None = None, *, patch: str, profile: str, progress: Progress | None = None):
    """A guarded copy of `patch` for `profile` on its pinned image by a 3-way merge (rebase.port):
    `Ported` with status "done", or "stopped" on a conflict (nothing written; `port_continue` /
    `port_abort`). Refused first: an unknown profile (naming the nearest), a patch the profile selects
    and that applies there as it is, a copy name that exists, a rebase or port in progress."""
    from .sources import ref_in_queue
    from .rebase.port import port as run

    root = queue_root(queue)
    return run(root, patch, profile, lambda lock: open_ref(ref_in_queue(lock.image.ref, root), lock.image.platform, root=root,
                                                           progress=progress))


def port_continue(queue: str | os.PathLike[str] | None = None):
    """Take the resolved work-tree files of a stopped port and write the copy."""
    from .rebase.port import port_continue as run

    return run(queue_root(queue))


def port_abort(queue: str | os.PathLike[str] | None = None):
    """Drop a stopped port; resolutions already made are kept (rebase --forget drops them)."""
    from .rebase.port import port_abort as run

    return run(queue_root(queue))


def rebase_forget(queue: str | os.PathLike[str] | None = None) -> int:
    """Drop every kept resolution (.imgquilt/resolutions/, as `git rerere forget`); how many were dropped."""
    from .rebase.rerere import forget

    return forget(queue_root(queue))


def rebase_in_progress(queue: str | os.PathLike[str] | None = None) -> bool:
    """Is a rebase stopped (or interrupted) in this queue?"""
    from .rebase.state import rebase_in_progress as in_progress

    return in_progress(queue_root(queue))


def overlay_args(overlay: str | os.PathLike[str], format: str = "podman") -> list[str] | dict[str, list[dict]]:
    """An overlay's mounts.tsv as `podman` (-v HOST:CTR:ro) or `docker` (--mount ...) arguments, or as
    a Kubernetes pod's `volumes` and container's `volumeMounts` (`k8s`), with its env.list's defaults
    (`-e KEY=VALUE` first; k8s: `env`). Reads no queue."""
    from .image.sinks.overlay import MOUNT_FORMATS, env_args, k8s_volumes, mount_args, read_env, read_mounts

    if format not in MOUNT_FORMATS:
        raise UsageError(f"Unknown format {format!r}: use one of {', '.join(MOUNT_FORMATS)}.")
    mounts, env = read_mounts(Path(overlay)), read_env(Path(overlay))
    return k8s_volumes(mounts, env) if format == "k8s" else env_args(env) + mount_args(mounts, format)


def boot(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, root: str | os.PathLike[str] | None = None,
         overlay: str | os.PathLike[str] | None = None, platform: str | None = None, profile: str | None = None, timeout: float = 120.0, memory: int | None = None,
         command: Sequence[str] = (), mount_queue: str | None = None, progress: Progress | None = None,
         on_probe: Callable[[str], None] | None = None, importers: int = 5):
    """Import every module the queue patches with the image's own Python in a sandbox, on the base
    and on the patched tree (docs/boot.md); returns a verbs.boot.BootReport (`.failure()` is the
    refusal, exit 3, when a patch fails). `root`: an extracted root filesystem, read only; else
    `image` (else the one targets.lock pins), its filesystem materialized once in the shared cache.
    `overlay`: a directory `apply --overlay` wrote, booted as its mounts.tsv binds it over that base.
    `importers`: per patched module, at most this many modules of its package that import it are probed too."""
    from .verbs.boot import boot_queue

    return boot_queue(load_queue(queue), image=image, root=Path(root) if root is not None else None,
                      overlay=Path(overlay) if overlay is not None else None, platform=platform,
                      profile=profile, timeout=timeout, memory=memory, command=tuple(command), mount_queue=mount_queue,
                      progress=progress, on_probe=on_probe, open_ref=open_ref, pick_ref=pick_ref,
                      image_bytes=lambda q, lock: _image_bytes(q, lock, platform, progress), importers=importers)


def rebase_status(queue: str | os.PathLike[str] | None = None) -> RebaseReport:
    """Where a stopped (or interrupted) rebase stands: each patch so far, the conflicted files."""
    from .rebase.state import load_state

    st = load_state(queue_root(queue))
    return st.report("stopped" if st.phase == "conflict" else st.phase)


class ImportItems(list):
    """The patches to import, and what was left out: `skipped`, (source, subject) of each cover letter."""

    skipped: list[tuple[str, str]]

    def __init__(self) -> None:
        super().__init__()
        self.skipped = []


def import_items(files: Sequence[str | os.PathLike[str]], *, name: str | None = None, strip: int = 1,
                 series: str | os.PathLike[str] | None = None, guards: Sequence[str] = ()) -> ImportItems:
    """What to import: each file (a multi-mail `git format-patch --stdout` file gives one patch per mail;
    a cover letter, `[PATCH 0/N]` with no diff, is skipped as `git am` skips it), or every patch a quilt
    `series` file lists, with its -pN and (an MQ series) its guards. `guards` (+G/-G) are set on every
    item, after a series' own."""
    from dataclasses import replace

    from .importer import is_cover_letter, mail_subject, mail_subject_name, split_mbox
    from .queue.series import check_guard, parse_series
    from .work import ImportItem

    if strip < 0:
        raise UsageError("-p wants a number >= 0.", hint="As patch -pN: how many leading components to strip (-p1 for a/ b/ names).")
    extra = tuple(dict.fromkeys(check_guard(g) for g in guards))
    items = ImportItems()
    if series is not None:
        if files or name:
            raise UsageError("--series imports the patches that series lists; give no FILE and no -P with it.",
                             hint="imgquilt import --series DIR/series (each patch keeps its name).")
        sfile = Path(series)
        if sfile.is_dir():
            sfile = sfile / "series"
        for e in parse_series(_read(sfile), source=str(sfile)):
            f = sfile.parent / e.name
            items.append(ImportItem(e.name, _read(f), e.strip, str(f), tuple(dict.fromkeys(e.guards + extra)), series=True))
        if not items:
            raise UsageError(f"{sfile} lists no patch.", hint="Name the series file that lists the patches (DIR/series).")
        return items
    if not files:
        raise UsageError("Name a patch FILE to import, or --series DIR/series.", hint="imgquilt import FILE... (see `imgquilt import --help`).")
    if name and len(files) > 1:
        raise UsageError("-P NAME names one imported patch; give one FILE with it.", hint="Import the files one at a time, or drop -P.")
    for f in map(str, files):
        data = _read(Path(f))
        mails = split_mbox(data)
        covers = [k for k, m in enumerate(mails, 1) if is_cover_letter(m)]
        items.skipped += [(f"{f} (mail {k})" if len(mails) > 1 else f, mail_subject(mails[k - 1])) for k in covers]
        if len(mails) - len(covers) > 1:
            if name:
                raise UsageError(f"{f} holds {len(mails) - len(covers)} mails (git format-patch --stdout); -P cannot name them all.",
                                 hint="Drop -P: each mail is named from its subject, as git format-patch names it.")
            patches = [(k, m) for k, m in enumerate(mails, 1) if k not in covers]
            items += [ImportItem(mail_subject_name(m, n), m, strip, f"{f} (mail {k})") for n, (k, m) in enumerate(patches, 1)]
            continue
        if covers and len(covers) == len(mails):
            raise BadInput(f"{f} holds only a cover letter ({mail_subject(mails[0])!r}): no patch to import.",
                           hint="Import the mbox that holds the patches (`git format-patch --stdout`, not only the cover letter).")
        if covers:
            data = next(m for k, m in enumerate(mails, 1) if k not in covers)
        items.append(ImportItem(name or Path(f).name, data, strip, f))
    if extra:
        items[:] = [replace(it, guards=extra) for it in items]
    return items


def _read(path: Path) -> bytes:
    """A file to import (or a quilt series): read as every queue file is, only if it is a regular file
    of at most 64 MiB (a FIFO never blocks, /dev/zero is refused)."""
    from .util.regular import read_regular_file

    if path.is_dir():
        raise BadInput(f"{path} is a directory.", hint="For a quilt patches directory, pass --series DIR/series.")
    data = read_regular_file(path)
    if data is None:
        raise BadInput(f"{path} does not exist.", hint="Check the file name.")
    return data


def import_patches(files: Sequence[str | os.PathLike[str]] = (), *, queue: str | os.PathLike[str] | None = None,
                   name: str | None = None, strip: int = 1, series: str | os.PathLike[str] | None = None,
                   fields: Sequence[tuple[str, str | None]] = (), replace: bool = False, check_git_index: bool = True,
                   image: str | None = None, platform: str | None = None, guards: Sequence[str] = (),
                   profile: str | None = None, after: str | None = None, before: str | None = None,
                   through_links: bool = False) -> tuple[Imported, ...]:
    """Import patches (diff -u, git diff, format-patch mails, a quilt series) after the top patch (after the
    last one when none is applied; `after`/`before` name the place), in the imgquilt format with real
    hashes. All or nothing. Bases: the work tree, else `image`, else the lock's. An MQ series' guards come
    along; `guards` (+G/-G) go on every imported patch. `profile` (with `series`, a dpkg-source vendor
    series such as debian/patches/ubuntu.series): import it as that profile's selection (see vendor_items)."""
    from .work import WorkTree
    from .work.importing import import_patches as into_tree

    items = import_items(files, name=name, strip=strip, series=series, guards=guards)
    root = queue_root(queue)
    refuse_during_rebase(root)

    def opener():
        pinned = wt.bases.lock() if image is None else None  # the pin of the profile the work tree follows
        return open_ref(pick_ref(image, pinned, root, wt.remembered_image()), platform, root=root)

    wt = WorkTree(root, open_image=opener, image_explicit=image is not None)
    others: dict[str, tuple[str, ...]] = {}
    if profile is not None:
        if series is None:
            raise UsageError("--profile imports a vendor series as that profile's selection: give --series VENDOR.series.")
        items, others = vendor_items(items, wt.queue.entries(), profile)
    return tuple(into_tree(wt, items, fields=list(fields), replace=replace, check_git_index=check_git_index, after=after,
                           before=before, through_links=through_links, guard_others=others))


def vendor_items(items: list[ImportItem], entries, profile: str) -> tuple[list[ImportItem], dict[str, tuple[str, ...]]]:
    """A dpkg-source vendor series imported as profile `profile`: the patches the queue already has
    (by name) are shared and left as they are; the others are imported with `+profile`; the queue's
    patches the vendor series does not list get `-profile`. Selecting `profile` then applies what the
    vendor series lists (the vendor-only patches stand together where import puts them: after the top
    patch, after the last patch of series when none is applied)."""
    from dataclasses import replace

    from .verbs.profiles import check_profile_name

    check_profile_name(profile)
    have = {e.name: e for e in entries}
    listed = {it.name for it in items}
    fresh = [replace(it, guards=tuple(dict.fromkeys(it.guards + (f"+{profile}",)))) for it in items if it.name not in have]
    others = {e.name: tuple(g for g in e.guards if g[1:] != profile) + (f"-{profile}",) for e in entries if e.name not in listed}
    if not fresh and not others:
        raise UsageError(f"The vendor series lists exactly the queue's patches: profile {profile} needs no guard.",
                         hint="Nothing to import: selecting the default applies what the vendor series lists.")
    if not fresh:
        raise UsageError("The vendor series lists no patch the queue lacks; nothing to import.",
                         hint=f"Keep the queue's other patches out of {profile} with `imgquilt guard PATCH -{profile}`.")
    return fresh, others
