"""Platforms ("os/arch[/variant]") and picking one image out of a multi-platform index."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ...errors import BadImage, UsageError

DEFAULT_PLATFORM = "linux/amd64"  # the same on every host, so a lock means the same image everywhere


@dataclass(frozen=True)
class Platform:
    os: str
    arch: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.arch}" + (f"/{self.variant}" if self.variant else "")

    @classmethod
    def parse(cls, text: str) -> "Platform":
        parts = text.strip().split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise UsageError(
                f"Bad --platform {text!r}.", hint="Write it as os/arch or os/arch/variant, e.g. linux/arm64."
            )
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else "")

    @classmethod
    def from_json(cls, obj: object) -> "Platform | None":
        """From an index descriptor's "platform" or a config's os/architecture/variant."""
        if not isinstance(obj, dict):
            return None
        os_ = obj.get("os")
        arch = obj.get("architecture")
        if not isinstance(os_, str) or not isinstance(arch, str) or not os_ or not arch:
            return None
        variant = obj.get("variant")
        return cls(os_, arch, variant if isinstance(variant, str) else "")

    def matches(self, other: "Platform") -> bool:
        """`other` (what an image is) satisfies `self` (what was asked); no variant asked: any."""
        if (self.os, self.arch) != (other.os, other.arch):
            return False
        return not self.variant or self.variant == other.variant or (
            # arm64's only variant is v8, often left out
            self.arch == "arm64" and {self.variant, other.variant} <= {"", "v8"}
        )


ALL = "all"  # --platform all: every platform of an index
_listing = threading.local()


def list_platforms(open_image) -> list[str]:
    """Every platform of the image `open_image(platform)` opens: its index's, in index order (each
    once), or the single image's own. Opening with the listing on takes the first index entry."""
    _listing.found = None
    try:
        image = open_image(None)
        found, _listing.found = _listing.found, None
    finally:
        _listing.found = None
    if found is None:
        return [image.platform] if image.platform else []
    return list(dict.fromkeys(found))


def choose(candidates: list[tuple[Platform | None, object]], wanted: str | None, *, where: str):
    """Pick the item whose platform matches `wanted` (default linux/amd64) from (platform, item)s."""
    if getattr(_listing, "found", "off") is None:  # list_platforms: record the top index, take its first entry
        real = [(p, item) for p, item in candidates if p is not None and p.os != "unknown"]  # not attestations
        if real:
            _listing.found = [str(p) for p, _ in real]
            return real[0]
    if wanted == ALL:
        raise UsageError("--platform all reads every platform of an index; this command takes one platform.",
                         hint="Pick one with --platform OS/ARCH.")
    want = Platform.parse(wanted or DEFAULT_PLATFORM)
    matching = [(p, item) for p, item in candidates if p is not None and want.matches(p)]
    if matching:
        # prefer an exact variant match, then the first listed (index order is the publisher's)
        exact = [m for m in matching if m[0] == want]
        return (exact or matching)[0]
    listed = sorted({str(p) for p, _ in candidates if p is not None and p.os != "unknown"})
    hint = "Pick one with --platform OS/ARCH." if wanted else (
        f"No --platform was given and the default {DEFAULT_PLATFORM} is not among them; "
        "pick one with --platform OS/ARCH."
    )
    raise BadImage(
        f"{where} has no image for platform {want}; it holds: {', '.join(listed) or 'no platforms'}.",
        hint=hint,
    )
