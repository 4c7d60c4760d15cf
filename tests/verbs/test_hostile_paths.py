"""Paths the system refuses (a name over 255 bytes, a loop of links) in image references and queue
paths: a clear error with its exit code, never exit 1; a fleet reports each image's error and audits
the others."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.hostile import refused, run
from support.imagetools import build_oci, file
from support.qtools import empty_queue, write_patch

LONG = "a" * 300


@pytest.mark.parametrize("ref", [LONG, f"oci:/tmp/{LONG}", f"rootfs:/tmp/{LONG}", f"oci-archive:/tmp/{LONG}",
                                 f"docker-archive:/tmp/{LONG}", f"tar:/tmp/{LONG}", f"oci:/tmp/{LONG}/x:tag"])
def test_a_name_too_long_in_a_reference_is_exit_6(tmp_path: Path, cli_env, ref: str) -> None:
    q = empty_queue(tmp_path / "q")
    refused(run(q, "audit", "--image", ref, env=cli_env), 6, "longer than the filesystem allows")
    refused(run(q, "apply", "--image", ref, "--layer", str(tmp_path / "x.tar"), env=cli_env), 6)


def test_a_name_too_long_for_root_is_exit_6(tmp_path: Path, cli_env) -> None:
    q = empty_queue(tmp_path / "q")
    refused(run(q, "audit", "--root", f"/tmp/{LONG}", env=cli_env), 6, "--root", "ENAMETOOLONG")


def test_the_fleet_reports_each_images_error_and_audits_the_others(tmp_path: Path, cli_env) -> None:
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", b"workers = 2\n")]])
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-conf.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    listing = tmp_path / "fleet.txt"
    os.symlink("loop-b", tmp_path / "loop-a")
    os.symlink("loop-a", tmp_path / "loop-b")
    listing.write_text(f"oci:/tmp/{LONG}:v1\noci:{layout}:latest\noci:{tmp_path}/loop-a:v1\n")
    r = run(q, "--json", "audit", "--images-from", str(listing), env=cli_env)
    assert r.code == 6, r.err
    doc = json.loads(r.out)
    images = {d["image"]["ref"]: d for d in doc["images"]}
    assert "longer than the filesystem allows" in images[f"oci:/tmp/{LONG}:v1"]["error"]["message"]
    assert images[f"oci:{layout}:latest"]["patches"][0]["state"] == "pending"  # the sound image was audited
    assert images[f"oci:{tmp_path}/loop-a:v1"]["error"]["code"] == 6
    assert doc["summary"] == {"images": 3, "as_expected": 0, "not_as_expected": 1, "unreadable": 2}


def test_queue_paths_that_loop_are_exit_6(tmp_path: Path, cli_env) -> None:
    q = empty_queue(tmp_path / "q")
    if (q / "patches").is_dir():
        os.rmdir(q / "patches")
    os.symlink("patches", q / "patches")  # a link to itself: ELOOP
    refused(run(q, "new", "a.patch", env=cli_env), 6, "patches")
    q2 = empty_queue(tmp_path / "q2")
    (q2 / "series").write_text(LONG + ".patch\n")
    for args in (("check",), ("push",), ("delete", "-r", LONG + ".patch")):
        run(q2, *args, env=cli_env)  # whatever it says, never exit 1 (the helper fails the test on it)


DEEP = b"[" * 200_000 + b"]" * 200_000


def test_json_nested_past_the_parser_is_bad_input_not_a_crash(tmp_path: Path, cli_env) -> None:
    """A record in a root, or an image's own index, nested deeper than CPython's JSON parser goes."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(b"workers = 2\n")
    (root / "var/lib/imgquilt").mkdir(parents=True)
    (root / "var/lib/imgquilt/applied.json").write_bytes(DEEP)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-conf.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    r = run(q, "--json", "audit", "--root", str(root), env=cli_env)
    assert r.code == 5 and json.loads(r.out)["record_problems"][0]["kind"] == "unreadable", r.out
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", b"workers = 2\n")]])
    (layout / "index.json").write_bytes(DEEP)
    refused(run(q, "audit", "--image", f"oci:{layout}", env=cli_env), 6, "index.json")


@pytest.mark.parametrize("exc", [PermissionError(13, "Permission denied", "/srv/q/series"),
                                 OSError(40, "Too many levels of symbolic links", "/srv/q/patches"),
                                 OSError(36, "File name too long", "/tmp/" + LONG)])
def test_a_path_error_anywhere_is_exit_6(exc: OSError) -> None:
    """The CLI's last line: a path the system refuses, wherever no nearer handler named it, is exit 6."""
    from imgquilt.cli.main import _guarded

    def fail() -> None:
        raise exc

    assert _guarded(fail) == 6
