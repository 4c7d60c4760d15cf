"""Byte progress bars: on a terminal (stderr a pty) while a registry image downloads and its layers are
read; nothing in a pipe, and nothing with --json even on a terminal."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from imagetools import build_oci, file
from qtools import TOOL, write_patch
from registry_server import seed
from registry_server import registry  # noqa: F401 (fixture)

SVC = b"def port():\n    return 8000\n"


@pytest.fixture(scope="module")
def image(registry, tmp_path_factory):
    layout = tmp_path_factory.mktemp("progress") / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode()), file("usr/share/a.bin", os.urandom(2 << 20))]], tag="v1")
    seed(registry, f"oci:{layout}:v1", "progress:v1")
    return registry.ref("progress:v1")


@pytest.fixture
def queue(tmp_path):
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    return q


def under_pty(args: list[str], cwd, env) -> str:
    """Run under script(1): stdout and stderr are a terminal; returns what the terminal saw."""
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "imgquilt", *args])
    done = subprocess.run(["script", "-qec", cmd, "/dev/null"], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    return done.stdout


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["PYTHONPATH"] = str(TOOL)
    cli_env["TERM"] = "xterm-256color"
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


def test_a_terminal_sees_byte_bars_for_the_download_and_the_layer_read(image, queue, env):
    seen = under_pty(["audit", "--image", image, "--expect", "pending"], queue, env)
    assert "download layer sha256:" in seen
    assert "layer 1/1 sha256:" in seen
    assert "MB" in seen or "kB" in seen  # a byte count
    assert "━" in seen  # a bar
    assert "0001-port.patch" in seen  # and the report after it


def test_nothing_in_a_pipe_or_with_json(image, queue, env):
    piped = subprocess.run([sys.executable, "-m", "imgquilt", "audit", "--image", image, "--expect", "pending"],
                           cwd=queue, env=env, capture_output=True, text=True)
    assert piped.returncode == 0
    assert "download" not in piped.stderr + piped.stdout and "━" not in piped.stderr + piped.stdout and "\x1b[" not in piped.stderr
    seen = under_pty(["audit", "--image", image, "--expect", "pending", "--json"], queue, env)
    assert "download" not in seen and "━" not in seen and "layer 1/1" not in seen
    assert '"state": "pending"' in seen
