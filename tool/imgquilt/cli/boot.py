"""`boot`: parse, call, render."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from .common import G, ImageOpt, PlatformOpt, ProfileOpt, emit_outcome, progress, say


class BootFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def _size(raw: Optional[str]) -> Optional[int]:
    if raw is None:
        return None
    from ..fs.content import parse_size

    return parse_size(raw, name="--memory")


def boot_cmd(
    command: Optional[List[str]] = typer.Argument(None, metavar="CMD", help="A command of the image's to run the same way on both trees (after `--`)."),
    image: Optional[str] = ImageOpt,
    root: Optional[Path] = typer.Option(None, "--root", metavar="DIR", help="Boot this extracted root filesystem (read only), the patched files over it."),
    overlay: Optional[Path] = typer.Option(None, "--overlay", metavar="DIR", help="Boot the files this overlay (`apply --overlay`) binds, over --image or --root, instead of the series' results."),
    platform: Optional[str] = PlatformOpt,
    profile: Optional[str] = ProfileOpt,
    importers: int = typer.Option(5, "--importers", metavar="N", help="Per patched module, also probe up to N modules of its package that import it (0: none)."),
    timeout: float = typer.Option(120.0, "--timeout", metavar="SECONDS", help="The time limit of each probe; one past it is killed and reported."),
    memory: Optional[str] = typer.Option(None, "--memory", metavar="SIZE", help="The address-space limit of each probe (e.g. 8G; default: none)."),
    mount_queue: Optional[str] = typer.Option(None, "--mount-queue", metavar="PATH", help="Show the queue directory read only at PATH inside the image, for the command."),
    format: BootFormat = typer.Option(BootFormat.text, "--format", metavar="text|json|github", help="text; json: the report as one document (docs/schemas/boot.schema.json); github: annotations on the patched files' lines."),
) -> None:
    """Import every module the queue patches with the image's own Python, in a sandbox, on the base
    and on the patched tree (with --profile all: each profile on the image it pins).

    Only a failure the base does not have counts: per patch `boots`, `fails` (the exception and the
    patched file's line) or `cannot tell` (why; a module failing on the base too names the base's
    error). Exit 3 when a patch fails; exit 6 when no sandbox can be made (docs/boot.md).

    \b
    Examples:
      imgquilt boot --image oci:images/vllm:0.10.1
      imgquilt boot --root /srv/rootfs --profile glm53
      imgquilt boot --image oci:images/vllm:0.10.1 --overlay out/overlay
      imgquilt boot --profile glm53 --mount-queue /queue -- python3 -m pytest -q /queue/tests/smoke
    """
    from ..verbs.boot import BootRequest, boot
    from ..verbs.fanout import boot_profiles

    names = boot_profiles(G.queue, profile, image=image, root=root, overlay=overlay)
    shown = progress()
    reports = [boot(BootRequest(G.queue, image=image, root=root, overlay=overlay, platform=platform, profile=name,
                                timeout=timeout, memory=_size(memory), command=tuple(command or ()), mount_queue=mount_queue,
                                progress=shown, importers=importers)) for name in names]
    failures = [r.failure() for r in reports if r.failure() is not None]
    failure = failures[0] if failures else None
    if failure is not None and len(reports) > 1:
        failure.message = "; ".join(f"Profile {r.profile}: {r.failure().message}" for r in reports if r.failed)
    if G.json or format is BootFormat.json:
        from .documents import boot_doc

        emit_outcome(boot_doc(reports, failure is None), failure)
        return
    for report in reports:
        if format is BootFormat.github:
            from .annotations import annotate

            for p in report.patches:
                for module, f in p.failures:
                    where = f" (profile {report.profile})" if report.profile else ""
                    annotate("error", f.path or f"patches/{p.name}", f"imgquilt boot: {module}",
                             f"{p.name}{where}: {f.type}: {f.message}", line=f.line)
        _render(report)
    if failure is not None:
        raise failure


def _render(report) -> None:
    where = f"{report.ref}" + (f" ({report.digest})" if report.digest else "")
    say(f"Booted {len(report.probes)} module(s) on {where}" + (f", profile {report.profile}" if report.profile else "") + ":")
    for p in report.patches:
        say(f"{p.verdict:<12} {p.name}" + (f"  ({p.why})" if p.why else ""))
        for module, f in p.failures:
            say(f"    {module}: {f.render()}")
    for pr in report.probes:
        if pr.verdict == "cannot tell":
            via = f" (imports {pr.importer_of})" if pr.importer_of else ""
            say(f"  cannot tell  {pr.module or pr.path}{via}: {pr.why}")
    c = report.command
    if c is not None:
        say(f"{c.verdict:<12} command `{' '.join(c.argv)}`: exit {_code(c.patched)} patched, {_code(c.base)} on the base")
        tail = (c.patched.tail("stdout") + c.patched.tail("stderr")).strip().splitlines()[-10:]
        for line in tail:
            say(f"    | {line}")


def _code(ran) -> str:
    return f"killed after {ran.seconds:.0f} s" if ran.timed_out else str(ran.code)


COMMANDS = {"boot": boot_cmd}
