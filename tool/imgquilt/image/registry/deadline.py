"""An overall deadline for every registry request, not just a timeout per read.

httpx times out a read that waits too long, but a server that trickles a byte every few seconds
never makes one wait: without more, a request could last for ever. So each request gets a
deadline: its answer (status line, headers and any small body) must arrive within
IMGQUILT_REGISTRY_DEADLINE seconds (default 300) of it being sent, retries included; a blob body
may take that long plus one second per MIN_RATE bytes it has brought (a slow download that moves
goes on; one that trickles is cut off). Every socket read and write of the calling thread is
clamped to the deadline it runs under (the network backend below), so even a status line sent a
byte at a time ends on time.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import httpcore

from ...errors import UsageError

DEADLINE_ENV = "IMGQUILT_REGISTRY_DEADLINE"
DEFAULT_SECONDS = 300.0
MIN_RATE = 64 << 10  # bytes per second a blob download must average after the first deadline
_active = threading.local()


@dataclass(frozen=True)
class DeadlinePolicy:
    """How long a request may take: `seconds` for its answer, plus len/`min_rate` for a body."""

    seconds: float = DEFAULT_SECONDS
    min_rate: int = MIN_RATE

    @classmethod
    def from_env(cls) -> "DeadlinePolicy":
        from ...settings import current

        raw = (current().of(DEADLINE_ENV) or "").strip()
        if not raw:
            return cls()
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < 1e9:
            raise UsageError(f"{DEADLINE_ENV}={raw!r} is not a number of seconds.",
                             hint="Write e.g. 300 (the default); every registry request must end within it.")
        return cls(seconds)

    def start(self) -> "Deadline":
        return Deadline(self, time.monotonic())


@dataclass(frozen=True)
class Deadline:
    """One request's deadline, from the moment it was sent."""

    policy: DeadlinePolicy
    started: float

    def at(self, body_bytes: int = 0) -> float:
        """When the request must be over, having brought `body_bytes` of body."""
        return self.started + self.policy.seconds + body_bytes / self.policy.min_rate

    def passed(self, body_bytes: int = 0) -> bool:
        return time.monotonic() > self.at(body_bytes)

    @contextmanager
    def active(self, body_bytes: int = 0) -> Iterator[None]:
        """Clamp this thread's socket reads and writes to the deadline while the block runs."""
        previous = getattr(_active, "at", None)
        _active.at = self.at(body_bytes)
        try:
            yield
        finally:
            _active.at = previous


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    at = getattr(_active, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request ran past its deadline")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address,
                                               socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def install(client: Any) -> bool:
    """Put the clamping backend under every transport of an httpx.Client (the default one and any
    proxy's). False if this httpx lays its transports out otherwise (bodies are still checked)."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    done = False
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
            done = True
    return done
