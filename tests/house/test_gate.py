"""The fast gate's rules, run as a user runs pytest: a test that runs a missing program is skipped, naming
it; in CI (IMGQUILT_CI_REQUIRE_TOOLS=1, set by .ci/run) that skip fails the run, and so does a file's own
skipif that names a tool CI installs; the markers tests/conftest.py sets select the unit tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SESSION = """
import shutil
import subprocess

import pytest

from helper import pull

STRACE = shutil.which("strace") or "/usr/bin/strace"


def test_plain():
    assert 1 + 1 == 2


def test_runs_skopeo():
    subprocess.run(["skopeo", "--version"], check=True)


def test_through_a_helper():
    pull("docker://example.invalid/x")


def test_through_a_constant():
    subprocess.run([STRACE, "-V"], check=True)


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_own_skipif():
    pass


def test_skips_itself():
    pytest.skip("podman not installed")


def test_limits_of_the_machine():
    pytest.skip("no usable containers-storage here: skopeo copy failed")
"""
HELPER = """
import subprocess


def pull(ref):
    subprocess.run(["skopeo", "copy", ref, "oci:/tmp/x"], check=True)
"""


def _session(tmp: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess:
    """pytest on a copy of tests/conftest.py and tests/support/ with SESSION's tests, on a PATH with no tools."""
    tests = tmp / "tests"
    shutil.copytree(TESTS / "support", tests / "support", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    shutil.copy(TESTS.parent / "pyproject.toml", tmp / "pyproject.toml")  # the markers' registration
    (tests / "test_session.py").write_text(SESSION)
    (tests / "helper.py").write_text(HELPER)
    (tmp / "empty-bin").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "IMGQUILT_CI_REQUIRE_TOOLS"}
    env["PATH"] = str(tmp / "empty-bin")
    env["COLUMNS"] = "300"  # -vv lines whole
    if ci:
        env["IMGQUILT_CI_REQUIRE_TOOLS"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "--rootdir", str(tmp), str(tests)]
    return subprocess.run([*cmd, *args], cwd=tmp, env=env, capture_output=True, text=True)


def test_a_test_that_runs_a_missing_tool_is_skipped_naming_it(tmp_path: Path) -> None:
    r = _session(tmp_path, "-vv")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed, 6 skipped" in r.stdout and "warning" not in r.stdout
    # the program run by the test itself, by a helper it calls, through a constant it reads, in its skipif
    for test, tool in (
        ("runs_skopeo", "skopeo"),
        ("through_a_helper", "skopeo"),
        ("through_a_constant", "strace"),
        ("own_skipif", "umoci"),
    ):
        assert f"::test_{test} SKIPPED (needs {tool} (not installed; .ci/install-tools installs the tools))" in r.stdout


def test_in_ci_a_skip_for_a_tool_ci_installs_fails_the_run(tmp_path: Path) -> None:
    r = _session(tmp_path, ci=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed, 1 skipped, 4 errors" in r.stdout  # the machine's limits stay a skip
    assert (
        "needs skopeo (not installed; .ci/install-tools installs the tools): IMGQUILT_CI_REQUIRE_TOOLS=1 and CI installs it"
        in r.stdout
    )
    assert (
        "skipped for want of podman, which CI installs (IMGQUILT_CI_REQUIRE_TOOLS=1): podman not installed" in r.stdout
    )


def test_the_markers_leave_the_unit_tests_to_the_fast_gate(tmp_path: Path) -> None:
    r = _session(tmp_path, "-m", "not tools and not crash and not network and not slow")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 4 deselected" not in r.stdout and "1 passed, 2 skipped, 4 deselected" in r.stdout
    r = _session(tmp_path / "crash", "-m", "crash", "--collect-only")
    assert "test_through_a_constant" in r.stdout and "test_runs_skopeo" not in r.stdout


def test_the_typed_packages_only_grow() -> None:
    """mypy's list (pyproject.toml [tool.mypy] files) holds at least the packages typed clean in issue 33."""
    import tomllib

    files = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    for package in (
        "tool/imgquilt/engine",
        "tool/imgquilt/queue",
        "tool/imgquilt/fs",
        "tool/imgquilt/errors.py",
        "tool/imgquilt/store.py",
    ):
        assert package in files, f"{package} left mypy's list: the list grows, it never shrinks"


def test_each_test_file_sits_in_the_folder_of_the_package_it_proves() -> None:
    """CONTRIBUTING.md "Where a test goes": test files in tests/<package>/ (a package of tool/imgquilt, or
    house/ for the project's own rules), basenames unique (pytest imports them by basename, the SLOW table
    names them so), no test file importing another (shared helpers live in tests/support/)."""
    import ast

    packages = {p.parent.name for p in (TESTS.parent / "tool" / "imgquilt").glob("*/__init__.py")}
    folders = packages | {"house"}
    code = [f for f in TESTS.rglob("*.py") if not {"data", "transcripts"} & set(f.relative_to(TESTS).parts)]
    files = sorted(f for f in code if f.name.startswith("test_"))
    assert len(files) > 100
    misplaced = [str(f.relative_to(TESTS)) for f in files if f.parent.parent != TESTS or f.parent.name not in folders]
    assert not misplaced, f"test files outside tests/<package>/ (CONTRIBUTING.md, where a test goes): {misplaced}"
    names = [f.name for f in files]
    assert len(set(names)) == len(names), sorted({n for n in names if names.count(n) > 1})
    strays = [str(f.relative_to(TESTS)) for f in code if f not in files and f.parent.name != "support"]
    strays = [s for s in strays if s != "conftest.py"]
    assert not strays, f"helper modules outside tests/support/: {strays}"
    crossing = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("test_"):
                crossing.append(f"{f.name} imports {node.module}")
            elif isinstance(node, ast.Import):
                crossing += [f"{f.name} imports {a.name}" for a in node.names if a.name.startswith("test_")]
    assert not crossing, f"a test file imports another (move the helper into tests/support/): {crossing}"
