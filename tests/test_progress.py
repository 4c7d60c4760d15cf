"""Progress goes to stderr only on a terminal: a person sees which layer is read, a pipe sees nothing."""
from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from conftest import TOOL
from qtools import copy_demo_queue


def run_on_a_terminal(args: list[str], cwd: Path) -> str:
    """Run imgquilt with stdout/stderr on a pseudo-terminal; return everything it printed."""
    main, sub = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(TOOL), COLUMNS="200", TERM="xterm")
    p = subprocess.Popen([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=sub, stderr=sub)
    os.close(sub)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    p.wait()
    os.close(main)
    assert p.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_layers_are_reported_on_a_terminal_only(tmp_path: Path) -> None:
    q = copy_demo_queue(tmp_path / "queue")
    text = run_on_a_terminal(["apply"], cwd=q)
    assert "reading layer 1 of 3 from the top: sha256:" in text
    piped = subprocess.run([sys.executable, "-m", "imgquilt", "apply"], cwd=q, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(TOOL)))
    assert piped.returncode == 0 and "reading layer" not in piped.stderr + piped.stdout
