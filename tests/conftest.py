"""Shared fixtures: run the real console script, hash whole trees, build small queues."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tool"
if str(TOOL) not in sys.path:
    sys.path.insert(0, str(TOOL))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# never share a user's cache: every run of imgquilt in the tests (in-process or not) gets this one
_CACHE = tempfile.mkdtemp(prefix="imgquilt-test-cache-")
os.environ["IMGQUILT_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

# nor the user's journal key (~/.local/state/imgquilt/journal.key): one key for the whole run, made
# before any test, so a crash test's traced run and its killed runs make the same syscalls, and a
# journal written by one imgquilt process of a test is recovered by the next
_STATE = tempfile.mkdtemp(prefix="imgquilt-test-state-")
os.environ["IMGQUILT_STATE_DIR"] = _STATE
_fd = os.open(os.path.join(_STATE, "journal.key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(_fd, os.urandom(32))
os.close(_fd)
atexit.register(shutil.rmtree, _STATE, True)


@pytest.fixture(autouse=True)
def _own_shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty shared cache: what one test read never makes another's warm."""
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path_factory.mktemp("shared-cache")))


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
    env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    env["COLUMNS"] = "200"
    return env


@pytest.fixture
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A private containers-storage store (imagetools.private_store, driver vfs) for this test: podman,
    buildah, skopeo and imgquilt (in-process or run with os.environ) all use it; removed afterwards."""
    from imagetools import drop_store, private_store

    env = private_store(tmp_path / "containers")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
    drop_store(tmp_path / "containers", env)
