"""The base an image names: the OCI image-spec's pre-defined annotations (annotations.md,
"Pre-Defined Annotation Keys") on the manifest of every image imgquilt writes.

    org.opencontainers.image.base.digest   the manifest digest of the image the new layer went onto
    org.opencontainers.image.base.name     its reference: a registry image as the spec asks, fully
                                           qualified without a transport (reg.example.com/app:1.0);
                                           any other base as imgquilt was given it (oci:DIR:TAG, ...),
                                           since it has no distribution name

`base_of(image)` reads them back (audit shows them; the rebase lineage check compares them), and
`archive_tag(image)` is the REPO:TAG a `docker-archive:` output carries when its reference names none,
so `podman load` / `docker load` name what they load (docs/image-references.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..util.jsonin import member_or_none

BASE_DIGEST = "org.opencontainers.image.base.digest"
BASE_NAME = "org.opencontainers.image.base.name"

_DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")  # the image-spec's digest grammar
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")


@dataclass(frozen=True)
class BaseImage:
    """The base an image's manifest names (either may be None: a manifest another tool wrote)."""

    name: str | None
    digest: str | None

    def json(self) -> dict[str, str | None]:
        return {"name": self.name, "digest": self.digest}


def base_of(image: Any) -> BaseImage | None:
    """The base `image` (anything with `manifest_bytes`, e.g. a source's `.image`) names in its
    manifest's annotations; None when it names none (a base never patched, or no manifest). A value
    that is not a string, or a digest that is not one, is left out: a manifest is anyone's to write."""
    data = getattr(image, "manifest_bytes", None)
    if not isinstance(data, (bytes, bytearray)):
        return None
    notes = member_or_none(data, "annotations")
    if not isinstance(notes, dict):
        return None
    name, digest = notes.get(BASE_NAME), notes.get(BASE_DIGEST)
    name = name if isinstance(name, str) and name else None
    digest = digest if isinstance(digest, str) and _DIGEST.match(digest) else None
    if name is None and digest is None:
        return None
    return BaseImage(name, digest)


def base_of_source(source: Any) -> BaseImage | None:
    """base_of() of a Source's image (None for a root filesystem or a flat tar: no manifest)."""
    return base_of(getattr(source, "image", None))


def annotation_name(image: Any) -> str:
    """The base.name to write for `image` as a base (see the module docstring)."""
    ref = str(getattr(image, "ref", "") or "")
    if getattr(image, "transport", None) == "docker":
        names = tuple(getattr(image, "names", ()) or ())
        return (names[0] if names else ref).removeprefix("docker://")
    return ref


def archive_tag(image: Any) -> str | None:
    """The REPO:TAG of a `docker-archive:` output whose reference names none: the base's own name.
    A registry base's repository and tag (reg.example.com/app:1.0), a docker-archive's or podman
    store's first name, an OCI layout's tag under localhost/ and the layout's directory name
    (oci:/srv/vllm-rocm:0.10.1 -> localhost/vllm-rocm:0.10.1); None when the base has no such name
    (a base pinned by digest only)."""
    ref = str(getattr(image, "ref", "") or "")
    names = [n for n in (getattr(image, "names", ()) or ()) if isinstance(n, str)]
    if getattr(image, "transport", None) == "docker" or ref.startswith("docker://"):
        name = (names[0] if names else ref).removeprefix("docker://")
        return name if "@" not in name and _valid(name) else None
    from ..errors import ImgquiltError
    from .reference import parse_ref

    try:
        parsed = parse_ref(ref)
    except ImgquiltError:
        return None
    if parsed.transport in ("oci", "oci-archive"):
        tag = parsed.tag or next((n for n in names if _TAG.match(n)), None) or ("latest" if not parsed.digest else "")
        stem = parsed.path.rstrip("/").rsplit("/", 1)[-1]
        if parsed.transport == "oci-archive":
            stem = re.sub(r"\.(tar|oci)$", "", stem)
        repo = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
        return f"localhost/{repo}:{tag}" if repo and tag and _valid(f"localhost/{repo}:{tag}") else None
    for n in names:  # docker-archive's RepoTags, a podman store's names
        n = n if ":" in n.rsplit("/", 1)[-1] else n + ":latest"
        if _valid(n):
            return n
    return None


def _valid(name: str) -> bool:
    """A REPO:TAG docker and podman load: [host[:port]/]path:tag, the path's components lowercase."""
    repo, _, tag = name.rpartition(":")
    if not repo or not _TAG.match(tag) or "/" in tag:
        return False
    parts = repo.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host = parts.pop(0)
        if not re.match(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?$", host):
            return False
    return bool(parts) and all(_COMPONENT.match(p) for p in parts)


__all__ = ["BASE_DIGEST", "BASE_NAME", "BaseImage", "annotation_name", "archive_tag", "base_of", "base_of_source"]
