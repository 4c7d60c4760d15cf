"""`audit --pid` pins the process: its PID reused by another process between the check and the reads
(forced here in a PID namespace of our own, where the next PID can be chosen) never makes imgquilt
audit the other process's root; the audit is refused instead."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import TOOL, empty_queue, write_patch

OLD, NEW = b"workers = 2\n", b"workers = 8\n"

HELPER = r"""
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
queue, root_a, root_b = sys.argv[2:5]

def start(root):
    pid = os.fork()
    if pid == 0:
        os.chroot(root)
        os.chdir("/")
        time.sleep(300)
        os._exit(0)
    time.sleep(0.2)
    return pid

import imgquilt.verbs.audit
from imgquilt.api import audit
from imgquilt.errors import ImgquiltError

a = start(root_a)  # the process to audit: its root holds the base (the patch is pending there)
original = imgquilt.verbs.audit.audit_source

def swapped(*args, **kw):
    # after the process was checked, before any read: it ends, and its PID goes to another process
    os.kill(a, signal.SIGKILL)
    os.waitpid(a, 0)
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(a - 1))
    b = start(root_b)
    assert b == a, (a, b)
    return original(*args, **kw)

imgquilt.verbs.audit.audit_source = swapped
try:
    done = audit(queue, pid=a)
    print("states", sorted({p.state for p in done.report.patches}), done.report.process.root)
except ImgquiltError as exc:
    print("refused", exc.exit_code, exc.message)
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_reused_pid_is_never_audited(tmp_path: Path) -> None:
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-conf.patch", [("etc/app.conf", OLD, NEW)])
    roots = []
    for name, data in (("a", OLD), ("b", NEW)):
        (tmp_path / name / "etc").mkdir(parents=True)
        (tmp_path / name / "etc" / "app.conf").write_bytes(data)
        roots.append(str(tmp_path / name))
    helper = tmp_path / "helper.py"
    helper.write_text(HELPER)
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(helper), str(TOOL), str(q), *roots],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0 and "unshare failed" in p.stderr:
        pytest.skip(f"no PID namespaces here: {p.stderr.strip()}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("refused 6 Process"), p.stdout  # not "states ['live']": process b's root
    assert "ended while imgquilt audited it" in p.stdout
