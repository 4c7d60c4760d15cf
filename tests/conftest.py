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
    from support.qtools import svc_root

    return svc_root(tmp_path / "rootfs")


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    """An empty queue at tmp_path/queue (test modules that need another queue override this)."""
    from support.qtools import empty_queue

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
    from support.imagetools import drop_store, private_store

    env = private_store(tmp_path / "containers")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
    drop_store(tmp_path / "containers", env)


# --- markers and tool skips (tests/support/markers.py says how a test's markers are found) ---
from support import markers as _markers  # noqa: E402
from support import tools as _tools  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        found = _markers.item_uses(item)
        item.stash[_USES] = frozenset(t for t in found if not t.startswith("@"))
        for mark in sorted(_markers.marks_for(found)):
            item.add_marker(mark)
        fn = getattr(item, "function", None)
        key = f"{Path(str(item.fspath)).name}::{fn.__name__ if fn else item.name}"
        if key in _markers.SLOW:
            item.add_marker("slow")


_USES = pytest.StashKey[frozenset]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that runs a program that is not installed is skipped, naming it (in CI: fails)."""
    absent = _tools.missing(item.stash.get(_USES, frozenset()))
    if not absent:
        return
    why = f"needs {', '.join(absent)} (not installed; .ci/install-tools installs the tools)"
    if _tools.required_in_ci() and any(t in _tools.CI_TOOLS for t in absent):
        pytest.fail(f"{why}: {_tools.REQUIRE_ENV}=1 and CI installs it", pytrace=False)
    pytest.skip(why)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """In CI a skip whose reason names a tool CI installed (a file's own skipif too) is a failure."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and _tools.required_in_ci() and isinstance(rep.longrepr, tuple):
        reason = str(rep.longrepr[2]).removeprefix("Skipped: ")
        if named := _tools.named_ci_tools(reason):
            rep.outcome = "failed"
            rep.longrepr = f"skipped for want of {', '.join(named)}, which CI installs ({_tools.REQUIRE_ENV}=1): {reason}"
