"""`import`: bring patches from elsewhere into the queue in the imgquilt format (see imgquilt.importer)."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import UsageError
from . import documents
from .common import G, ImageOpt, PlatformOpt, emit_json, header_fields, note, say, say_lock, tree


def import_cmd(
    files: List[str] = typer.Argument(None, metavar="FILE", help="Patch files: diff -u, git diff, git format-patch mails, quilt patches, TARGET/sha256 pinned diffs."),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="NAME", help="Name of the imported patch (one FILE only; default: the file's name)."),
    strip: int = typer.Option(1, "-p", metavar="N", help="Strip this many leading path components (as patch -pN; -p1 default, -p0 accepted)."),
    series: Optional[str] = typer.Option(None, "--series", metavar="FILE", help="Import every patch a quilt series file lists, in order, with its -pN."),
    force: bool = typer.Option(False, "--force", "-f", help="Replace an unapplied patch of the same name."),
    description: Optional[str] = typer.Option(None, "--description", "-d", metavar="TEXT", help="Set the Description field."),
    author: Optional[str] = typer.Option(None, "--author", metavar="'NAME <EMAIL>'", help="Set the Author field."),
    field: List[str] = typer.Option([], "--field", metavar="FIELD=VALUE", help="Set any header field (repeatable)."),
    ignore_git_index: bool = typer.Option(False, "--ignore-git-index", help="Do not check git `index` blob hashes against the bases (a --series records a mismatch and goes on, as quilt does)."),
    after: Optional[str] = typer.Option(None, "--after", metavar="PATCH", help="Place the imported patches right after PATCH in series."),
    before: Optional[str] = typer.Option(None, "--before", metavar="PATCH", help="Place the imported patches right before PATCH in series."),
    through_links: bool = typer.Option(False, "--through-links", help="A diff for a regular file whose path is a symlink patches the file the link leads to, and the link stays; without it that is refused, as patch and git apply refuse it."),
    fuzz: int = typer.Option(0, "--fuzz", "-F", metavar="N", help="Let a hunk apply with up to N (<= 2) context lines at each end not matching, as patch -F (off by default; reported per hunk)."),
    prefix: Optional[str] = typer.Option(None, "--prefix", metavar="DIR", help="The patch's paths are relative to DIR inside the image (as patch -d DIR)."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
    guard: List[str] = typer.Option([], "--guard", metavar="+G|-G", help="Set this guard on every imported patch (repeatable; an MQ series' own guards come along)."),
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME", help="With --series VENDOR.series (dpkg-source): import it as profile NAME: new patches get +NAME, the queue's patches it does not list -NAME."),
) -> None:
    """Import patches from elsewhere, written in the imgquilt format with real hashes.

    They go after the top patch (after the last patch of series when none is applied), or where
    --after/--before PATCH says; bases are read there: the work tree and the image (--image, else the
    lock's), through the unapplied patches before that place. A hunk applies where it matches exactly,
    nearest its header's line (each moved hunk is reported; the patch is written with the real line
    numbers); fuzz only with --fuzz N. Pins the patch carries (TARGET/sha256 lines, git index hashes)
    are verified (exit 3); in a --series, a git index line that names another blob is recorded in the
    patch's header instead, as quilt ignores it. A missing path is looked for by its tail
    (package-relative paths) and taken where exactly one file fits. Git symlinks (mode 120000), mode
    changes, renames and copies are imported as git apply reads them; a cover letter is skipped, and so is an empty patch file a series lists (quilt pushes it as nothing).

    \b
    Examples:
      imgquilt import ~/fix.diff -P 0005-fix.patch
      imgquilt import --series ../upstream/patches/series
      imgquilt import --series debian/patches/ubuntu.series --profile ubuntu
      imgquilt import ~/rocm-fix.diff --guard +rocm
      git format-patch -1 --stdout > /tmp/x.mbox
      imgquilt import /tmp/x.mbox
    """
    if strip < 0:
        raise UsageError("-p wants a number >= 0.", hint="As patch -pN: how many leading components to strip (-p1 for a/ b/ names).")
    if not 0 <= fuzz <= 2:
        raise UsageError("--fuzz wants 0, 1 or 2 (context lines that may differ at each end of a hunk).",
                         hint="Start without --fuzz: import names the fuzz a hunk would need.")
    if prefix is not None:
        from ..fs.paths import check_member_path

        prefix = check_member_path(prefix.strip("/"), what="--prefix") if prefix.strip("/") else ""
    from ..work.import_verb import import_items, vendor_items

    items = import_items(list(files or []), name=patch, strip=strip, series=series, guards=guard)
    skipped = items.skipped  # cover letters left out of an mbox, empty patches out of a series
    wt = tree(image, platform)
    others: dict[str, tuple[str, ...]] = {}
    if profile is not None:
        if series is None:
            raise UsageError("--profile imports a vendor series as that profile's selection: give --series VENDOR.series.")
        items, others = vendor_items(items, wt.queue.entries(), profile)
    fields = header_fields(description, author, [], None, field)
    top = wt.top()
    placed: list = []
    from ..work.importing import import_patches

    done = import_patches(wt, items, fields=fields, replace=force, check_git_index=not ignore_git_index, fuzz=fuzz,
                          prefix=prefix or "", after=after, before=before, through_links=through_links, placed=placed,
                          guard_others=others)
    if G.json:
        emit_json(documents.import_doc(done, items, wt.patches_dir, wt.top(), placed, skipped, others, wt.lock_update))
        return
    for src, subject, why in skipped:
        if why == "empty patch":
            note(f"note: skipped {src}: an empty file, which quilt pushes as nothing")
        else:
            note(f"note: skipped {src}: a cover letter ({subject!r}), no diff; as `git am` does")
    for d in done:
        for n in d.notes:
            note(f"note: {d.name}: {n}")
        guards = next((it.guards for it in items if it.name == d.name), ())
        say(f"Imported {d.name} ({len(d.patch.sections)} file(s)) as patches/{d.name}" + (f", guarded {' '.join(guards)}." if guards else "."))
    for name, g in others.items():
        say(f"Guarded {name} {' '.join(g)}: the vendor series does not list it.")
    anchor = placed[0].after if placed else None
    if placed and placed[0].rechained:
        say(f"Re-chained onto them: {', '.join(placed[0].rechained)}.")
    if anchor is None:
        where = "at the start of series"
    elif anchor == top:
        where = f"after the top patch {top}"
    else:
        where = f"after {anchor}" + ("" if top else " (no patch is applied)")
    say(f"They stand {where}, with bases read there; `imgquilt push` applies them to the work tree.")
    say_lock(wt.lock_update)


COMMANDS = {"import": import_cmd}
