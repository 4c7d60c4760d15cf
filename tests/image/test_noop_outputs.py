"""No output path writes a layer that changes nothing (outputs.changes_image decides for all of them).

The demo queue applied onto an image that already holds its result: `--layer` and `--overlay` write
nothing, `--root` replaces nothing, and `--output-image` (every transport, a registry push, and
`--platform all`) writes the base as it is: the same layers, the same config, and for an OCI base the
same manifest digest. skopeo, umoci and podman read what was written."""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support.imagetools import make_index, run, skopeo_copy
from support.qtools import copy_demo_queue, imgquilt, tree_hash
from support.registry_server import registry  # noqa: F401 (fixture)
from support.registry_server import skopeo


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    """(queue, oci:DIR:v1 holding the demo queue's result, the JSON of writing it)."""
    tmp = tmp_path_factory.mktemp("noop")
    q = copy_demo_queue(tmp / "q")
    r = imgquilt("--json", "apply", "--output-image", f"oci:{tmp}/patched:v1", cwd=q, check=0)
    return q, f"oci:{tmp}/patched:v1", json.loads(r.out), tmp


def apply_json(q: Path, *args: str) -> dict:
    return json.loads(imgquilt("--json", "apply", *args, cwd=q, check=0).out)


def inspect(ref: str) -> dict:
    return json.loads(run("skopeo", "inspect", ref))


def test_layer_and_overlay_are_not_written(patched, tmp_path: Path) -> None:
    q, ref, _, _ = patched
    doc = apply_json(q, "--image", ref, "--layer", str(tmp_path / "x.tar.gz"), "--overlay", str(tmp_path / "ov"))
    assert doc["changes"] is False and doc["outputs"] == {}
    assert not (tmp_path / "x.tar.gz").exists() and not (tmp_path / "ov").exists()
    r = imgquilt("apply", "--image", ref, "--layer", str(tmp_path / "x.tar.gz"), cwd=q, check=0)
    assert "no layer written" in r.out and "Wrote" not in r.out


def test_a_real_change_is_still_written(patched, tmp_path: Path) -> None:
    q, _, _, _ = patched
    doc = apply_json(q, "--layer", str(tmp_path / "x.tar.gz"))
    assert doc["changes"] is True and (tmp_path / "x.tar.gz").is_file()


@pytest.mark.parametrize("with_image", [False, True])
def test_root_is_left_alone(patched, tmp_path: Path, with_image: bool) -> None:
    q, ref, _, _ = patched
    root = tmp_path / "root"
    subprocess.run(["python3", "examples/build_demo.py", "--rootfs", str(root)], cwd=q, check=True, capture_output=True)
    imgquilt("apply", "--root", str(root), cwd=q, check=0)
    before = tree_hash(root)
    args = ["--image", ref] if with_image else []
    doc = apply_json(q, *args, "--root", str(root))
    assert doc["changes"] is False and doc["outputs"]["root"]["changed"] == []
    assert tree_hash(root) == before


@pytest.mark.parametrize("transport", ["oci", "oci-archive", "docker-archive"])
def test_output_image_is_the_base_as_it_is(patched, tmp_path: Path, transport: str, own_store) -> None:
    q, ref, first, _ = patched
    base = inspect(ref)
    name = f"imgquilt-noop-{uuid.uuid4().hex[:8]}"
    path = tmp_path / ("out" if transport == "oci" else "out.tar")
    out = f"{transport}:{path}:" + (f"localhost/{name}:v1" if transport == "docker-archive" else "v1")
    doc = apply_json(q, "--image", ref, "--output-image", out)
    image = doc["outputs"]["image"]
    assert image["unchanged"] is True and image["layer_digest"] is None and image["diff_id"] is None
    read = f"{transport}:{path}" + ("" if transport == "docker-archive" else ":v1")
    info = inspect(read)
    assert len(info["Layers"]) == len(base["Layers"]) == 4
    assert image["config_digest"] == first["outputs"]["image"]["config_digest"]  # the same image ID
    if transport == "docker-archive":
        p = run("podman", "load", "-q", "-i", str(path))
        subprocess.run(["podman", "rmi", "-f", f"localhost/{name}:v1"], capture_output=True)
        assert "Loaded image" in p
    else:
        assert info["Digest"] == base["Digest"] == image["digest"]  # an OCI base manifest, byte for byte
        run("skopeo", "copy", "-q", read, f"oci:{tmp_path / 'copy'}:v1")
        run("umoci", "unpack", "--rootless", "--image", f"{tmp_path / 'copy'}:v1", str(tmp_path / "bundle"))


def test_output_image_into_an_existing_layout_and_a_registry(patched, registry, tmp_path: Path) -> None:
    q, ref, first, tmp = patched
    layout = tmp_path / "layout"
    shutil.copytree(ref[len("oci:"):].rsplit(":", 1)[0], layout)
    doc = apply_json(q, "--image", ref, "--output-image", f"oci:{layout}:again")
    assert doc["outputs"]["image"]["digest"] == first["outputs"]["image"]["digest"]
    assert inspect(f"oci:{layout}:again")["Digest"] == inspect(f"oci:{layout}:v1")["Digest"]
    dest = registry.ref("noop:again")
    before = len(registry.requests())
    doc = apply_json(q, "--image", ref, "--output-image", dest)
    assert doc["outputs"]["image"]["unchanged"] is True
    pushed = json.loads(skopeo("inspect", "--tls-verify=false", dest))
    assert pushed["Digest"] == first["outputs"]["image"]["digest"] and len(pushed["Layers"]) == 4
    uploaded = {x.path.split("digest=", 1)[1].split("&")[0] for x in registry.requests()[before:]
                if x.method == "PUT" and "/blobs/uploads/" in x.path and "digest=" in x.path}
    assert uploaded <= set(pushed["Layers"]) | {first["outputs"]["image"]["config_digest"]}  # no new layer


def test_platform_all_writes_each_platform_as_it_is(patched, tmp_path: Path) -> None:
    q, ref, _, tmp = patched
    layout = tmp_path / "multi"
    skopeo_copy(ref, f"oci:{layout}:amd")
    skopeo_copy(ref, f"oci:{layout}:arm")
    run("umoci", "config", "--image", f"{layout}:arm", "--architecture", "arm64")
    make_index(layout, {"linux/amd64": "amd", "linux/arm64": "arm"}, "multi", keep_members=True)
    doc = apply_json(q, "--image", f"oci:{layout}:multi", "--platform", "all", "--output-image", f"oci:{tmp_path / 'out'}:all")
    members = doc["outputs"]["image"]["platforms"]
    assert [m["layer_digest"] for m in members] == [None, None]
    for m, tag in zip(members, ("amd", "arm")):
        assert m["digest"] == inspect(f"oci:{layout}:{tag}")["Digest"]
