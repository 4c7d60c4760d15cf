"""`audit`: which patches are live in an image, a rootfs or a running container (and since when)."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from ..audit import LIVE, STATES, AuditReport, audit_source, report_json
from ..errors import NotLive, UsageError
from ..fs.types import Source
from .apply import ImageOpt, PlatformOpt, open_ref
from .context import G, emit_json, load, out

if TYPE_CHECKING:
    from rich.table import Table

COLOR = {"live": "green", "pending": "cyan", "drifted-live": "yellow", "drifted": "red", "missing": "red", "partial": "magenta"}


class Expect(str, Enum):
    live = "live"
    pending = "pending"


def _source(image: str | None, root: Path | None, platform: str | None, lock_ref: str | None) -> Source | None:
    if image and root:
        raise UsageError("Give --image or --root, not both.")
    if root is not None:
        from ..rootfs.source import RootfsSource

        if not root.is_dir():
            raise UsageError(f"--root {root}: not a directory.")
        return RootfsSource(root, ref=f"rootfs:{root}")
    ref = image or lock_ref
    return open_ref(ref, platform) if ref else None


def _state(s: str) -> str:
    return f"[{COLOR.get(s, 'white')}]{s}[/]"


def _table(report: AuditReport) -> Table:
    from rich.table import Table

    t = Table(title=escape(f"Audit of {report.info.ref}"))
    for col in ("patch", "state", "files", "first divergent file"):
        t.add_column(col)
    for p in report.patches:
        live = sum(f.state == LIVE for f in p.files)
        files = str(len(p.files)) if live in (0, len(p.files)) else f"{live}/{len(p.files)} live"
        d = p.first_divergent
        first = ""
        if d is not None:
            first = escape(d.path if d.path == d.resolved else f"{d.path} -> {d.resolved}")
            first += f" ({_state(d.state)}" + (f"; {escape(d.detail)}" if d.detail else "") + ")"
        t.add_row(escape(p.name), _state(p.state), files, first)
    return t


def _history_table(h) -> Table:
    from rich.table import Table

    t = Table(title=escape(f"History of {h.queue_path} in {h.repo} ({h.commits} commit(s))"))
    for col in ("patch", "event", "commit", "date", "subject", "note"):
        t.add_column(col)
    for p in h.patches:
        for i, e in enumerate(p.events):
            name = (p.name + ("" if p.in_series else " (not in series)")) if i == 0 else ""
            t.add_row(escape(name), e.kind, e.commit.short, e.commit.date[:10], escape(e.commit.subject), escape(e.detail))
    return t


def _render(report: AuditReport | None, history) -> None:
    if report is not None:
        out.print(_table(report))
        rec = report.record
        if rec is None:
            out.print("No apply record (var/lib/imgquilt/applied.json) in this filesystem.")
        else:
            who = f" by imgquilt {rec.imgquilt_version}" if rec.imgquilt_version else ""
            out.print(escape(f"Apply record {rec.path}{who}: {len(rec.patches)} patch(es) recorded as applied, from {rec.image_ref} ({rec.image_digest})."))
            for x in rec.problems:
                out.print(f"  [yellow]record disagrees:[/] {escape(x.message)}")
            if not rec.problems:
                out.print("  The record agrees with the bytes.")
        counts = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
        out.print(f"{len(report.patches)} patch(es): {counts or 'none'}.")
    if history is not None:
        out.print(_history_table(history))
        for f in history.flags:
            out.print(f"  [red]{f.kind}:[/] {escape(f.message)}")
        if not history.flags:
            out.print("  No silent removals, deletions of listed patches or re-additions.")


def audit_cmd(
    image: Optional[str] = ImageOpt,
    root: Optional[Path] = typer.Option(None, "--root", help="An extracted rootfs, or /proc/PID/root of a running container."),
    platform: Optional[str] = PlatformOpt,
    history: bool = typer.Option(False, "--history", help="Add when each patch entered and left the series (git history of the queue)."),
    expect: Expect = typer.Option(Expect.live, "--expect", help="The state every patch must be in for exit 0 (pending: a base image is still clean)."),
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
    """
    q = load()
    lock = q.lock()
    source = _source(image, root, platform, lock.image.ref if lock else None)
    if source is None and not history:
        raise UsageError("No image given and no targets.lock to take one from.", hint="Pass --image REF or --root DIR.")
    hist = None
    if history:
        from ..history import queue_history

        hist = queue_history(q.root, q.names)
    report = audit_source(q, source) if source is not None else None
    want = expect.value
    failing = [p for p in report.patches if p.state != want] if report is not None else []
    if G.json:
        doc = report_json(report) if report is not None else {"image": None, "patches": [], "summary": {s: 0 for s in STATES}}
        doc["expect"] = want
        if hist is not None:
            from ..history import history_json

            doc["history"] = history_json(hist)
        emit_json(doc)
        if failing:
            raise typer.Exit(NotLive.exit_code)
        return
    _render(report, hist)
    if failing:
        names = ", ".join(f"{p.name} ({p.state})" for p in failing)
        hint = (
            "Apply the queue (`imgquilt apply`), or carry it onto this image (`imgquilt rebase`)."
            if want == LIVE
            else "This filesystem already carries changes of the queue."
        )
        raise NotLive(f"{len(failing)} of {len(report.patches)} patch(es) are not {want}: {names}.", hint=hint)  # type: ignore[union-attr]


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_cmd)
