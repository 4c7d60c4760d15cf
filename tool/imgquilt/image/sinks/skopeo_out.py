"""`--output-image containers-storage:NAME` and `dir:DIR`: where podman and buildah users keep images,
written through skopeo, as the reads of those transports already are (sources/skopeo_copy.py).

The new image is first written as an OCI layout in a temporary directory (base blobs hard-linked
when they are on the same filesystem, else streamed and re-hashed, as `oci:` writes them), then
`skopeo copy --preserve-digests` puts it in place, so the manifest and config digests imgquilt reports
are the ones podman shows. A `dir:` image is copied into a new directory beside DIR and renamed into
place whole; containers-storage commits an image as a whole itself.

`containers-storage:` goes to the store podman uses (image.containers_store): its driver and roots are
named to skopeo, and podman is asked afterwards whether it lists the image; when it does not, the
image is removed again and the write refused (StoreNotPodmans).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import BadImage, StoreNotPodmans, UsageError
from ..containers_store import Store, StorageRef, check_write_store, podman_image_id, resolve
from .layout import write_layout
from .mutate import NewImage
from .output_file import output_dir

SKOPEO_OUTPUTS = ("containers-storage", "dir")
_NAME = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$"
)
_DIR_VERSION = b"Directory Transport Version:"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def skopeo() -> str:
    found = shutil.which("skopeo")
    if found is None:
        raise UsageError("Writing containers-storage: or dir: images needs skopeo, which is not installed.",
                         hint="Install skopeo (the `skopeo` package), or write oci:DIR:TAG and copy it yourself.")
    return found


def check_skopeo_destination(transport: str, rest: str) -> Path | None:
    """Refuse a bad destination before anything is computed; the DIR of a `dir:` output, else None."""
    hostile = _hostile(transport, rest)
    if hostile is not None:
        raise UsageError(f"Cannot write an image to {transport}:{rest!r}: {hostile}.",
                         hint="Name the destination with plain characters (an absolute path for dir:, NAME[:TAG] for "
                              "containers-storage:).")
    if transport == "containers-storage":
        from ..containers_store import parse_specifier, split_specifier

        spec, name = split_specifier(rest)
        if not _NAME.match(name):
            raise UsageError(f"containers-storage:{rest} names no image as podman spells one (NAME[:TAG], e.g. "
                             "localhost/app:1.0-fixed).", hint="podman images lists the names it holds.")
        if spec is not None:
            parse_specifier(spec, whole=rest)
        skopeo()
        check_write_store(resolve(rest))  # asks podman where its store is: a podman that cannot say refuses here
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


def _hostile(transport: str, rest: str) -> str | None:
    """What makes a destination name one imgquilt will not hand to skopeo: control characters (a newline
    splits the reports that name it), `,` (skopeo's option separator) and `..` components."""
    bad = _CONTROL.search(rest)
    if bad:
        return f"it holds the control character {bad.group()!r}"
    if "," in rest:
        return "it holds `,`"
    if transport == "dir" and ".." in rest.split("/"):
        return "its path holds a `..` component"
    return None


def _is_dir_image(dest: Path) -> bool:
    version = dest / "version"
    try:
        return version.is_file() and not version.is_symlink() and version.read_bytes().startswith(_DIR_VERSION)
    except OSError:
        return False


def write_through_skopeo(img: NewImage, transport: str, rest: str) -> Store | None:
    """Write `img` to `transport:rest` (checked by check_skopeo_destination); whole or not at all. For
    containers-storage, the store written."""
    dest = check_skopeo_destination(transport, rest)
    where = dest.parent if dest is not None else None  # beside DIR: base blobs are hard-linked, not copied
    with tempfile.TemporaryDirectory(prefix=".imgquilt-out.", dir=where) as tmp:
        layout = Path(tmp) / "layout"
        write_layout(img, layout, "imgquilt")
        if dest is None:
            ref = resolve(rest)
            image_id = img.config_digest.removeprefix("sha256:")
            had = ref.store.named_by == "podman" and _holds(ref, image_id)
            _copy(f"oci:{layout}:imgquilt", ref.skopeo_ref)
            if ref.store.named_by == "podman":
                _confirm_podman_sees(ref, image_id, had)
            return ref.store
        with output_dir(dest, failure=f"Cannot write the image to dir:{rest}") as new:
            _copy(f"oci:{layout}:imgquilt", f"dir:{new}")
    return None


def _holds(ref: StorageRef, image_id: str) -> bool:
    """Does the store already hold this image (then a refused write must not remove it)?"""
    proc = subprocess.run([skopeo(), "inspect", "--raw", f"containers-storage:{ref.store.specifier}@{image_id}"],
                          stdin=subprocess.DEVNULL, capture_output=True)
    return proc.returncode == 0


def _confirm_podman_sees(ref: StorageRef, image_id: str, had: bool) -> None:
    """podman lists `ref.name` as the image just written, or it is removed again and the write refused."""
    from ..containers_store import ask_podman, podman

    if podman_image_id(ref.name) == image_id:
        return
    if not had:
        subprocess.run([skopeo(), "delete", f"containers-storage:{ref.store.specifier}@{image_id}"],
                       stdin=subprocess.DEVNULL, capture_output=True)
    exe = podman()
    try:
        now = ask_podman(exe).describe() if exe is not None else "podman is gone"
    except BadImage as exc:
        now = exc.message
    raise StoreNotPodmans(
        f"skopeo wrote containers-storage:{ref.name} with the {ref.store.driver} driver at {ref.store.graph_root} "
        f"(run root {ref.store.run_root}), the store `podman info` named, but podman does not list it there "
        f"(podman's store now: {now}); "
        + ("it was removed again, nothing is written." if not had else "the store held that image before; it is left as it was."),
        hint="podman and skopeo see different stores here (another driver, a mount namespace, a toolbox); "
             "write oci-archive:FILE and `podman load -i FILE`, or name the store podman uses: "
             "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME.")


def _copy(src: str, dst: str) -> None:
    from ..skopeo_text import skopeo_message

    proc = subprocess.run([skopeo(), "copy", "--quiet", "--preserve-digests", src, dst], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadImage(f"skopeo could not write {dst}: {skopeo_message(proc.stderr) or f'exit status {proc.returncode}'}.",
                       hint="`skopeo copy` the image from an oci: output yourself to see what it says.")
