"""git in a test repository, for the import tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="A U Thor", GIT_AUTHOR_EMAIL="author@example.org", GIT_COMMITTER_NAME="C O Mitter",
               GIT_COMMITTER_EMAIL="c@example.org", GIT_AUTHOR_DATE="2024-05-01T10:00:00Z", GIT_COMMITTER_DATE="2024-05-01T10:00:00Z",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout
