"""The outputs of `apply`: checked before anything is read, written only after everything verified.

The image sinks know layers and images, not apply results: this verb turns a verified ApplyResult
into the file changes a layer or overlay holds, and into the Addendum (layer, history, labels) that
goes on top of the base image.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from ..engine.plan import plan_apply_gated
from ..pycheck import checks
from ..engine.record import names_series
from ..engine.result import RECORD_PATH, ApplyResult
from ..errors import UsageError
from ..fs.types import FileChange, ImageInfo, Source
from ..image.mediatypes import LAYER_FORMATS, LayerFormat
from ..image.model import Image
from ..image.referrers import Referrer
from ..image.sinks import layer as layer_sink
from ..image.sinks import overlay as overlay_sink
from ..image.sinks.image import WrittenImage, check_image_destination, check_referrer_destination, parse_output_ref, write_new_image
from ..image.sinks.layer import LayerBlob, LayerEntry, LayerInfo, resolve_epoch
from ..image.sinks.mutate import Addendum, History, NewImage, append, config_env, created_of, unchanged
from ..image.sinks.overlay import OverlayInfo
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..store import ObjectStore, remember


class Attester(Protocol):
    """What signs an image's attestation (verbs.attest.Attester): the referrer, and how it is reported."""

    def referrer(self, result: ApplyResult, img: NewImage, ref: str, platform: str | None = None) -> Referrer: ...

    def stored_json(self, stored: tuple[tuple[str, str], ...]) -> list[dict[str, str]]: ...

LABEL_SERIES = "org.imgquilt.series.sha256"
LABEL_PATCHES = "org.imgquilt.patches"


@dataclass(frozen=True)
class Outputs:
    """What the user asked `apply` to write."""

    layer: Path | None = None
    image: str | None = None
    root: Path | None = None
    overlay: Path | None = None
    compression: LayerFormat | None = None  # of the new layer in `image` (None: the destination's default)
    compression_level: int | None = None  # of the new layer (--layer and --output-image); None: the default

    @property
    def any(self) -> bool:
        return any(x is not None for x in (self.layer, self.image, self.root, self.overlay))


# --- the apply result as the sinks take it ----------------------------------------------------
def patched_files(result: ApplyResult) -> tuple[FileChange, ...]:
    """Every file the series leaves changed or deleted (absent before and after says nothing)."""
    return tuple(
        FileChange(f.target.path, f.resolved, f.final, f.mode, f.uid, f.gid, f.target.parents, link=f.link)
        for f in result.files
        if f.final is not None or f.target.data is not None
    )


def file_changes(result: ApplyResult) -> tuple[FileChange, ...]:
    """What a layer holds: the patched files, and a deletion of every stale bytecode file."""
    return patched_files(result) + tuple(FileChange(b.path, b.path, None, parents=b.parents) for b in result.bytecode)


def addendum(result: ApplyResult, layer: LayerBlob, created: int, created_text: str | None = None) -> Addendum:
    """The layer plus the history entry and labels that say which series made it."""
    history = History(created, f"imgquilt apply {result.series_sha256}",
                      "imgquilt: " + (", ".join(result.patches) or "no patches"), created_text)
    return Addendum(layer, history, {LABEL_SERIES: result.series_sha256, LABEL_PATCHES: ",".join(result.patches)}, result.env)


def layer_entries(result: ApplyResult) -> list[LayerEntry]:
    return layer_sink.layer_entries(file_changes(result))


def layer_tar_bytes(result: ApplyResult, *, epoch: int | None = None) -> bytes:
    return layer_sink.layer_tar_bytes(file_changes(result), epoch=epoch)


def build_layer(result: ApplyResult, compression: LayerFormat = "gzip", *, epoch: int | None = None,
                level: int | None = None) -> LayerBlob:
    return layer_sink.build_layer(file_changes(result), compression, epoch=epoch, level=level)


def write_layer(result: ApplyResult, dest: Path, *, epoch: int | None = None, level: int | None = None) -> LayerInfo:
    return layer_sink.write_layer(file_changes(result), dest, epoch=epoch, level=level)


def check_overlay(result: ApplyResult) -> None:
    overlay_sink.check_overlay(patched_files(result))


def write_overlay(result: ApplyResult, dest: Path) -> OverlayInfo:
    """The patched files, and an empty file mounted over each stale bytecode file (CPython ignores a
    pyc without a header and compiles the source; it cannot replace a mount point, so it keeps it)."""
    return overlay_sink.write_overlay(patched_files(result), dest, hidden=[b.path for b in result.bytecode], env=result.env)


def changes_image(result: ApplyResult) -> bool:
    """Does writing `result` change anything in the image or root? The one test every output asks
    before it writes: a layer that changes nothing is never written. Nothing changes when every file
    is already at the series' result and the record there already names this series (a record that
    is missing or names another series is a change: audit reads it)."""
    changed = [f for f in result.files if f.changed]
    if result.bytecode or any(f.target.path != RECORD_PATH for f in changed):
        return True
    return bool(changed) and not names_series(changed[0].target.data, result.series_sha256)


def new_image(base: Image, result: ApplyResult, compression: LayerFormat, *, epoch: int | None = None,
              level: int | None = None) -> NewImage:
    """The base image with the series' layer on top (nothing written); the base as it is when the
    series changes nothing in it (see changes_image)."""
    when = resolve_epoch(epoch)
    if not changes_image(result) and env_holds(base, result.env):
        return unchanged(base, when)
    return append(base, addendum(result, build_layer(result, compression, epoch=when, level=level), when, created_date(base, epoch)))


def created_date(base: Image, epoch: int | None = None) -> str | None:
    """The new image's `created` (and its history entry's): SOURCE_DATE_EPOCH (or `epoch`) when set,
    else the base's own, so a patched image is dated as the image it patches, not 1970 nor the moment
    it was written (which would make every run a new image). None: the layer's epoch (the base has no date)."""
    import os

    if epoch is not None or os.environ.get("SOURCE_DATE_EPOCH", "").strip():
        return None
    return created_of(base.config_bytes)


def env_holds(base: Image, env: tuple[tuple[str, str], ...]) -> bool:
    """Does the base's config already set every environment default the apply declares?"""
    if not env:
        return True
    have = config_env(base.config_bytes) or {}
    return all(have.get(k) == v for k, v in env)


def env_report(base: Image, env: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """`outputs.image.env`: the defaults set, and each key the base set to another value (replaced)."""
    cfg = config_env(base.config_bytes) or {}
    return {"set": dict(env), "replaced": {k: cfg[k] for k, v in env if k in cfg and cfg[k] != v}}


def write_image(base: Image, result: ApplyResult, ref: str, *, epoch: int | None = None,
                compression: LayerFormat | None = None, attest: Attester | None = None,
                level: int | None = None) -> WrittenImage:
    """Write `base` plus the layer of `result` to `ref`; whole or not at all. With `attest`, a signed
    attestation of the apply goes with it (verbs.attest).

    `compression` is the new layer's (default: gzip for oci/oci-archive, none for docker-archive).
    """
    out = check_image_destination(ref)
    check_compression(compression, out.transport)
    layer_sink.check_level(compression or out.default_compression, level)
    img = new_image(base, result, compression or out.default_compression, epoch=epoch, level=level)
    referrers = [attest.referrer(result, img, ref)] if attest is not None else []
    return write_new_image(img, ref, referrers)


def check_compression(compression: str | None, transport: str | None) -> None:
    """`--compression`: one of LAYER_FORMATS, for an image output whose manifest can announce a TOC."""
    if compression is None:
        return
    if compression not in LAYER_FORMATS:
        raise UsageError(f"Unknown layer compression {compression!r}: use one of {', '.join(LAYER_FORMATS)}.")
    if transport is None:
        raise UsageError("--compression sets the new layer's compression in --output-image; give --output-image.",
                         hint="A --layer file takes its compression from its name (.tar, .tar.gz, .tar.zst).")
    if compression == "zstd:chunked" and transport == "docker-archive":
        raise UsageError("A docker-archive has no layer annotations, so it cannot announce a zstd:chunked TOC.",
                         hint="Write oci:, oci-archive: or docker:// for zstd:chunked, or use --compression zstd.")


def check_compression_level(outputs: Outputs) -> None:
    """`--compression-level`: for a layer that is compressed (by --layer's name, --compression or the
    image destination's default), in that compression's range."""
    level = outputs.compression_level
    if level is None:
        return
    kinds = []
    if outputs.layer is not None:
        kinds.append(layer_sink.compression_for(outputs.layer))
    if outputs.image is not None:
        kinds.append(outputs.compression or check_image_destination(outputs.image).default_compression)
    if not kinds:
        raise UsageError("--compression-level sets the level of the new layer: give --layer or --output-image with it.")
    for kind in kinds:
        layer_sink.check_level(kind, level)


# --- the verb ----------------------------------------------------------------------------------
def check_destinations(outputs: Outputs, source: ImageInfo, attest: Attester | None = None,
                       queue_root: Path | None = None) -> None:
    """Refuse bad destinations up front, so a later one cannot fail after an earlier one was written.
    With `queue_root`, also any that would land on the queue's own files (check_outside_queue)."""
    if queue_root is not None:
        check_outside_queue(outputs, queue_root)
    if attest is not None:
        if outputs.image is None:
            raise UsageError("--attest signs the image --output-image writes; give --output-image REF with it.")
        check_referrer_destination(outputs.image)
    if outputs.layer is not None:
        layer_sink.check_layer_destination(outputs.layer)
    check_compression(outputs.compression, None if outputs.image is None else check_image_destination(outputs.image).transport)
    check_compression_level(outputs)
    if outputs.image is not None:
        if source.kind != "image":
            raise UsageError(
                f"--output-image needs a container image as its base, but {source.ref} is a {source.kind}.",
                hint="Give --image with an image reference (oci:, oci-archive:, docker-archive:, ...), or write --layer only.",
            )
        check_image_destination(outputs.image)
    if outputs.overlay is not None:
        overlay_sink.check_overlay_destination(outputs.overlay)


# the queue's own files: an output there would replace them (a directory such as out/ beside them is fine)
_QUEUE_FILES = ("series", "targets.lock")
_QUEUE_DIRS = ("patches", ".imgquilt")


def check_outside_queue(outputs: Outputs, queue_root: Path) -> None:
    """Refuse an output whose path is the queue's series or targets.lock, or lies below its patches/ or
    .imgquilt/, and an overlay directory that holds the queue (its rewrite replaces the directory whole),
    as the kernel resolves them (symlinks on the way followed)."""
    from os.path import realpath

    root = Path(realpath(queue_root))
    owned = [root / n for n in _QUEUE_FILES]
    below = [root / n for n in _QUEUE_DIRS]
    dests: list[tuple[str, Path, bool]] = []  # (option, path, replaced whole as a directory)
    if outputs.layer is not None:
        dests.append(("--layer", outputs.layer, False))
    if outputs.overlay is not None:
        dests.append(("--overlay", outputs.overlay, True))
    if outputs.image is not None and not outputs.image.startswith("docker://"):
        out = parse_output_ref(outputs.image)
        if out.path is not None:
            dests.append(("--output-image", out.path, False))
    for option, dest, whole in dests:
        path = Path(realpath(dest))
        clash = next((q for q in owned if path == q), None) or next((d for d in below if path == d or d in path.parents), None)
        if clash is None and whole and (path == root or path in root.parents):
            clash = root
        if clash is not None:
            what = "directory, with every file in it" if clash == root else clash.name + ("/" if clash in below else "")
            raise UsageError(f"{option} {str(dest)!r} would write over the queue's {what} ({clash}); nothing was written.",
                             hint="Write outputs outside the queue's own files (series, targets.lock, patches/, .imgquilt/): "
                                  "a directory such as out/ beside them is fine.")


def check_result(outputs: Outputs, result: ApplyResult) -> None:
    """Refusals that depend on what the series does (an overlay cannot bind-mount a deletion)."""
    if outputs.overlay is not None:
        check_overlay(result)


def write_image_output(ref: str, result: ApplyResult, open_base: Callable[[], Image],
                       compression: LayerFormat | None = None, attest: Attester | None = None,
                       level: int | None = None) -> dict[str, Any]:
    base = open_base()
    img = write_image(base, result, ref, compression=compression, attest=attest, level=level)
    out = {"ref": ref, "digest": img.digest, "config_digest": img.config_digest,
           "layer_digest": img.layer_digest, "diff_id": img.diff_id, "unchanged": img.layer_digest is None}
    if img.store is not None:
        out["store"] = img.store
    if result.env:
        out["env"] = env_report(base, result.env)
    if attest is not None:
        out["attestations"] = attest.stored_json(img.referrers)
    return out


def write_outputs(outputs: Outputs, result: ApplyResult, open_base: Callable[[], Image], held: Any = None,
                  gate: Callable[[], None] | None = None, attest: Attester | None = None) -> dict[str, dict[str, Any]]:
    """Write every requested output; return what was written, for the report. `gate` must pass before
    anything becomes visible: an in-place write stages its files first and asks it before the commit;
    any other output asks it before it starts."""
    written: dict[str, dict[str, Any]] = {}
    changes = changes_image(result)  # nothing to change: no layer, overlay or in-place write; an image as it is
    only_root = outputs.root is not None and all(o is None for o in (outputs.layer, outputs.image, outputs.overlay))
    if gate is not None and not only_root:
        gate()
        gate = None
    if outputs.image is not None and outputs.image.startswith("docker://"):
        written["image"] = write_image_output(outputs.image, result, open_base, outputs.compression, attest,
                                              outputs.compression_level)  # the network fails most: first
    if outputs.layer is not None and changes:
        info = write_layer(result, outputs.layer, level=outputs.compression_level)
        written["layer"] = {"path": str(outputs.layer), "digest": info.digest, "diff_id": info.diff_id,
                            "media_type": info.media_type, "size": info.size}
    if outputs.image is not None and "image" not in written:
        written["image"] = write_image_output(outputs.image, result, open_base, outputs.compression, attest,
                                              outputs.compression_level)
    if outputs.overlay is not None and changes:
        ov = write_overlay(result, outputs.overlay)
        written["overlay"] = {"path": str(outputs.overlay), "mounts": str(ov.mounts_file)}
        if ov.env_file is not None:
            written["overlay"]["env"] = {"set": dict(result.env), "file": str(ov.env_file)}
    if outputs.root is not None:
        from ..rootfs.inplace import write_in_place

        changed = write_in_place(outputs.root, result, held=held, gate=gate) if changes else []
        stale = {b.path for b in result.bytecode}
        written["root"] = {"path": str(outputs.root), "changed": [p for p in changed if p not in stale],
                           "bytecode_removed": [p for p in changed if p in stale]}
        if result.env:  # recorded in applied.json; a root has no config to hold them
            written["root"]["env"] = {"set": dict(result.env), "runtime": True}
    return written


def apply_queue(queue: Queue, source: Source, lock: Lock | None, outputs: Outputs, open_base: Callable[[], Image], *,
                locked: bool = False, python_check: bool = True, attest: Attester | None = None,
                env: tuple[tuple[str, str], ...] = (),
                image_bytes: Callable[[str, str], tuple[bool, bytes | None]] | None = None,
                boot: dict | None = None) -> tuple[ApplyResult, dict[str, dict[str, Any]]]:
    """The whole apply: check destinations, verify in memory, keep the bytes for rebase, write (and
    sign, with `attest`). `env`: environment defaults for the config of `outputs.image` (recorded).
    `image_bytes`: the pinned image's bytes of a path by sha256, for the diff of a file edited by hand
    in a root (default: the object store's). `boot`: apply --boot's result, kept in the record."""
    from ..rootfs.inplace import hold_root
    from ..rootfs.source import RootfsSource

    check_destinations(outputs, source.info(), attest, queue.root)
    # --root: lock it and recover a crashed apply before the plan reads it, so concurrent applies serialize
    with hold_root(outputs.root) as held:
        python = checks(python_check)
        # the Python check runs on in other processes while an in-place write stages its files
        # in place, the bytecode to remove is the root's own (it may differ from an --image's)
        bytecode_source = RootfsSource(outputs.root) if outputs.root is not None else None
        result, gate = plan_apply_gated(queue, source, lock, locked=locked, python=python, bytecode_source=bytecode_source, env=env,
                                        image_bytes=image_bytes or (lambda _path, sha: ObjectStore(queue.root).get_or_absent(sha)),
                                        boot=boot)
        try:
            check_result(outputs, result)
            root = outputs.root
            if root is None or not queue.root.resolve().is_relative_to(root.resolve()):
                # not when the queue sits inside the root being patched (RUN imgquilt apply --root /):
                # the stored copies would end up in the image. Stored before any output is written:
                # a store that cannot be written (a planted link) refuses the run with nothing written
                remember(queue.root, [x for f in result.files if f.patches for x in (f.target.data, f.final)])
                if root is not None and changes_image(result):
                    from .versions import remember_applied

                    remember_applied(queue.root, result.series_sha256)  # `apply --reverse` knows this version then
            written = write_outputs(outputs, result, open_base, held, gate=gate.check, attest=attest)
            gate.check()  # when nothing had to be written, the check still decides
        finally:
            gate.close()
        return result, written
