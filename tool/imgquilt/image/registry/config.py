"""registries.conf: which registries may be reached without TLS verification (`insecure = true`).

Read from $CONTAINERS_REGISTRIES_CONF, else /etc/containers/registries.conf. Both the v2 format
(`[[registry]] location = "host[/ns]" insecure = true`, `*.domain` wildcards) and v1
(`[registries.insecure] registries = [...]`) are understood; the most specific location wins.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput

SYSTEM_REGISTRIES_CONF = Path("/etc/containers/registries.conf")


@dataclass(frozen=True)
class RegistryEntry:
    """One `[[registry]]` table: its location (or prefix) and whether TLS may be skipped."""

    location: str
    insecure: bool


def registries_conf_path() -> Path:
    env = os.environ.get("CONTAINERS_REGISTRIES_CONF")
    return Path(env) if env else SYSTEM_REGISTRIES_CONF


def load_registries_conf(path: Path | None = None) -> tuple[RegistryEntry, ...]:
    """The entries of registries.conf; none when the file does not exist."""
    path = path or registries_conf_path()
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        return ()
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"Cannot read the registries configuration {path}: {exc}.",
                       hint="Fix the file, or point CONTAINERS_REGISTRIES_CONF at a valid one.") from None
    entries: list[RegistryEntry] = []
    for table in doc.get("registry", []) if isinstance(doc.get("registry"), list) else []:
        if not isinstance(table, dict):
            continue
        location = table.get("prefix") or table.get("location")
        if isinstance(location, str) and location:
            entries.append(RegistryEntry(location.rstrip("/"), table.get("insecure") is True))
    v1 = doc.get("registries", {})
    insecure_v1 = v1.get("insecure", {}).get("registries", []) if isinstance(v1, dict) else []
    entries.extend(RegistryEntry(str(loc).rstrip("/"), True) for loc in insecure_v1 if isinstance(loc, str))
    return tuple(entries)


def _matches(location: str, name: str) -> int:
    """How specific a match `location` is for `name` (host/repo): its length, or -1 for none."""
    if location.startswith("*."):
        host = name.split("/", 1)[0]
        return len(location) if host.endswith(location[1:]) else -1
    if name == location or name.startswith(location + "/"):
        return len(location)
    return -1


def is_insecure(host: str, repository: str = "", entries: tuple[RegistryEntry, ...] | None = None) -> bool:
    """Whether registries.conf marks `host` (or `host/repository`) `insecure = true`."""
    entries = load_registries_conf() if entries is None else entries
    name = f"{host}/{repository}" if repository else host
    best = max(entries, key=lambda e: _matches(e.location, name), default=None)
    return best is not None and _matches(best.location, name) >= 0 and best.insecure
