"""Shared fixtures: run the real console script, hash whole trees, build small queues."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tool"
if str(TOOL) not in sys.path:
    sys.path.insert(0, str(TOOL))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def svc(tmp_path: Path) -> Path:
    """The demo service's merged-/usr rootfs (qtools.svc_root) at tmp_path/rootfs."""
    from qtools import svc_root

    return svc_root(tmp_path / "rootfs")


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    """An empty queue at tmp_path/queue (test modules that need another queue override this)."""
    from qtools import empty_queue

    return empty_queue(tmp_path / "queue")


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TOOL) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("IMGQUILT_QUEUE", None)
    env["HOME"] = str(tmp_path / "home")
    env["COLUMNS"] = "200"
    return env
