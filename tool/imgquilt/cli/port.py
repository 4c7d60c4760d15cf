"""`port`: a guarded copy of a patch for another profile, by a 3-way merge onto its image; `--continue` and `--abort`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import typer

from ..errors import RebaseConflict, UsageError
from .documents import port_doc
from .common import G, emit_json, emit_outcome, note, patch_names, progress, say, say_lock, table

if TYPE_CHECKING:
    from ..rebase.port import Ported

_STYLE = {
    "carried": "green",
    "merged": "cyan",
    "upstream": "blue",
    "reused": "cyan",
    "resolved": "cyan",
    "conflict": "bold red",
}


def _conflict_error(r: Ported) -> RebaseConflict:
    files = "\n".join(f"  - {f.path}: {f.detail}\n    edit {f.work}" for f in r.conflicts)
    return RebaseConflict(
        f"Port stopped: {r.patch} conflicts with profile {r.profile}'s image ({r.image.get('ref')}) in:\n{files}",
        hint="Edit the file(s) to the result you want (remove every conflict marker), then `imgquilt port --continue`;\n"
        "or `imgquilt port --abort` (series, patches/ and targets.lock were not changed).",
    )


def _render(r: Ported) -> None:
    if G.json:
        if r.status == "stopped":
            emit_outcome(port_doc(r), _conflict_error(r))
        else:
            emit_json(port_doc(r))
    else:
        table(
            f"Port of {r.patch} to profile {r.profile} ({r.image.get('ref')})",
            ["file", "state", "note"],
            [[f.path, (f.state, _STYLE.get(f.state, "")), f.detail] for f in r.files],
        )
        for n in r.notes:
            say(f"note: {n}")
    if r.status == "stopped":
        raise _conflict_error(r)
    if G.json:
        return
    if r.status == "aborted":
        say("Port aborted: series, patches/ and targets.lock were not changed.")
        return
    guards = " ".join(r.guards) or "unguarded"
    say(f"Ported {r.patch} to profile {r.profile}: {r.copy} (+{r.profile}) follows it in series; {r.patch}: {guards}.")
    say_lock(r.lock)
    note(f"Next: `imgquilt apply --profile {r.profile}`, then commit series, patches/ and targets.lock.")


def port_cmd(
    patch: Optional[str] = typer.Argument(
        None, metavar="PATCH", help="The patch to copy for the profile.", autocompletion=patch_names("series")
    ),
    profile: Optional[str] = typer.Option(
        None,
        "--profile",
        metavar="NAME",
        help="The profile (declared in targets.lock) the copy is for; it must select its own name as a guard.",
    ),
    continue_: bool = typer.Option(
        False, "--continue", help="Go on after resolving the conflicted files in .imgquilt/work/."
    ),
    abort: bool = typer.Option(False, "--abort", help="Drop the stopped port (nothing in the queue was changed yet)."),
) -> None:
    """Copy a patch to another profile's image by a 3-way merge (its base, its result, the profile's file).

    The copy, PATCH-NAME.patch, is guarded +NAME and placed right after PATCH in series; PATCH gets
    -NAME when the profile selects it. The copy's sections are pinned on the profile's own files,
    and targets.lock follows in the same transaction. A conflict stops the port (exit 4) with the
    merged file in .imgquilt/work/; nothing is written until `port --continue`. A resolution is kept
    (as a rebase's) and reused when the same three sides meet again.

    Refused before any work: an unknown profile (naming the nearest), a patch the profile already
    selects and that applies on its image as it is, a copy name that exists, a rebase or port in
    progress, patches applied in the work tree.

    \b
    Examples:
      imgquilt port 0005-moe-fix.patch --profile rocm
      imgquilt port --continue
      imgquilt port --abort
    """
    from ..rebase import verbs as verb

    if continue_ and abort:
        raise UsageError("--continue and --abort exclude each other.")
    if continue_ or abort:
        if patch or profile:
            raise UsageError("--continue and --abort take no patch and no --profile: the port remembers them.")
        r = verb.port_continue(G.queue) if continue_ else verb.port_abort(G.queue)
    else:
        if not patch or not profile:
            raise UsageError("Which patch, for which profile? `imgquilt port PATCH --profile NAME`.")
        r = verb.port(G.queue, patch=patch, profile=profile, progress=progress())
    _render(r)


COMMANDS = {"port": port_cmd}
