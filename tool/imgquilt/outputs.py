"""The outputs of `apply`: checked before anything is read, written only after everything verified."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .engine.plan import plan_apply
from .engine.result import ApplyResult
from .errors import UsageError
from .fs.types import ImageInfo, Source
from .image.model import Image
from .queue.lock import Lock
from .queue.queue import Queue
from .store import remember


@dataclass(frozen=True)
class Outputs:
    """What the user asked `apply` to write."""

    layer: Path | None = None
    image: str | None = None
    root: Path | None = None
    overlay: Path | None = None

    @property
    def any(self) -> bool:
        return any(x is not None for x in (self.layer, self.image, self.root, self.overlay))


def check_destinations(outputs: Outputs, source: ImageInfo) -> None:
    """Refuse bad destinations up front, so a later one cannot fail after an earlier one was written."""
    from .image.image_writer import check_image_destination
    from .image.layer_writer import check_layer_destination
    from .image.overlay import check_overlay_destination

    if outputs.layer is not None:
        check_layer_destination(outputs.layer)
    if outputs.image is not None:
        if source.kind != "image":
            raise UsageError(
                f"--output-image needs a container image as its base, but {source.ref} is a {source.kind}.",
                hint="Give --image with an image reference (oci:, oci-archive:, docker-archive:, ...), or write --layer only.",
            )
        check_image_destination(outputs.image)
    if outputs.overlay is not None:
        check_overlay_destination(outputs.overlay)


def check_result(outputs: Outputs, result: ApplyResult) -> None:
    """Refusals that depend on what the series does (an overlay cannot bind-mount a deletion)."""
    from .image.overlay import check_overlay

    if outputs.overlay is not None:
        check_overlay(result)


def write_outputs(outputs: Outputs, result: ApplyResult, open_base: Callable[[], Image], held: Any = None) -> dict[str, dict[str, Any]]:
    """Write every requested output; return what was written, for the report."""
    written: dict[str, dict[str, Any]] = {}
    if outputs.layer is not None:
        from .image.layer_writer import write_layer

        info = write_layer(result, outputs.layer)
        written["layer"] = {"path": str(outputs.layer), "digest": info.digest, "diff_id": info.diff_id,
                            "media_type": info.media_type, "size": info.size}
    if outputs.image is not None:
        from .image.image_writer import write_image

        img = write_image(open_base(), result, outputs.image)
        written["image"] = {"ref": outputs.image, "digest": img.digest, "config_digest": img.config_digest,
                            "layer_digest": img.layer_digest, "diff_id": img.diff_id}
    if outputs.overlay is not None:
        from .image.overlay import write_overlay

        ov = write_overlay(result, outputs.overlay)
        written["overlay"] = {"path": str(outputs.overlay), "mounts": str(ov.mounts_file)}
    if outputs.root is not None:
        from .rootfs.inplace import write_in_place

        changed = write_in_place(outputs.root, result, held=held)
        written["root"] = {"path": str(outputs.root), "changed": changed}
    return written


def apply_queue(queue: Queue, source: Source, lock: Lock | None, outputs: Outputs, open_base: Callable[[], Image], *,
                locked: bool = False, python_check: bool = True) -> tuple[ApplyResult, dict[str, dict[str, Any]]]:
    """The whole apply: check destinations, verify in memory, keep the bytes for rebase, write."""
    from .rootfs.inplace import hold_root

    check_destinations(outputs, source.info())
    # --root: lock it and recover a crashed apply before the plan reads it, so concurrent applies serialize
    with hold_root(outputs.root) as held:
        result = plan_apply(queue, source, lock, locked=locked, python_check=python_check)
        check_result(outputs, result)
        root = outputs.root
        if root is None or not queue.root.resolve().is_relative_to(root.resolve()):
            # not when the queue sits inside the root being patched (RUN imgquilt apply --root /):
            # the stored copies would end up in the image
            remember(queue.root, [x for f in result.files if f.patches for x in (f.target.data, f.final)])
        return result, write_outputs(outputs, result, open_base, held)
