"""The journal key (util/sealing.py): where it lives, how it is made, and what is never trusted as one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.hostile import forger_seal
from imgquilt.errors import UnsafeStateKey
from imgquilt.util import sealing
from support.qtools import TOOL

DOC = {"version": 3, "files": [{"path": "series", "old": 420}]}


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("IMGQUILT_STATE_DIR", str(home))
    monkeypatch.setattr(sealing, "_keys", {})
    return home


def test_first_seal_makes_a_private_key_and_it_verifies(state: Path) -> None:
    tag = sealing.seal(DOC)
    key = state / "journal.key"
    st = key.stat()
    assert st.st_size == 32 and st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    assert state.stat().st_mode & 0o777 == 0o700
    assert sealing.sealed_here({**DOC, "seal": tag})
    assert [p.name for p in state.iterdir()] == ["journal.key"]  # no temp left


def test_a_changed_field_a_foreign_key_or_no_seal_does_not_verify(state: Path) -> None:
    tag = sealing.seal(DOC)
    assert not sealing.sealed_here({**DOC, "version": 4, "seal": tag})
    assert not sealing.sealed_here({**DOC, "seal": forger_seal(DOC)})
    assert not sealing.sealed_here(dict(DOC))
    assert not sealing.sealed_here({**DOC, "seal": 7})


def test_without_a_key_nothing_verifies_and_no_key_is_made(state: Path) -> None:
    assert not sealing.sealed_here({**DOC, "seal": forger_seal(DOC)})
    assert not state.exists()


def test_the_key_is_kept_across_processes(state: Path) -> None:
    """A journal sealed by one imgquilt process (the one that crashed) verifies in the next."""
    code = "import sys, json; from imgquilt.util.sealing import seal; print(seal(json.loads(sys.argv[1])))"
    env = dict(os.environ, PYTHONPATH=str(TOOL))
    tags = {subprocess.run([sys.executable, "-c", code, '{"a": 1}'], env=env, capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    assert len(tags) == 1 and sealing.sealed_here({"a": 1, "seal": tags.pop()})


def test_default_location_follows_xdg_state_home_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IMGQUILT_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert sealing.state_home() == tmp_path / "xdg" / "imgquilt"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert sealing.state_home() == tmp_path / "home" / ".local/state/imgquilt"


@pytest.mark.parametrize("kind", ["open-to-others", "short", "symlink", "directory", "dir-writable-by-others", "dir-symlink"])
def test_a_key_that_is_not_the_users_own_is_refused_never_replaced(state: Path, tmp_path: Path, kind: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "journal.key").write_bytes(b"k" * 32)
    if kind == "dir-symlink":
        state.symlink_to(elsewhere)
    else:
        state.mkdir(mode=0o700)
    key = state / "journal.key"
    if kind == "open-to-others":
        key.write_bytes(os.urandom(32))
        key.chmod(0o644)
    elif kind == "short":
        key.write_bytes(b"abc")
        key.chmod(0o600)
    elif kind == "symlink":
        key.symlink_to(elsewhere / "journal.key")
    elif kind == "directory":
        key.mkdir()
    elif kind == "dir-writable-by-others":
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        state.chmod(0o777)
    before = {p.name: p.lstat().st_mode for p in state.iterdir()} if not kind == "dir-symlink" else None
    for call in (lambda: sealing.seal(DOC), lambda: sealing.sealed_here({**DOC, "seal": "0" * 64})):
        with pytest.raises(UnsafeStateKey) as exc:
            call()
        assert exc.value.exit_code == 6 and "IMGQUILT_STATE_DIR" in (exc.value.hint or "")
        assert exc.value.message.startswith(f"imgquilt's journal key {state / 'journal.key'} is "), exc.value.message
    if before is not None:
        assert {p.name: p.lstat().st_mode for p in state.iterdir()} == before
    assert (elsewhere / "journal.key").read_bytes() == b"k" * 32
