"""Registry auth as docker and podman do it: anonymous, Basic, or Bearer tokens per repository scope.

A `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge sends us to the realm for a
token (GET with `service` and each `scope`, Basic credentials if we have any; the answer's `token` or
`access_token`). Tokens are cached per set of scopes until shortly before they expire.

The realm is the registry's word for where its tokens come from, so it may be another host (Docker
Hub's is auth.docker.io), as docker and podman allow; but it must be an http(s) URL, and Basic
credentials go to it only over HTTPS unless the registry itself is reached over plain HTTP (a
loopback or `insecure` one): an HTTPS registry cannot send them out in clear. The token answer is
capped at TOKEN_CAP bytes.
"""
from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

import httpx

from ...errors import BadImage, shown
from .credentials import Credentials
from .problems import registry_messages

_PARAM = re.compile(r'([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))')
_EXPIRY_MARGIN = 10.0  # seconds: fetch a new token this long before the old one expires
TOKEN_CAP = 1 << 20  # a token answer is a JWT in a small JSON document


@dataclass(frozen=True)
class Challenge:
    """A parsed WWW-Authenticate challenge: scheme ("bearer" or "basic") and its parameters."""

    scheme: str
    params: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.params if k == key), None)


def parse_challenge(header: str | None) -> Challenge | None:
    """The first Bearer or Basic challenge of a WWW-Authenticate header, else None."""
    if not header:
        return None
    m = re.match(r"\s*(Bearer|Basic)\b(.*)$", header, re.I | re.S)
    if not m:
        return None
    params = tuple((p.group(1).lower(), (p.group(2) or "").replace('\\"', '"') if p.group(2) is not None
                    else p.group(3)) for p in _PARAM.finditer(m.group(2)))
    return Challenge(m.group(1).lower(), params)


def repository_scope(repository: str, *, push: bool = False) -> str:
    return f"repository:{repository}:{'pull,push' if push else 'pull'}"


def basic_header(credentials: Credentials) -> str:
    raw = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()


class Authenticator:
    """The Authorization header for a set of scopes on one registry, fetching tokens as needed."""

    def __init__(self, registry: str, credentials: Credentials | None, send: Callable[..., httpx.Response],
                 build: Callable[..., httpx.Request], base_url: Callable[[], str]) -> None:
        self.registry = registry
        self.credentials = credentials
        self._send = send
        self._build = build
        self._base_url = base_url
        self.challenge: Challenge | None = None
        self._tokens: dict[tuple[str, ...], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def learn(self, header: str | None) -> bool:
        """Take a challenge from a 401 answer; True if it tells us something new to try."""
        challenge = parse_challenge(header)
        if challenge is None:
            return False
        with self._lock:
            known = self.challenge
            if known is not None and known.scheme == challenge.scheme and known.get("realm") == challenge.get("realm"):
                return False
            self.challenge = challenge
            self._tokens.clear()
        return True

    def forget(self, scopes: tuple[str, ...]) -> None:
        with self._lock:
            self._tokens.pop(scopes, None)

    def authorization(self, scopes: tuple[str, ...]) -> str | None:
        challenge = self.challenge
        if challenge is None:
            return None
        if challenge.scheme == "basic":
            return basic_header(self.credentials) if self.credentials else None
        with self._lock:
            cached = self._tokens.get(scopes)
        if cached and cached[1] > time.monotonic():
            return f"Bearer {cached[0]}"
        token, lifetime = self._fetch_token(challenge, scopes)
        with self._lock:
            self._tokens[scopes] = (token, time.monotonic() + max(lifetime - _EXPIRY_MARGIN, 1.0))
        return f"Bearer {token}"

    def _fetch_token(self, challenge: Challenge, scopes: tuple[str, ...]) -> tuple[str, float]:
        realm = challenge.get("realm")
        if not realm or not realm.startswith(("https://", "http://")):
            raise BadImage(f"The registry {self.registry} asks for a Bearer token but names no usable realm "
                           f"({realm!r}).", hint="The registry's auth configuration is broken; tell its operator.")
        params: list[tuple[str, str]] = []
        if challenge.get("service"):
            params.append(("service", challenge.get("service") or ""))
        params.extend(("scope", s) for s in scopes)
        headers = {}
        if self.credentials:
            if realm.startswith("http://") and self._base_url().startswith("https://"):
                raise BadImage(f"The registry {self.registry} asks for a Bearer token from {realm}, over plain "
                               "HTTP; imgquilt does not send your credentials there in clear.",
                               hint="The registry's auth configuration is broken (its realm should be https://); "
                                    "tell its operator.")
            params.append(("account", self.credentials.username))
            headers["Authorization"] = basic_header(self.credentials)
        response = self._send(self._build("GET", realm, params=params, headers=headers), body_cap=TOKEN_CAP)
        if response.status_code != 200:
            said = registry_messages(response) or shown(response.text[:300].strip())  # its words, one line
            who = f"the credentials from {self.credentials.source}" if self.credentials else "anonymous access"
            raise BadImage(
                f"The token service of {self.registry} ({realm}) refused {who} for {' '.join(scopes)} "
                f"({response.status_code}).{' It says: ' + said + '.' if said else ''}",
                hint=f"Log in (`podman login {self.registry}`) or fix the credentials in REGISTRY_AUTH_FILE, "
                     "containers/auth.json or ~/.docker/config.json.")
        if response.extensions.get("imgquilt_cut"):
            raise BadImage(f"The token service of {self.registry} ({realm}) answered with more than {TOKEN_CAP} "
                           "bytes; imgquilt does not read it.", hint="The registry's auth service is broken; tell its operator.")
        try:
            answer = json.loads(response.content)
            token = answer.get("token") or answer.get("access_token")
            lifetime = float(answer.get("expires_in") or 60)
            if not 0 <= lifetime < 1e9:
                lifetime = 60.0
        except (ValueError, AttributeError, TypeError, RecursionError):
            token = None
        if not isinstance(token, str) or not token or not token.isprintable() or not token.isascii():
            raise BadImage(f"The token service of {self.registry} ({realm}) gave no token.",
                           hint="The registry's auth service is broken; tell its operator.")
        return token, lifetime
