"""The `import` verb as api.py and the CLI call it: what to import (patch files, `git format-patch` mails,
a quilt or vendor series) and the import into the queue's work tree (work.importing writes it, all or
nothing). It lives in this package, not in verbs/, because the work tree imports the verbs: the verbs
importing it back would be a cycle."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import BadInput, UsageError
from ..verbs.rebase_guard import refuse_during_rebase
from ..verbs.refs import open_ref, pick_ref, queue_root

if TYPE_CHECKING:
    from .importing import ImportItem, Imported


class ImportItems(list):
    """The patches to import, and what was left out: `skipped`, (source, subject, why) of each cover
    letter ("cover letter") and of each empty patch a series lists ("empty patch")."""

    skipped: list[tuple[str, str, str]]

    def __init__(self) -> None:
        super().__init__()
        self.skipped = []


def import_items(
    files: Sequence[str | os.PathLike[str]],
    *,
    name: str | None = None,
    strip: int = 1,
    series: str | os.PathLike[str] | None = None,
    guards: Sequence[str] = (),
) -> ImportItems:
    """What to import: each file (a multi-mail `git format-patch --stdout` file gives one patch per mail;
    a cover letter, `[PATCH 0/N]` with no diff, is skipped as `git am` skips it), or every patch a quilt
    `series` file lists, with its -pN and (an MQ series) its guards. `guards` (+G/-G) are set on every
    item, after a series' own."""
    from dataclasses import replace

    from ..importer import is_cover_letter, mail_subject, mail_subject_name, split_mbox
    from ..queue.series import check_guard, parse_series
    from .importing import ImportItem

    if strip < 0:
        raise UsageError(
            "-p wants a number >= 0.", hint="As patch -pN: how many leading components to strip (-p1 for a/ b/ names)."
        )
    extra = tuple(dict.fromkeys(check_guard(g) for g in guards))
    items = ImportItems()
    if series is not None:
        if files or name:
            raise UsageError(
                "--series imports the patches that series lists; give no FILE and no -P with it.",
                hint="imgquilt import --series DIR/series (each patch keeps its name).",
            )
        sfile = Path(series)
        if sfile.is_dir():
            sfile = sfile / "series"
        for e in parse_series(_read(sfile), source=str(sfile)):
            f = sfile.parent / e.name
            data = _read(f)
            if not data:  # quilt pushes an empty patch file as nothing (one with any text is patch's "garbage")
                items.skipped.append((str(f), e.name, "empty patch"))
                continue
            items.append(ImportItem(e.name, data, e.strip, str(f), tuple(dict.fromkeys(e.guards + extra)), series=True))
        if not items and items.skipped:
            raise UsageError(
                f"Every patch {sfile} lists is empty: nothing to import.",
                hint="quilt applies an empty patch as nothing; a series of them changes no file.",
            )
        if not items:
            raise UsageError(
                f"{sfile} lists no patch.", hint="Name the series file that lists the patches (DIR/series)."
            )
        return items
    if not files:
        raise UsageError(
            "Name a patch FILE to import, or --series DIR/series.",
            hint="imgquilt import FILE... (see `imgquilt import --help`).",
        )
    if name and len(files) > 1:
        raise UsageError(
            "-P NAME names one imported patch; give one FILE with it.",
            hint="Import the files one at a time, or drop -P.",
        )
    for f in map(str, files):
        data = _read(Path(f))
        mails = split_mbox(data)
        covers = [k for k, m in enumerate(mails, 1) if is_cover_letter(m)]
        items.skipped += [
            (f"{f} (mail {k})" if len(mails) > 1 else f, mail_subject(mails[k - 1]), "cover letter") for k in covers
        ]
        if len(mails) - len(covers) > 1:
            if name:
                raise UsageError(
                    f"{f} holds {len(mails) - len(covers)} mails (git format-patch --stdout); -P cannot name them all.",
                    hint="Drop -P: each mail is named from its subject, as git format-patch names it.",
                )
            patches = [(k, m) for k, m in enumerate(mails, 1) if k not in covers]
            items += [
                ImportItem(mail_subject_name(m, n), m, strip, f"{f} (mail {k})") for n, (k, m) in enumerate(patches, 1)
            ]
            continue
        if covers and len(covers) == len(mails):
            raise BadInput(
                f"{f} holds only a cover letter ({mail_subject(mails[0])!r}): no patch to import.",
                hint="Import the mbox that holds the patches (`git format-patch --stdout`, not only the cover letter).",
            )
        if covers:
            data = next(m for k, m in enumerate(mails, 1) if k not in covers)
        items.append(ImportItem(name or Path(f).name, data, strip, f))
    if extra:
        items[:] = [replace(it, guards=extra) for it in items]
    return items


def _read(path: Path) -> bytes:
    """A file to import (or a quilt series): read as every queue file is, only if it is a regular file
    of at most 64 MiB (a FIFO never blocks, /dev/zero is refused)."""
    from ..util.regular import read_regular_file

    if path.is_dir():
        raise BadInput(f"{path} is a directory.", hint="For a quilt patches directory, pass --series DIR/series.")
    data = read_regular_file(path)
    if data is None:
        raise BadInput(f"{path} does not exist.", hint="Check the file name.")
    return data


@dataclass(frozen=True)
class ImportRequest:
    """An import, as api.import_patches() takes it (see its docstring for each field)."""

    files: tuple[str | os.PathLike[str], ...] = ()
    queue: str | os.PathLike[str] | None = None
    name: str | None = None
    strip: int = 1
    series: str | os.PathLike[str] | None = None
    fields: tuple[tuple[str, str | None], ...] = ()
    replace: bool = False
    check_git_index: bool = True
    image: str | None = None
    platform: str | None = None
    guards: tuple[str, ...] = ()
    profile: str | None = None
    after: str | None = None
    before: str | None = None
    through_links: bool = False


def import_patches(req: ImportRequest) -> tuple[Imported, ...]:
    """Import patches into the queue, all or nothing (api.import_patches() says the rest)."""
    from .importing import import_patches as into_tree
    from .tree import WorkTree

    items = import_items(req.files, name=req.name, strip=req.strip, series=req.series, guards=req.guards)
    root = queue_root(req.queue)
    refuse_during_rebase(root)

    def opener():
        pinned = wt.bases.lock() if req.image is None else None  # the pin of the profile the work tree follows
        return open_ref(pick_ref(req.image, pinned, root, wt.remembered_image()), req.platform, root=root)

    wt = WorkTree(root, open_image=opener, image_explicit=req.image is not None)
    others: dict[str, tuple[str, ...]] = {}
    if req.profile is not None:
        if req.series is None:
            raise UsageError(
                "--profile imports a vendor series as that profile's selection: give --series VENDOR.series."
            )
        items, others = vendor_items(items, wt.queue.entries(), req.profile)
    return tuple(
        into_tree(
            wt,
            items,
            fields=list(req.fields),
            replace=req.replace,
            check_git_index=req.check_git_index,
            after=req.after,
            before=req.before,
            through_links=req.through_links,
            guard_others=others,
        )
    )


def vendor_items(items: list[ImportItem], entries, profile: str) -> tuple[list[ImportItem], dict[str, tuple[str, ...]]]:
    """A dpkg-source vendor series imported as profile `profile`: the patches the queue already has
    (by name) are shared and left as they are; the others are imported with `+profile`; the queue's
    patches the vendor series does not list get `-profile`. Selecting `profile` then applies what the
    vendor series lists (the vendor-only patches stand together where import puts them: after the top
    patch, after the last patch of series when none is applied)."""
    from dataclasses import replace

    from ..verbs.profiles import check_profile_name

    check_profile_name(profile)
    have = {e.name: e for e in entries}
    listed = {it.name for it in items}
    fresh = [
        replace(it, guards=tuple(dict.fromkeys(it.guards + (f"+{profile}",)))) for it in items if it.name not in have
    ]
    others = {
        e.name: tuple(g for g in e.guards if g[1:] != profile) + (f"-{profile}",)
        for e in entries
        if e.name not in listed
    }
    if not fresh and not others:
        raise UsageError(
            f"The vendor series lists exactly the queue's patches: profile {profile} needs no guard.",
            hint="Nothing to import: selecting the default applies what the vendor series lists.",
        )
    if not fresh:
        raise UsageError(
            "The vendor series lists no patch the queue lacks; nothing to import.",
            hint=f"Keep the queue's other patches out of {profile} with `imgquilt guard PATCH -{profile}`.",
        )
    return fresh, others
