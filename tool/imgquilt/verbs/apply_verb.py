"""The `apply` verb: one request (ApplyRequest), fanned out over profiles or platforms, each cell
planned, verified and written through verbs/apply.py's outputs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..engine.result import ApplyResult
from ..errors import UsageError
from ..fs.types import Source
from ..image.model import Image
from ..pycheck import checks
from .apply import Outputs, apply_queue, check_destinations


# --- the verb: one request, fanned out over profiles or platforms -------------------------------
@dataclass(frozen=True)
class Applied:
    """A verified apply and what it wrote, per output kind ("layer", "image", "root", "overlay")."""

    result: ApplyResult
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    profile: str | None = None  # the profile applied (None: the default)
    boot: Any = None  # with boot=True: the verbs.boot.BootReport that let the outputs be written


@dataclass(frozen=True)
class PlatformsApplied:
    """`apply --platform all`: each platform's verified result (in the index's order) and the index written."""

    ref: str
    results: tuple[tuple[str, ApplyResult], ...]
    written: dict[str, Any]


@dataclass(frozen=True)
class ApplyRequest:
    """`imgquilt apply` as asked (api.apply's keywords, plus the CLI's `reverse`, which only the
    combination rule reads, and `progress_of`, the progress of one reference's reads by name)."""

    queue: str | os.PathLike[str] | None = None
    image: str | None = None
    layer: str | os.PathLike[str] | None = None
    output_image: str | None = None
    root: str | os.PathLike[str] | None = None
    overlay: str | os.PathLike[str] | None = None
    platform: str | None = None
    locked: bool = False
    python_check: bool = True
    progress: Any = None
    attest: str | os.PathLike[str] | None = None
    compression: str | None = None
    profile: str | None = None
    compression_level: int | None = None
    boot_check: bool = False
    boot_timeout: float = 120.0
    reverse: bool = False
    progress_of: Callable[[str], Any] | None = None


def refuse_apply(req: ApplyRequest) -> None:
    """The combinations `apply` refuses before reading anything (`--reverse` has its own rules, in
    the verb that takes a root back)."""
    from .fanout import select

    sel = select(req.profile, req.platform)
    if req.boot_check and (req.reverse or sel.every_profile or sel.every_platform):
        raise UsageError("--boot boots one image: it cannot go with --reverse, --profile all or --platform all.",
                         hint="Boot each profile or platform on its own: imgquilt apply --boot --profile NAME ...")
    if req.reverse:
        return
    if sel.every_profile:
        if sel.every_platform or req.image is not None or req.root is not None:
            raise UsageError("`apply --profile all` applies each profile on the image it pins; give it no --image, --root "
                             "or --platform all.", hint="Apply one profile with --profile NAME.")
        return
    if sel.every_platform and req.profile is not None:
        raise UsageError("--platform all takes the default selection; give one of --platform all and --profile.")
    if sel.every_platform and (req.layer is not None or req.root is not None or req.overlay is not None):
        raise UsageError("--platform all writes an image index (--output-image) or only verifies; "
                         "--layer, --root and --overlay take one platform.", hint="Pick one with --platform OS/ARCH.")


def run_apply(req: ApplyRequest) -> Applied | tuple[Applied, ...] | PlatformsApplied:
    """The CLI's `apply` (not --reverse): one selection (Applied), every profile (`--profile all`: a
    tuple, one per profile) or every platform (`--platform all`: PlatformsApplied)."""
    from .fanout import select

    refuse_apply(req)
    sel = select(req.profile, req.platform)
    if sel.every_profile:
        return apply_profiles(req)
    if sel.every_platform:
        return apply_platforms_of(req)
    return apply(req)


def apply(req: ApplyRequest) -> Applied:
    """One selection applied (api.apply says how)."""
    from ..sources import open_image
    from .profiles import fill, lock_file, need_profile, other_pins, resolve
    from .refs import cache_dir, load_queue, naming, open_ref, other_pin, pick_ref, signing_key
    from .restore import image_bytes

    platform, progress, profile = req.platform, req.progress, req.profile
    key = signing_key(req.attest)
    q = load_queue(req.queue)
    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf)
    need_profile(chosen, lf)  # stricter than need_pin: also with --image or --root
    pinned = chosen.lock
    # `--profile NAME` fills {profile} in an output path as --profile all does
    layer, output_image = fill(req.layer, chosen.name, "--layer"), fill(req.output_image, chosen.name, "--output-image")
    overlay = fill(req.overlay, chosen.name, "--overlay")
    root_dir = Path(req.root) if req.root is not None else None
    ref = f"rootfs:{root_dir}" if req.image is None and root_dir is not None else pick_ref(req.image, pinned, q.root)
    source = open_ref(ref, platform, root=q.root, progress=progress)
    outputs = Outputs(layer=Path(layer) if layer is not None else None, image=output_image, root=root_dir,
                      overlay=Path(overlay) if overlay is not None else None, compression=req.compression,  # type: ignore[arg-type]
                      compression_level=req.compression_level)
    theirs = other_pins(chosen, lf, source.info().digest)

    def open_base() -> Image:
        # reuse the image the source already opened (a skopeo transport would be copied twice)
        return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir(q.root))

    booted = None
    if req.boot_check:  # before any output: a patch that fails to boot writes nothing
        from .boot import boot_queue
        from .refs import open_ref as opener, pick_ref as picker

        check_destinations(outputs, source.info(), key, q.root)
        booted = boot_queue(load_queue(q.root), image=ref, root=None, overlay=None, platform=platform, profile=profile,
                            timeout=req.boot_timeout, memory=None, command=(), mount_queue=None, progress=progress,
                            on_probe=None, open_ref=opener, pick_ref=picker,
                            image_bytes=lambda r, lock: image_bytes(r, lock, platform, progress), importers=5)
        failure = booted.failure()
        if failure is not None:
            failure.message += " Nothing was written (apply --boot)."
            raise failure
        if key is not None:  # the attestation carries the boot result as an in-toto test-result predicate
            from dataclasses import replace as _with

            key = _with(key, boot=booted)
    with naming(chosen.name), other_pin(chosen, theirs):
        result, written = apply_queue(chosen.queue, source, pinned, outputs, open_base, locked=req.locked,
                                      python_check=req.python_check, attest=key, env=chosen.env,
                                      image_bytes=image_bytes(q.root, pinned, platform, progress),
                                      boot=booted.record() if booted is not None else None)
    return Applied(result, written, chosen.name, booted)


def apply_profiles(req: ApplyRequest) -> tuple[Applied, ...]:
    """`apply --profile all` (api.apply_profiles says how): every profile verified on its own image
    before any output is written."""
    from ..engine.plan import plan_apply
    from ..errors import ImgquiltError
    from ..sources import open_image
    from .fanout import Selection, fan_out
    from .profiles import check_placeholders, fill, resolve
    from .refs import cache_dir, load_queue, naming, open_ref, pick_ref, signing_key

    platform, progress = req.platform, req.progress
    layer = None if req.layer is None else str(req.layer)
    overlay = None if req.overlay is None else str(req.overlay)
    q = load_queue(req.queue)
    chosen = [c.profile or resolve(q, None) for c in fan_out(Selection(req.profile), q)]  # one platform: --platform as given
    check_placeholders(len(chosen), output_image=req.output_image, layer=layer, overlay=overlay)
    key = signing_key(req.attest)
    planned = []
    python = checks(req.python_check)
    for r in chosen:
        ref = pick_ref(None, r.lock, q.root)
        source = open_ref(ref, platform, root=q.root, progress=progress)
        layer_i, overlay_i = fill(layer, r.name, "--layer"), fill(overlay, r.name, "--overlay")
        outputs = Outputs(layer=Path(layer_i) if layer_i is not None else None, image=fill(req.output_image, r.name, "--output-image"),
                          overlay=Path(overlay_i) if overlay_i is not None else None, compression=req.compression,  # type: ignore[arg-type]
                          compression_level=req.compression_level)
        try:
            with naming(r.name):
                check_destinations(outputs, source.info(), key, r.queue.root)
                plan_apply(r.queue, source, r.lock, locked=req.locked, python=python, env=r.env)
        except ImgquiltError as exc:
            exc.hint = "\n".join(x for x in (exc.hint, "Nothing was written for any profile.") if x)
            raise
        planned.append((r, ref, source, outputs))
    done = []
    for r, ref, source, outputs in planned:
        def open_base(source: Source = source, ref: str = ref) -> Image:
            return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir(q.root))

        result, written = apply_queue(r.queue, source, r.lock, outputs, open_base, locked=req.locked,
                                      python_check=req.python_check, attest=key, env=r.env)
        done.append(Applied(result, written, r.name))
    return tuple(done)


def apply_platforms_of(req: ApplyRequest) -> PlatformsApplied:
    """`apply --platform all`: every platform of the image verified on its own bases, then one index
    written (verbs.platforms)."""
    from .fanout import fan_out, select
    from .platforms import apply_platforms
    from .refs import load_queue, open_ref, pick_ref, signing_key

    q = load_queue(req.queue)
    lock = q.lock()
    ref = pick_ref(req.image, lock, q.root)
    key = signing_key(req.attest)
    cells = fan_out(select(None, req.platform), q, ref=ref)
    shown = req.progress_of or (lambda _ref: req.progress)
    results, written = apply_platforms(q, [str(c.platform) for c in cells], lambda p: open_ref(ref, p, root=q.root, progress=shown(ref)),
                                       lock, req.output_image, locked=req.locked, python_check=req.python_check, attest=key,
                                       compression=req.compression, compression_level=req.compression_level)
    return PlatformsApplied(ref, tuple(results), written)  # type: ignore[arg-type]
