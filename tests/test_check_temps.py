"""`check` reports every temp file no live process holds, whatever its age: the moment after a kill -9
too (before, a temp younger than 10 s was called sound, and a `git add patches/` then committed it)."""
from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qtools import empty_queue, imgquilt, write_patch

STRACE = shutil.which("strace")


def _queue(tmp: Path) -> Path:
    q = empty_queue(tmp / "q")
    write_patch(q, "0001-conf.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    imgquilt("check", cwd=q, check=0)
    return q


def test_a_fresh_dead_temp_is_reported_and_a_held_one_is_not(tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path)
    held = q / "patches" / ".0001-conf.patch.imgquilt-livewrit.tmp"
    held.write_bytes(b"being written")
    with open(held, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # a live writer holds its temp
        imgquilt("check", cwd=q, env=cli_env, check=0)
        dead = q / "patches" / ".0001-conf.patch.imgquilt-abcdefgh.tmp"
        dead.write_bytes(b"half a patch")  # just now: younger than any grace
        r = imgquilt("check", cwd=q, env=cli_env, check=6)
        assert "patches/.0001-conf.patch.imgquilt-abcdefgh.tmp is a temp file" in r.err
        assert "livewrit" not in r.err


@pytest.mark.skipif(STRACE is None, reason="needs strace")
def test_check_right_after_a_kill_names_the_temp(tmp_path: Path, cli_env) -> None:
    """`new` killed (kill -9) as it renames its patch file into place: the very next `check` names the
    temp it left."""
    q = _queue(tmp_path)
    p = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename", "-e", "inject=rename:signal=SIGKILL:when=1",
                        sys.executable, "-m", "imgquilt", "new", "0002-next.patch"], cwd=q, env=cli_env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    temps = sorted(x.name for x in (q / "patches").glob(".*.tmp"))
    assert temps, sorted(q.rglob("*"))
    r = imgquilt("check", cwd=q, env=cli_env, check=6)
    assert all(t in r.err for t in temps), r.err
