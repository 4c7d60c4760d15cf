"""The quilt workflow commands: new add edit refresh push pop top applied unapplied series diff header
delete rename fold (here) and import (cli/importing.py). Parse, call imgquilt.work, render."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ..errors import QueueNotFound, UsageError
from ..queue.lock import read_lock
from ..queue.patchfile import Header, Patch
from .apply import ImageOpt, PlatformOpt, open_ref, pick_ref
from .context import G, emit_json, err, out, queue_root, refuse_during_rebase

if TYPE_CHECKING:  # imgquilt.work loads only for the commands that use the work tree
    from ..work import WorkTree


def say(text: str) -> None:
    out.print(text, markup=False, highlight=False)


def note(text: str) -> None:
    err.print(text, markup=False, highlight=False)


def tree(image: str | None = None, platform: str | None = None, *, create: bool = False, guard: bool = True) -> WorkTree:
    """The work tree of the current queue; `create` makes a queue in the working directory when there is none.

    `guard`: refuse while a rebase is stopped (every command that changes the queue or work tree).
    """
    try:
        root = queue_root()
    except QueueNotFound:
        if not create:
            raise
        root = Path(G.queue or os.environ.get("IMGQUILT_QUEUE") or ".").resolve()
        root.mkdir(parents=True, exist_ok=True)

    if guard:
        refuse_during_rebase(root)
    wt: WorkTree

    def opener():
        lock = read_lock(root / "targets.lock")
        source = open_ref(pick_ref(image, lock.image.ref if lock else wt.remembered_image()), platform)
        if image is not None:
            wt.remember_image(absolute_ref(image))
        return source

    from ..work import WorkTree

    wt = WorkTree(root, open_image=opener, image_explicit=image is not None)
    return wt


def absolute_ref(ref: str) -> str:
    """A ref that still works from another directory: relative paths made absolute."""
    for prefix in ("rootfs:", "oci:", "oci-archive:", "docker-archive:", "tar:", ""):
        if ref.startswith(prefix) and Path(ref[len(prefix):]).exists():
            return prefix + str(Path(ref[len(prefix):]).resolve())
    return ref


def editor() -> str | None:
    """IMGQUILT_EDITOR always (scripts, tests); VISUAL/EDITOR only on a terminal."""
    if os.environ.get("IMGQUILT_EDITOR"):
        return os.environ["IMGQUILT_EDITOR"]
    if sys.stdin.isatty() and sys.stdout.isatty():
        return os.environ.get("VISUAL") or os.environ.get("EDITOR")
    return None


def run_editor(cmd: str, files: list[Path]) -> None:
    # as git runs $EDITOR: through the shell, so "code --wait" works
    r = subprocess.run(["sh", "-c", f'{cmd} "$@"', cmd, *[str(f) for f in files]])
    if r.returncode != 0:
        raise UsageError(f"The editor ({cmd}) exited with status {r.returncode}; nothing more was changed.")


def default_description(name: str) -> str:
    """0003-fix-port.patch -> "fix port" (DEP-3 wants a Description; edit it with `header`)."""
    stem = re.sub(r"\.(patch|diff)$", "", name.rsplit("/", 1)[-1])
    return re.sub(r"^[0-9]+[-_.]*", "", stem).replace("-", " ").replace("_", " ").strip() or stem


def field_pairs(sets: list[str], unsets: list[str] | None = None) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--set wants FIELD=VALUE, not {item!r}.")
        pairs.append((key.strip(), value))
    pairs += [(k.strip(), None) for k in unsets or []]
    return pairs


def header_fields(description: str | None, author: str | None, requires: list[str], status: str | None, fields: list[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    if description is not None:
        pairs.append(("Description", description))
    if author is not None:
        pairs.append(("Author", author))
    if requires:
        pairs.append(("Requires", " ".join(requires)))
    if status is not None:
        pairs.append(("Status", status))
    return pairs + field_pairs(fields)


def files_json(patch: Patch) -> list[dict]:
    return [
        {"path": s.path, "base_sha256": s.base_sha256, "patched_sha256": s.patched_sha256, **({"mode": f"{s.mode:04o}"} if s.mode is not None else {})}
        for s in patch.sections
    ]


# --- commands -------------------------------------------------------------------------------
def new_cmd(
    name: str = typer.Argument(..., help="Patch file name, e.g. 0003-fix-port.patch."),
    description: Optional[str] = typer.Option(None, "--description", "-d", help="DEP-3 Description (first line short; more lines allowed)."),
    author: Optional[str] = typer.Option(None, "--author", help="DEP-3 Author, e.g. 'Ops <ops@example.org>'."),
    requires: List[str] = typer.Option([], "--requires", help="A patch this one needs (repeatable)."),
    status: Optional[str] = typer.Option(None, "--status", help="Status field, e.g. wip."),
    field: List[str] = typer.Option([], "--field", help="Any other header field, FIELD=VALUE (repeatable)."),
) -> None:
    """Create a patch after the top one and make it the top (its header only, until `refresh`).

    Example: imgquilt new 0003-fix-port.patch -d "Serve on port 9000" --author "Ops <ops@example.org>"
    """
    wt = tree(create=True)
    header = Header(b"")
    pairs = header_fields(description if description is not None else default_description(name), author, requires, status, field)
    for key, value in pairs:
        header = header.with_field(key, value)
    patch = wt.new(name, header)
    if G.json:
        emit_json({"patch": name, "file": str(wt.patches_dir / name), "top": name, "header": patch.header.raw.decode("utf-8", "replace")})
        return
    say(f"Patch {name} is now on top (patches/{name}).")
    say("Next: `imgquilt add PATH` (or `edit PATH`), change the files under .imgquilt/work/, then `imgquilt refresh`.")


def _add(paths: list[str], image: str | None, platform: str | None) -> tuple[WorkTree, str, list[str], list[str]]:
    wt = tree(image, platform)
    top, added, already = wt.add(paths)
    return wt, top, added, already


def _report_add(wt: WorkTree, top: str, added: list[str], already: list[str], **extra) -> None:
    if G.json:
        emit_json({"patch": top, "added": added, "already": already, "work": {p: str(wt.work / wt.location(p)) for p in added + already}, **extra})
        return
    for p in added:
        say(f"File {p} added to patch {top} ({wt.work / wt.location(p)}).")
    for p in already:
        say(f"File {p} is already in patch {top}.")


def add_cmd(
    paths: List[str] = typer.Argument(..., help="Image paths as patches name them, e.g. usr/lib/python3/dist-packages/foo.py."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
) -> None:
    """Track files in the top patch: copy them from the image into .imgquilt/work/ and snapshot them.

    Example: imgquilt add etc/svc.conf
    """
    wt, top, added, already = _add(paths, image, platform)
    _report_add(wt, top, added, already)


def edit_cmd(
    paths: List[str] = typer.Argument(..., help="Image paths to add and edit."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
) -> None:
    """`add` the files, then open them in $EDITOR (on a terminal) or $IMGQUILT_EDITOR.

    Without an editor the files are only added; edit them under .imgquilt/work/.
    Example: imgquilt edit usr/lib/svc/server.py
    """
    wt, top, added, already = _add(paths, image, platform)
    cmd = editor()
    if cmd:
        run_editor(cmd, [wt.work / wt.location(p) for p in added + already])
    _report_add(wt, top, added, already, edited=bool(cmd))
    if not cmd and not G.json:
        say("No editor (set EDITOR on a terminal, or IMGQUILT_EDITOR): edit the files above, then `imgquilt refresh`.")


def refresh_cmd(name: Optional[str] = typer.Argument(None, help="An applied patch (default: the top).")) -> None:
    """Write the work tree's changes into the patch (snapshot -> current); the header is kept as it is.

    Example: imgquilt refresh
    """
    wt = tree()
    r = wt.refresh(name)
    if G.json:
        emit_json({"patch": r.name, "changed": r.changed, "file": str(wt.patches_dir / r.name), "files": files_json(r.patch)})
        return
    if not r.patch.sections:
        say(f"Nothing changed in patch {r.name}.")
    elif r.changed:
        say(f"Refreshed patch {r.name}.")
    else:
        say(f"Patch {r.name} is up to date.")


def _target(arg: str | None, wt: WorkTree) -> tuple[str | None, int | None]:
    if arg is None:
        return None, None
    if arg.isdigit() and arg not in wt.series():
        return None, int(arg)
    return arg, None


def push_cmd(
    target: Optional[str] = typer.Argument(None, help="Push up to and including this patch, or this many patches."),
    all: bool = typer.Option(False, "--all", "-a", help="Push every patch."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
) -> None:
    """Apply the next patch(es) onto the work tree, verifying every base and result sha256.

    A base that drifted is refused (exit 3); nothing is written for that patch.
    Examples: imgquilt push    imgquilt push -a    imgquilt push 0003-fix-port.patch    imgquilt push 2
    """
    wt = tree(image, platform)
    name, count = _target(target, wt)
    try:
        done = wt.push(name, all=all, count=count)
    except Exception as exc:
        for p in getattr(exc, "pushed", []):
            note(f"Applied patch {p.name}.")
        raise
    if G.json:
        emit_json({"pushed": [p.name for p in done], "files": {p.name: list(p.files) for p in done}, "top": wt.top()})
        return
    for p in done:
        say(f"Applying patch {p.name}")
        for f in p.files:
            say(f"  patched {f}")
    say(f"Now at patch {wt.top()}")


def pop_cmd(
    target: Optional[str] = typer.Argument(None, help="Pop until this patch is the top, or this many patches."),
    all: bool = typer.Option(False, "--all", "-a", help="Pop every patch."),
    force: bool = typer.Option(False, "--force", "-f", help="Discard changes not refreshed into the top patch."),
) -> None:
    """Unapply the top patch(es): restore the snapshots in the work tree.

    Refused while the top patch has changes not refreshed into it (exit 3), unless -f.
    Examples: imgquilt pop    imgquilt pop -a    imgquilt pop 0001-port.patch
    """
    wt = tree()
    name, count = _target(target, wt)
    popped = wt.pop(name, all=all, count=count, force=force)
    top = wt.top()
    if G.json:
        emit_json({"popped": popped, "top": top})
        return
    for p in popped:
        say(f"Removing patch {p}")
    say(f"Now at patch {top}" if top else "No patches applied")


def top_cmd() -> None:
    """Print the top applied patch.

    Example: imgquilt top
    """
    wt = tree(guard=False)
    top = wt.top()
    if G.json:
        emit_json({"top": top})
        return
    if top is None:
        raise UsageError("No patches applied.")
    say(top)


def applied_cmd() -> None:
    """List the applied patches, bottom first.

    Example: imgquilt applied --json
    """
    names = tree(guard=False).applied()
    if G.json:
        emit_json({"applied": names})
        return
    for n in names:
        say(n)


def unapplied_cmd() -> None:
    """List the patches not applied yet, next first.

    Example: imgquilt unapplied
    """
    names = tree(guard=False).unapplied()
    if G.json:
        emit_json({"unapplied": names})
        return
    for n in names:
        say(n)


def series_cmd(verbose: bool = typer.Option(False, "--verbose", "-v", help="Mark applied patches (+) and the top (=).")) -> None:
    """List the series.

    Example: imgquilt series -v
    """
    wt = tree(guard=False)
    names, applied = wt.series(), wt.applied()
    if G.json:
        emit_json({"series": names, "applied": applied, "top": applied[-1] if applied else None})
        return
    for n in names:
        if not verbose:
            say(n)
            continue
        mark = "=" if applied and n == applied[-1] else ("+" if n in applied else " ")
        say(f"{mark} {n}")


def diff_cmd(patch: Optional[str] = typer.Option(None, "-P", "--patch", help="An applied patch (default: the top).")) -> None:
    """Show the diff of a patch's files, snapshot -> current work tree (what `refresh` would write).

    Example: imgquilt diff > /tmp/top.diff
    """
    wt = tree(guard=False)
    p = wt.diff(patch)
    if G.json:
        emit_json({"patch": p.name, "files": [
            {**f, "diff": s.raw.decode("utf-8", "replace")} for f, s in zip(files_json(p), p.sections)
        ]})
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(b"".join(s.raw for s in p.sections))
    sys.stdout.buffer.flush()


def header_cmd(
    name: Optional[str] = typer.Argument(None, help="A patch in series (default: the top)."),
    edit: bool = typer.Option(False, "--edit", "-e", help="Edit the header in $EDITOR (or $IMGQUILT_EDITOR)."),
    set_: List[str] = typer.Option([], "--set", help="Set one field, FIELD=VALUE (repeatable); other fields are kept."),
    unset: List[str] = typer.Option([], "--unset", help="Remove one field (repeatable)."),
) -> None:
    """Print a patch's header, or change it (the diff is left byte for byte).

    Examples: imgquilt header    imgquilt header --set Status=merged 0001-port.patch    imgquilt header -e
    """
    wt = tree()
    name, header = wt.header(name)
    changed = False
    if set_ or unset:
        header = wt.set_fields(name, field_pairs(set_, unset)).header
        changed = True
    if edit:
        cmd = editor()
        if not cmd:
            raise UsageError("No editor: set EDITOR (on a terminal) or IMGQUILT_EDITOR.", hint="Or change one field with --set FIELD=VALUE.")
        wt.state.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="header-", suffix=".txt", dir=wt.state)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header.raw)
            run_editor(cmd, [Path(tmp)])
            header = wt.set_header(name, Header(Path(tmp).read_bytes())).header
        finally:
            os.unlink(tmp)
        changed = True
    if G.json:
        emit_json({"patch": name, "header": header.raw.decode("utf-8", "replace"), "fields": [[k, v] for k, v in header.fields], "changed": changed})
        return
    if changed:
        say(f"Header of {name} updated.")
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(header.raw)
    sys.stdout.buffer.flush()


def delete_cmd(
    name: Optional[str] = typer.Argument(None, help="The patch (default: the top; an applied top patch is popped first)."),
    remove: bool = typer.Option(False, "--remove", "-r", help="Also remove patches/NAME."),
    force: bool = typer.Option(False, "--force", "-f", help="Pop even with changes not refreshed."),
) -> None:
    """Remove a patch from series (the file stays unless -r).

    Example: imgquilt delete -r 0004-experiment.patch
    """
    wt = tree()
    gone = wt.delete(name, remove=remove, force=force)
    if G.json:
        emit_json({"deleted": gone, "removed_file": remove, "top": wt.top()})
        return
    say(f"Removed patch {gone} from series" + (" and deleted its file." if remove else f" (patches/{gone} is kept; -r removes it)."))


def rename_cmd(
    new_name: str = typer.Argument(..., help="The new patch name."),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", help="The patch to rename (default: the top)."),
) -> None:
    """Rename a patch: its file, its series line, its work-tree state and Requires: in other patches.

    Example: imgquilt rename -P 0003-x.patch 0003-fix-port.patch
    """
    wt = tree()
    old, touched = wt.rename(new_name, patch)
    if G.json:
        emit_json({"renamed": old, "to": new_name, "requires_updated": touched})
        return
    say(f"Patch {old} renamed to {new_name}.")
    for t in touched:
        say(f"  updated Requires: in {t}")


def fold_cmd(
    file: str = typer.Argument("-", help="A plain unified diff, or - for stdin."),
    strip: int = typer.Option(1, "-p", help="Strip this many leading path components (as patch -pN)."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    ignore_git_index: bool = typer.Option(False, "--ignore-git-index", help="Do not check git `index` blob hashes."),
) -> None:
    """Apply a plain diff to the top patch's files (adding them), exactly where its hunks say; then `refresh`.

    Example: git diff | imgquilt fold -
    """
    data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    wt = tree(image, platform)
    top, paths, notes = wt.fold(data, strip=strip, source="<stdin>" if file == "-" else file, check_git_index=not ignore_git_index)
    if G.json:
        emit_json({"patch": top, "files": paths, "notes": notes})
        return
    for n in notes:
        note(f"note: {n}")
    for p in paths:
        say(f"patched {p}")
    say(f"Folded into the work tree of {top}; run `imgquilt refresh` to write it into the patch.")


def register(app: typer.Typer) -> None:
    from . import importing

    for name, fn in (
        ("new", new_cmd), ("add", add_cmd), ("edit", edit_cmd), ("refresh", refresh_cmd), ("push", push_cmd),
        ("pop", pop_cmd), ("top", top_cmd), ("applied", applied_cmd), ("unapplied", unapplied_cmd),
        ("series", series_cmd), ("diff", diff_cmd), ("header", header_cmd), ("delete", delete_cmd),
        ("rename", rename_cmd), ("fold", fold_cmd),
    ):
        app.command(name)(fn)
    importing.register(app)


__all__ = ["register", "tree", "say", "note"]
