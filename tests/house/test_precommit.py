"""The pre-commit hook `imgquilt-check`, run through `pre-commit try-repo` on a committed copy of the demo queue."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import REPO, copy_demo_queue

HOOK_FILES = (".pre-commit-hooks.yaml", "pyproject.toml", "README.md", "LICENSE", "tool")


def git(*args: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def commit_all(repo: Path, env: dict[str, str]) -> None:
    if not (repo / ".git").exists():
        git("init", "-q", cwd=repo, env=env)
    git("add", "-A", cwd=repo, env=env)
    git("commit", "-qm", "snapshot", cwd=repo, env=env)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precommit")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp / "cache"), HOME=str(tmp / "home"),
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    env.pop("IMGQUILT_QUEUE", None)
    # try-repo installs the hook repository at a commit: commit this checkout's hook, as it is now, into a clone
    hooks = tmp / "imgquilt"
    hooks.mkdir()
    for name in HOOK_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, hooks / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, hooks / name)
    commit_all(hooks, env)
    queue = copy_demo_queue(tmp / "queue")
    commit_all(queue, env)
    return hooks, queue, env


def try_repo(hooks: Path, queue: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(hooks), "imgquilt-check", "--all-files"],
                          cwd=queue, env=env, capture_output=True, text=True)


def test_hook_passes_on_the_demo_queue(setup) -> None:
    hooks, queue, env = setup
    r = try_repo(hooks, queue, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "imgquilt check" in r.stdout and "Passed" in r.stdout


def test_hook_fails_on_a_stale_hash(setup) -> None:
    hooks, queue, env = setup
    patch = queue / "patches/0003-app-config-longer-timeouts.patch"
    data = patch.read_bytes()
    stale = data.replace(b"Patched-SHA256: 71a5", b"Patched-SHA256: 0000")
    assert stale != data
    patch.write_bytes(stale)
    commit_all(queue, env)
    r = try_repo(hooks, queue, env)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Failed" in r.stdout
    assert "targets.lock is stale" in r.stdout  # the lock pins the hashes the patch had
    # and names the patch, with the one command back from a hand edit
    assert "0003-app-config-longer-timeouts.patch edited by hand since it was made" in r.stdout
    assert "`imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch`" in r.stdout
    patch.write_bytes(data)
    commit_all(queue, env)


def test_hook_passes_after_a_refresh_with_no_lock_in_between(setup) -> None:
    """Issue 29, point 1: the quilt workflow keeps targets.lock fresh by itself, so the commit after
    `imgquilt refresh` passes the hook with no `imgquilt lock` run."""
    hooks, queue, env = setup
    before = {p: (queue / p).read_bytes() for p in ("targets.lock", "patches/0003-app-config-longer-timeouts.patch")}
    env = {**env, "PYTHONPATH": str(REPO / "tool")}

    def iq(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=queue, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    iq("push", "3")
    work = queue / ".imgquilt/work/home/app/config.toml"
    work.write_text(work.read_text().replace("count = 2", "count = 6"))
    assert "Updated targets.lock" in iq("refresh")
    iq("pop", "-a")
    assert (queue / "targets.lock").read_bytes() != before["targets.lock"]
    commit_all(queue, env)
    r = try_repo(hooks, queue, env)
    assert r.returncode == 0 and "Passed" in r.stdout, r.stdout + r.stderr
    for p, data in before.items():
        (queue / p).write_bytes(data)
    commit_all(queue, env)


def test_a_config_with_rev_set_to_a_commit_runs_the_hook(setup) -> None:
    """As docs/integrations.md writes it: `repo:` where imgquilt is kept, `rev:` one of its commits."""
    hooks, queue, env = setup
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hooks, env=env, capture_output=True, text=True, check=True).stdout.strip()
    (queue / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: {sha}\n    hooks:\n      - id: imgquilt-check\n")
    commit_all(queue, env)
    r = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=queue, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "imgquilt check" in r.stdout and "Passed" in r.stdout, r.stdout + r.stderr
    (queue / ".pre-commit-config.yaml").unlink()
    commit_all(queue, env)


def test_hook_definition() -> None:
    """The hook runs `imgquilt check` once per commit, only when the queue's files change."""
    import re

    import yaml

    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "imgquilt-check" and hook["entry"] == "imgquilt check"
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    for path in ("series", "targets.lock", "patches/0001-x.patch", "deploy/queue/series", "deploy/queue/patches/a.patch"):
        assert files.search(path), path
    for path in ("README.md", "tool/imgquilt/cli/main.py", "docs/series.md", "my-series"):
        assert not files.search(path), path
