"""`rebase`: carry the queue onto a new image; `--continue`, `--skip`, `--abort` and `--status` of a stopped rebase."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

from ..errors import RebaseConflict, UsageError
from .common import G, ImageOpt, PlatformOpt, ProfileOpt, emit_json, emit_outcome, note, progress, say, table

if TYPE_CHECKING:  # the rebase machinery (and gitpython) load only when rebase runs
    from ..rebase import RebaseReport

_STYLE = {"unchanged": "green", "merged": "cyan", "moved": "magenta", "merged-upstream": "blue", "conflict": "bold red"}


def _rows(report: RebaseReport) -> list[list]:
    rows = []
    for p in report.patches:
        first = True
        for f in p.files:
            where = f.path if not f.moved_from else f"{f.path} (from {f.moved_from})"
            extra = ("merged; " if f.merged and f.state == "moved" else "") + ("resolved by hand" if f.by_hand else f.detail)
            name = p.name + (" (dropped)" if p.dropped and first else "")
            rows.append([name if first else "", (p.state, _STYLE[p.state]) if first else "", where, (f.state, _STYLE[f.state]), extra])
            first = False
    return rows


def _conflict_error(report: RebaseReport) -> RebaseConflict:
    """Exit 4, naming the patch, each conflicted file and the next commands."""
    files = "\n".join(f"  - {f.path}: {f.detail}\n    edit {f.work}" for f in report.conflicts)
    return RebaseConflict(
        f"Rebase stopped: {report.conflict_patch} conflicts with {report.new_image.get('ref')} in:\n{files}",
        hint="Edit the file(s) to the result you want (remove every conflict marker), then `imgquilt rebase --continue`;\n"
        "or `imgquilt rebase --skip` to drop this patch, or `imgquilt rebase --abort` to put the queue back as it was.",
    )


def _render(report: RebaseReport) -> None:
    if G.json:
        emit_json(report.to_json())
        return
    table(f"Rebase onto {report.new_image.get('ref')}", ["patch", "state", "file", "file state", "note"], _rows(report))
    for n in report.notes:
        say(f"note: {n}")
    for p in report.patches:
        for n in p.notes:
            say(f"note: {p.name}: {n}")
    counts = {k: v for k, v in report.summary().items() if v}
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if report.status == "done":
        pin = "targets.lock pins the new image" if report.profile is None else f"targets.lock pins profile {report.profile} to the new image (other pins unchanged)"
        say(f"Rebased {len(report.patches)} patch(es) onto {report.new_image.get('ref')}: {summary}. {pin}.")


def _status() -> None:
    """Re-list where a stopped rebase stands (top says "No patches applied" then)."""
    from ..api import rebase_in_progress, rebase_status

    if not rebase_in_progress(G.queue):  # a question with an answer: exit 0
        if G.json:
            emit_json({"status": "none"})
        else:
            say("No rebase in progress.")
        return
    report = rebase_status(G.queue)
    _render(report)  # exit 0: the status was shown; the conflict is in the document
    if not G.json:
        if report.status == "stopped":
            note(_conflict_error(report).render())
        else:
            note(f"The rebase was interrupted while {report.status}: `imgquilt rebase --continue` goes on, `--abort` gives up.")


def rebase_cmd(
    image: Optional[str] = ImageOpt,
    from_ref: Optional[str] = typer.Option(None, "--from", metavar="OLDREF", help="The old image (fills the object store with the old bases when it lacks them)."),
    maps: Optional[List[str]] = typer.Option(None, "--map", metavar="OLD=NEW", help="OLD=NEW: a target path or directory prefix that moved (repeatable)."),
    keep_empty: bool = typer.Option(False, "--keep-empty", help="Keep patches whose change is already upstream (as no-op sections) instead of dropping them."),
    continue_: bool = typer.Option(False, "--continue", help="Go on after resolving the conflicted files in .imgquilt/work/."),
    abort: bool = typer.Option(False, "--abort", help="Stop the rebase and restore series, patches/ and targets.lock."),
    skip: bool = typer.Option(False, "--skip", help="Drop the conflicted patch from the rebased series and go on."),
    status: bool = typer.Option(False, "--status", help="Show the stopped rebase: each patch so far and the conflicted files."),
    platform: Optional[str] = PlatformOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Carry the queue onto a new image with 3-way merges; stop on a conflict (exit 4).

    With --profile NAME, carry the patches that profile selects onto its new image and re-pin that
    profile only; a patch other profiles select too is rewritten only where each of them still chains
    (else nothing is written, exit 3, naming the profile to rebase as well).

    \b
    Examples:
      imgquilt rebase --image oci:vllm:0.10.2
      imgquilt rebase --image rootfs:new --from rootfs:old
      imgquilt rebase --image oci:img:2 --map usr/lib/python3.11=usr/lib/python3.12
      imgquilt rebase --status
      imgquilt rebase --continue
      imgquilt rebase --skip
      imgquilt rebase --abort
      imgquilt rebase --profile qwen --image oci:images/vllm:0.11
    """
    from .. import api

    if sum((continue_, abort, status, skip)) > 1:
        raise UsageError("--continue, --skip, --abort and --status exclude each other.")
    if (continue_ or abort or status or skip) and (image or from_ref or maps or keep_empty or profile):
        raise UsageError("--continue, --skip, --abort and --status take no other options: the rebase remembers them.")
    if status:
        _status()
        return
    if abort:
        aborted = api.rebase_abort(G.queue)
        report, restored = aborted.report, list(aborted.restored)
        if G.json:
            doc = report.to_json() if report else {"status": "aborted"}
            doc["restored"] = restored
            emit_json(doc)
        elif report:
            say(f"Rebase aborted: series, patches/ and targets.lock are back as they were ({len(restored)} file(s) restored).")
        else:
            say("Rebase aborted before it changed anything.")
        return
    if continue_:
        report = api.rebase_continue(G.queue, progress=progress())
    elif skip:
        report = api.rebase_skip(G.queue, progress=progress())
    else:
        report = api.rebase(G.queue, image=image or "", from_ref=from_ref, maps=maps or (), keep_empty=keep_empty,
                            platform=platform, progress=progress(), profile=profile)
    if report.status == "stopped" and G.json:
        emit_outcome(report.to_json(), _conflict_error(report))
    _render(report)
    if report.status == "stopped":
        raise _conflict_error(report)
    if not G.json:
        note("Next: `imgquilt check`, then commit series, patches/ and targets.lock.")


COMMANDS = {"rebase": rebase_cmd}
