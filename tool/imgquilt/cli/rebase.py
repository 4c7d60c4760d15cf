"""`rebase`: carry the queue onto a new image; `--continue`, `--skip`, `--abort` and `--status` of a stopped rebase."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

from ..errors import RebaseConflict, UsageError
from .annotations import Format, annotate
from . import documents
from .common import G, PlatformOpt, ProfileOpt, emit_json, emit_outcome, note, progress, raw_say, say, table

if TYPE_CHECKING:  # the rebase machinery (and gitpython) load only when rebase runs
    from ..rebase import RebaseReport

_STYLE = {"unchanged": "green", "merged": "cyan", "moved": "magenta", "merged-upstream": "blue", "conflict": "bold red"}


def _rows(report: RebaseReport) -> list[list]:
    rows = []
    for p in report.patches:
        first = True
        for f in p.files:
            where = f.path if not f.moved_from else f"{f.path} (from {f.moved_from})"
            extra = ("merged; " if f.merged and f.state == "moved" else "") + (
                ("resolved by hand" if not f.reused else "kept resolution reused") if f.by_hand else f.detail)
            if f.upstream and f.state != "conflict":
                extra = "; ".join(x for x in (extra, f"{report.who} changed " + ", ".join(u.region.name or f"lines {u.region.start}-{u.region.end}"
                                                                                 for u in f.upstream)) if x)
            name = p.name + (" (dropped)" if p.dropped and first else "") + (f" [{', '.join(p.profiles)}]" if p.profiles else "")
            rows.append([name if first else "", (p.headline(report.who), _STYLE[p.state]) if first else "", where,
                         (f.state, _STYLE[f.state]), extra])
            first = False
    return rows


def _conflict_error(report: RebaseReport) -> RebaseConflict:
    """Exit 4, naming the patch, each conflicted file and the next commands."""
    files = "\n".join(f"  - {f.path}: {f.detail}\n    edit {f.work}" for f in report.conflicts)
    where = report.new_image.get("ref")
    if report.pins:  # one resolution serves every profile the conflict stands in
        pins = [d for d in report.pins if d["profile"] in report.conflict_profiles]
        where = "the new image of " + ", ".join(f"profile {d['profile']} ({d['new'].get('ref')})" for d in pins) + \
            (" (one resolution serves them all)" if len(pins) > 1 else "")
    return RebaseConflict(
        f"Rebase stopped: {report.conflict_patch} conflicts with {where} in:\n{files}",
        hint="Edit the file(s) to the result you want (remove every conflict marker), then `imgquilt rebase --continue`;\n"
        "or `imgquilt rebase --skip` to drop this patch, or `imgquilt rebase --abort` to put the queue back as it was.",
    )


def _render(report: RebaseReport, verbose: bool = False, format: Format = Format.text) -> None:
    if G.json:
        emit_json(documents.rebase_doc(report))
        return
    if format is Format.github:
        _annotate(report)
    onto = ("Rebase of " + ", ".join(f"profile {d['profile']} onto {d['new'].get('ref')}" for d in report.pins)
            if report.pins else f"Rebase onto {report.new_image.get('ref')}")
    table(onto, ["patch", "state", "file", "file state", "note"], _rows(report))
    for n in report.notes:
        say(f"note: {n}")
    for p in report.patches:
        for n in p.notes:
            say(f"note: {p.name}: {n}")
    _upstream(report, verbose)
    counts = {k: v for k, v in report.summary().items() if v}
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if report.status == "done":
        if report.pins:
            names = ", ".join(d["profile"] for d in report.pins)
            say(f"Rebased {len(report.patches)} patch(es) for profiles {names}: {summary}. targets.lock pins each of them to its "
                "new image (re-pinned together; other pins unchanged).")
            return
        pin = "targets.lock pins the new image" if report.profile is None else f"targets.lock pins profile {report.profile} to the new image (other pins unchanged)"
        say(f"Rebased {len(report.patches)} patch(es) onto {report.new_image.get('ref')}: {summary}. {pin}.")


def _upstream(report: RebaseReport, verbose: bool) -> None:
    """One line per patch that upstream changed under (or that has findings on the new image), then
    each change; with -v, upstream's diff of those regions."""
    for p in report.patches:
        if not p.upstream and not p.findings:
            continue
        say(f"{p.name}: {p.headline(report.who)}:")
        for u in p.upstream:
            say(f"  {u.path}: {u.summary()}")
            if verbose and u.diff:
                raw_say(_indent(u.diff))
        for f in p.findings:
            head = "cannot tell" if f["kind"] == "cannot-tell" else f["kind"]
            where = ": ".join(x for x in (f["module_path"], f["why"]) if x)
            say(f"  {f['path']}:{f['line']}:{f['col']}: {head}: {f['message']}" + (f" ({where})" if where else ""))


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.rstrip("\n").split("\n"))


def _annotate(report: RebaseReport) -> None:
    """--format github: a warning per region upstream changed under a patch, an error per finding."""
    for p in report.patches:
        for u in p.upstream:
            annotate("warning", f"patches/{p.name}", f"{report.who} changed {u.region.name or 'lines'}", f"{u.path}: {u.summary()}")
        for f in p.findings:
            level = "notice" if f["kind"] == "cannot-tell" else "error"
            annotate(level, f"patches/{p.name}", f"{f['kind']} on the new image",
                     f"{f['path']}:{f['line']}:{f['col']}: {f['message']} ({f['module_path']}: {f['why']})")


def _status() -> None:
    """Re-list where a stopped rebase stands (top says "No patches applied" then)."""
    from ..rebase.verbs import rebase_in_progress, rebase_status

    if not rebase_in_progress(G.queue):  # a question with an answer: exit 0
        if G.json:
            emit_json(documents.rebase_none_doc())
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


def _images(values: list[str], profile: str | None) -> tuple[str, dict[str, str]]:
    """--image REF (one pin) and --image NAME=REF (a profile's, with --profile): the plain one and the named."""
    import re

    plain: list[str] = []
    named: dict[str, str] = {}
    for v in values:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_-]{0,63})=(.+)", v, re.S)
        if profile is not None and m:
            if m.group(1) in named:
                raise UsageError(f"--image given twice for profile {m.group(1)}.")
            named[m.group(1)] = m.group(2)
        else:
            plain.append(v)
    if len(plain) > 1:
        raise UsageError(f"--image given {len(plain)} times: {', '.join(plain)}.",
                         hint="One new image per profile: --profile all --image NAME=REF --image NAME=REF.")
    return (plain[0] if plain else ""), named
def _forget(other: object) -> None:
    from ..rebase.verbs import rebase_forget

    if other:
        raise UsageError("--forget takes no other option: it drops the kept resolutions, nothing else.")
    n = rebase_forget(G.queue)
    if G.json:
        emit_json(documents.rebase_forgotten_doc(n))
    else:
        say(f"Forgot {n} kept resolution(s).")


def rebase_cmd(
    image: Optional[List[str]] = typer.Option(None, "--image", "-i", metavar="REF|PROFILE=REF", help="The new image; with --profile all (or A,B), each profile's as PROFILE=REF (repeatable)."),
    from_ref: Optional[str] = typer.Option(None, "--from", metavar="OLDREF", help="The old image (fills the object store with the old bases when it lacks them)."),
    maps: Optional[List[str]] = typer.Option(None, "--map", metavar="OLD=NEW", help="OLD=NEW: a target path or directory prefix that moved (repeatable)."),
    keep_empty: bool = typer.Option(False, "--keep-empty", help="Keep patches whose change is already upstream (as no-op sections) instead of dropping them."),
    continue_: bool = typer.Option(False, "--continue", help="Go on after resolving the conflicted files in .imgquilt/work/."),
    abort: bool = typer.Option(False, "--abort", help="Stop the rebase and restore series, patches/ and targets.lock."),
    skip: bool = typer.Option(False, "--skip", help="Drop the conflicted patch from the rebased series and go on."),
    status: bool = typer.Option(False, "--status", help="Show the stopped rebase: each patch so far and the conflicted files."),
    forget: bool = typer.Option(False, "--forget", help="Drop every kept resolution (a conflict resolved once is otherwise taken again by the next rebase or port that meets the same three sides)."),
    platform: Optional[str] = PlatformOpt,
    profile: Optional[str] = ProfileOpt,
    split: bool = typer.Option(False, "--split", help="With several profiles: a shared patch whose file their new images hold at different bases is kept for the profiles that agree, and a guarded copy (NAME-PROFILE.patch, +PROFILE) is carried onto the others' base."),
    force: bool = typer.Option(False, "--force", help="Re-pin a profile onto the image another profile pins, or onto another repository than its old pin's (refused otherwise, exit 3)."),
    conflict_style: str = typer.Option("diff3", "--conflict-style", metavar="diff3|merge", help="Conflict markers with the old base's section too (diff3, as `git merge-file --diff3`), or the two sides only (merge)."),
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the Python checks after every step (in-file and cross-module, on the new image); with --continue, for the rest of the rebase. Each patch carried with a .py section then says `Python-Check: skipped` in its header."),
    boot: bool = typer.Option(False, "--boot", help="After every step, import the patch's modules with the new image's own Python in a sandbox (as `imgquilt boot`); a module that fails where the image with the queue so far imports it stops the rebase (a conflict of kind boot)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show upstream's diff of every function, class or region it changed under a patch."),
    format: Format = typer.Option(Format.text, "--format", metavar="text|github", help="text (default) or github: a warning annotation per region upstream changed under a patch, an error per new Python finding."),
) -> None:
    """Carry the queue onto a new image with 3-way merges; stop on a conflict (exit 4).

    Says what upstream changed in the functions, classes and regions each patch edits, and stops
    (a conflict of kind python) when a result has new Python findings on the new image. Without
    --from, the old bases come from the object store, else from the image targets.lock pins.

    With --profile NAME, carry the patches that profile selects onto its new image and re-pin that
    profile only; a patch other profiles select too is rewritten only where each of them still chains
    (else nothing is written, exit 3, naming the profile to rebase as well). With --profile all (or
    A,B) and --image NAME=REF for each, every profile is carried onto its own new image in one rebase:
    a shared patch is merged once, a conflict shown once for every profile it stands in, and all are
    re-pinned together at the end. Before any merge, a shared patch whose file the new images hold at
    different bases is refused (exit 3) unless --split. A profile re-pinned onto another profile's
    image, or another repository, is refused (exit 3) unless --force.

    A conflict resolved once is kept (.imgquilt/resolutions/, as `git rerere`), also when the rebase
    is then aborted, refused or killed; the next rebase or port that meets the same three sides takes
    it and says so. --forget drops them.

    \b
    Examples:
      imgquilt rebase --image oci:vllm:0.10.2
      imgquilt rebase --image oci:vllm:0.10.2 -v             (with upstream's diff of what it changed)
      imgquilt rebase --image rootfs:new --from rootfs:old
      imgquilt rebase --image oci:img:2 --map usr/lib/python3.11=usr/lib/python3.12
      imgquilt rebase --status
      imgquilt rebase --continue
      imgquilt rebase --skip
      imgquilt rebase --abort
      imgquilt rebase --forget      (drop the kept resolutions)
      imgquilt rebase --profile qwen --image oci:images/vllm:0.11
      imgquilt rebase --profile all --image cuda=oci:vllm:0.10.2 --image rocm=oci:vllm-rocm:0.10.2 --split
    """
    from ..rebase import verbs as verb

    if sum((continue_, abort, status, skip)) > 1:
        raise UsageError("--continue, --skip, --abort and --status exclude each other.")
    if (continue_ or abort or status or skip) and (image or from_ref or maps or keep_empty or profile or split or force
                                                   or conflict_style != "diff3" or boot):
        raise UsageError("--continue, --skip, --abort and --status take no other options: the rebase remembers them.")
    if no_python_check and (abort or status or skip):
        raise UsageError("--no-python-check goes with a new rebase or --continue.")
    if forget:
        _forget(continue_ or abort or status or skip or image or from_ref or maps or keep_empty or profile or no_python_check)
        return
    if status:
        _status()
        return
    if abort:
        aborted = verb.rebase_abort(G.queue)
        report, restored = aborted.report, list(aborted.restored)
        if G.json:
            emit_json(documents.rebase_aborted_doc(report, restored))
        elif report:
            say(f"Rebase aborted: series, patches/ and targets.lock are back as they were ({len(restored)} file(s) restored).")
        else:
            say("Rebase aborted before it changed anything.")
        return
    if continue_:
        report = verb.rebase_continue(G.queue, progress=progress(), python_check=not no_python_check)
    elif skip:
        report = verb.rebase_skip(G.queue, progress=progress())
    else:
        plain, named = _images(image or [], profile)
        report = verb.rebase(verb.RebaseRequest(G.queue, image=plain, images=named, split=split, force=force, from_ref=from_ref,
                                                maps=tuple(maps or ()), keep_empty=keep_empty, platform=platform,
                                                progress=progress(), profile=profile, conflict_style=conflict_style,
                                                python_check=not no_python_check, boot=boot))
    if report.status == "stopped" and G.json:
        emit_outcome(documents.rebase_doc(report), _conflict_error(report))
    _render(report, verbose, format)
    if report.status == "stopped":
        raise _conflict_error(report)
    if not G.json:
        note("Next: `imgquilt check`, then commit series, patches/ and targets.lock.")


COMMANDS = {"rebase": rebase_cmd}
