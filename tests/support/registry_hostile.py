"""A hostile registry: a fault proxy's answers and the CLI run against it, for the hostile registry tests."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from support.qtools import TOOL, Run
from support.registry_server import QuietServer, free_port

MEMORY_CAP = 1 << 30


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, PYTHONPATH=str(TOOL), IMGQUILT_CACHE_DIR=str(tmp_path / "cache"), IMGQUILT_NO_RUFF="1",
             REGISTRY_AUTH_FILE=str(tmp_path / "no-auth.json"), HOME=str(tmp_path / "home"))
    e.pop("IMGQUILT_QUEUE", None)
    return e


def cli(*args: str, cwd: Path, env: dict[str, str], timeout: float = 90) -> Run:
    """The real CLI with at most 1 GiB of address space; a run past `timeout` fails the test."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    try:
        p = subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=env, capture_output=True,
                           text=True, preexec_fn=limit, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"imgquilt {' '.join(args)} still ran after {timeout} s (no deadline)")
    return Run(p.returncode, p.stdout, p.stderr)


def bad(r: Run, *words: str) -> None:
    text = r.out + r.err
    assert r.code == 6, f"exit {r.code}, wanted 6\n{text}"
    assert "Traceback" not in text and "internal error" not in text, text
    for w in words:
        assert w in text, f"{w!r} not in:\n{text}"


class Elsewhere:
    """Another origin (127.0.0.1 on another port): logs every request with its Authorization, and
    answers each with `answer(handler)` (default: 404)."""

    def __init__(self, answer=None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        self.answer = answer
        self.port = free_port()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                outer.seen.append((self.command, self.path, self.headers.get("Authorization")))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if outer.answer is not None:
                    outer.answer(self)
                    return
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = QuietServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(status: int, headers: dict[str, str], body: bytes = b""):
    def write(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Connection", "close")  # the proxy closes after a raw answer
        h.end_headers()
        h.wfile.write(body)
    return ("raw", write)
