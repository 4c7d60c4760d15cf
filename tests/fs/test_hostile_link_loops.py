"""Links that go round (issue 35, point 6): symlink loops in an image or a root (a link to itself, two
links to each other, a directory link into itself, absolute links), and a symlinked TMPDIR or
IMGQUILT_SPOOL_DIR (to a directory, dangling, a loop). No exit 1, no hang, a loop named as one,
nothing written outside the root or the queue, and the same layer bytes as without the links.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from support.hostile import CONF, canary_dir, unchanged
from support.imagetools import build_oci, file, symlink
from support.qtools import empty_queue, imgquilt, tree_hash, write_patch

LOOPS = {"self": [("etc/a", "a")], "pair": [("etc/a", "b"), ("etc/b", "a")], "into-itself": [("etc/a", "../etc/a/x")],
         "absolute-pair": [("etc/a", "/etc/b"), ("etc/b", "/etc/a")]}


@pytest.mark.parametrize("target", ["etc/a", "etc/a/x/y"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_symlink_loop_in_an_image_or_a_root_is_named_and_nothing_is_written(tmp_path: Path, cli_env, loop: str, target: str) -> None:
    links = LOOPS[loop]
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", CONF), *[symlink(p, to) for p, to in links]]])
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(CONF)
    for p, to in links:
        os.symlink(to, root / p)
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-new.patch", [(target, None, b"new\n")])
    home = canary_dir(tmp_path)
    with unchanged(layout, root, home):
        for args, code in ((["lock", "--image", f"oci:{layout}:latest"], 6), (["lock", "--image", f"rootfs:{root}"], 6),
                           (["apply", "--image", f"oci:{layout}:latest", "--layer", str(tmp_path / "l.tar")], 6),
                           (["apply", "--root", str(root), "--image", f"rootfs:{root}"], 6),
                           (["audit", "--image", f"oci:{layout}:latest"], 5), (["audit", "--root", str(root)], 5)):
            r = imgquilt(*args, cwd=q, env=cli_env)
            assert r.code == code, (args, r.out, r.err)
            if code == 6:
                assert "Too many levels of symbolic links" in r.err and "Traceback" not in r.err, r.err
    assert not (tmp_path / "l.tar").exists() and not (q / "targets.lock").exists()


@pytest.fixture
def big_queue(tmp_path: Path, cli_env) -> tuple[Path, dict[str, str]]:
    """A queue whose one target is spooled (IMGQUILT_SPOOL_AT=1000), pinned to a small root."""
    big = b"".join(b"line %d\n" % i for i in range(5000))
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/big.txt").write_bytes(big)
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-big.patch", [("etc/big.txt", big, big.replace(b"line 7\n", b"line seven\n"))])
    env = {**cli_env, "IMGQUILT_SPOOL_AT": "1000"}
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=env, check=0)
    return q, env


@pytest.mark.parametrize("var", ["IMGQUILT_SPOOL_DIR", "TMPDIR"])
@pytest.mark.parametrize("link", ["to-a-directory", "dangling", "loop"])
def test_a_symlinked_spool_directory_or_tmpdir_works_or_gives_way(big_queue, tmp_path: Path, var: str, link: str) -> None:
    q, env = big_queue
    imgquilt("apply", "--layer", str(tmp_path / "plain.tar"), cwd=q, env=env, check=0)
    real = tmp_path / "real"
    real.mkdir()
    spot = tmp_path / "spool"
    os.symlink({"to-a-directory": str(real), "dangling": str(tmp_path / "nowhere"), "loop": str(spot)}[link], spot)
    before = tree_hash(tmp_path / "root")
    r = imgquilt("apply", "--layer", str(tmp_path / "linked.tar"), cwd=q, env={**env, var: str(spot)}, check=0)
    assert "Wrote layer" in r.out
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(tmp_path / "linked.tar") == digest(tmp_path / "plain.tar")
    assert tree_hash(tmp_path / "root") == before and not any(real.iterdir())  # spooled files have no name
    assert not (tmp_path / "nowhere").exists()
