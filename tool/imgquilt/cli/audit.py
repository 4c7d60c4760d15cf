"""`audit`: which patches are live in an image, a rootfs or a running container (and since when)."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from . import audit_fleet as fleet_cli
from .annotations import Format, FormatOpt_help, annotate
from ..errors import NotLive, shown, shown_env
from .common import AUDIT_COLOR, G, ImageOpt, PlatformOpt, ProfileOpt, emit_outcome, progress, ref_progress, say, table

if TYPE_CHECKING:
    from ..verbs.audit import AuditReport, PatchAudit

class Expect(str, Enum):
    live = "live"
    pending = "pending"


def _first(p: PatchAudit) -> str:
    d = p.first_divergent
    if d is None:
        return ""
    where = d.path if d.path == d.resolved else f"{d.path} -> {d.resolved}"
    return f"{where} ({d.state}" + (f"; {d.detail}" if d.detail else "") + ")"


def _say_platforms(done, want: str, format: Format, strict: bool = False) -> None:
    """--platform all: each platform audited on its own, one section each."""
    from ..verbs.audit import not_in_state
    from .documents import audit_platforms_doc

    ref, audits = done.ref, list(done.audits)
    failing = [a for a in audits if not_in_state(a.report, want, strict=strict) is not None]
    failure = None
    if failing:
        failure = NotLive(f"{len(failing)} of {len(audits)} platform(s) have a patch that is not {want}: "
                          + "; ".join(f"{a.platform}: {not_in_state(a.report, want, strict=strict).message}" for a in failing),  # type: ignore[union-attr]
                          hint=not_in_state(failing[0].report, want, strict=strict).hint)  # type: ignore[union-attr]
    if G.json:
        emit_outcome(audit_platforms_doc(ref, audits, want), failure)
        return
    for a in audits:
        if format is Format.github:
            for p in a.report.patches:
                if p.state != want:
                    annotate("error", f"patches/{p.name}", "imgquilt audit", f"{p.name} is {p.state}, not {want}, on {a.platform}.")
        _render(a.report, None, platform=a.platform)
    if failure is not None:
        raise failure


def _say_runtime(report: AuditReport) -> None:
    """Each file whose bytes are right but whose running code is not (or not known to be)."""
    from ..verbs.audit import CANNOT_TELL_DETAIL, RESTART_PENDING, SHADOWED, iso_time

    if report.process is not None:
        say(f"Process {report.process.pid} (root {report.process.root}) started {iso_time(report.process.started)}.")
    for p in report.patches:
        for f in p.files:
            if f.state in (SHADOWED, RESTART_PENDING):
                say(f"  {f.state}: {p.name}: {f.path}: {f.detail}")
            elif f.detail.startswith(CANNOT_TELL_DETAIL):
                say(f"  cannot tell: {p.name}: {f.path}: {f.detail[len(CANNOT_TELL_DETAIL):]}")


def _say_env(report: AuditReport) -> None:
    env = report.env
    if env is None:
        return
    if env.found is None:
        say(f"Env defaults of profile {report.profile} not checked: a root filesystem has no image config "
            "(audit the running process with --pid to check its environment).")
    elif not env.missing:
        say(f"Env: every default of profile {report.profile} is set" + (f" in {env.where}" if env.source == "process" else "")
            + f" ({', '.join(shown_env(k, v) for k, v in env.expected)}).")
    has, where = ("it has", f" in {env.where}") if env.source == "process" else ("the image has", "")
    for k, v, got in env.missing:
        say(f"  env not set{where}: {shown_env(k, v)} ({has} {shown_env(k, got)})")


def _render(report: AuditReport | None, history, platform: str | None = None) -> None:
    if report is not None:
        from ..verbs.audit import LIVE

        rows = []
        for p in report.patches:
            live = sum(f.state == LIVE for f in p.files)
            files = str(len(p.files)) if live in (0, len(p.files)) else f"{live}/{len(p.files)} live"
            rows.append([p.name, (p.state, AUDIT_COLOR.get(p.state, "white")), files, _first(p)])
        title = f"Audit of {report.info.ref}" + (f" for {platform} ({report.info.digest})" if platform else "")
        if report.profile is not None:
            title += f" as profile {report.profile}"
        table(title, ["patch", "state", "files", "first divergent file"], rows)
        if report.base is not None:
            # a manifest is anyone's to write: its name is one escaped line (errors.shown)
            say(f"Base (the image's annotations): {shown(report.base.name or '(no name)')} ({report.base.digest or 'no digest'}).")
        _say_runtime(report)
        _say_env(report)
        if report.trust is not None:
            say(f"{report.trust.note}.")
            for digest, why in report.trust.rejected:
                say(f"  attestation {digest} did not answer: {why}")
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
    image: Optional[list[str]] = typer.Option(None, "--image", "-i", metavar="REF", help=ImageOpt.help + " Repeat it (or use --images-from) to audit a fleet: a patches x images matrix."),
    images_from: Optional[Path] = typer.Option(None, "--images-from", metavar="FILE", help="Audit every image listed in FILE (one reference per line, # comments), as with repeated --image."),
    merge: Optional[list[Path]] = typer.Option(None, "--merge", metavar="JSON", help="Merge the --json documents of several audit runs (shards of a fleet) into one matrix; reads no image. Repeatable; further files may follow as arguments."),
    merge_more: Optional[list[Path]] = typer.Argument(None, metavar="[JSON]...", help="More documents for --merge.", show_default=False),
    root: Optional[Path] = typer.Option(None, "--root", metavar="DIR", help="An extracted rootfs, or /proc/PID/root of a running container."),
    pid: Optional[int] = typer.Option(None, "--pid", metavar="PID", help="Audit the root of a running process (/proc/PID/root); a file changed after it started is restart-pending."),
    platform: Optional[str] = PlatformOpt,
    history: bool = typer.Option(False, "--history", help="Add when each patch entered and left the series (git history of the queue)."),
    expect: Optional[Expect] = typer.Option(None, "--expect", metavar="live|pending", help="The state every patch must be in for exit 0 (pending: a base image is still clean). Default: live."),
    format: Format = typer.Option(Format.text, "--format", metavar="text|github", help=FormatOpt_help),
    trust_attestation: Optional[Path] = typer.Option(None, "--trust-attestation", metavar="PUB", help="Where an attestation of the image verifies with this PEM public key and matches the queue, take the states from it and read no layer; otherwise read the layers, and say why."),
    strict: bool = typer.Option(False, "--strict", help="Exit 5 also when imgquilt cannot tell which code CPython runs for a live file (a pyc it would load that could not be judged)."),
    profile: Optional[str] = ProfileOpt,
) -> None:
    """State of each patch and file in an image, a rootfs or a running container.

    States: live, pending, drifted-live, drifted, missing, shadowed (stale bytecode would run instead),
    restart-pending (--pid: changed after the process started), partial. Exit 0 when every patch is
    in the --expect state (live by default), 5 otherwise (with --strict, also when a pyc CPython
    would load for a live file could not be judged: "cannot tell").

    On a queue with profiles: --profile NAME judges that profile's patches (and its env defaults in
    the image's config); without it, the profile the image's apply record (else its digest) names;
    --profile all judges every one and says which the image matches (exit 0 when one does). With --pid,
    the profile's env defaults are checked in the process's environment (/proc/PID/environ). A fleet
    audit (several images) judges each image by its own profile.

    \b
    Examples:
      imgquilt audit --image oci:out:1.0-fixed
      imgquilt audit --root /proc/1234/root --json
      imgquilt audit --pid 1234
      imgquilt audit --image oci:base:1.0 --expect pending
      imgquilt audit --history
      imgquilt audit --format github
      imgquilt audit --image docker://reg/app:1.0 --image docker://reg/app:1.1 --image docker://reg/app:2.0
      imgquilt audit --images-from fleet.txt --json > shard-0.json
      imgquilt audit --merge shard-*.json
      imgquilt audit --image docker://reg/app:1.0-fixed --trust-attestation key.pub
      imgquilt audit --profile all --image oci:out:glm53
      imgquilt audit --pid 1234 --profile all
    """
    from ..verbs.audit_verb import AuditRequest, FleetAudited, FleetMerged, PlatformsAudited, run_audit

    req = AuditRequest(G.queue, tuple(image or ()), root, platform, history, expect.value if expect else None, progress(),
                       trust_attestation, pid, profile, strict, images_from, tuple(merge or ()), tuple(merge_more or ()),
                       progress_of=ref_progress)
    done = run_audit(req)
    if isinstance(done, FleetMerged):
        return fleet_cli.finish(done.doc, format)
    if isinstance(done, FleetAudited):
        return fleet_cli.say_fleet(done, (expect or Expect.live).value, format, strict=strict)
    if isinstance(done, tuple):  # --profile all
        return _say_profiles(done, req.image, root, pid, (expect or Expect.live).value, format)
    if isinstance(done, PlatformsAudited):
        return _say_platforms(done, (expect or Expect.live).value, format, strict=strict)
    report, hist, want, failing, failure = done.report, done.history, done.expect, done.failing, done.error
    if G.json:
        from .documents import audit_doc

        emit_outcome(audit_doc(report, want, hist), failure)
        return
    if format is Format.github:
        whose = f" (profile {done.profile})" if done.profile else ""
        for p in failing:
            annotate("error", f"patches/{p.name}", "imgquilt audit", f"{p.name} is {p.state}, not {want}{whose}" + (f": {_first(p)}" if _first(p) else "") + ".")
        if failure is not None and not failing:
            annotate("error", "targets.lock", "imgquilt audit", failure.message)
    _render(report, hist)
    if failure is not None:
        raise failure


def _say_profiles(audits, image_ref: str | None, root: Path | None, pid: int | None, want: str, format: Format) -> None:
    """--profile all: every profile judged; the ones the filesystem (or process) matches named."""
    from .documents import audit_profiles_doc

    matching = [a.profile for a in audits if a.matches]
    where = (image_ref or (str(root) if root is not None else None)
             or (f"process {pid}" if pid is not None else "the image each profile pins"))
    failure = None
    if not matching:
        failure = NotLive(f"{where} matches no profile ({want}): "
                          + "; ".join(f"{a.profile}: {a.error.message if a.error else 'the apply record disagrees'}" for a in audits),
                          hint="Apply the profile it should be (`imgquilt apply --profile NAME --output-image REF`).")
    if G.json:
        emit_outcome(audit_profiles_doc(audits, want, matching, bool(image_ref or root or pid is not None)), failure)
        return
    for a in audits:
        if format is Format.github and not a.matches:
            for p in a.failing:
                annotate("error", f"patches/{p.name}", "imgquilt audit", f"{p.name} is {p.state}, not {want} (profile {a.profile}).")
        _render(a.report, None)
        say(f"Profile {a.profile}: " + ("matches." if a.matches else "does not match."))
    say(f"{where} matches profile(s): {', '.join(matching)}." if matching else f"{where} matches no profile.")
    if failure is not None:
        raise failure


COMMANDS = {"audit": audit_cmd}
