"""An image's filesystem as a directory to boot: unpacked once per manifest digest into the shared
cache (cache.rootfs, sealed), then reused; with the cache off (IMGQUILT_NO_CACHE=1) or no cache key,
unpacked into a temporary directory for this run only and removed after it."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..cache.layers import cache_disabled
from ..image.model import Image
from ..rootfs.extract import extract_layers


def _unpack(img: Image, dest: Path, progress=None) -> None:
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

    extract_layers(dest, streams())


@contextmanager
def materialized(img: Image, progress=None) -> Iterator[Path]:
    """The unpacked filesystem of `img`, read only to every user of it."""
    if not cache_disabled():
        from ..cache.rootfs import RootfsCache

        cache = RootfsCache()
        found = cache.believed(img.manifest_digest)
        if found is not None:
            yield found
            return
        staged = cache.staging()
        try:
            _unpack(img, staged, progress)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        tree = cache.seal(img.manifest_digest, staged)
        if tree is not None:
            yield tree
            return
        try:
            yield cache.tree(img.manifest_digest)
        finally:
            cache.discard(img.manifest_digest)
        return
    tmp = Path(tempfile.mkdtemp(prefix="imgquilt-rootfs-"))
    try:
        _unpack(img, tmp, progress)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
