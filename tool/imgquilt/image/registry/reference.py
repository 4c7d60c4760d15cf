"""`docker://HOST[:PORT]/REPO[:TAG|@DIGEST]` references, spelled and defaulted as Docker does."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ...errors import BadImage
from ..digests import check_digest

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
# docker.io's other spellings, as they appear in credential files
DOCKER_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::[0-9]{1,5})?$")
_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def host_problem(host: str) -> str | None:
    """Why `host[:port]` cannot name a registry (RFC 1123 labels of at most 63 characters, 253 in all;
    an `xn--` label must be valid IDNA; a port 1-65535), or None."""
    if not _HOST.match(host):
        return "it is not a host name or address"
    name, port = split_host_port(host)
    if port is not None and not 0 < port < 65536:
        return f"port {port} is out of range"
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return "it is not an IPv6 address"
        return None
    if len(name) > 253:
        return "it is longer than 253 characters"
    for label in name.split("."):
        if not _LABEL.match(label):
            return f"its label {label[:70]!r} is empty, longer than 63 characters or starts or ends with '-'"
        if label[2:4] == "--" and label[:4].lower() != "xn--":
            return f"its label {label!r} has '--' at positions 3-4 (reserved for IDNA)"
        if label[:4].lower() == "xn--" and not _valid_a_label(label):
            return f"its label {label!r} is not a valid internationalised (IDNA) name"
    return None


def _valid_a_label(label: str) -> bool:
    try:
        import idna  # httpx's own dependency: what it will encode the name with
    except ImportError:  # pragma: no cover
        try:
            label.encode("ascii").decode("idna")
        except UnicodeError:
            return False
        return True
    try:
        idna.decode(label)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class RegistryRef:
    """One image in a registry: where (domain), which repository, and a tag or a digest."""

    domain: str  # as written (docker.io for Docker Hub), used to look up credentials
    repository: str  # e.g. library/ubuntu
    tag: str | None = None
    digest: str | None = None

    @property
    def host(self) -> str:
        """The host[:port] the HTTP API is served on."""
        return DOCKER_HUB_API if self.domain == DOCKER_HUB else self.domain

    @property
    def reference(self) -> str:
        """What follows /manifests/ in the API: the digest if pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def with_digest(self, digest: str) -> "RegistryRef":
        return RegistryRef(self.domain, self.repository, None, digest)

    def with_tag(self, tag: str) -> "RegistryRef":
        return RegistryRef(self.domain, self.repository, tag, None)

    def __str__(self) -> str:
        name = f"docker://{self.domain}/{self.repository}"
        return f"{name}@{self.digest}" if self.digest else f"{name}:{self.tag or 'latest'}"


def parse_registry_ref(ref: str) -> RegistryRef:
    """Parse `docker://NAME[:TAG|@DIGEST]` (the `docker://` prefix is optional); a bad one is BadImage."""
    raw = ref
    if ref.startswith("docker://"):
        ref = ref[len("docker://"):]
    if not ref:
        raise BadImage(f"Image reference {raw!r} names no repository.", hint="Write docker://HOST/REPO:TAG.")
    name, at, digest = ref.partition("@")
    digest_value = check_digest(digest, what=f"reference {raw!r}") if at else None
    tag = None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.match(tag):
            raise BadImage(f"Image reference {raw!r} has an invalid tag {tag!r}.",
                           hint="A tag is up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'.")
    if tag is not None and digest_value is not None:
        raise BadImage(f"Image reference {raw!r} names both a tag and a digest.",
                       hint="Keep one of them: docker://HOST/REPO:TAG or docker://HOST/REPO@DIGEST.")
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        domain, path = first, rest
        problem = host_problem(domain)
        if problem is not None:
            raise BadImage(f"Image reference {raw!r} has an invalid registry host {domain[:300]!r}: {problem}.",
                           hint="Write docker://HOST[:PORT]/REPO:TAG with the registry's real name.")
    else:
        domain, path = DOCKER_HUB, name
    if domain == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images
    if len(path) > 255:  # the distribution spec's limit, and docker's
        raise BadImage(f"Image reference {raw[:300]!r}... has a repository name of {len(path)} characters; at most 255 "
                       "are allowed.")
    if not path or not all(_COMPONENT.match(c) for c in path.split("/")):
        raise BadImage(f"Image reference {raw!r} has an invalid repository name {path!r}.",
                       hint="Repository names are lowercase letters, digits and separators ('.', '_', '-'), "
                            "in components joined by '/'.")
    if tag is None and digest_value is None:
        tag = "latest"
    return RegistryRef(domain, path, tag, digest_value)


def split_host_port(host: str) -> tuple[str, int | None]:
    """("127.0.0.1", 5000) from "127.0.0.1:5000"; brackets of an IPv6 address are dropped."""
    if host.startswith("["):
        addr, _, rest = host[1:].partition("]")
        return addr, int(rest[1:]) if rest.startswith(":") else None
    if host.count(":") > 1:
        return host, None  # a bare IPv6 address
    name, sep, port = host.rpartition(":")
    return (name, int(port)) if sep and port.isdigit() else (host, None)


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (with or without a port): may be served over plain HTTP."""
    name = split_host_port(host)[0].lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
