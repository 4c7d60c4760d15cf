"""Registry credentials where podman, skopeo and docker keep them.

Files, in order (the first with an entry for the registry wins): $REGISTRY_AUTH_FILE,
${XDG_RUNTIME_DIR}/containers/auth.json, then $DOCKER_CONFIG/config.json (else ~/.docker/config.json).
In each: `credHelpers[host]`, then the most specific `auths` key (host/namespace/repo ... host; `auth`
is base64 user:password, or `username`/`password`), then `credsStore`. Helpers are run as
`docker-credential-NAME get` with the server on stdin, as docker does.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...errors import BadInput
from .reference import DOCKER_HUB, DOCKER_HUB_ALIASES


@dataclass(frozen=True)
class Credentials:
    """A user name and password (or token) for one registry, and where they came from."""

    username: str
    password: str
    source: str  # a file path or "docker-credential-NAME", for error messages

    def __repr__(self) -> str:  # never print a secret
        return f"Credentials(username={self.username!r}, source={self.source!r})"


def auth_files() -> list[Path]:
    """The credential files to consult, in order."""
    files: list[Path] = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    if os.environ.get("XDG_RUNTIME_DIR"):
        files.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    docker_dir = os.environ.get("DOCKER_CONFIG")
    files.append(Path(docker_dir) / "config.json" if docker_dir else Path.home() / ".docker" / "config.json")
    return files


def _normalize_key(key: str) -> str:
    """docker writes "https://host/v1/"; podman writes "host" or "host/ns/repo"."""
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            return key[len(prefix):].split("/", 1)[0]
    return key.rstrip("/")


def _host_keys(domain: str) -> tuple[str, ...]:
    return tuple(_normalize_key(k) for k in DOCKER_HUB_ALIASES) if domain == DOCKER_HUB else (domain,)


def _from_auths(auths: dict, domain: str, repository: str, source: str) -> Credentials | None:
    by_key = {_normalize_key(k): v for k, v in auths.items() if isinstance(v, dict)}
    parts = repository.split("/") if repository else []
    candidates = [f"{domain}/{'/'.join(parts[:i])}" for i in range(len(parts), 0, -1)] + list(_host_keys(domain))
    for key in candidates:
        entry = by_key.get(key)
        if not entry:
            continue
        if entry.get("auth"):
            try:
                user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError, TypeError):
                sep = ""
            if not sep:
                raise BadInput(f"The credentials for {key} in {source} are not base64 of user:password.",
                               hint=f"Log in again (`podman login {domain}`) or fix the `auth` entry.")
            return Credentials(user, password, source)
        if entry.get("username") and entry.get("password"):
            return Credentials(str(entry["username"]), str(entry["password"]), source)
    return None


def helper_server(domain: str) -> str:
    """The server name a credential helper is asked for (docker's legacy URL for Docker Hub)."""
    return "https://index.docker.io/v1/" if domain == DOCKER_HUB else domain


def run_credential_helper(name: str, domain: str) -> Credentials | None:
    """`docker-credential-NAME get`; None when the helper has no credentials for the server."""
    program = f"docker-credential-{name}"
    path = shutil.which(program)
    if path is None:
        raise BadInput(f"The credential helper {program} named for {domain} is not installed (not on PATH).",
                       hint="Install it, or remove it from credHelpers/credsStore in your docker config.")
    try:
        done = subprocess.run([path, "get"], input=helper_server(domain).encode(), capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"The credential helper {program} failed for {domain}: {exc}.") from None
    if done.returncode != 0:
        message = (done.stdout or done.stderr).decode(errors="replace").strip()
        if "credentials not found" in message.lower():
            return None
        raise BadInput(f"The credential helper {program} failed for {domain} (exit {done.returncode}): {message}",
                       hint=f"Run `echo {helper_server(domain)} | {program} get` to see why.")
    try:
        answer = json.loads(done.stdout)
        return Credentials(str(answer["Username"]), str(answer["Secret"]), program)
    except (ValueError, KeyError, TypeError, RecursionError):
        raise BadInput(f"The credential helper {program} gave an answer that is not "
                       "{\"Username\": ..., \"Secret\": ...} JSON.") from None


def _read_config(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"Cannot read the credentials file {path}: {exc}.",
                       hint="Fix or remove it (REGISTRY_AUTH_FILE, containers/auth.json or docker config.json).") \
            from None
    return doc if isinstance(doc, dict) else None


def find_credentials(domain: str, repository: str = "") -> Credentials | None:
    """Credentials for `domain` (and `repository`, for per-repository auth.json keys), or None."""
    for path in auth_files():
        doc = _read_config(path)
        if doc is None:
            continue
        helpers = {_normalize_key(k): v for k, v in doc["credHelpers"].items()} \
            if isinstance(doc.get("credHelpers"), dict) else {}
        for key in _host_keys(domain):
            if key in helpers:
                return run_credential_helper(str(helpers[key]), domain)
        auths = doc.get("auths") if isinstance(doc.get("auths"), dict) else {}
        found = _from_auths(auths, domain, repository, str(path))
        if found is not None:
            return found
        if isinstance(doc.get("credsStore"), str) and doc["credsStore"]:
            found = run_credential_helper(doc["credsStore"], domain)
            if found is not None:
                return found
    return None
