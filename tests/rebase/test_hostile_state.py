"""Hostile or broken state: a conflicted work file replaced by a link, directory or FIFO before
`rebase --continue`, garbage rebase journals, damaged output layouts. Exit 6 with a message, no hang,
nothing written outside (canaries hashed before and after), and `rebase --abort` still restores."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support.hostile import CONF, NEW_CONF, canary_dir, refused, run, unchanged
from support.imagetools import build_oci, dir_, file
from support.qtools import imgquilt, write_patch
from support.rebase_cli import W311
from support.rebase_stopped import stopped  # noqa: F401 (fixtures)


def _restored(q: Path, before: dict[Path, bytes]) -> None:
    for p, data in before.items():
        assert p.read_bytes() == data, p


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_continue_with_a_hostile_work_file(stopped, kind: str) -> None:
    q, before, home, env = stopped
    work = q / ".imgquilt/work" / W311
    work.unlink()
    if kind == "symlink":
        os.symlink(home / "notes.txt", work)
    elif kind == "directory":
        work.mkdir()
    else:
        os.mkfifo(work)
    with unchanged(home):
        refused(imgquilt("rebase", "--continue", cwd=q, env=env), 6, W311.split("/")[-1])
        r = imgquilt("rebase", "--abort", cwd=q, env=env)
        if kind == "directory":  # imgquilt removes only files it put there: the user clears the directory
            refused(r, 6, "is a directory")
            work.rmdir()
            r = imgquilt("rebase", "--abort", cwd=q, env=env)
        assert r.code == 0, r.out + r.err
    _restored(q, before)
    assert not (q / ".imgquilt/rebase").exists()


@pytest.mark.parametrize("garbage", [b"{not json", b"[]", b"5", b'{"version": 1}', b'{"version": 1, "new_ref": 5}', b"\xff\xfe"])
def test_garbage_rebase_journal(stopped, garbage: bytes) -> None:
    q, before, home, env = stopped
    (q / ".imgquilt/rebase/state.json").write_bytes(garbage)
    with unchanged(home):
        refused(imgquilt("rebase", "--continue", cwd=q, env=env), 6, "state.json")
        r = imgquilt("rebase", "--abort", cwd=q, env=env)
        assert r.code == 0, r.out + r.err
    _restored(q, before)
    assert not (q / ".imgquilt/rebase").exists()


def test_garbage_backup_manifest(stopped) -> None:
    q, before, home, env = stopped
    (q / ".imgquilt/rebase/backup/manifest.json").write_bytes(json.dumps({"series": 420, "lock": None, "patches": {"../../../x": 420}}).encode())
    with unchanged(home, q / "patches"):
        refused(imgquilt("rebase", "--abort", cwd=q, env=env), 6, "manifest")
    assert not (q.parent / "x").exists()


# --- output layouts -------------------------------------------------------------------------------
@pytest.fixture
def layouts(tmp_path: Path, cli_env):
    src = build_oci(tmp_path / "img", [[dir_("etc"), file("etc/app.conf", CONF)]])
    q = tmp_path / "q"
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    out = tmp_path / "out"
    shutil.copytree(src, out)
    return q, src, out, canary_dir(tmp_path), cli_env


INDEX_GARBAGE = [b'{"manifests": 5}', b'{"manifests": [5]}', b"[]", b"{", b'{"manifests": [{"annotations": 3}]}']


@pytest.mark.parametrize("garbage", INDEX_GARBAGE)
def test_existing_layout_with_a_damaged_index(layouts, garbage: bytes) -> None:
    q, src, out, home, env = layouts
    (out / "index.json").write_bytes(garbage)
    with unchanged(out, home):
        refused(run(q, "apply", "--image", f"oci:{src}:latest", "--output-image", f"oci:{out}:patched", env=env), 6, "index.json")


@pytest.mark.parametrize("where", ["blobs", "blobs/sha256", "index.json"])
def test_existing_layout_with_a_linked_part(layouts, where: str) -> None:
    q, src, out, home, env = layouts
    part = out / where
    target = home / "linked"
    shutil.move(part, target)
    os.symlink(target, part)
    with unchanged(out, home):
        refused(run(q, "apply", "--image", f"oci:{src}:latest", "--output-image", f"oci:{out}:patched", env=env), 6, where, "symlink")


def test_existing_layout_still_takes_a_new_tag(layouts) -> None:
    q, src, out, home, env = layouts
    r = run(q, "apply", "--image", f"oci:{src}:latest", "--output-image", f"oci:{out}:patched", env=env)
    assert r.code == 0, r.out + r.err
    tags = [m["annotations"]["org.opencontainers.image.ref.name"] for m in json.loads((out / "index.json").read_bytes())["manifests"]]
    assert sorted(tags) == ["latest", "patched"]
