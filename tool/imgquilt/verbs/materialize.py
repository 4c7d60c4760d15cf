"""An image's filesystem as a directory to boot: unpacked once per manifest digest into the shared
cache (cache.rootfs, sealed; identical files stored once across trees; the trees counted in the
cache's cap, IMGQUILT_CACHE_MAX, and evicted least recently used first, never while in use), then
reused; with the cache off (IMGQUILT_NO_CACHE=1) or no cache key, unpacked into a temporary directory
for this run only and removed after it."""
from __future__ import annotations

import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..cache.layers import cache_disabled
from ..cache.rootfs import sync_tree
from ..image.model import Image
from ..rootfs.extract import extract_layers


def _unpack(img: Image, dest: Path, progress=None, pool: Path | None = None) -> int:
    """Unpack the layers into `dest`; the bytes of regular files written."""
    layers = img.layers

    def streams():
        for i, layer in enumerate(layers):
            if progress is not None:
                progress(len(layers) - 1 - i, len(layers), layer.descriptor.digest)
            tar = layer.open_tar()
            try:
                yield layer.descriptor.digest, tar
                while tar.read(1 << 20):  # to its end: the blob's digest is checked there
                    pass
            finally:
                tar.close()

    written: list[int] = []
    extract_layers(dest, streams(), pool=pool, written=written)
    return written[0] if written else 0


class _Sync:
    """`sync_tree(tree)` on a thread of its own; wait() says whether it succeeded."""

    def __init__(self, tree: Path) -> None:
        self._ok = False
        self._thread = threading.Thread(target=self._run, args=(tree,), name="imgquilt-syncfs", daemon=True)
        self._thread.start()

    def _run(self, tree: Path) -> None:
        try:
            sync_tree(tree)
            self._ok = True
        except OSError:
            pass  # not sealed then: the next run unpacks again

    def wait(self) -> bool:
        self._thread.join()
        return self._ok


@contextmanager
def materialized(img: Image, progress=None) -> Iterator[Path]:
    """The unpacked filesystem of `img`, read only to every user of it."""
    if not cache_disabled():
        from ..cache.rootfs import RootfsCache
        from ..cache.usage import trim

        cache = RootfsCache()
        digest = img.manifest_digest
        found = cache.believed(digest)
        if found is not None:
            with cache.held(digest):
                if cache.believed(digest) == found:  # not evicted between the look and the lock
                    yield found
                    return
        staged = cache.staging()
        try:
            size = _unpack(img, staged, progress, pool=cache.trusted_pool())
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        # The tree is ours and complete: it is used from where it was unpacked while its bytes go to
        # disk on a thread (a second of waiting on the vLLM-sized image, no CPU), and sealed (moved into
        # place, its marker written) only after both: a crash meanwhile leaves it unsealed, never believed.
        syncing = _Sync(staged)
        try:
            trim()  # the cache back under its cap, this tree not yet among its entries
            yield staged
        finally:
            tree = cache.seal(digest, staged, size, synced=syncing.wait())
            if tree is None:
                shutil.rmtree(staged, ignore_errors=True)
            trim()
        return
    tmp = Path(tempfile.mkdtemp(prefix="imgquilt-rootfs-"))
    try:
        _unpack(img, tmp, progress)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
