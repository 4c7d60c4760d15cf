"""`containers-storage:` follows the store podman itself uses (issue 38), on a store a used machine has:

storage.conf names no driver (Debian's does not), skopeo wrote the store first (it took `overlay`),
then podman ran once with `--storage-driver vfs` and pinned `vfs` in its database. A plain
`skopeo copy` now writes where podman does not look (skopeo: "using prior storage driver: overlay").
Each test builds that in a private store (tests/support/imagetools.private_store): the machine's own store is
never read or written.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import build_oci, drop_store, file, private_store
from support.qtools import imgquilt, write_patch

SVC = b"def port():\n    return 8000\n"
pytestmark = pytest.mark.skipif(shutil.which("podman") is None or shutil.which("skopeo") is None, reason="podman and skopeo")


def tool(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), env=env, capture_output=True, text=True)
    assert not check or p.returncode == 0, f"{' '.join(args)}: {p.stderr}"
    return p


@pytest.fixture
def used(tmp_path: Path, cli_env: dict[str, str]):
    """A queue on an OCI base, and a private store in the state of issue 38: overlay on disk, vfs in podman."""
    layout = tmp_path / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode())]], tag="v1")
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    store = tmp_path / "store"
    env = {**cli_env, **private_store(store, driver=None)}
    graph = store / "graph"
    try:
        # the first tool to touch the store is skopeo; with no driver named it takes overlay
        first = tool("skopeo", "copy", "--quiet", f"oci:{layout}:v1", "containers-storage:localhost/app:fixed", env=env, check=False)
        if first.returncode != 0 or not (graph / "overlay-images").is_dir():  # no overlay here: name it, as the skopeo did
            tool("skopeo", "copy", "--quiet", f"oci:{layout}:v1", f"containers-storage:[overlay@{graph}+{store / 'run'}]localhost/app:fixed", env=env)
        tool("podman", "--storage-driver", "vfs", "images", env=env)  # podman once with vfs: its database pins vfs
        info = json.loads(tool("podman", "info", "--format", "json", env=env).stdout)["store"]
        assert (info["graphDriverName"], info["graphRoot"]) == ("vfs", str(graph))
        imgquilt("lock", "--image", f"oci:{layout}:v1", cwd=q, env=env, check=0)
        yield q, layout, env, store
    finally:
        drop_store(store, env)


def podman_ids(env: dict[str, str], name: str) -> list[str]:
    out = tool("podman", "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", name, env=env).stdout
    return out.split()


def test_the_trap_is_real_a_plain_skopeo_copy_is_not_listed_by_podman(used) -> None:
    _, layout, env, _ = used
    tool("skopeo", "copy", "--quiet", f"oci:{layout}:v1", "containers-storage:localhost/plain:1", env=env)
    assert tool("podman", "image", "exists", "localhost/plain:1", env=env, check=False).returncode == 1
    assert podman_ids(env, "localhost/app") == []  # the base skopeo wrote first: in overlay, where podman does not look


def test_apply_writes_where_podman_looks_and_audit_reads_what_podman_shows(used) -> None:
    q, _, env, store = used
    doc = json.loads(imgquilt("--json", "apply", "--output-image", "containers-storage:localhost/app:fixed", cwd=q, env=env, check=0).out)
    image = doc["outputs"]["image"]
    assert image["store"] == {"driver": "vfs", "graph_root": str(store / "graph"), "run_root": str(store / "run"), "named_by": "podman"}
    assert podman_ids(env, "localhost/app") == ["localhost/app:fixed", image["config_digest"]]
    shown = json.loads(tool("podman", "image", "inspect", "localhost/app:fixed", env=env).stdout)[0]
    assert shown["Digest"] == image["digest"]
    # the same name in the overlay tree still holds the unpatched base: the audit must read podman's
    audit = json.loads(imgquilt("--json", "audit", "--image", "containers-storage:localhost/app:fixed", cwd=q, env=env, check=0).out)
    assert [p["state"] for p in audit["patches"]] == ["live"] and audit["record"]["agrees"]
    graph, run = store / "graph", store / "run"
    other = json.loads(imgquilt("--json", "audit", "--image", f"containers-storage:[overlay@{graph}+{run}]localhost/app:fixed",
                                cwd=q, env=env, check=5).out)
    assert [p["state"] for p in other["patches"]] == ["pending"]  # what a plain skopeo read would have read
    text = imgquilt("apply", "--output-image", "containers-storage:localhost/app:again", cwd=q, env=env, check=0).out
    assert f"Store: driver vfs, graph root {store / 'graph'}, run root {store / 'run'} (podman's store, as `podman info` shows it)" in text
    assert podman_ids(env, "localhost/app:again")[1] == image["config_digest"]


def test_an_image_only_in_the_other_driver_is_not_read(used) -> None:
    q, layout, env, _ = used
    tool("skopeo", "copy", "--quiet", f"oci:{layout}:v1", "containers-storage:localhost/elsewhere:1", env=env)  # overlay
    r = imgquilt("audit", "--image", "containers-storage:localhost/elsewhere:1", cwd=q, env=env, check=6)
    assert "skopeo could not read 'containers-storage:localhost/elsewhere:1' (driver vfs" in r.err
    assert "podman's store, as `podman info` shows it" in r.err


def test_naming_podman_s_graph_root_under_the_other_driver_is_refused_before_any_work(used) -> None:
    q, _, env, store = used
    graph, run = store / "graph", store / "run"
    ref = f"containers-storage:[overlay@{graph}+{run}]localhost/app:x"
    r = imgquilt("apply", "--output-image", ref, cwd=q, env=env, check=6)
    assert "under the overlay driver, but podman uses the vfs driver there" in r.err
    assert f"[vfs@{graph}+{run}]" in r.err and "containers-storage:localhost/app:x" in r.err
    assert tool("skopeo", "inspect", "--raw", f"containers-storage:[overlay@{graph}+{run}]localhost/app:x", env=env, check=False).returncode != 0
    # podman's own driver, named: written, and listed
    imgquilt("apply", "--output-image", f"containers-storage:[vfs@{graph}+{run}]localhost/app:x", cwd=q, env=env, check=0)
    assert podman_ids(env, "localhost/app:x")[0] == "localhost/app:x"


def _can_unshare() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and \
        subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="a private mount namespace (root and unshare -m)")
def test_a_podman_that_does_not_see_what_skopeo_wrote_is_refused_and_nothing_is_left(used, tmp_path: Path) -> None:
    """podman in another mount namespace (a toolbox's flatpak-spawn podman, a podman in its own
    namespace): `podman info` names a graph root that is another directory for skopeo."""
    q, _, env, store = used
    graph, run = store / "graph", store / "run"
    hidden = tmp_path / "hidden"
    shutil.copytree(graph, hidden, symlinks=True)  # what podman sees at the graph root, from now on
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    real = shutil.which("podman")
    (bin_ / "podman").write_text(f'#!/bin/sh\nexec unshare -m sh -c \'mount --bind "$0" "$1" && shift && exec {real} "$@"\' '
                                 f'"{hidden}" "{graph}" "$@"\n')
    (bin_ / "podman").chmod(0o755)
    env = {**env, "PATH": f"{bin_}:{env['PATH']}"}
    assert json.loads(tool("podman", "info", "--format", "json", env=env).stdout)["store"]["graphRoot"] == str(graph)
    r = imgquilt("--json", "apply", "--output-image", "containers-storage:localhost/app:unseen", cwd=q, env=env, check=6)
    assert "skopeo wrote containers-storage:localhost/app:unseen with the vfs driver at" in r.err
    assert "but podman does not list it there (podman's store now: driver vfs" in r.err
    assert "it was removed again, nothing is written" in r.err and "podman load" in r.err
    # nothing is left in the store skopeo wrote (the outer graph root), and podman lists nothing new
    listed = tool("skopeo", "inspect", "--raw", f"containers-storage:[vfs@{graph}+{run}]localhost/app:unseen", env=env, check=False)
    assert listed.returncode != 0
    assert podman_ids(env, "localhost/app:unseen") == []


def test_without_podman_apply_says_which_store_skopeo_wrote(tmp_path: Path, cli_env: dict[str, str]) -> None:
    layout = tmp_path / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode())]], tag="v1")
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    store = tmp_path / "store"
    env = {**cli_env, **private_store(store, driver="vfs")}
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    os.symlink(shutil.which("skopeo"), bin_ / "skopeo")  # skopeo, and no podman
    try:
        imgquilt("lock", "--image", f"oci:{layout}:v1", cwd=q, env=env, check=0)
        bare = {**env, "PATH": str(bin_)}
        r = imgquilt("apply", "--output-image", "containers-storage:localhost/app:fixed", cwd=q, env=bare, check=0)
        assert (f"Store: driver vfs, graph root {store / 'graph'}, run root {store / 'run'} (skopeo's default store as "
                "storage.conf names it; podman is not installed)") in r.out
        doc = json.loads(imgquilt("--json", "apply", "--output-image", "containers-storage:localhost/app:fixed", cwd=q, env=bare, check=0).out)
        assert doc["outputs"]["image"]["store"]["named_by"] == "storage.conf"
        assert podman_ids(env, "localhost/app:fixed") == ["localhost/app:fixed", doc["outputs"]["image"]["config_digest"]]
    finally:
        drop_store(store, env)


def test_a_podman_that_cannot_say_where_its_store_is_is_refused_before_any_work(tmp_path: Path, cli_env: dict[str, str]) -> None:
    layout = tmp_path / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode())]], tag="v1")
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    env = {**cli_env, **private_store(tmp_path / "store")}
    (tmp_path / "store" / "storage.conf").write_text("[storage\ndriver = \n")  # a storage.conf podman cannot read
    imgquilt("lock", "--image", f"oci:{layout}:v1", cwd=q, env=env, check=0)
    for verb in (("apply", "--overlay", str(tmp_path / "ov"), "--output-image", "containers-storage:localhost/app:x"),
                 ("audit", "--image", "containers-storage:localhost/app:x")):
        r = imgquilt(*verb, cwd=q, env=env, check=6)
        assert "podman is installed but `podman info` did not say where its store is" in r.err
        assert "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME" in r.err
    assert not (tmp_path / "ov").exists()
