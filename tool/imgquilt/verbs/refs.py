"""What every verb that reads an image shares: the queue's cache, opening a reference, which
reference (the one given, else the pin's), the pinned image's bytes for a refusal, the keys that sign
and verify, and how a refusal names the profile it was met for. Moved here from api.py so the verbs
reach them without going back up through the public face."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..errors import BaseDrift, ImgquiltError, UsageError

if TYPE_CHECKING:
    from ..fs.types import Source
    from ..queue.lock import Lock
    from ..queue.patchfile import Patch
    from ..queue.queue import Queue

Progress = Callable[[int, int, str], None]
"""Called as each image layer starts to be read: (index from the top, count, digest)."""


def queue_root(queue: str | os.PathLike[str] | None = None) -> Path:
    """The queue directory: `queue`, else IMGQUILT_QUEUE, else the nearest with a `series` file."""
    from ..queue.locate import find_queue

    return find_queue(queue)


def load_queue(queue: str | os.PathLike[str] | None = None) -> Queue:
    """The queue, parsed: series, every listed patch, the lock (`.lock()`)."""
    from ..queue.queue import load_queue as _load

    return _load(queue_root(queue), parse_many=remembered_parses)


def remembered_parses(items: list[tuple[str, int | None, bytes]]) -> list[Patch]:
    """The patches (name, strip, bytes) parsed, from the shared cache when a sealed entry holds the
    parses of exactly these (cache.parsed): a warm run of a 1000-patch queue reads one entry instead
    of parsing 1000 patches. Queues under cache.parsed.MIN_SIZE are parsed (a read costs as much)."""
    import hashlib

    from ..cache.parsed import MIN_SIZE, remembered_as
    from ..queue import patchcodec
    from ..queue.patchfile import parse_patch

    def parse_all() -> list[Patch]:
        return [parse_patch(data, name, strip=strip) for name, strip, data in items]

    if sum(len(data) for _, _, data in items) < MIN_SIZE:
        return parse_all()
    key = hashlib.sha256(patchcodec.parser_key())
    for name, strip, data in items:
        key.update(
            b"%s\0%s\0%s"
            % (name.encode("utf-8", "surrogateescape"), str(strip).encode(), hashlib.sha256(data).digest())
        )
    return remembered_as("patches", key.digest(), parse_all, patchcodec.encode, patchcodec.decode)


def cache_dir(root: Path | None) -> Path | None:
    """The queue's own cache dir; the queue is untrusted, so no link may stand on the way to what it writes."""
    if root is None:
        return None
    from ..util.statedir import StateDir

    for sub in ("verified", "skopeo"):
        StateDir(root, "cache", sub).exists()
    return root / ".imgquilt" / "cache"


def open_ref(
    ref: str, platform: str | None = None, *, root: Path | None = None, progress: Progress | None = None
) -> Source:
    """Open an image reference (or rootfs:DIR) for reading targets; `root`'s cache keeps copies and verified blobs."""
    from ..sources import open_source

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
        from ..sources import ref_in_queue

        return ref_in_queue(lock.image.ref, root)
    if remembered:
        return remembered
    raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF.")


def pinned_image(q: Queue, platform: str | None, progress: Progress | None) -> Callable[[], Source] | None:
    """Opens the image targets.lock pins (None: no lock, or the lock pins a rootfs)."""
    return pin_opener(q.root, q.lock(), platform, progress)


def pin_opener(
    root: Path, lock: Lock | None, platform: str | None, progress: Progress | None
) -> Callable[[], Source] | None:
    """Opens the image `lock` pins (None: no lock, or it pins a rootfs, whose files may have changed since)."""
    if lock is None or lock.image.kind == "rootfs":
        return None
    return lambda: open_ref(pick_ref(None, lock, root), platform or lock.image.platform, root=root, progress=progress)


def signing_key(path: str | os.PathLike[str] | None) -> Any:
    """What signs with the private key `path` names (None: none), the key checked before anything is read."""
    if path is None:
        return None
    from ..util.dsse import load_private_key
    from .attest import Attester

    return Attester(load_private_key(Path(path)))


def public_key(path: str | os.PathLike[str]) -> Any:
    from ..util.dsse import load_public_key

    return load_public_key(Path(path))


@contextmanager
def other_pin(chosen: Any, theirs: Sequence[str | None]) -> Iterator[None]:
    """Drift onto an image another pin names is not an image that changed under the queue: say whose
    image it is (a rebase would re-pin this deployment onto another's)."""
    try:
        yield
    except ImgquiltError as exc:
        drifted = any(
            getattr(p, "kind", None) in ("drift", "missing", "type") for p in getattr(exc, "problems", None) or ()
        )
        if theirs and (drifted or isinstance(exc, BaseDrift)):
            who = " and ".join(f"profile {n}" if n else "the default pin" for n in theirs)
            way = " or ".join(
                f"`imgquilt apply --profile {n}`" if n else "`imgquilt apply` (no --profile)" for n in theirs
            )
            exc.message += f" This is the image {who} pins, not {chosen.label}'s."
            exc.hint = (
                f"Apply that deployment's own selection to it ({way}), or apply {chosen.label} to its own "
                "image (drop --image); `imgquilt rebase` would re-pin this deployment onto another's image."
            )
        raise


@contextmanager
def naming(profile: str | None) -> Iterator[None]:
    """A refusal while working on a profile names it, and the command that re-pins it."""
    try:
        yield
    except ImgquiltError as exc:
        if profile is not None:
            exc.message = f"Profile {profile}: {exc.message}"
            if exc.hint:
                exc.hint = exc.hint.replace("`imgquilt lock`", f"`imgquilt lock --profile {profile}`")
        raise
