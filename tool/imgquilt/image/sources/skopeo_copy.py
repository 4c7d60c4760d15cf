"""Any other skopeo transport (containers-storage:, docker-daemon:, ...): copied first (docker:// is read natively).

A `containers-storage:` reference is read from the store podman uses (image.containers_store), so
what is read is the image `podman images` shows; it is copied once per image ID into the shared cache
(copy_from_store, sources.store_copy), never below the queue.

For the other transports, `skopeo copy` writes the image into the cache as a `dir:` image, which keeps the source's manifest
byte for byte (so the digest is the source's). A reference by digest is immutable, so a finished
copy of it is reused; anything else is copied afresh every time (a tag may have moved). The copy
is made under a temporary name and renamed into place whole.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import BadImage
from ..skopeo_text import skopeo_message
from .dir_layout import is_dir_layout
from .platforms import DEFAULT_PLATFORM, Platform

_TEMP_CACHES: list[Path] = []


def _default_cache() -> Path:
    path = Path(tempfile.mkdtemp(prefix="imgquilt-cache-"))
    _TEMP_CACHES.append(path)
    if len(_TEMP_CACHES) == 1:
        atexit.register(lambda: [shutil.rmtree(p, ignore_errors=True) for p in _TEMP_CACHES])
    return path


def copy_from_store(ref: str, *, platform: str | None) -> tuple[Path, str]:
    """A `containers-storage:` image, copied once per image ID into the shared cache (sources.store_copy):
    (the OCI layout, the manifest digest to open). Nothing is written below the queue."""
    from ...cache import cache_root
    from ...cache.layers import cache_disabled
    from ..containers_store import podman, podman_image_id, resolve, split_specifier
    from .store_copy import _HEX64, complete_copy, copy_store_image, store_layout

    skopeo = _skopeo(ref)
    want = Platform.parse(platform or DEFAULT_PLATFORM)
    layout = store_layout(_default_cache() if cache_disabled() else cache_root())
    rest = ref.partition(":")[2]
    spec, name = split_specifier(rest)
    image_id = None
    if spec is None and podman() is not None:
        # podman names the image it shows (its own store, its own short-name rules) by ID, in one quick
        # call; an image copied before is then opened without asking anything else
        image_id = podman_image_id(name)
        if image_id is not None and _HEX64.match(image_id):
            found_copy = complete_copy(layout, image_id)
            if found_copy is not None:
                return layout, found_copy
        else:
            image_id = None
    found = resolve(rest, error=BadImage)
    src = found.skopeo_ref
    if image_id is not None:  # copy exactly the image podman named, even if the name moves meanwhile
        src = f"containers-storage:{found.store.specifier}@{image_id}"
    digest = copy_store_image(skopeo, src, want, ref=ref, store=f" ({found.store.describe()})", layout=layout)
    return layout, digest


def _skopeo(ref: str) -> str:
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise BadImage(
            f"Reading {ref!r} needs skopeo, which is not installed.",
            hint="Install skopeo, or save the image to a file first (e.g. `docker save -o img.tar IMAGE`) "
                 "and pass docker-archive:img.tar.",
        )
    return skopeo


def copy_with_skopeo(ref: str, *, platform: str | None, cache_dir: Path | None) -> Path:
    """Copy `ref` into the cache with skopeo; return the `dir:` image directory."""
    skopeo = _skopeo(ref)
    want = Platform.parse(platform or DEFAULT_PLATFORM)
    src, store = ref, ""
    base = (cache_dir if cache_dir is not None else _default_cache()) / "skopeo"
    key = hashlib.sha256(f"{src}\0{want}".encode()).hexdigest()[:24]
    dest = base / key
    if "@sha256:" in ref and is_dir_layout(dest):
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=base))
    cmd = [skopeo, "--override-os", want.os, "--override-arch", want.arch]
    if want.variant:
        cmd += ["--override-variant", want.variant]
    cmd += ["copy", "--quiet", src, f"dir:{tmp}"]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BadImage(f"skopeo could not read {ref!r}{store}: {skopeo_message(proc.stderr) or f'exit status {proc.returncode}'}.",
                           hint=f"Check the reference: `skopeo inspect {src}` shows what skopeo sees.")
        old = None
        if dest.exists():
            old = base / f".{key}.old.{os.getpid()}"
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
