"""The apply record (var/lib/imgquilt/applied.json) is written like a target: never through a link.

A root or an image that plants `applied.json -> /etc/passwd` (or a link on its way, a directory or a
FIFO at its place) is refused with exit 6, and nothing is written: not in the root, not into a
layer or image, not outside (canaries hashed before and after). Audit reports a path behind a
dangling or escaping link as `missing`, with the reason in `detail`.
"""
from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from support.hostile import CONF, NEW_CONF, canary_dir, refused, run, small_root, unchanged
from support.imagetools import build_oci, dir_, file, symlink
from support.qtools import write_patch

PASSWD = b"root:x:0:0:root:/root:/bin/sh\n"
RECORD = "var/lib/imgquilt/applied.json"


def _queue(tmp: Path) -> Path:
    q = tmp / "q"
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    return q


def _plant(root: Path, kind: str, outside: Path) -> None:
    rec = root / RECORD
    if kind == "var-lib-link":
        (root / "var").mkdir(parents=True)
        os.symlink("../etc", root / "var/lib")
        (root / "etc/imgquilt").mkdir()
        return
    rec.parent.mkdir(parents=True)
    if kind == "link-in-root":
        os.symlink("../../../etc/passwd", rec)
    elif kind == "link-absolute":
        os.symlink("/etc/passwd", rec)
    elif kind == "link-outside":
        os.symlink(str(outside / "notes.txt"), rec)
    elif kind == "dangling":
        os.symlink("nonexist/../../outside", rec)
    elif kind == "directory":
        rec.mkdir()
    elif kind == "fifo":
        os.mkfifo(rec)


KINDS = ["link-in-root", "link-absolute", "link-outside", "dangling", "var-lib-link", "directory", "fifo"]


@pytest.mark.parametrize("kind", KINDS)
def test_root_record_never_written_through_a_link(tmp_path: Path, cli_env: dict[str, str], kind: str) -> None:
    root = small_root(tmp_path / "root")
    (root / "etc/passwd").write_bytes(PASSWD)
    home = canary_dir(tmp_path)
    _plant(root, kind, home)
    q = _queue(tmp_path)
    with unchanged(root, home):
        r = run(q, "apply", "--root", str(root), env=cli_env)
        refused(r, 6, "applied.json")
    assert not [p for p in root.rglob("*") if "imgquilt-" in p.name]


@pytest.mark.parametrize("kind", ["link-in-root", "link-absolute", "var-lib-link"])
def test_layer_and_image_never_carry_the_record_elsewhere(tmp_path: Path, cli_env: dict[str, str], kind: str) -> None:
    members = [dir_("etc"), file("etc/app.conf", CONF), file("etc/passwd", PASSWD), dir_("var")]
    if kind == "var-lib-link":
        members += [symlink("var/lib", "../etc"), dir_("etc/imgquilt")]
    else:
        members += [dir_("var/lib"), dir_("var/lib/imgquilt"),
                    symlink(RECORD, "../../../etc/passwd" if kind == "link-in-root" else "/etc/passwd")]
    layout = build_oci(tmp_path / "img", [members])
    q = _queue(tmp_path)
    home = canary_dir(tmp_path)
    with unchanged(layout, home):
        r = run(q, "apply", "--image", f"oci:{layout}:latest", "--layer", str(tmp_path / "fix.tar"),
                "--output-image", f"oci:{tmp_path / 'out'}:patched", env=cli_env)
        refused(r, 6, "applied.json", "symlink")
    assert not (tmp_path / "fix.tar").exists() and not (tmp_path / "out").exists()


def test_layer_record_at_its_own_path_when_unplanted(tmp_path: Path, cli_env: dict[str, str]) -> None:
    layout = build_oci(tmp_path / "img", [[dir_("etc"), file("etc/app.conf", CONF)]])
    q = _queue(tmp_path)
    r = run(q, "apply", "--image", f"oci:{layout}:latest", "--layer", str(tmp_path / "fix.tar"), env=cli_env)
    assert r.code == 0, r.out + r.err
    with tarfile.open(tmp_path / "fix.tar") as t:
        rec = t.getmember(RECORD)
        assert rec.isfile() and json.loads(t.extractfile(rec).read())["patches"][0]["name"] == "0001-conf.patch"


def test_audit_reports_a_path_behind_an_escaping_link_as_missing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root = small_root(tmp_path / "root")
    os.symlink("nonexist/../../outside", root / "lnk")
    q = tmp_path / "q"
    write_patch(q, "0001-new.patch", [("lnk/new", None, b"x\n")])
    home = canary_dir(tmp_path)
    with unchanged(root, home):
        r = run(q, "audit", "--root", str(root), "--json", env=cli_env)
        assert r.code == 5, r.out + r.err
        f = json.loads(r.out)["patches"][0]["files"][0]
        assert f["state"] == "missing" and "above the root" in f["detail"], f
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "lnk/new", "above the root")
