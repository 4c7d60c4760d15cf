"""A full spool directory (issue 35, point 7): a large file set aside while a root or a layer is read
finds no room. It is named as what it is, SpoolFull (exit 6, "The spool directory DIR is full"), never
as a read error of the root, and the root, the queue and the outputs are left as they were.

The full disk is a 64 KiB tmpfs in a private mount namespace (`unshare -m`, or `unshare -Urm` when not
root: the host's mounts are never touched); a file size limit (RLIMIT_FSIZE, EFBIG) is the other way a
write finds no room.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import TOOL, empty_queue, imgquilt, tree_hash, write_patch

BIG = b"".join(b"line %d\n" % i for i in range(40000))  # 429 kB: spooled (IMGQUILT_SPOOL_AT=1000)
NEW = BIG.replace(b"line 5\n", b"line five\n")


@pytest.fixture
def world(tmp_path: Path, cli_env: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/big.txt").write_bytes(BIG)
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-big.patch", [("etc/big.txt", BIG, NEW)])
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    return q, root, cli_env


def queue_files(q: Path) -> dict[str, bytes]:
    """The queue as the user keeps it (its .imgquilt/ state is imgquilt's own)."""
    return {str(p.relative_to(q)): p.read_bytes() for p in q.rglob("*") if p.is_file() and ".imgquilt" not in p.parts}


def full(text: str, where: str, code: str) -> None:
    assert f"The spool directory {where} is full ({code}" in text, text
    assert "Cannot read" not in text and "cannot be read" not in text and "Traceback" not in text, text
    assert "IMGQUILT_SPOOL_DIR" in text, text


def test_a_full_spool_directory_is_named_as_such_and_nothing_is_written(world, tmp_path: Path) -> None:
    q, root, env = world
    before = tree_hash(root), queue_files(q)
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    spool = tmp_path / "spool"
    spool.mkdir()
    runs = [["apply", "--root", str(root)], ["apply", "--layer", str(tmp_path / "fix.tar")], ["audit", "--root", str(root)],
            ["--json", "apply", "--layer", str(tmp_path / "fix.tar")]]
    script = f"mount -t tmpfs -o size=64k spool {spool} && " + " ; ".join(
        f'"$PY" -m imgquilt --queue {q} {" ".join(args)} > {tmp_path}/out{i} 2> {tmp_path}/err{i}; echo $? >> {tmp_path}/rcs'
        for i, args in enumerate(runs))
    e = {**env, "PY": sys.executable, "PYTHONPATH": str(TOOL), "IMGQUILT_SPOOL_AT": "1000", "IMGQUILT_SPOOL_DIR": str(spool)}
    p = subprocess.run(cmd + ["bash", "-c", script], env=e, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "rcs").read_text().split() == ["6"] * len(runs)
    for i in range(len(runs)):
        full((tmp_path / f"err{i}").read_text(), str(spool), "ENOSPC")
    doc = json.loads((tmp_path / "out3").read_text())
    assert doc["error"]["kind"] == "spool-full" and doc["error"]["code"] == 6
    assert (tree_hash(root), queue_files(q)) == before
    assert not (tmp_path / "fix.tar").exists()
    assert not any(spool.iterdir())  # the namespace's tmpfs is gone; the host's directory never got a byte


def test_a_file_size_limit_on_the_spool_is_named_as_such(world, tmp_path: Path) -> None:
    q, root, env = world
    spool = tmp_path / "spool"
    spool.mkdir()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    e = {**env, "IMGQUILT_SPOOL_AT": "1000", "IMGQUILT_SPOOL_DIR": str(spool)}
    before = tree_hash(root)
    p = subprocess.run([sys.executable, "-m", "imgquilt", "--queue", str(q), "apply", "--root", str(root)], env=e,
                       capture_output=True, text=True, preexec_fn=limit)
    assert p.returncode == 6, p.stderr
    full(p.stderr, str(spool), "EFBIG")
    assert tree_hash(root) == before

