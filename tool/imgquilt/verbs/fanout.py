"""One fan-out for every verb that runs more than once per command: profiles x platforms x images.

The strings the user gave (`--profile all|NAME`, `--platform all|OS/ARCH`, several `--image` or
`--images-from`) are resolved once into a frozen `Selection`; `fan_out` turns it into the cells a
verb runs on: each profile (resolved at the edge, verbs.profiles), each platform of the image (an
index's, in its order) and each image of a fleet. lock, apply, audit, verify and boot take their
loops from here; the rule of which combinations each verb refuses is the verb's own (its
`refuse_*` function, beside its request), so the CLI holds no `all` of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import BadImage
from .profiles import ALL, Resolved, resolve_many
from .refs import cache_dir

if TYPE_CHECKING:
    from ..queue.lock import LockFile
    from ..queue.queue import Queue


@dataclass(frozen=True)
class Selection:
    """What one command runs on, as the user named it: `profile` (None: the default; "all": every
    declared profile; NAME: that one), `platform` (None: the image's own; "all": every platform of
    the index; OS/ARCH: that one) and `images` (none: the pin's; several, or read from a file: a
    fleet, each image judged by its own profile)."""

    profile: str | None = None
    platform: str | None = None
    images: tuple[str, ...] = ()
    fleet: bool = False

    @property
    def every_profile(self) -> bool:
        return self.profile == ALL

    @property
    def every_platform(self) -> bool:
        return self.platform == ALL

    @property
    def image(self) -> str | None:
        """The one image named (None: the pin's)."""
        return self.images[0] if self.images else None


def select(
    profile: str | None = None, platform: str | None = None, images: Sequence[str] = (), images_from: Path | None = None
) -> Selection:
    """The Selection of the strings given: repeated --image and the lines of --images-from, in their
    order, each once (verbs.fleet); several, or a file, make a fleet."""
    refs: list[str] = list(images)
    if images_from is not None:
        from .fleet import read_image_list

        refs += read_image_list(images_from)
    from .fleet import unique

    refs = unique(refs)
    return Selection(profile, platform, tuple(refs), len(refs) > 1 or images_from is not None)


@dataclass(frozen=True)
class Cell:
    """One run of a fanned-out verb: the profile (None: the default, as the verb resolves it), the
    platform (None: the image's own) and the image (None: the pin's)."""

    profile: Resolved | None
    platform: str | None
    image: str | None


def platforms(sel: Selection, ref: str | None, root: Path | None, *, named: bool = True) -> list[str | None]:
    """The platforms `sel` runs on: every one `ref` holds (`--platform all`; `named`: an image that
    names none is BadImage), else the one given."""
    if not sel.every_platform:
        return [sel.platform]
    from ..sources import platforms_of

    assert ref is not None
    found = platforms_of(ref, cache_dir=cache_dir(root))
    if named and not found:
        raise BadImage(f"{ref} names no platform (neither an index nor a config says one).")
    return list(found)


def fan_out(
    sel: Selection, q: Queue | None = None, lf: LockFile | None = None, *, ref: str | None = None, named: bool = True
) -> tuple[Cell, ...]:
    """profiles x platforms x images: every cell `sel` names, profiles in targets.lock's order, then
    platforms in the index's, then images in the order given. A profile is resolved only when one is
    named (the default is left to the verb, as it resolves it alone); `ref` is the image whose
    platforms `--platform all` lists (`named`: one that names none is refused)."""
    profiles: list[Resolved | None] = [None]
    if sel.profile is not None:
        assert q is not None
        profiles = list(resolve_many(q, sel.profile, lf))
    plats = platforms(sel, ref, q.root if q is not None else None, named=named)
    images: tuple[str | None, ...] = sel.images or (None,)
    return tuple(Cell(r, p, i) for r in profiles for p in plats for i in images)


def names(sel: Selection, declared: Sequence[str]) -> list[str | None]:
    """The profile names `sel` runs (every declared one for "all"; None: the default), for a verb
    that resolves each profile itself (boot). `--profile all` with none declared is refused."""
    if not sel.every_profile:
        return [sel.profile]
    if not declared:
        from ..errors import UsageError

        raise UsageError(
            "`--profile all`: targets.lock declares no profile.",
            hint="Declare one with `imgquilt lock --profile NAME --image REF`.",
        )
    return list(declared)


def boot_profiles(
    queue: str | os.PathLike[str] | None,
    profile: str | None,
    *,
    image: object = None,
    root: object = None,
    overlay: object = None,
) -> list[str | None]:
    """The profiles `boot` runs, one boot each (None: the default), refused first: `--profile all`
    boots each profile on the image it pins, so it takes no other base. (boot's own request is
    its verb's; this is the fan-out rule it shares with the others.)"""
    sel = select(profile)
    if not sel.every_profile:
        return [sel.profile]
    if image is not None or root is not None or overlay is not None:
        from ..errors import UsageError

        raise UsageError(
            "`boot --profile all` boots each profile on the image it pins; give it no --image, --root or --overlay.",
            hint="Boot one profile on another base with --profile NAME.",
        )
    from .profiles import lock_file
    from .refs import queue_root

    return names(sel, lock_file(queue_root(queue)).names)
