"""The rebase and port verbs as api.py and the CLI call them: start a rebase (a `RebaseRequest`), go on,
skip, abort, forget the kept resolutions, where a stopped one stands, what upstream changed under a
patch, and a port. The work is this package's (loop, upstream, port); here the queue is found, the
profiles are resolved into pins (at the edge) and the images opened (verbs.refs). They live in this
package, not in verbs/, because the rebase package imports the verbs (lock, boot, profiles): the verbs
importing it back would be a cycle."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from ..errors import UsageError
from ..verbs.refs import Progress, load_queue, open_ref, queue_root

if TYPE_CHECKING:
    from ..fs.types import Source
    from .report import RebaseReport


@dataclass(frozen=True)
class RebaseAborted:
    """An aborted rebase: the report so far (None when it stopped before changing anything) and the files restored."""

    report: RebaseReport | None
    restored: tuple[str, ...]


@dataclass(frozen=True)
class RebaseRequest:
    """A new rebase, as api.rebase() takes it (see its docstring for each field)."""

    queue: str | os.PathLike[str] | None = None
    image: str = ""
    from_ref: str | None = None
    maps: tuple[str, ...] = ()
    keep_empty: bool = False
    platform: str | None = None
    progress: Progress | None = None
    profile: str | None = None
    conflict_style: str = "diff3"
    python_check: bool = True
    images: Mapping[str, str] = field(default_factory=dict)  # {profile: new ref}, for several profiles
    split: bool = False
    force: bool = False
    boot: bool = False


def rebase(req: RebaseRequest) -> RebaseReport:
    """Carry the queue onto the new image(s) with 3-way merges (api.rebase() says the rest)."""
    from . import RebaseOptions, parse_map, rebase_in_progress, start_rebase

    root = queue_root(req.queue)
    images = dict(req.images or {})
    if not req.image and not images:
        if rebase_in_progress(root):
            raise UsageError(
                "A rebase is in progress.",
                hint="Resolve the conflicts (`imgquilt rebase --status` lists them), "
                "then `imgquilt rebase --continue`; or `imgquilt rebase --abort`.",
            )
        raise UsageError("Which image? Pass --image NEWREF.", hint="Example: imgquilt rebase --image oci:vllm:0.10.2")
    from ..sources import ref_for_lock

    from ..engine.merge import STYLES

    if req.conflict_style not in STYLES:
        raise UsageError(f"--conflict-style {req.conflict_style!r}: expected one of {', '.join(STYLES)}.")
    pins = rebase_pins(root, req.profile, req.image, images)
    first, *more = [(name, select, ref_for_lock(ref, root)) for name, select, ref in pins]
    opts = RebaseOptions(
        first[2],
        req.platform,
        ref_for_lock(req.from_ref, root) if req.from_ref else None,
        req.keep_empty,
        tuple(parse_map(m) for m in req.maps),
        first[0],
        first[1],
        req.conflict_style,
        req.python_check,
        tuple((str(n), s, r) for n, s, r in more),
        req.split,
        req.force,
        boot=req.boot,
    )
    return start_rebase(root, opts, _opener(root, req.progress))


def _opener(root: Path, progress: Progress | None) -> Callable[[str, str | None], Source]:
    """Opens the references a rebase keeps (relative to the queue directory, as targets.lock does)."""
    from ..sources import ref_in_queue

    return lambda ref, platform: open_ref(
        ref_in_queue(ref, root, "the rebase reads the image"), platform, root=root, progress=progress
    )


def rebase_pins(
    root: Path, profile: str | None, image: str, images: dict[str, str]
) -> list[tuple[str | None, tuple[str, ...], str]]:
    """The pins a rebase re-pins, each with its selection and its new image (the profiles resolved here,
    at the edge): (profile or None, select, new ref)."""
    from ..verbs.profiles import ALL, lock_file, unknown

    if profile is None:
        if images:
            raise UsageError(
                f"--image {next(iter(images))}=REF names a profile; say which with --profile.",
                hint="Example: imgquilt rebase --profile all --image cuda=REF --image rocm=REF",
            )
        return [(None, (), image)]
    lf = lock_file(root)
    names = (
        [p.name for p in lf.profiles] if profile == ALL else list(dict.fromkeys(n.strip() for n in profile.split(",")))
    )
    if not names:
        raise UsageError(
            "`--profile all`: targets.lock declares no profile.",
            hint="Declare one with `imgquilt lock --profile NAME --image REF`.",
        )
    found = []
    for name in names:
        p = lf.profile(name)
        if p is None:
            raise unknown(name, lf)
        found.append(p)
    for name in images:
        if name not in names:
            raise (
                unknown(name, lf)
                if lf.profile(name) is None
                else UsageError(
                    f"--image {name}=REF: profile {name} is not among those rebased ({', '.join(names)}).",
                    hint=f"Add it: --profile {','.join([*names, name])}.",
                )
            )
    if image and len(names) > 1:
        raise UsageError(
            f"--image {image}: {len(names)} profiles are rebased ({', '.join(names)}); each needs its own new image.",
            hint="Name each: " + " ".join(f"--image {n}=REF" for n in names) + ".",
        )
    if image and names[0] in images:
        raise UsageError(f"--image given twice for profile {names[0]}.")
    missing = [n for n in names if n not in images and not image]
    if missing:
        raise UsageError(
            f"No new image for profile {', '.join(missing)}: a rebase of several profiles takes each one's.",
            hint="Name each: " + " ".join(f"--image {n}=REF" for n in names) + ".",
        )
    return [(p.name, p.select, images.get(p.name, image)) for p in found]


def diff_upstream(
    queue: str | os.PathLike[str] | None = None,
    *,
    patch: str,
    image: str | None = None,
    from_ref: str | None = None,
    platform: str | None = None,
    progress: Progress | None = None,
    profile: str | None = None,
):
    """What upstream changed in the functions, classes and regions `patch` edits (api.diff_upstream())."""
    from .upstream import upstream_of
    from ..sources import ref_for_lock
    from ..verbs.profiles import lock_file, resolve

    from .state import rebase_in_progress

    root = queue_root(queue)
    selection = None
    if profile is not None and not rebase_in_progress(root):  # a rebase under way: its own lanes name the profiles
        chosen = resolve(load_queue(root), profile, lock_file(root))
        if patch not in chosen.queue.names:
            raise UsageError(
                f"Profile {profile} does not select {patch}.",
                hint=f"`imgquilt select {profile}` lists what it selects.",
            )
        selection = (chosen.queue, chosen.lock)
    return upstream_of(
        root,
        patch,
        _opener(root, progress),
        image=ref_for_lock(image, root) if image else None,
        from_ref=ref_for_lock(from_ref, root) if from_ref else None,
        platform=platform,
        selection=selection,
        profile=profile,
    )


def rebase_continue(
    queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None, python_check: bool = True
) -> RebaseReport:
    """Take the resolved files of the stopped patch from .imgquilt/work/ and go on."""
    from . import continue_rebase

    root = queue_root(queue)
    return continue_rebase(root, _opener(root, progress), python_check=python_check)


def rebase_skip(queue: str | os.PathLike[str] | None = None, *, progress: Progress | None = None) -> RebaseReport:
    """Drop the conflicted patch from the rebased series and go on."""
    from . import skip_rebase

    root = queue_root(queue)
    return skip_rebase(root, _opener(root, progress))


def rebase_abort(queue: str | os.PathLike[str] | None = None) -> RebaseAborted:
    """Restore series, patches/ and targets.lock as they were before the rebase."""
    from . import abort_rebase

    report, restored = abort_rebase(queue_root(queue))
    return RebaseAborted(report, tuple(restored))


def rebase_forget(queue: str | os.PathLike[str] | None = None) -> int:
    """Drop every kept resolution (.imgquilt/resolutions/, as `git rerere forget`); how many were dropped."""
    from .rerere import forget

    return forget(queue_root(queue))


def rebase_in_progress(queue: str | os.PathLike[str] | None = None) -> bool:
    """Is a rebase stopped (or interrupted) in this queue?"""
    from .state import rebase_in_progress as in_progress

    return in_progress(queue_root(queue))


def rebase_status(queue: str | os.PathLike[str] | None = None) -> RebaseReport:
    """Where a stopped (or interrupted) rebase stands: each patch so far, the conflicted files."""
    from .state import load_state

    st = load_state(queue_root(queue))
    return st.report("stopped" if st.phase == "conflict" else st.phase)


def port(queue: str | os.PathLike[str] | None = None, *, patch: str, profile: str, progress: Progress | None = None):
    """A guarded copy of `patch` for `profile` on its pinned image (api.port() says the rest)."""
    from .port import port as run
    from ..sources import ref_in_queue

    root = queue_root(queue)
    return run(
        root,
        patch,
        profile,
        lambda lock: open_ref(ref_in_queue(lock.image.ref, root), lock.image.platform, root=root, progress=progress),
    )


def port_continue(queue: str | os.PathLike[str] | None = None):
    """Take the resolved work-tree files of a stopped port and write the copy."""
    from .port import port_continue as run

    return run(queue_root(queue))


def port_abort(queue: str | os.PathLike[str] | None = None):
    """Drop a stopped port; resolutions already made are kept (rebase --forget drops them)."""
    from .port import port_abort as run

    return run(queue_root(queue))
