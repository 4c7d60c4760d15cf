"""What the user asks a rebase for: the new image, the old one, --keep-empty and --map prefixes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError
from ..fs.paths import check_member_path
from ..fs.types import Source

Opener = Callable[[str, "str | None"], Source]


@dataclass(frozen=True)
class RebaseOptions:
    new_ref: str
    platform: str | None = None
    from_ref: str | None = None
    keep_empty: bool = False
    maps: tuple[tuple[str, str], ...] = ()  # --map OLD=NEW path prefixes
    profile: str | None = None  # the pin to re-pin (None: the default)
    select: tuple[str, ...] = ()  # the guards the rebased selection turns on (the profile's)
    conflict_style: str = "diff3"  # diff3 (the base section too) | merge
    python_check: bool = True  # the Python checks after every step (--no-python-check turns them off)
    more: tuple[tuple[str, tuple[str, ...], str], ...] = ()  # further pins rebased with it: (profile, select, new ref)
    split: bool = False  # --split: copy a shared patch whose file the pins' new images hold at different bases
    force: bool = False  # --force: a profile may leave its lineage (another profile's image, another repository)
    boot: bool = False  # --boot: after every step, the patch's modules imported on the new image (bootprobe.py)


def parse_map(value: str) -> tuple[str, str]:
    """`OLD=NEW` as given to --map, both checked as in-image paths."""
    if "=" not in value:
        raise UsageError(f"--map {value!r}: expected OLD=NEW (path prefixes inside the image).")
    old, new = value.split("=", 1)
    return check_member_path(old, what="--map OLD"), check_member_path(new, what="--map NEW")
