"""Helpers for the hostile-input suites (tests/*/test_hostile_*.py): canaries, a small rootfs, runs.

Every case runs the real console script and asserts the exit code, a word of the message, and that
a canary tree outside the root/queue/output hashes the same before and after.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from imgquilt.util.sealing import canonical
from support.qtools import Run, imgquilt, tree_hash

CONF = b"workers = 2\n"
NEW_CONF = b"workers = 8\n"


def small_root(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(CONF)
    return root


def forger_seal(doc: dict) -> str:
    """A seal made exactly as imgquilt makes one, but under a key of the forger's own, not the user's."""
    return hmac.new(os.urandom(32), canonical(doc), hashlib.sha256).hexdigest()


def canary_dir(tmp: Path) -> Path:
    """A $HOME-like directory outside everything imgquilt is given."""
    home = tmp / "victim-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/known_hosts").write_bytes(b"host ssh-ed25519 AAAA\n")
    (home / "notes.txt").write_bytes(b"keep me\n")
    return home


@contextmanager
def unchanged(*trees: Path) -> Iterator[None]:
    """Assert every tree hashes the same after the block."""
    before = [tree_hash(t) for t in trees]
    yield
    assert [tree_hash(t) for t in trees] == before, "a tree outside imgquilt's reach changed"


def refused(r: Run, code: int, *words: str) -> None:
    """Exit `code`, never a traceback, and each of `words` in the message."""
    text = r.out + r.err
    assert r.code == code, f"exit {r.code}, wanted {code}\n{text}"
    assert "Traceback" not in text, text
    for w in words:
        assert w in text, f"{w!r} not in:\n{text}"


def run(q: Path, *args: str, env: dict[str, str]) -> Run:
    return imgquilt("--queue", str(q), *args, cwd=q, env=env)
