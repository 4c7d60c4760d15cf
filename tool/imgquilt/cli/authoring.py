"""Writing a patch: new, add, edit, refresh, diff, fold. Parse, call imgquilt.work, render."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ..fs.content import chunks_of
from ..errors import UsageError

from . import documents
from .common import (G, ImageOpt, PlatformOpt, editor, emit_json, header_fields, note, patch_names, run_editor, say,
                     one_patch, say_lock, tree, write_bytes)

if TYPE_CHECKING:
    from ..work import WorkTree


def default_description(name: str) -> str:
    """0003-fix-port.patch -> "fix port" (DEP-3 wants a Description; edit it with `header`)."""
    stem = re.sub(r"\.(patch|diff)$", "", name.rsplit("/", 1)[-1])
    return re.sub(r"^[0-9]+[-_.]*", "", stem).replace("-", " ").replace("_", " ").strip() or stem


def new_cmd(
    name: str = typer.Argument(..., metavar="NAME", help="Patch file name, e.g. 0003-fix-port.patch."),
    description: Optional[str] = typer.Option(None, "--description", "-d", metavar="TEXT", help="DEP-3 Description (first line short; more lines allowed)."),
    author: Optional[str] = typer.Option(None, "--author", metavar="'NAME <EMAIL>'", help="DEP-3 Author, e.g. 'Ops <ops@example.org>'."),
    requires: List[str] = typer.Option([], "--requires", metavar="PATCH", help="A patch this one needs (repeatable)."),
    status: Optional[str] = typer.Option(None, "--status", metavar="TEXT", help="Status field, e.g. wip."),
    field: List[str] = typer.Option([], "--field", metavar="FIELD=VALUE", help="Any other header field (repeatable)."),
    guard: List[str] = typer.Option([], "--guard", metavar="+G|-G", help="A guard on its series line (repeatable): +G only in profiles that select G, -G in none of them."),
    new_guard: bool = typer.Option(False, "--new-guard", help="Accept a guard no profile of targets.lock selects yet (else refused: a typo would drop the fix)."),
) -> None:
    """Create a patch after the top one and make it the top (its header only, until `refresh`).

    With --guard the patch is guarded from the start (as `imgquilt guard` sets it; a guard no profile
    selects is refused without --new-guard). When the guards keep it out of the profile the work tree
    follows, it is inserted but not applied: `imgquilt select NAME`, then `push` it.

    \b
    Example:
      imgquilt new 0003-fix-port.patch -d "Serve on port 9000" --author "Ops <ops@example.org>"
      imgquilt new 0004-hip-timeouts.patch --guard +rocm
    """
    from ..queue.patchfile import Header
    from ..work.series_edit import new

    wt = tree()
    header = Header(b"")
    pairs = header_fields(description if description is not None else default_description(name), author, requires, status, field)
    for key, value in pairs:
        header = header.with_field(key, value)
    patch = new(wt, name, header, tuple(guard), new_guard=new_guard)
    top = wt.top()
    if G.json:
        emit_json(documents.new_doc(name, wt.patches_dir / name, top, patch.header, guard, wt.lock_update))
        return
    if top != name:
        say(f"Patch {name} is in series ({' '.join(dict.fromkeys(guard))}) but not applied: the work tree's profile does not select it. "
            "`imgquilt select PROFILE`, then `imgquilt push` it.")
        say_lock(wt.lock_update)
        return
    say(f"Patch {name} is now on top (patches/{name}).")
    say("Next: `imgquilt add PATH` (or `edit PATH`), change the files under .imgquilt/work/, then `imgquilt refresh`.")
    say_lock(wt.lock_update)


def _add(paths: list[str], image: str | None, platform: str | None, new: bool) -> tuple[WorkTree, str, list[str], list[str]]:
    from ..work.track import add

    wt = tree(image, platform)
    top, added, already = add(wt, paths, new=new)
    return wt, top, added, already


def _report_add(wt: WorkTree, top: str, added: list[str], already: list[str], **extra) -> None:
    if G.json:
        emit_json(documents.add_doc(top, added, already, {p: wt.work / wt.location(p) for p in added + already}, **extra))
        return
    for p in added:
        say(f"File {p} added to patch {top} ({wt.work / wt.location(p)}).")
    for p in already:
        say(f"File {p} is already in patch {top}.")


NewOpt_help = "The patch creates these files: a path that is not in the image is refused without it (a typo, most often)."


def add_cmd(
    paths: List[str] = typer.Argument(..., metavar="PATH", help="Image paths as patches name them, e.g. usr/lib/python3/dist-packages/foo.py."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    new: bool = typer.Option(False, "--new", help=NewOpt_help),
) -> None:
    """Track files in the top patch: copy them from the image into .imgquilt/work/ and snapshot them.

    A path the image does not have (and no applied patch creates) needs --new.

    \b
    Examples:
      imgquilt add etc/svc.conf
      imgquilt add --new usr/local/bin/healthcheck
    """
    wt, top, added, already = _add(paths, image, platform, new)
    _report_add(wt, top, added, already)


def edit_cmd(
    paths: List[str] = typer.Argument(..., metavar="PATH", help="Image paths to add and edit."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    new: bool = typer.Option(False, "--new", help=NewOpt_help),
) -> None:
    """`add` the files, then open them in $EDITOR (on a terminal) or $IMGQUILT_EDITOR.

    Without an editor the files are only added; edit them under .imgquilt/work/.

    \b
    Example:
      imgquilt edit usr/lib/svc/server.py
    """
    wt, top, added, already = _add(paths, image, platform, new)
    cmd = editor()
    if cmd:
        run_editor(cmd, [wt.work / wt.location(p) for p in added + already])
    _report_add(wt, top, added, already, edited=bool(cmd))
    if not cmd and not G.json:
        say("No editor (set EDITOR on a terminal, or IMGQUILT_EDITOR): edit the files above, then `imgquilt refresh`.")


def refresh_cmd(
    names: Optional[List[str]] = typer.Argument(None, metavar="[PATCH]...", help="An applied patch (default: the top); with --rehash, the patches to re-pin.",
                                                autocompletion=patch_names("series")),
    patch_opt: Optional[List[str]] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument (repeatable with --rehash).",
                                                  autocompletion=patch_names("series")),
    rehash: bool = typer.Option(False, "--rehash", help="Re-pin patches whose files were edited by hand (applied or not) and re-chain the patches after them; targets.lock follows."),
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the check that patched .py files gain no errors; a change to a .py file is then marked `Python-Check: skipped` in the header (`check --strict` refuses it) until a refresh with the check."),
) -> None:
    """Write the work tree's changes into the patch (snapshot -> current); the header is kept as it is.

    A .py file the patch leaves with a new syntax error or undefined name is refused (exit 3) unless
    --no-python-check.

    With --rehash PATCH..., re-pin patches edited by hand instead (the one way back from a hand
    edit): each body (hunk headers recounted) is applied to the base the queue pins for each file
    (lock, object store, the pinned image; never the patch's own claim), its Patched-SHA256 lines
    follow, every later patch on the same files is re-chained onto the new result (a hunk that no
    longer fits stops it, exit 3, nothing written), and targets.lock is written from the verified
    series. A base that drifted is still refused.

    \b
    Examples:
      imgquilt refresh
      imgquilt refresh --rehash 0003-fix.patch
    """
    names = list(names or []) + [n for n in patch_opt or [] if n not in (names or [])]
    if rehash:
        _rehash(names, python_check=not no_python_check)
        return
    if names and len(names) > 1:
        raise UsageError("refresh takes one PATCH (several only with --rehash).")
    from ..work.refresh import refresh

    wt = tree()
    r = refresh(wt, names[0] if names else None, python_check=not no_python_check)
    if G.json:
        emit_json(documents.refresh_doc(r, wt.patches_dir / r.name))
        return
    for n in r.notes:
        note(f"note: {n}")
    if not r.patch.sections and not r.changed:
        say(f"Nothing changed in patch {r.name}.")
    elif r.changed:
        say(f"Refreshed patch {r.name}.")
    else:
        say(f"Patch {r.name} is up to date.")
    say_lock(r.lock)


def _rehash(names: list[str], *, python_check: bool) -> None:
    from ..work.rehash import rehash

    if not names:
        raise UsageError("--rehash needs the PATCH to re-pin.", hint="imgquilt refresh --rehash NAME")
    from .apply import python_check_named

    wt = tree()
    with python_check_named("refresh --rehash " + " ".join(names)):
        r = rehash(wt, names, python_check=python_check)
    changed = [s for s in r.sections if s.old != s.new]
    if G.json:
        emit_json(documents.rehash_doc(r, wt.patches_dir / r.name))
        return
    for n in r.notes:
        note(f"note: {n}")
    for name in r.names:
        mine = [s for s in changed if s.patch == name]
        for s in mine:
            say(f"{s.path}: Patched-SHA256 {s.old} -> {s.new}")
        if mine:
            say(f"Re-pinned patch {name}.")
        elif not any(c.patch == name for c in r.rechained):
            say(f"Patch {name}: every Patched-SHA256 already matches its body.")
    for c in r.rechained:
        result = f"Patched-SHA256 {c.old_patched} -> {c.patched}" if c.patched != c.old_patched else "Patched-SHA256 unchanged"
        say(f"Re-chained {c.patch}: {c.path}: Base-SHA256 {c.old_base} -> {c.base}, {result}")
    if r.lock is not None:
        say(f"Wrote {r.lock}.")


def diff_cmd(
    name: Optional[str] = typer.Argument(None, metavar="PATCH", help="An applied patch (default: the top).",
                                         autocompletion=patch_names("applied")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("applied")),
    unrefreshed: bool = typer.Option(False, "-z", help="Only the changes not refreshed yet (patch file's result -> work tree)."),
    upstream: Optional[str] = typer.Option(None, "--upstream", metavar="PATCH", help="Instead: upstream's change, between the old image and --image NEWREF, of the functions, classes and regions PATCH edits.",
                                           autocompletion=patch_names("series")),
    image: Optional[str] = typer.Option(None, "--image", "-i", metavar="NEWREF", help="With --upstream: the new image (default: the one a rebase under way goes to)."),
    from_ref: Optional[str] = typer.Option(None, "--from", metavar="OLDREF", help="With --upstream: the old image (default: the one targets.lock pins)."),
    platform: Optional[str] = PlatformOpt,
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME", help="With --upstream: the old image is that profile's pin (and the patch its selection's); during a rebase of several profiles, that profile's images alone (default: each profile carrying the patch)."),
) -> None:
    """Show the diff of a patch's files, snapshot -> current work tree (what `refresh` would write);
    with --upstream PATCH, what upstream changed under that patch between two images.

    \b
    Examples:
      imgquilt diff > /tmp/top.diff
      imgquilt diff -z
      imgquilt diff --upstream 0003-moe-fix.patch --image oci:vllm:0.11.0
    """
    if upstream is not None:
        if patch is not None or name is not None or unrefreshed:
            raise UsageError("--upstream PATCH names its patch; give no other PATCH, -P or -z with it.")
        return _diff_upstream(upstream, image, from_ref, platform, profile)
    if image or from_ref or profile:
        raise UsageError("--image, --from and --profile go with --upstream PATCH.")
    patch = one_patch(name, patch)
    from ..work.refresh import diff
    from ..work.unrefreshed import diff_unrefreshed

    wt = tree(guard=False)
    p = diff_unrefreshed(wt, patch) if unrefreshed else diff(wt, patch)
    if G.json:
        emit_json(documents.diff_doc(p))
        return
    for s in p.sections:  # a section of a large patch file streams out in chunks, never held
        for chunk in chunks_of(s.raw):
            write_bytes(chunk)


def _diff_upstream(name: str, image: str | None, from_ref: str | None, platform: str | None, profile: str | None) -> None:
    from ..rebase.verbs import diff_upstream
    from .common import progress, raw_say

    got = diff_upstream(G.queue, patch=name, image=image, from_ref=from_ref, platform=platform, progress=progress(), profile=profile)
    if G.json:
        emit_json(documents.upstream_doc(got))
        return
    for one in got.lanes or (got,):  # a stopped rebase of several profiles: each profile's images in turn
        who = f"profile {one.profile}: " if got.lanes or (one.profile is not None and profile is None) else ""
        old = one.old["ref"] or "the queue's bases (.imgquilt/objects)"
        if not one.changes:
            say(f"{who}Between {old} and {one.new['ref']}, upstream changed nothing in what {name} edits.")
            continue
        say(f"{who}Upstream's change, {old} -> {one.new['ref']}, of what {name} edits:")
        for c in one.changes:
            say(f"{c.path}: {c.summary()}")
            if c.diff:
                raw_say(c.diff.rstrip("\n"))


def fold_cmd(
    file: str = typer.Argument("-", metavar="FILE", help="A plain unified diff, or - for stdin."),
    strip: int = typer.Option(1, "-p", metavar="N", help="Strip this many leading path components (as patch -pN)."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    ignore_git_index: bool = typer.Option(False, "--ignore-git-index", help="Do not check git `index` blob hashes."),
) -> None:
    """Apply a plain diff to the top patch's files (adding them), exactly where its hunks say; then `refresh`.

    \b
    Example:
      git diff | imgquilt fold -
    """
    from ..errors import BadInput

    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise BadInput(f"Cannot read {file}: {exc.strerror}.") from None
    from ..work.track import fold

    wt = tree(image, platform)
    top, paths, notes = fold(wt, data, strip=strip, source="<stdin>" if file == "-" else file, check_git_index=not ignore_git_index)
    if G.json:
        emit_json(documents.fold_doc(top, paths, notes))
        return
    for n in notes:
        note(f"note: {n}")
    for p in paths:
        say(f"patched {p}")
    say(f"Folded into the work tree of {top}; run `imgquilt refresh` to write it into the patch.")


COMMANDS = {"new": new_cmd, "add": add_cmd, "edit": edit_cmd, "refresh": refresh_cmd, "diff": diff_cmd, "fold": fold_cmd}
