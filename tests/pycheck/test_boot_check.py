"""Issue 26, point 1: the cross-module Python check, on real images built with umoci and proven by
running the patched modules with real CPython on the unpacked images (tests/support/boottools.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import boottools as bt
from support.imagetools import run
from support.qtools import imgquilt
from support.schemas import validator


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return bt.build_images(tmp_path_factory.mktemp("boot-images"))


@pytest.fixture
def session(tmp_path: Path, cli_env, images):
    old, new = images
    q = bt.make_queue(tmp_path / "q")
    imgquilt("lock", "--image", f"oci:{old}:latest", cwd=q, env=cli_env, check=0)
    return q, old, new, cli_env


def _unpacked(layout: Path, dest: Path) -> Path:
    run("umoci", "unpack", "--image", f"{layout}:latest", dest)
    return dest / "rootfs"


def _python(root: Path, code: str) -> subprocess.CompletedProcess:
    """Real CPython with the image's site-packages on its path (-s: no user site, -B: writes no bytecode)."""
    env = {"PYTHONPATH": str(root / bt.SITE), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-s", "-B", "-c", code], capture_output=True, text=True, env=env, cwd=root)


def test_applies_on_the_old_image_and_is_refused_on_the_new_one_with_every_place(session) -> None:
    q, old, new, env = session
    r = imgquilt("apply", "--image", f"oci:{old}:latest", cwd=q, env=env, check=0)
    assert "Verified 2 patch(es)" in r.out
    r = imgquilt("apply", "--image", f"oci:{new}:latest", cwd=q, env=env, check=3)
    for path, line, col, kind, words in bt.EXPECTED:
        assert f"{path}:{line}:{col}: {kind}: {words}" in r.err, r.err
    # each with the imported module's path and why
    assert f"({bt.PKG}/util.py: binds no 'helper' at module level)" in r.err
    assert f"({bt.PKG}/core.py: line 1: def configure(path, mode, *, strict=…))" in r.err
    # the patch named is the one that brought them; the base's own broken import (plugins.py) is not reported
    assert "0001-tinyfix.patch: the patch adds Python errors" in r.err
    assert "long_gone" not in r.err and "0002-plugin-names.patch" not in r.err
    # a module with __getattr__: "cannot tell", a note, never a refusal
    path, line, col = bt.CANNOT_TELL
    assert f"{path}:{line}:{col}: cannot tell: whether tinylib.lazy has 'lazy_anything'" in r.err
    assert "defines a module __getattr__" in r.err
    # --no-python-check turns it off; lock and check --image run it too
    imgquilt("apply", "--image", f"oci:{new}:latest", "--no-python-check", cwd=q, env=env, check=0)
    r = imgquilt("check", "--image", f"oci:{new}:latest", cwd=q, env=env, check=3)
    assert f"{bt.EXPECTED[2][0]}:4:12: TypeError" in r.err
    r = imgquilt("lock", "--image", f"oci:{new}:latest", cwd=q, env=env, check=3)
    assert "cannot import name 'helper' from 'tinylib.util'" in r.err


def test_real_cpython_fails_there_on_the_new_image_only(session, tmp_path: Path) -> None:
    q, old, new, env = session
    roots = {}
    for name, layout in (("old", old), ("new", new)):
        root = _unpacked(layout, tmp_path / f"bundle-{name}")
        imgquilt("apply", "--root", str(root), "--no-python-check", cwd=q, env=env, check=0)
        roots[name] = root
    for module in ("tinyfix.boot", "tinyfix.setup"):
        got = _python(roots["old"], f"import {module}")
        assert got.returncode == 0, got.stderr
    boot = _python(roots["new"], "import tinyfix.boot")
    assert "ImportError: cannot import name 'helper' from 'tinylib.util'" in boot.stderr
    setup = _python(roots["new"], "import tinyfix.setup")
    assert "TypeError: configure() missing 1 required positional argument: 'mode'" in setup.stderr
    # every finding the check reported, one at a time: the file up to its line, the other findings' lines left out
    r = imgquilt("--json", "apply", "--image", f"oci:{new}:latest", cwd=q, env=env, check=3)
    reported = [p for p in json.loads(r.out)["error"]["problems"]]
    for path, line, col, kind, words in bt.EXPECTED:
        assert any(f"{path}:{line}:{col}: {kind}: {words}" in p for p in reported)
        lines = (roots["new"] / path).read_text().splitlines()
        others = {ln for p, ln, *_ in bt.EXPECTED if p == path and ln != line}
        code = "\n".join(x for i, x in enumerate(lines[:line], 1) if i not in others)
        on_new, on_old = _python(roots["new"], code), _python(roots["old"], code)
        assert f"{kind}: {words}" in on_new.stderr, (path, line, on_new.stderr)
        assert on_old.returncode == 0, (path, line, on_old.stderr)
    # the line the check could not judge runs on both (lazy.py's __getattr__ answers it)
    assert _python(roots["new"], "from tinylib.lazy import lazy_anything").returncode == 0


def test_the_rebase_stops_on_the_findings_and_continue_takes_the_fix(session) -> None:
    q, old, new, env = session
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    r = imgquilt("rebase", "--image", f"oci:{new}:latest", cwd=q, env=env, check=4)
    for path, line, col, kind, words in bt.EXPECTED:
        assert f"{path}:{line}:{col}: {kind}: {words}" in r.err
    doc = json.loads(imgquilt("--json", "rebase", "--status", cwd=q, env=env, check=0).out)
    validator("rebase", "result").validate(doc)
    first = doc["patches"][0]
    assert first["state"] == "conflict"
    kinds = sorted((f["path"].rsplit("/", 1)[1], f["line"], f["kind"]) for f in first["findings"])
    assert kinds == [("boot.py", 2, "ImportError"), ("boot.py", 3, "ImportError"), ("boot.py", 4, "cannot-tell"),
                     ("setup.py", 4, "TypeError")]
    assert {c["kind"] for c in doc["conflict"]["files"]} == {"python"}
    # still broken: refused
    r = imgquilt("rebase", "--continue", cwd=q, env=env, check=4)
    assert "still conflicted" in r.err
    work = q / ".imgquilt/work" / bt.SITE / "tinyfix"
    (work / "boot.py").write_bytes(bt.BOOT.replace(b"from tinylib.util import helper", b"from tinylib.helpers import helper")
                                   .replace(b"from tinylib import LEGACY_MODE", b'LEGACY_MODE = "compat"'))
    (work / "setup.py").write_bytes(bt.SETUP.replace(b'configure("svc.toml", strict=True)', b'configure("svc.toml", "serve", strict=True)'))
    r = imgquilt("rebase", "--continue", cwd=q, env=env, check=0)
    assert "Rebased 2 patch(es)" in r.out
    imgquilt("apply", "--image", f"oci:{new}:latest", "--locked", cwd=q, env=env, check=0)


def test_a_base_with_the_same_import_is_not_reported(tmp_path: Path, cli_env, images) -> None:
    """The patched file's base already imports a name the module lacks: the finding is the base's."""
    old, _ = images
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    from support.qtools import write_patch

    patched = bt.PLUGINS.replace(b"    return []", b"    return [other]")
    write_patch(q, "0001-x.patch", [(f"{bt.PKG}/plugins.py", bt.PLUGINS, patched)])
    r = imgquilt("apply", "--image", f"oci:{old}:latest", cwd=q, env=cli_env, check=0)
    assert "long_gone" not in r.out + r.err
    # the same import added by the patch is new: reported
    worse = bt.PLUGINS.replace(b"def plugins", b"from tinylib.util import also_gone\n\n\ndef plugins")
    (q / "series").write_text("")
    write_patch(q, "0001-x.patch", [(f"{bt.PKG}/plugins.py", bt.PLUGINS, worse)])
    r = imgquilt("apply", "--image", f"oci:{old}:latest", cwd=q, env=cli_env, check=3)
    assert "cannot import name 'also_gone' from 'tinylib.util'" in r.err and "long_gone" not in r.err


def test_refresh_runs_the_check_against_the_work_trees_image(tmp_path: Path, cli_env, images) -> None:
    _, new = images
    q = tmp_path / "q"
    q.mkdir()
    path = f"{bt.SITE}/tinyboot.py"
    imgquilt("init", cwd=q, env=cli_env, check=0)
    imgquilt("new", "0001-boot.patch", cwd=q, env=cli_env, check=0)
    imgquilt("add", "--new", "--image", f"oci:{new}:latest", path, cwd=q, env=cli_env, check=0)
    work = q / ".imgquilt/work" / path
    work.write_bytes(b"from tinylib.util import helper\nfrom tinylib.lazy import lazy_x\n")
    r = imgquilt("refresh", cwd=q, env=cli_env, check=3)
    assert f"{path}:1:1: ImportError: cannot import name 'helper' from 'tinylib.util'" in r.err
    assert not (q / "patches/0001-boot.patch").read_bytes().count(b"+from tinylib.util")
    work.write_bytes(b"from tinylib.helpers import helper\nfrom tinylib.lazy import lazy_x\n")
    r = imgquilt("refresh", cwd=q, env=cli_env, check=0)
    assert f"{path}:2:1: cannot tell: whether tinylib.lazy has 'lazy_x'" in r.err
    work.write_bytes(b"from tinylib.util import helper\n")
    imgquilt("refresh", "--no-python-check", cwd=q, env=cli_env, check=0)


def test_rebase_no_python_check_carries_the_queue_as_it_is(session) -> None:
    q, old, new, env = session
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    r = imgquilt("rebase", "--image", f"oci:{new}:latest", "--no-python-check", cwd=q, env=env, check=0)
    assert "Rebased 2 patch(es)" in r.out and "ImportError" not in r.out + r.err
    # the queue lands as it was, and apply still refuses it on the new image
    imgquilt("apply", "--image", f"oci:{new}:latest", cwd=q, env=env, check=3)


def test_continue_no_python_check_takes_the_file_as_it_is(session) -> None:
    q, old, new, env = session
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    imgquilt("rebase", "--image", f"oci:{new}:latest", cwd=q, env=env, check=4)
    imgquilt("rebase", "--skip", "--no-python-check", cwd=q, env=env, check=2)  # it goes with --continue only
    r = imgquilt("rebase", "--continue", "--no-python-check", cwd=q, env=env, check=0)
    assert "Rebased 2 patch(es)" in r.out
