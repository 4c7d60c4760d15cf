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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

from .verbs.init import InitResult as Initialized, init_queue
from .verbs.refs import Progress, cache_dir, load_queue, open_ref, pick_ref, public_key, queue_root, signing_key  # noqa: F401  (the public names, as before)
from .verbs.rebase_guard import refuse_during_rebase  # noqa: F401  (a public name, as before)
from .errors import BadInput, BaseDrift, ImgquiltError, QueueProblems, UsageError  # noqa: F401  (reachable here as before; imgquilt.errors is their home)

if TYPE_CHECKING:
    from .verbs.apply_verb import Applied
    from .verbs.audit_verb import Audit
    from .verbs.check import CheckResult
    from .verbs.lock import Locked
    from .queue.lock import Profile
    from .rebase import RebaseReport
    from .rebase.verbs import RebaseAborted
    from .verbs.attest import Verification
    from .verbs.restore import Restored
    from .work import ImportItem, Imported
    from .work.import_verb import ImportItems

__all__ = [
    "Applied", "Audit", "CheckResult", "Initialized", "Locked", "Progress", "RebaseAborted",
    "apply", "apply_profiles", "audit", "audit_profiles", "boot", "check", "diff_upstream", "import_items", "import_patches", "init",
    "load_queue", "lock", "lock_profiles", "overlay_args", "profiles", "rebase", "rebase_abort", "rebase_continue",
    "port", "port_abort", "port_continue", "rebase_forget", "rebase_in_progress", "rebase_skip", "rebase_status", "restore", "reverse", "verify",
]

# the values of the verbs that live in verbs/, named here as before; imported when first asked for
# (the verbs' modules read the engine and images: `import imgquilt.api` stays light)
_MOVED = {"Locked": "verbs.lock", "CheckResult": "verbs.check", "Applied": "verbs.apply_verb", "Audit": "verbs.audit_verb",
          "RebaseAborted": "rebase.verbs", "ImportItems": "work.import_verb"}


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{where}", __package__), name)


# --- the queue ----------------------------------------------------------------------------------
def profiles(queue: str | os.PathLike[str] | None = None) -> tuple[Profile, ...]:
    """The profiles targets.lock declares, by name: each with its `select`ed guards, its `env`
    defaults and its pin (`lock`: image, targets, series_sha256 over its selection)."""
    from .verbs.profiles import lock_file

    return lock_file(queue_root(queue)).profiles


def init(path: str | os.PathLike[str] = ".") -> Initialized:
    """Make a queue in `path`: `series`, `patches/`, and a .gitignore for `.imgquilt/`. Keeps what exists;
    a file in the way is BadInput, checked before anything is made."""
    return init_queue(Path(path))


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
    from .verbs.check import CheckRequest, check as run

    from .work.rehash import stale_results

    return run(CheckRequest(queue, image, platform, progress, profile, allow_unselected, strict), stale_results)


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
    from .verbs.apply_verb import ApplyRequest, apply as run

    return run(ApplyRequest(queue, image, layer, output_image, root, overlay, platform, locked, python_check, progress, attest,
                            compression, profile, compression_level, boot_check, boot_timeout))


def apply_profiles(queue: str | os.PathLike[str] | None = None, *, profile: str = "all", layer: str | None = None,
                   output_image: str | None = None, overlay: str | None = None, platform: str | None = None,
                   locked: bool = False, python_check: bool = True, progress: Progress | None = None,
                   attest: str | os.PathLike[str] | None = None, compression: str | None = None,
                   compression_level: int | None = None) -> tuple[Applied, ...]:
    """`apply --profile all`: each profile applied on the image it pins. Every output path must hold
    `{profile}` (replaced by each profile's name) when there is more than one profile: UsageError
    before anything is read. Every profile is verified (destinations checked) before any output is
    written; then each profile's outputs are written in turn."""
    from .verbs.apply_verb import ApplyRequest, apply_profiles as run

    return run(ApplyRequest(queue, layer=layer, output_image=output_image, overlay=overlay, platform=platform, locked=locked,
                            python_check=python_check, progress=progress, attest=attest, compression=compression,
                            profile=profile, compression_level=compression_level))


def restore(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], paths: Sequence[str],
            image: str | None = None, platform: str | None = None, progress: Progress | None = None) -> Restored:
    """Put files of a root back as the image has them (`image`, else the lock's pins from the object
    store, else the lock's image), journaled as an in-place apply."""
    from .verbs.restore import restore_queue

    return restore_queue(queue, root=root, paths=paths, image=image, platform=platform, progress=progress)


def reverse(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str], image: str | None = None,
            platform: str | None = None, progress: Progress | None = None, profile: str | None = None) -> Restored:
    """`apply --reverse --root ROOT`: take off what imgquilt applied to the root (its record says what),
    leaving it as the image has it; journaled as an in-place apply. `profile`: the apply line repeated
    with --reverse (`apply --profile NAME --root ROOT --reverse`): the bytes come from that profile's
    pin, and a root another pin's apply wrote is refused (exit 2, naming it) before any write."""
    from .verbs.restore import reverse_queue

    return reverse_queue(queue, root=root, image=image, platform=platform, progress=progress, profile=profile)


def verify(queue: str | os.PathLike[str] | None = None, *, image: str | None = None, key: str | os.PathLike[str],
           platform: str | None = None, profile: str | None = None) -> tuple[Verification, ...]:
    """Find the attestations of the image (`image`, else the lock's) and check each with the public `key`:
    the signature, the subject digest, and that the attested record matches the queue. One Verification
    per platform (`platform="all"`: every platform of the index). The CLI exits 3 (NotAttested,
    `v.failure()`) when one has no `verified` candidate. `profile`: the record must match the patches
    that profile selects (and carry its environment defaults); the image defaults to its pin."""
    from .verbs.verify import VerifyRequest, verify as run

    return run(VerifyRequest(queue, image, key, platform, profile))


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
    from .verbs.audit_verb import AuditRequest, audit as run

    return run(AuditRequest(queue, (image,) if image else (), root, platform, history, expect, progress, trust_attestation, pid,
                            profile, strict))


def audit_profiles(queue: str | os.PathLike[str] | None = None, *, image: str | None = None,
                   root: str | os.PathLike[str] | None = None, platform: str | None = None,
                   expect: Literal["live", "pending"] = "live", progress: Progress | None = None,
                   trust_attestation: str | os.PathLike[str] | None = None, strict: bool = False,
                   pid: int | None = None) -> tuple[Audit, ...]:
    """`audit --profile all`: every profile judged in `image` (or `root`, or the root of process `pid`,
    pinned as audit() pins it, its environment checked against each profile's defaults); without
    any, each in the image it pins. `Audit.matches` says which profiles the filesystem is (a fleet
    audit's answer to "which deployment is this container?"). `strict` as audit()'s."""
    from .verbs.audit_verb import AuditRequest, audit_profiles as run

    return run(AuditRequest(queue, (image,) if image else (), root, platform, expect=expect, progress=progress,
                            trust_attestation=trust_attestation, strict=strict, pid=pid, profile="all"))


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
    from .rebase.verbs import RebaseRequest, rebase as run

    return run(RebaseRequest(queue, image, from_ref, tuple(maps), keep_empty, platform, progress, profile, conflict_style,
                             python_check, dict(images or {}), split, force, boot))


def diff_upstream(queue: str | os.PathLike[str] | None = None, *, patch: str, image: str | None = None,
                  from_ref: str | None = None, platform: str | None = None, progress: Progress | None = None,
                  profile: str | None = None):
    """What upstream changed in the functions, classes and regions `patch` edits, between the old image
    (`from_ref`, else the one targets.lock pins: `profile`'s pin with a profile) and the new one
    (`image`, else a rebase's under way). While a rebase of several profiles is stopped, every profile
    carrying the patch is shown (`lanes`, each with its `profile`), or `profile`'s alone."""
    from .rebase.verbs import diff_upstream as run

    return run(queue, patch=patch, image=image, from_ref=from_ref, platform=platform, progress=progress, profile=profile)


def rebase_continue(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None,
                    python_check: bool = True) -> RebaseReport:
    """Take the resolved files of the stopped patch from .imgquilt/work/ and go on. `python_check=False`
    turns the Python checks off for the rest of the rebase (its final verification included)."""
    from .rebase.verbs import rebase_continue as run

    return run(queue, progress=progress, python_check=python_check)


def rebase_skip(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None) -> RebaseReport:
    """Drop the conflicted patch from the rebased series and go on."""
    from .rebase.verbs import rebase_skip as run

    return run(queue, progress=progress)


def rebase_abort(queue: str | os.PathLike[str] | None = None) -> RebaseAborted:
    """Restore series, patches/ and targets.lock as they were before the rebase."""
    from .rebase.verbs import rebase_abort as run

    return run(queue)


def port(queue: str | os.PathLike[str] | None = None, *, patch: str, profile: str, progress: Progress | None = None):
    """A guarded copy of `patch` for `profile` on its pinned image by a 3-way merge (rebase.port):
    `Ported` with status "done", or "stopped" on a conflict (nothing written; `port_continue` /
    `port_abort`). Refused first: an unknown profile (naming the nearest), a patch the profile selects
    and that applies there as it is, a copy name that exists, a rebase or port in progress."""
    from .rebase.verbs import port as run

    return run(queue, patch=patch, profile=profile, progress=progress)


def port_continue(queue: str | os.PathLike[str] | None = None):
    """Take the resolved work-tree files of a stopped port and write the copy."""
    from .rebase.verbs import port_continue as run

    return run(queue)


def port_abort(queue: str | os.PathLike[str] | None = None):
    """Drop a stopped port; resolutions already made are kept (rebase --forget drops them)."""
    from .rebase.verbs import port_abort as run

    return run(queue)


def rebase_forget(queue: str | os.PathLike[str] | None = None) -> int:
    """Drop every kept resolution (.imgquilt/resolutions/, as `git rerere forget`); how many were dropped."""
    from .rebase.verbs import rebase_forget as run

    return run(queue)


def rebase_in_progress(queue: str | os.PathLike[str] | None = None) -> bool:
    """Is a rebase stopped (or interrupted) in this queue?"""
    from .rebase.verbs import rebase_in_progress as run

    return run(queue)


def overlay_args(overlay: str | os.PathLike[str], format: str = "podman") -> list[str] | dict[str, list[dict]]:
    """An overlay's mounts.tsv as `podman` (-v HOST:CTR:ro) or `docker` (--mount ...) arguments, or as
    a Kubernetes pod's `volumes` and container's `volumeMounts` (`k8s`), with its env.list's defaults
    (`-e KEY=VALUE` first; k8s: `env`). Reads no queue."""
    from .verbs.overlay import overlay_args as run

    return run(overlay, format)


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
    from .verbs.boot import BootRequest, boot as run

    return run(BootRequest(queue, image, root, overlay, platform, profile, timeout, memory, tuple(command), mount_queue,
                           progress, on_probe, importers))


def rebase_status(queue: str | os.PathLike[str] | None = None) -> RebaseReport:
    """Where a stopped (or interrupted) rebase stands: each patch so far, the conflicted files."""
    from .rebase.verbs import rebase_status as run

    return run(queue)


def import_items(files: Sequence[str | os.PathLike[str]], *, name: str | None = None, strip: int = 1,
                 series: str | os.PathLike[str] | None = None, guards: Sequence[str] = ()) -> ImportItems:
    """What to import: each file (a multi-mail `git format-patch --stdout` file gives one patch per mail;
    a cover letter, `[PATCH 0/N]` with no diff, is skipped as `git am` skips it), or every patch a quilt
    `series` file lists, with its -pN and (an MQ series) its guards. `guards` (+G/-G) are set on every
    item, after a series' own."""
    from .work.import_verb import import_items as run

    return run(files, name=name, strip=strip, series=series, guards=guards)


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
    from .work.import_verb import ImportRequest, import_patches as run

    return run(ImportRequest(tuple(files), queue, name, strip, series, tuple(fields), replace, check_git_index, image,
                             platform, tuple(guards), profile, after, before, through_links))


def vendor_items(items: list[ImportItem], entries, profile: str) -> tuple[list[ImportItem], dict[str, tuple[str, ...]]]:
    """A dpkg-source vendor series imported as profile `profile`: the patches the queue already has
    (by name) are shared and left as they are; the others are imported with `+profile`; the queue's
    patches the vendor series does not list get `-profile`. Selecting `profile` then applies what the
    vendor series lists (the vendor-only patches stand together where import puts them: after the top
    patch, after the last patch of series when none is applied)."""
    from .work.import_verb import vendor_items as run

    return run(items, entries, profile)
