"""`--output-image containers-storage:NAME` and `dir:DIR`: where podman and buildah users keep images,
written through skopeo, as the reads of those transports already are (sources/skopeo_copy.py).

The new image is first written as an OCI layout in a temporary directory (base blobs hard-linked
when they are on the same filesystem, else streamed and re-hashed, as `oci:` writes them), then
`skopeo copy --preserve-digests` puts it in place, so the manifest and config digests imgquilt reports
are the ones podman shows. A `dir:` image is copied into a new directory beside DIR and renamed into
place whole; containers-storage commits an image as a whole itself.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import BadImage, UsageError
from .layout import write_layout
from .mutate import NewImage
from .output_file import output_dir

SKOPEO_OUTPUTS = ("containers-storage", "dir")
_NAME = re.compile(
    r"^(?:\[[^\]\n]+\])?"  # an optional [driver@graphroot+runroot] storage specifier, as skopeo takes it
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$"
)
_DIR_VERSION = b"Directory Transport Version:"


def skopeo() -> str:
    found = shutil.which("skopeo")
    if found is None:
        raise UsageError("Writing containers-storage: or dir: images needs skopeo, which is not installed.",
                         hint="Install skopeo (the `skopeo` package), or write oci:DIR:TAG and copy it yourself.")
    return found


def check_skopeo_destination(transport: str, rest: str) -> Path | None:
    """Refuse a bad destination before anything is computed; the DIR of a `dir:` output, else None."""
    if transport == "containers-storage":
        if not _NAME.match(rest):
            raise UsageError(f"containers-storage:{rest} names no image as podman spells one (NAME[:TAG], e.g. "
                             "localhost/app:1.0-fixed).", hint="podman images lists the names it holds.")
        skopeo()
        return None
    dest = Path(rest)
    if not rest or not dest.parent.is_dir():
        raise UsageError(f"Cannot write the image to dir:{rest}: directory {str(dest.parent)!r} does not exist.")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"Cannot write the image to dir:{rest}: it exists and is not a directory.")
    if dest.is_dir() and any(dest.iterdir()) and not _is_dir_image(dest):
        raise UsageError(f"Cannot write the image to dir:{rest}: it holds files that are not an image skopeo wrote "
                         "(no `version` file).", hint="Name a new or empty directory, or an earlier dir: image.")
    skopeo()
    return dest


def _is_dir_image(dest: Path) -> bool:
    version = dest / "version"
    try:
        return version.is_file() and not version.is_symlink() and version.read_bytes().startswith(_DIR_VERSION)
    except OSError:
        return False


def write_through_skopeo(img: NewImage, transport: str, rest: str) -> None:
    """Write `img` to `transport:rest` (checked by check_skopeo_destination); whole or not at all."""
    dest = check_skopeo_destination(transport, rest)
    where = dest.parent if dest is not None else None  # beside DIR: base blobs are hard-linked, not copied
    with tempfile.TemporaryDirectory(prefix=".imgquilt-out.", dir=where) as tmp:
        layout = Path(tmp) / "layout"
        write_layout(img, layout, "imgquilt")
        if dest is None:
            _copy(f"oci:{layout}:imgquilt", f"containers-storage:{rest}")
            return
        with output_dir(dest, failure=f"Cannot write the image to dir:{rest}") as new:
            _copy(f"oci:{layout}:imgquilt", f"dir:{new}")


def _copy(src: str, dst: str) -> None:
    from ..sources.skopeo_copy import skopeo_message

    proc = subprocess.run([skopeo(), "copy", "--quiet", "--preserve-digests", src, dst], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadImage(f"skopeo could not write {dst}: {skopeo_message(proc.stderr) or f'exit status {proc.returncode}'}.",
                       hint="`skopeo copy` the image from an oci: output yourself to see what it says.")
