"""`imgquilt boot`'s limits as a user types them: a --timeout, --memory or --importers no probe can be
given is a usage error (exit 2) naming the option, before any root is read or any sandbox made;
never an internal error (exit 1), never a probe that crashes on it and is reported `cannot tell`."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.qtools import CONF, imgquilt, svc_root, tree_hash, write_patch


@pytest.fixture
def world(tmp_path: Path, cli_env):
    root = svc_root(tmp_path / "rootfs")
    q = tmp_path / "queue"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    write_patch(q, "0001-conf.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"4"))])
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    return q, root, cli_env


@pytest.mark.parametrize(
    "args, words",
    [
        (["--timeout", "inf"], "--timeout inf"),  # was exit 1: OverflowError (math.ceil of infinity)
        (["--timeout", "1e9"], "--timeout 1e+09"),  # was exit 1: poll()'s "timeout is too large"
        (["--timeout", "nan"], "--timeout nan"),
        (["--timeout", "0"], "--timeout 0"),
        (["--importers", "-1"], "--importers -1"),  # was taken as 0
        (["--memory", "99999999999999999999G"], "--memory"),  # was a traceback of the sandbox child in each probe
        (["--memory", "0"], "--memory"),  # was taken as no limit
    ],
)
def test_a_limit_no_probe_can_be_given_is_a_usage_error(world, args: list[str], words: str) -> None:
    q, root, env = world
    before = tree_hash(q), tree_hash(root)
    r = imgquilt("boot", *args, cwd=q, env=env, check=2)
    assert words in r.err and "Traceback" not in r.err + r.out and "internal error" not in r.err
    assert (tree_hash(q), tree_hash(root)) == before


def test_the_largest_timeout_is_a_week(world) -> None:
    q, _, env = world
    r = imgquilt("boot", "--timeout", "604801", cwd=q, env=env, check=2)
    assert "at most 604800 (a week)" in r.err
    r = imgquilt("boot", "--timeout", "604800", "--importers", "0", "--memory", "8G", cwd=q, env=env, check=0)
    assert "cannot tell" in r.out and "0001-conf.patch" in r.out  # it changes no Python module
