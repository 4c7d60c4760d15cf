"""`check` reports every temp file no live process holds, whatever its age: the moment after a kill -9
too (before, a temp younger than 10 s was called sound, and a `git add patches/` then committed it)."""
from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import empty_queue, imgquilt, write_patch

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
        fixed = q / "patches" / ".0001-conf.patch.imgquilt-tmp"
        fixed.write_bytes(b"half a patch")  # write_atomic_at's temp (a journaled write's)
        r = imgquilt("check", cwd=q, env=cli_env, check=6)
        assert "patches/.0001-conf.patch.imgquilt-abcdefgh.tmp is a temp file" in r.err
        assert "patches/.0001-conf.patch.imgquilt-tmp is a temp file" in r.err
        assert "livewrit" not in r.err


@pytest.mark.skipif(STRACE is None, reason="needs strace")
def test_check_right_after_a_kill_leaves_no_temp_behind(tmp_path: Path, cli_env) -> None:
    """`new` killed (kill -9) as it renames its patch file into place: it leaves a temp in patches/,
    and the very next `check` puts the queue back as it was (`new` is journaled), temp included: never
    "sound" with the temp still there. (A temp no journal covers is named: the test above.)"""
    q = _queue(tmp_path)
    series = (q / "series").read_bytes()
    # which rename puts the patch file in place: counted on a copy of the queue, then killed there
    dry = tmp_path / "dry"
    shutil.copytree(q, dry)
    log = tmp_path / "renames"
    subprocess.run([STRACE, "-f", "-qq", "-o", str(log), "-e", "trace=rename,renameat,renameat2",
                    sys.executable, "-m", "imgquilt", "new", "0002-next.patch"], cwd=dry, env=cli_env, check=True,
                   capture_output=True)
    calls = [ln for ln in log.read_text().splitlines() if "rename" in ln]
    nth = 1 + next(i for i, ln in enumerate(calls) if '"0002-next.patch")' in ln)
    p = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2", "-e",
                        f"inject=rename,renameat,renameat2:signal=SIGKILL:when={nth}",
                        sys.executable, "-m", "imgquilt", "new", "0002-next.patch"], cwd=q, env=cli_env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    temps = sorted(x.name for x in (q / "patches").glob(".*tmp"))
    assert temps, sorted(q.rglob("*"))
    imgquilt("check", cwd=q, env=cli_env, check=0)
    assert not sorted(x.name for x in (q / "patches").glob(".*tmp"))
    assert (q / "series").read_bytes() == series and not (q / "patches" / "0002-next.patch").exists()
