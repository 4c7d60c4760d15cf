"""`audit`: which patches are live in an image, a rootfs or a running container (and since when)."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from .annotations import Format, FormatOpt_help, annotate
from .common import G, ImageOpt, PlatformOpt, emit_outcome, progress, say, table

if TYPE_CHECKING:
    from ..audit import AuditReport, PatchAudit

COLOR = {"live": "green", "pending": "cyan", "drifted-live": "yellow", "drifted": "red", "missing": "red", "partial": "magenta"}


class Expect(str, Enum):
    live = "live"
    pending = "pending"


def _first(p: PatchAudit) -> str:
    d = p.first_divergent
    if d is None:
        return ""
    where = d.path if d.path == d.resolved else f"{d.path} -> {d.resolved}"
    return f"{where} ({d.state}" + (f"; {d.detail}" if d.detail else "") + ")"


def _render(report: AuditReport | None, history) -> None:
    if report is not None:
        from ..audit import LIVE

        rows = []
        for p in report.patches:
            live = sum(f.state == LIVE for f in p.files)
            files = str(len(p.files)) if live in (0, len(p.files)) else f"{live}/{len(p.files)} live"
            rows.append([p.name, (p.state, COLOR.get(p.state, "white")), files, _first(p)])
        table(f"Audit of {report.info.ref}", ["patch", "state", "files", "first divergent file"], rows)
        rec = report.record
        if rec is None:
            say("No apply record (var/lib/imgquilt/applied.json) in this filesystem.")
        else:
            who = f" by imgquilt {rec.imgquilt_version}" if rec.imgquilt_version else ""
            say(f"Apply record {rec.path}{who}: {len(rec.patches)} patch(es) recorded as applied, from {rec.image_ref or 'the image'} ({rec.image_digest}).")
            for x in rec.problems:
                say(f"  record disagrees: {x.message}")
            if not rec.problems:
                say("  The record agrees with the bytes.")
        counts = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
        say(f"{len(report.patches)} patch(es): {counts or 'none'}.")
    if history is not None:
        rows = []
        for p in history.patches:
            for i, e in enumerate(p.events):
                name = (p.name + ("" if p.in_series else " (not in series)")) if i == 0 else ""
                rows.append([name, e.kind, e.commit.short, e.commit.date[:10], e.commit.subject, e.detail])
        table(f"History of {history.queue_path} in {history.repo} ({history.commits} commit(s))",
              ["patch", "event", "commit", "date", "subject", "note"], rows)
        for f in history.flags:
            say(f"  {f.kind}: {f.message}")
        if not history.flags:
            say("  No silent removals, deletions of listed patches or re-additions.")


def audit_cmd(
    image: Optional[str] = ImageOpt,
    root: Optional[Path] = typer.Option(None, "--root", metavar="DIR", help="An extracted rootfs, or /proc/PID/root of a running container."),
    platform: Optional[str] = PlatformOpt,
    history: bool = typer.Option(False, "--history", help="Add when each patch entered and left the series (git history of the queue)."),
    expect: Expect = typer.Option(Expect.live, "--expect", metavar="live|pending", help="The state every patch must be in for exit 0 (pending: a base image is still clean)."),
    format: Format = typer.Option(Format.text, "--format", metavar="text|github", help=FormatOpt_help),
) -> None:
    """State of each patch and file in an image, a rootfs or a running container.

    States: live, pending, drifted-live, drifted, missing, partial. Exit 0 when every patch is in
    the --expect state (live by default), 5 otherwise.

    \b
    Examples:
      imgquilt audit --image oci:out:1.0-fixed
      imgquilt audit --root /proc/1234/root --json
      imgquilt audit --image oci:base:1.0 --expect pending
      imgquilt audit --history
      imgquilt audit --format github
    """
    from ..api import audit
    from ..audit import STATES, report_json

    done = audit(G.queue, image=image, root=root, platform=platform, history=history, expect=expect.value, progress=progress())
    report, hist, want, failing, failure = done.report, done.history, done.expect, done.failing, done.error
    if G.json:
        doc = report_json(report) if report is not None else {"image": None, "patches": [], "summary": {s: 0 for s in STATES}}
        doc["expect"] = want
        if hist is not None:
            from ..history import history_json

            doc["history"] = history_json(hist)
        emit_outcome(doc, failure)
        return
    if format is Format.github:
        for p in failing:
            annotate("error", f"patches/{p.name}", "imgquilt audit", f"{p.name} is {p.state}, not {want}" + (f": {_first(p)}" if _first(p) else "") + ".")
    _render(report, hist)
    if failure is not None:
        raise failure


COMMANDS = {"audit": audit_cmd}
