"""`lock`, `apply` and `check`: parse, call the core, render."""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, List, Optional

import typer

from ..errors import PythonCheckFailed, Refused, UsageError, shown, shown_env
from . import documents, listing
from .annotations import Format, FormatOpt_help
from .common import (G, ImageOpt, PlatformOpt, ProfileOpt, VerboseOpt, emit_json, note, progress, ref_progress, say, table)

if TYPE_CHECKING:
    from ..engine.result import ApplyResult


def lock_cmd(
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the check that patched .py files gain no errors."),
    profile: Optional[str] = ProfileOpt,
    select: Optional[list[str]] = typer.Option(None, "--select", metavar="GUARD,...", help="With --profile: the guards the profile selects (default: its own name). Repeatable."),
    env: Optional[list[str]] = typer.Option(None, "--env", metavar="KEY=VALUE", help="With --profile: an environment default its images get (set in --output-image's config). Repeatable."),
    unset_env: Optional[list[str]] = typer.Option(None, "--unset-env", metavar="KEY", help="With --profile: drop an environment default. Repeatable."),
    new: bool = typer.Option(False, "--new", help="With --profile: declare it even though its name is within two edits of a declared profile's (else refused as a likely typo)."),
) -> None:
    """Pin the image and every target (writes targets.lock).

    A local path in REF is kept relative to the queue directory, so every directory, --queue and the
    Python API reach the same image. With --profile NAME, declare or re-pin that profile's own
    section (the patches its guards select, on its own image); --profile all re-pins every profile
    on the image it is pinned to.

    \b
    Examples:
      imgquilt lock --image oci:examples/demo-image:latest
      imgquilt lock --profile glm53 --image oci:images/vllm:0.10 --env VLLM_GLM53_PREP_FUSED=0
      imgquilt lock --profile rocm --image oci:images/vllm-rocm:0.10 --select rocm,glm53
      imgquilt lock --profile all
    """
    from ..verbs.lock import LockRequest, run_lock

    with python_check_named("lock"):
        done = run_lock(LockRequest(G.queue, image, platform, not no_python_check, progress(), profile, select, env or (),
                                    unset_env or (), new))
    if isinstance(done, tuple):  # --profile all
        if G.json:
            emit_json(documents.lock_profiles_doc(done))
            return
        for d in done:
            _say_locked(d)
        say(f"Wrote {done[0].path}.")
        return
    if G.json:
        emit_json(documents.lock_doc(done))
        return
    _say_locked(done)
    say(f"Wrote {done.path}.")


def _say_locked(done) -> None:
    if done.profile is None:
        say(f"Pinned {done.targets} target(s) of {done.patches} patch(es) to {done.ref} ({done.digest}).")
        return
    env = (", env " + " ".join(shown_env(k, v) for k, v in done.env)) if done.env else ""
    say(f"Profile {done.profile} (selects {shown(', '.join(done.select)) or 'no guard'}{env}): pinned {done.targets} target(s) "
        f"of {done.patches} patch(es) to {done.ref} ({done.digest}).")


def _short(sha: str) -> str:
    return sha if sha == "absent" else sha[:12]


def _rows(result: ApplyResult) -> list[list]:
    """One row per patch and file, in series order: what was checked and what it became."""
    by_patch: dict[str, list[list]] = {name: [] for name in result.patches}
    for f in result.files:  # files in order, each once (not once per patch: 1000 patches stay cheap)
        where = f.target.path if f.resolved == f.target.path else f"{f.target.path} ({f.resolved})"
        for patch, base, done in f.steps:
            if patch in by_patch:
                by_patch[patch].append([patch, where, _short(base), _short(done), ("ok", "green")])
    return [row for name in result.patches for row in by_patch[name]]


def _files_per_patch(result: ApplyResult) -> dict[str, int]:
    counts = dict.fromkeys(result.patches, 0)
    for f in result.files:
        for patch, _, _ in f.steps:
            counts[patch] = counts.get(patch, 0) + 1
    return counts


def _say_bytecode(result: ApplyResult, written: dict, verbose: bool) -> None:
    """What apply did about bytecode CPython could have loaded instead of the patched sources."""
    if not result.bytecode:
        return
    n = len(result.bytecode)
    if not written:
        say(f"Would remove {n} stale bytecode file(s) that CPython could load instead of the patched sources.")
    else:
        say(f"Removed {n} stale bytecode file(s) that CPython could load instead of the patched sources "
            "(whiteouts in a layer, unlinked in place, covered in an overlay).")
    if verbose:
        for b in result.bytecode:
            say(f"  {b.path} (for {b.source})")


def apply_cmd(
    image: Optional[str] = ImageOpt,
    layer: Optional[Path] = typer.Option(None, "--layer", metavar="FILE", help="Write an OCI layer tar (.tar, .tar.gz, .tar.zst)."),
    output_image: Optional[str] = typer.Option(None, "--output-image", metavar="REF", help="Write the base image plus the layer: oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE, containers-storage:NAME (podman's store), dir:DIR, or push to docker://HOST/REPO:TAG."),
    root: Optional[Path] = typer.Option(None, "--root", metavar="DIR", help="Patch this extracted rootfs in place (bases read from it unless --image)."),
    overlay: Optional[Path] = typer.Option(None, "--overlay", metavar="DIR", help="Write patched files plus mounts.tsv for bind mounts."),
    locked: bool = typer.Option(False, "--locked", help="Fail when there is no targets.lock."),
    platform: Optional[str] = PlatformOpt,
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the check that patched .py files gain no errors."),
    attest: Optional[Path] = typer.Option(None, "--attest", metavar="KEY", help="Sign an in-toto attestation of what was applied (PEM private key: Ed25519 or ECDSA P-256; an encrypted one takes IMGQUILT_KEY_PASSWORD) and store it beside --output-image as an OCI referrer."),
    compression: Optional[str] = typer.Option(None, "--compression", metavar="FORMAT", help="The new layer's compression in --output-image: gzip (default; none for docker-archive), zstd, zstd:chunked (with a TOC, read lazily), none."),
    compression_level: Optional[int] = typer.Option(None, "--compression-level", metavar="N", help="The new layer's compression level (--layer and --output-image): gzip 1-9 (default 1), zstd 1-19 (default 3); same inputs and level, same bytes."),
    reverse: bool = typer.Option(False, "--reverse", "-R", help="With --root: take off what imgquilt applied there (its record says which files, the queue which bytes), leaving the root as the image has it; journaled as apply is."),
    verbose: bool = VerboseOpt,
    profile: Optional[str] = ProfileOpt,
    boot: bool = typer.Option(False, "--boot", help="First import the patched modules with the image's own Python in a sandbox (as `imgquilt boot`); a patch that fails to boot writes nothing (exit 3)."),
) -> None:
    """Verify every base, apply the series in memory, verify every result, then write the outputs.

    With --profile NAME, the patches that profile selects on its pinned image, its env defaults set
    in --output-image's config. With --profile all, every profile on its own image: each output
    path needs the {profile} placeholder.

    \b
    Examples:
      imgquilt apply --root /                      (as a RUN step of a Dockerfile)
      imgquilt apply --image oci:img:1.0 --layer fix.tar.gz --output-image oci:out:1.0-fixed
      imgquilt apply --output-image docker://reg/app:1.0-fixed --attest key.pem
      imgquilt apply --profile all --output-image oci:out:{profile} --layer build/{profile}.tar.gz
      imgquilt apply --reverse --root /srv/rootfs    (take the queue off again)
      imgquilt apply --profile rocm --root /srv/rootfs --reverse
    """
    from ..verbs.apply_verb import Applied, ApplyRequest, refuse_apply, run_apply

    req = ApplyRequest(G.queue, image, layer, output_image, root, overlay, platform, locked, not no_python_check, progress(),
                       attest, compression, profile, compression_level, boot, reverse=reverse,
                       progress_of=ref_progress)
    refuse_apply(req)
    if reverse:
        return _reverse(root, image, platform, profile, layer=layer, output_image=output_image, overlay=overlay, attest=attest,
                        compression=compression, compression_level=compression_level, locked=locked)
    from ..verbs.fanout import select

    # the hint that names --no-python-check, as before: not on `--platform all` (it never had it)
    with nullcontext() if select(profile, platform).every_platform else python_check_named("apply"):
        done = run_apply(req)
    if isinstance(done, tuple):  # --profile all
        return _say_profiles(done, layer, overlay)
    if not isinstance(done, Applied):  # --platform all
        return _say_platforms(done)
    result, written = done.result, done.outputs
    if G.json:
        emit_json(documents.apply_doc(result, written, done.profile, done.boot))
        return
    if done.boot is not None:
        for p in done.boot.patches:
            say(f"{p.verdict:<12} {p.name}" + (f"  ({p.why})" if p.why else ""))
    _say_applied(done, verbose, {"layer": layer, "overlay": overlay})


def _say_applied(done, verbose: bool, asked: dict) -> None:
    result, written = done.result, done.outputs
    if done.profile is not None:
        say(f"Profile {done.profile}:")
    for n in result.notes:
        note(f"note: {n}")
    rows = _rows(result)  # none when the target already holds the series' result: no empty table
    if verbose and rows:
        table("Verified", ["patch", "file (resolved)", "base", "result", "check"], rows)
    elif rows:
        for name, count in _files_per_patch(result).items():
            say(f"ok  {name}  ({count} file{'s' if count != 1 else ''})")
    say(f"Verified {len(result.patches)} patch(es) on {result.info.ref}" + (" (pinned by targets.lock)." if result.pinned else " (not pinned: targets.lock pins no image for it)."))
    _say_bytecode(result, written, verbose)
    if not written and not any(asked.values()):
        say("Nothing written: give --layer, --output-image, --root or --overlay.")
    for kind, path in asked.items():
        if path is not None and kind not in written:
            say(f"Nothing to change: {result.info.ref} already holds the series' result; no {kind} written ({path}).")
    for kind, w in written.items():
        if kind == "root" and not w["changed"]:
            say(f"Nothing to change in root {w['path']}: it already holds the series' result.")
            continue
        extra = f" {w['digest']}" if w.get("digest") else ""
        if kind == "root":
            extra = f" ({len(w['changed'])} file(s) replaced)"
        if w.get("unchanged"):
            extra += " (the base as it is: it already holds the series' result, so no layer was added)"
        say(f"Wrote {kind}: {w.get('path') or w.get('ref')}{extra}")
        if w.get("store"):
            say(f"  Store: {store_line(w['store'])}")
        _say_attestations(w)
        env = w.get("env")
        if env:
            replaced = env.get("replaced", {})
            said = ", ".join(shown_env(k, v) + (f" (replaced the base's {shown_env(k, replaced[k])})" if k in replaced else "")
                             for k, v in env["set"].items())
            if kind == "overlay":
                said += f" (in {env['file']}: start the container with them, `imgquilt overlay-args` adds them)"
            elif kind == "root":
                said += " (recorded in the root's applied.json; a root has no image config: the runtime that starts it must set them)"
            say(f"  Env: {said}")


def store_line(store: dict) -> str:
    """The containers-storage store an image went to, as `outputs.image.store` holds it."""
    by = {"podman": "podman's store, as `podman info` shows it", "reference": "the store the reference names",
          "storage.conf": "skopeo's default store as storage.conf names it; podman is not installed"}[store["named_by"]]
    driver = store["driver"] or "none set (the one the store already holds, else overlay)"
    return f"driver {driver}, graph root {store['graph_root']}, run root {store['run_root']} ({by})"


def _say_profiles(done, layer, overlay) -> None:
    """--profile all: every profile verified on its own image, then each one's outputs written."""
    if G.json:
        emit_json(documents.apply_profiles_doc(done))
        return
    from ..verbs.profiles import fill

    for d in done:
        _say_applied(d, False, {"layer": fill(layer, d.profile, "--layer"), "overlay": fill(overlay, d.profile, "--overlay")})


def _reverse(root: Path | None, image: str | None, platform: str | None, profile: str | None, **others) -> None:
    from ..verbs.restore import reverse_queue

    if root is None:
        raise UsageError("--reverse takes a queue off a root filesystem: give --root DIR.",
                         hint="A layer or an image is taken off by using the image without it (the base image).")
    given = [f"--{k.replace('_', '-')}" for k, v in others.items() if v not in (None, False)]
    if given:
        raise UsageError(f"--reverse writes only the root; {', '.join(given)} cannot go with it.")
    done = reverse_queue(G.queue, root=root, image=image, platform=platform, progress=progress(), profile=profile)
    _say_restored(done, "reverse")


def _say_restored(done, verb: str) -> None:
    if G.json:
        emit_json(documents.restored_doc(done, reverse=verb == "reverse"))
        return
    for p in done.written:
        say(f"removed {p}" if p in done.removed else f"restored {p}")
    if verb == "reverse":
        say(f"Took the queue (series {done.series_sha256[:12]}) off {done.root}: {len(done.written)} file(s) as the image "
            "has them, the apply record and the directories that apply made removed.")
        if done.bytecode:
            note(f"note: the {len(done.bytecode)} stale bytecode file(s) that apply removed are not brought back "
                 "(CPython compiles the restored sources again).")
        return
    if done.already:
        say(f"Already as the image has them: {', '.join(done.already)}.")
    say(f"Restored {len(done.written)} file(s) in {done.root} as the image has them.")


def restore_cmd(
    paths: List[str] = typer.Argument(..., metavar="PATH...", help="Paths in the root, as the patches name them (e.g. etc/svc.conf)."),
    root: Path = typer.Option(..., "--root", metavar="DIR", help="The root filesystem to repair."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
) -> None:
    """Put files of a root back as the image has them (a hand edit undone), journaled as apply is.

    The image's bytes: from --image (the image the root was extracted from), else the object store by
    the sha256 the queue pins (targets.lock, else the first section on the path), else the image the
    lock pins; a path no pin names needs --image. The root's apply record is neither read (a root can
    ship any) nor changed: `apply --reverse` takes the whole queue off.

    \b
    Example:
      imgquilt restore home/app/config.toml --root /srv/rootfs
    """
    from ..verbs.restore import restore_queue

    done = restore_queue(G.queue, root=root, paths=paths, image=image, platform=platform, progress=progress())
    _say_restored(done, "restore")


def _say_attestations(w: dict, indent: str = "") -> None:
    for a in w.get("attestations") or []:
        say(f"{indent}Wrote attestation: {a['digest']} ({a['where']}), signed by key {a['key_id']}")


@contextmanager
def python_check_named(command: str) -> Iterator[None]:
    """A refusal that the Python check took part in names the option of `command` that skips it."""
    try:
        yield
    except Refused as exc:
        if any(getattr(p, "kind", None) == "python" for p in getattr(exc, "problems", [])) or isinstance(exc, PythonCheckFailed):
            exc.hint = "\n".join(x for x in (exc.hint, f"Or skip the Python check with `imgquilt {command} --no-python-check`.") if x)
        raise


def _say_platforms(done) -> None:
    """--platform all: every platform verified on its own bases, then one index written."""
    ref, results, written = done.ref, done.results, done.written
    if G.json:
        emit_json(documents.apply_platforms_doc(ref, results, written))
        return
    for p, r in results:
        say(f"Verified {len(r.patches)} patch(es) on {p} ({r.info.digest})" + (" (pinned by targets.lock)." if r.pinned else "."))
        _say_bytecode(r, written, False)
    if not written:
        say("Nothing written: give --output-image to write an index with every platform patched.")
    for w in written.values():
        say(f"Wrote image index: {w['ref']} {w['digest']}")
        for m in w["platforms"]:
            say(f"  {m['platform']}: {m['digest']} (new layer {m['layer_digest']})")
            _say_attestations(m, "    ")


def check_cmd(
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    format: Format = typer.Option(Format.text, "--format", metavar="text|github", help=FormatOpt_help),
    profile: Optional[str] = ProfileOpt,
    allow_unselected: bool = typer.Option(False, "--allow-unselected", help="Accept patches that no pin of targets.lock selects (else exit 3: a guard typo drops a fix from every deployment)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 6 also for a patch written with --no-python-check (its header says `Python-Check: skipped`)."),
    boot: bool = typer.Option(False, "--boot", help="Then import the patched modules with the image's own Python in a sandbox, as `imgquilt boot` (exit 3 when a patch fails to boot)."),
) -> None:
    """Lint the queue: series vs patches/, hash chains (each profile's), Requires order, lock freshness,
    and that every patch is selected by some pin (the default or a profile).

    With --image, also verify the whole series on that image (drift is exit 3, as in apply). With
    --profile NAME|all, also verify each such profile's patches on the image it pins. A profile
    whose patches do not chain (a Base only a patch it does not select produces) is exit 3. A patch
    refreshed or rebased with --no-python-check is named; --strict refuses it (exit 6).

    \b
    Examples:
      imgquilt check
      imgquilt check --image oci:examples/demo-image:latest
      imgquilt check --profile all
      imgquilt check --boot --image oci:examples/demo-image:latest
      imgquilt check --format github
      imgquilt check --strict
    """
    listing.check(image, platform, format, profile, allow_unselected, strict, boot)


COMMANDS = {"lock": lock_cmd, "apply": apply_cmd, "restore": restore_cmd, "check": check_cmd}
