"""A rebase stopped on a conflict (a fixture), for the hostile state tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.hostile import canary_dir
from support.qtools import imgquilt
from support.rebase_queue import DEBUG_LINE, WEIGHTS_V1, WEIGHTS_V2, make_patches, make_root


@pytest.fixture
def stopped(tmp_path: Path, cli_env):
    """A rebase stopped on a conflict in W311, and a copy of the queue files as they were."""
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    q = tmp_path / "queue"
    make_patches(q)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    before = {p: p.read_bytes() for p in [q / "series", q / "targets.lock", *(q / "patches").iterdir()]}
    new = make_root(tmp_path / "new", WEIGHTS_V2.replace(DEBUG_LINE, b'logger.debug("upstream")'))
    imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=cli_env, check=4)
    return q, before, canary_dir(tmp_path), cli_env
