"""Audit of a running container's filesystem, through /proc/PID/root, resolved inside that root."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.qtools import imgquilt, write_patch

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("chroot"), reason="chroot needs root")

CONF = b"workers = 2\n"


def chroot_with_sleep(root: Path) -> None:
    """A root that can run /bin/sleep: the binary, its libraries and the dynamic loader."""
    sleep = Path(shutil.which("sleep")).resolve()
    needed = [sleep]
    for line in subprocess.run(["ldd", str(sleep)], capture_output=True, text=True, check=True).stdout.splitlines():
        for word in line.split():
            if word.startswith("/"):
                needed.append(Path(word))
    for p in needed:
        dest = root / str(p).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p.resolve(), dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin/sleep").exists():
        shutil.copy2(sleep, root / "bin/sleep")


def test_audit_through_proc_pid_root(tmp_path: Path) -> None:
    root = tmp_path / "container"
    chroot_with_sleep(root)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/app.conf").write_bytes(CONF.replace(b"2", b"8"))  # the patch is live in the container
    os.symlink("/etc/app.conf", root / "etc/app-link.conf")  # absolute: must resolve inside the container
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-workers.patch", [("etc/app-link.conf", CONF, CONF.replace(b"2", b"8"))])
    proc = subprocess.Popen(["chroot", str(root), "/bin/sleep", "60"])
    try:
        proc_root = Path(f"/proc/{proc.pid}/root")
        for _ in range(100):  # wait until the process has entered its root
            if os.path.realpath(proc_root) == str(root):
                break
            time.sleep(0.05)
        r = imgquilt("audit", "--root", str(proc_root), "--json", cwd=q, check=0)
        doc = json.loads(r.out)
        [patch] = doc["patches"]
        assert patch["state"] == "live"
        assert patch["files"][0]["resolved"] == "etc/app.conf"
    finally:
        proc.kill()
        proc.wait()
