"""`lock`, `apply` and `check`: parse, call the core, render."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..queue.hunks import sha256_hex
from ..engine.plan import verification_problems
from ..engine.result import ApplyResult
from ..errors import QueueProblems, UsageError
from ..fs.types import Source
from ..queue.check import check_queue
from ..queue.lock import render_lock
from ..outputs import Outputs, apply_queue
from ..util.atomic import atomic_write
from ..verbs.lock import lock_queue
from .context import G, cache_dir, emit_json, err, load, out, queue_root, refuse_during_rebase

if TYPE_CHECKING:
    from rich.table import Table

ImageOpt = typer.Option(None, "--image", "-i", help="Image reference (oci:DIR[:TAG], oci-archive:FILE, docker-archive:FILE, rootfs:DIR, tar:FILE, a path, or any skopeo transport).")
PlatformOpt = typer.Option(None, "--platform", help="os/arch[/variant] to pick from a multi-platform image.")


def open_ref(ref: str, platform: str | None) -> Source:
    from ..sources import open_source

    source = open_source(ref, platform=platform, cache_dir=cache_dir())
    if hasattr(source, "on_layer") and err.is_terminal and not G.json:
        # progress for people only: one line per layer read, on stderr, never into JSON or a pipe
        source.on_layer = lambda i, n, digest: err.print(f"[dim]reading layer {i + 1} of {n} from the top: {digest}[/]")
    return source


def pick_ref(image: str | None, lock_ref: str | None) -> str:
    if image:
        return image
    if lock_ref:
        return lock_ref
    raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF.")


def lock_cmd(image: Optional[str] = ImageOpt, platform: Optional[str] = PlatformOpt) -> None:
    """Pin the image and every target file (writes targets.lock).

    \b
    Example:
      imgquilt lock --image oci:examples/demo-image:latest
    """
    q = load()
    refuse_during_rebase(q.root)
    old = q.lock()
    ref = pick_ref(image, old.image.ref if old else None)
    lock = lock_queue(q, open_ref(ref, platform), ref)
    atomic_write(q.lock_path, render_lock(lock))
    if G.json:
        emit_json({"lock": str(q.lock_path), "image": {"ref": ref, "digest": lock.image.digest, "platform": lock.image.platform},
                   "series_sha256": lock.series_sha256, "targets": len(lock.targets)})
        return
    out.print(f"Pinned {len(lock.targets)} target(s) of {len(q.patches)} patch(es) to {ref} ({lock.image.digest}).")
    out.print(f"Wrote {q.lock_path}.")


def _short(sha: str) -> str:
    return sha if sha == "absent" else sha[:12]


def _table(result: ApplyResult) -> Table:
    """One row per patch and file, in series order: what was checked and what it became."""
    from rich.table import Table  # only the human-readable output needs it

    t = Table(title="Verified", title_justify="left")
    t.add_column("patch", overflow="fold")
    t.add_column("file (resolved)", overflow="fold")
    t.add_column("base", no_wrap=True)
    t.add_column("result", no_wrap=True)
    t.add_column("", no_wrap=True)
    for name in result.patches:
        for f in result.files:
            for patch, base, done in f.steps:
                if patch == name:
                    where = f.target.path if f.resolved == f.target.path else f"{f.target.path} ({f.resolved})"
                    t.add_row(name, where, _short(base), _short(done), "[green]ok[/]")
    return t


def result_json(result: ApplyResult) -> dict:
    return {
        "image": {"ref": result.info.ref, "digest": result.info.digest, "platform": result.info.platform},
        "pinned": result.pinned,
        "series_sha256": result.series_sha256,
        "patches": list(result.patches),
        "files": [
            {"path": f.target.path, "resolved": f.resolved, "base_sha256": sha256_hex(f.target.data),
             "final_sha256": sha256_hex(f.final), "mode": f"{f.mode:04o}", "uid": f.uid, "gid": f.gid, "patches": list(f.patches)}
            for f in result.files
        ],
        "notes": list(result.notes),
    }


def apply_cmd(
    image: Optional[str] = ImageOpt,
    layer: Optional[Path] = typer.Option(None, "--layer", help="Write an OCI layer tar (.tar, .tar.gz, .tar.zst)."),
    output_image: Optional[str] = typer.Option(None, "--output-image", help="Write the base image plus the layer (oci:, oci-archive:, docker-archive:)."),
    root: Optional[Path] = typer.Option(None, "--root", help="Patch this extracted rootfs in place (bases read from it unless --image)."),
    overlay: Optional[Path] = typer.Option(None, "--overlay", help="Write patched files plus mounts.tsv for bind mounts."),
    locked: bool = typer.Option(False, "--locked", help="Fail when there is no targets.lock."),
    platform: Optional[str] = PlatformOpt,
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the check that patched .py files gain no errors."),
) -> None:
    """Verify every base, apply the series in memory, verify every result, then write the outputs.

    \b
    Examples:
      imgquilt apply --root /                      (in a Dockerfile: RUN imgquilt apply --root /)
      imgquilt apply --image oci:img:1.0 --layer fix.tar.gz --output-image oci:out:1.0-fixed
    """
    q = load()
    lock = q.lock()
    if image is None and root is not None:
        ref = f"rootfs:{root}"
    else:
        ref = pick_ref(image, lock.image.ref if lock else None)
    source = open_ref(ref, platform)
    outputs = Outputs(layer=layer, image=output_image, root=root, overlay=overlay)

    def open_base():
        from ..sources import open_image

        # reuse the image the source already opened (a skopeo transport would be copied twice)
        return getattr(source, "image", None) or open_image(ref, platform=platform, cache_dir=cache_dir())

    result, written = apply_queue(q, source, lock, outputs, open_base, locked=locked, python_check=not no_python_check)
    if G.json:
        doc = result_json(result)
        doc["outputs"] = written
        emit_json(doc)
        return
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}")
    out.print(_table(result))
    out.print(f"Verified {len(result.patches)} patch(es) on {result.info.ref}" + (" (pinned by targets.lock)." if result.pinned else " (not pinned: no targets.lock)."))
    if not written:
        out.print("Nothing written: give --layer, --output-image, --root or --overlay.")
    for kind, w in written.items():
        extra = f" {w['digest']}" if w.get("digest") else ""
        if kind == "root":
            extra = f" ({len(w['changed'])} file(s) replaced)"
        out.print(f"Wrote {kind}: {w.get('path') or w.get('ref')}{extra}")


def check_cmd(image: Optional[str] = ImageOpt, platform: Optional[str] = PlatformOpt) -> None:
    """Lint the queue: series vs patches/, hash chains, Requires order, lock freshness.

    With --image, also verify the whole series on that image.

    \b
    Example:
      imgquilt check --image oci:examples/demo-image:latest
    """
    root = queue_root()
    problems, patches = check_queue(root)
    if image and not problems:
        q = load()
        problems.extend(verification_problems(q, open_ref(image, platform), q.lock()))
    if G.json:
        emit_json({"ok": not problems, "problems": problems, "patches": [p.name for p in patches]})
        if problems:
            raise typer.Exit(QueueProblems(problems).exit_code)
        return
    if problems:
        raise QueueProblems(problems)
    out.print(f"The queue is sound: {len(patches)} patch(es), chains and Requires in order.")


def register(app: typer.Typer) -> None:
    app.command("lock")(lock_cmd)
    app.command("apply")(apply_cmd)
    app.command("check")(check_cmd)
