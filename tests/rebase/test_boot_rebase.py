"""Issue 36: `rebase --boot`. After each step the patch's modules are imported with the new image's own
CPython (this machine's Debian python3.11 in a root, tests/support/pyroot.py): the base is the new image with
the rebased queue so far, the patched tree that plus this patch. A module that fails only with the
patch stops the rebase like a Python finding (a conflict of kind `boot`, the result in the work tree),
then `--continue` (probed again) or `--skip`.

The new image changes cyc/b.py to import cyc.a at its top: 0002, which makes cyc/a.py import cyc.b,
carries cleanly and passes the static checks, but closes an import cycle on the new image only.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support import pyroot
from support.qtools import imgquilt, tree_hash, write_patch
from support.schemas import validator

pytestmark = pytest.mark.skipif(not pyroot.available(), reason="needs Debian's /usr/bin/python3.11")

DIST = pyroot.DIST
OLD = {
    f"{DIST}/cyc/__init__.py": b"",
    f"{DIST}/cyc/a.py": b"A = 1\n",
    f"{DIST}/cyc/b.py": b"B = 2\n",
    f"{DIST}/svc/__init__.py": b"",
    f"{DIST}/svc/util.py": b"def one():\n    return 1\n",
}
NEW = {**OLD, f"{DIST}/cyc/b.py": b"from cyc.a import A\n\nB = A + 1\n"}
UTIL = b"def one():\n    return 1\n\n\ndef two():\n    return one() + 1\n"
A_CYCLE = b"from cyc.b import B\n\nA = 1\nC = B * 2\n"
A_FIXED = b"A = 1\n\n\ndef c():\n    from cyc.b import B\n    return B * 2\n"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = pyroot.debian_root(tmp_path_factory.mktemp("debian") / "old")
    new = base.with_name("new")
    for root, files in ((base, OLD), (new, NEW)):
        if root is new:
            shutil.copytree(base, new, symlinks=True)
        for path, data in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
    return base, new


def _queue(q: Path, old: Path, cli_env) -> Path:
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-util.patch", [(f"{DIST}/svc/util.py", OLD[f"{DIST}/svc/util.py"], UTIL)])
    write_patch(q, "0002-cycle.patch", [(f"{DIST}/cyc/a.py", OLD[f"{DIST}/cyc/a.py"], A_CYCLE)])
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    return q


def test_rebase_boot_stops_on_a_module_that_fails_only_on_the_new_image(roots, tmp_path: Path, cli_env) -> None:
    old, new = roots
    q = _queue(tmp_path / "q", old, cli_env)
    before = tree_hash(new)
    # the old image boots both; without --boot the rebase carries both (the static checks see nothing)
    imgquilt("boot", "--root", str(old), cwd=q, env=cli_env, check=0)
    plain = shutil.copytree(q, tmp_path / "plain")
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=plain, env=cli_env, check=0)
    # with --boot: 0001 boots and is carried; 0002 closes a cycle on the new image and stops the rebase
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--boot", cwd=q, env=cli_env, check=4)
    assert "Rebase stopped: 0002-cycle.patch conflicts" in r.err
    assert ("carried, but it fails to boot on the new image: cyc.a: "
            f"{DIST}/cyc/a.py:1: ImportError: cannot import name 'A' from partially initialized module 'cyc.a'") in r.err
    work = q / ".imgquilt/work" / DIST / "cyc/a.py"
    assert work.read_bytes() == A_CYCLE
    doc = json.loads(imgquilt("--json", "rebase", "--status", cwd=q, env=cli_env, check=0).out)
    validator("rebase", "result").validate(doc)
    assert doc["conflict"]["files"][0]["kind"] == "boot"
    one, two = doc["patches"]
    assert [b["verdict"] for b in one["files"][0]["boot"]] == ["boots"]
    probes = {b["module"]: b for b in two["files"][0]["boot"]}
    assert probes["cyc.a"]["verdict"] == "fails" and probes["cyc.a"]["base"]["state"] == "ok"
    assert probes["cyc.a"]["patched"]["failure"]["line"] == 1
    # cyc.b imports the patched module: probed too, its failure the same patch's
    assert probes["cyc.b"]["importer_of"] == "cyc.a" and probes["cyc.b"]["verdict"] == "fails"
    # a resolution that still fails is refused; one that boots goes on to the end
    r = imgquilt("rebase", "--continue", cwd=q, env=cli_env, check=4)
    assert "0002-cycle.patch still fails to boot" in r.err
    work.write_bytes(A_FIXED)
    imgquilt("rebase", "--continue", cwd=q, env=cli_env, check=0)
    assert "+def c():\n+    from cyc.b import B\n" in (q / "patches/0002-cycle.patch").read_text()
    imgquilt("boot", "--root", str(new), cwd=q, env=cli_env, check=0)
    assert tree_hash(new) == before


def test_rebase_boot_skip_drops_the_patch_that_fails(roots, tmp_path: Path, cli_env) -> None:
    old, new = roots
    q = _queue(tmp_path / "q", old, cli_env)
    imgquilt("rebase", "--image", f"rootfs:{new}", "--boot", cwd=q, env=cli_env, check=4)
    imgquilt("rebase", "--skip", cwd=q, env=cli_env, check=0)
    assert (q / "series").read_text() == "0001-util.patch\n"


def test_rebase_boot_without_a_sandbox_is_exit_6_and_starts_nothing(roots, tmp_path: Path, cli_env) -> None:
    old, new = roots
    q = _queue(tmp_path / "q", old, cli_env)
    before = {p.name: p.read_bytes() for p in (q / "patches").iterdir()}, (q / "series").read_bytes()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (bin_dir / "unshare").chmod(0o755)
    env = {**cli_env, "PATH": f"{bin_dir}:{cli_env['PATH']}", "IMGQUILT_SANDBOX": "unshare"}
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--boot", cwd=q, env=env, check=6)
    assert "No sandbox to run the image's Python in: tried unshare(1)" in r.err and "No rebase was started" in r.err
    assert ({p.name: p.read_bytes() for p in (q / "patches").iterdir()}, (q / "series").read_bytes()) == before
    assert not (q / ".imgquilt/rebase").exists()


def test_rebase_boot_onto_an_image_unpacks_it_once_and_stops_the_same(roots, tmp_path: Path, cli_env) -> None:
    from support.imagetools import build_oci

    old, new = roots
    layout = build_oci(tmp_path / "new-image", [new])
    q = _queue(tmp_path / "q", old, cli_env)
    r = imgquilt("rebase", "--image", f"oci:{layout}:latest", "--from", f"rootfs:{old}", "--boot", cwd=q, env=cli_env,
                 check=4)
    assert ("carried, but it fails to boot on the new image: cyc.a: "
            f"{DIST}/cyc/a.py:1: ImportError: cannot import name 'A' from partially initialized module 'cyc.a'") in r.err
    trees = list((Path(cli_env["IMGQUILT_CACHE_DIR"]) / "rootfs").glob("*.tree"))
    assert len(trees) == 1  # unpacked once for both steps
    imgquilt("rebase", "--skip", cwd=q, env=cli_env, check=0)
