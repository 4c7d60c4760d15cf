"""`apply --output-image docker://...`: only the new layer, the config and the manifest go up; the pushed
image is read back by skopeo, umoci and podman; a failure pushes no tag."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from support.imagetools import build_oci, file, layer_digests
from support.qtools import imgquilt, write_patch
from support.registry_server import seed, skopeo
from support.registry_server import registry  # noqa: F401 (fixture)

SVC = b"def port():\n    return 8000\n"
PATCHED = SVC.replace(b"8000", b"9000")


def storage_bytes(registry) -> int:
    return sum(p.stat().st_size for p in (registry.root / "docker/registry/v2/blobs").rglob("data"))


@pytest.fixture(scope="module")
def big(registry, tmp_path_factory):
    """An image of ~6 MiB (incompressible) with the target in its middle layer, in the registry as big:v1."""
    layout = tmp_path_factory.mktemp("big") / "img"
    build_oci(layout, [
        [file("usr/share/big/a.bin", os.urandom(3 << 20))],
        [file("srv/app/svc.py", SVC.decode(), mode=0o750, uid=1000, gid=1001)],
        [file("usr/share/big/b.bin", os.urandom(3 << 20))],
    ], tag="v1")
    seed(registry, f"oci:{layout}:v1", "big:v1")
    return layout


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


@pytest.fixture
def queue(tmp_path):
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, PATCHED)])
    return q


def test_push_uploads_only_the_new_layer_config_and_manifest(registry, big, queue, tmp_path, env):
    before = storage_bytes(registry)
    puts = registry.count("PUT", "/blobs/uploads/")
    r = imgquilt("apply", "--image", registry.ref("big:v1"), "--output-image", registry.ref("big:fixed"), "--json",
                 cwd=queue, env=env, check=0)
    grown = storage_bytes(registry) - before
    assert 0 < grown < 1 << 20, grown
    written = json.loads(r.out)["outputs"]["image"]
    inspected = json.loads(skopeo("inspect", "--tls-verify=false", registry.ref("big:fixed")))
    assert written["digest"] == inspected["Digest"]  # the registry's digest is the one reported
    assert inspected["Layers"][:3] == layer_digests(big, "v1") and len(inspected["Layers"]) == 4
    assert not list((queue / ".imgquilt").glob("cache/skopeo*"))  # nothing copied locally
    # no base blob went up: every base layer was found in the repository with a HEAD
    assert registry.count("PUT", "/blobs/uploads/") == puts + 2  # the new layer and the config

    # pulled back with skopeo and unpacked by umoci: the patched file, its mode and owners
    out = tmp_path / "pulled"
    skopeo("copy", "--quiet", "--src-tls-verify=false", registry.ref("big:fixed"), f"oci:{out}:fixed")
    subprocess.run(["umoci", "unpack", "--image", f"{out}:fixed", str(tmp_path / "bundle")], check=True,
                   capture_output=True)
    target = tmp_path / "bundle/rootfs/srv/app/svc.py"
    st = target.lstat()
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(PATCHED).digest()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o750, 1000, 1001)
    # and the pushed image is what imgquilt reads as live
    imgquilt("audit", "--image", registry.ref("big:fixed"), cwd=queue, env=env, check=0)


def test_push_to_another_repository_mounts_the_base_blobs(registry, big, queue, env):
    before = storage_bytes(registry)
    imgquilt("apply", "--image", registry.ref("big:v1"), "--output-image", registry.ref("team/app:fixed"),
             cwd=queue, env=env, check=0)
    assert storage_bytes(registry) - before < 1 << 20
    for d in layer_digests(big, "v1"):
        assert registry.count("POST", f"/v2/team/app/blobs/uploads/.*mount={d}") == 1


def test_push_from_a_local_layout_uploads_what_the_registry_lacks(registry, big, queue, env):
    imgquilt("apply", "--image", f"oci:{big}:v1", "--output-image", registry.ref("fromlocal:fixed"),
             cwd=queue, env=env, check=0)
    inspected = json.loads(skopeo("inspect", "--tls-verify=false", registry.ref("fromlocal:fixed")))
    assert inspected["Layers"][:3] == layer_digests(big, "v1")


def test_podman_pulls_the_pushed_image(registry, big, queue, tmp_path, env, own_store):
    imgquilt("apply", "--image", registry.ref("big:v1"), "--output-image", registry.ref("big:podman"),
             cwd=queue, env=env, check=0)
    ref = f"{registry.host}/big:podman"
    pulled = subprocess.run(["podman", "pull", "--tls-verify=false", ref], capture_output=True, text=True)
    try:
        assert pulled.returncode == 0, pulled.stderr
        inspected = json.loads(subprocess.run(["podman", "image", "inspect", ref], capture_output=True, text=True,
                                              check=True).stdout)
        assert len(inspected[0]["RootFS"]["Layers"]) == 4
    finally:
        subprocess.run(["podman", "rmi", "-f", ref], capture_output=True)
