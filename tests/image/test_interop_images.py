"""Images imgquilt writes are images every tool accepts: skopeo, umoci and podman, end to end.

A user session: the demo queue (the top-level series and patches) applied with the real CLI to the
demo image, to an image umoci built and to skopeo's docker-archive of it, written as a layer and
as oci:, oci-archive: and docker-archive: images; then inspected, copied, unpacked and loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support.qtools import copy_demo_queue, imgquilt, tree_hash

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo-image"
sys.path.insert(0, str(REPO / "examples"))
import build_demo  # noqa: E402

needs = lambda tool: pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool} not installed")  # noqa: E731
LABEL_SERIES = "org.imgquilt.series.sha256"
LABEL_PATCHES = "org.imgquilt.patches"


def run(*cmd: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    """A copy of the top-level demo queue (without its lock: the images here are new)."""
    q = tmp_path / "queue"
    q.mkdir()
    shutil.copy(REPO / "series", q / "series")
    shutil.copytree(REPO / "patches", q / "patches")
    return q


@pytest.fixture
def demo(tmp_path: Path) -> str:
    shutil.copytree(DEMO, tmp_path / "demo")
    return f"oci:{tmp_path / 'demo'}:latest"


@pytest.fixture(scope="module")
def umoci_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo filesystem as one layer, built by umoci (not by us)."""
    work = tmp_path_factory.mktemp("umoci")
    layout = work / "layout"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:latest")
    run("umoci", "unpack", "--image", f"{layout}:latest", str(work / "bundle"))
    rootfs = work / "bundle" / "rootfs"
    build_demo.materialize_rootfs(work / "fs")
    for p in (work / "fs").iterdir():
        shutil.move(str(p), rootfs / p.name)
    run("umoci", "repack", "--image", f"{layout}:latest", str(work / "bundle"))
    return layout


def apply_json(queue: Path, *args: str) -> dict:
    r = imgquilt("--json", "apply", *args, cwd=queue, check=0)
    return json.loads(r.out)


def unpack(image_ref: str, tmp: Path) -> Path:
    """umoci unpack (archives are first converted to an oci: layout with skopeo, as umoci needs)."""
    name = uuid.uuid4().hex[:8]
    if image_ref.startswith("oci:"):
        layout_ref = image_ref[len("oci:"):]
    else:
        run("skopeo", "copy", "-q", image_ref, f"oci:{tmp / ('layout-' + name)}:x")
        layout_ref = f"{tmp / ('layout-' + name)}:x"
    bundle = tmp / f"bundle-{name}"
    run("umoci", "unpack", "--image", layout_ref, str(bundle))
    return bundle / "rootfs"


def assert_files_applied(rootfs: Path, files: list[dict]) -> None:
    """Every file the apply reported is in the unpacked rootfs with its sha256, mode, uid, gid."""
    for f in files:
        p = rootfs / f["resolved"]
        if f["final_sha256"] == "absent":
            assert not p.exists(), f["resolved"]
            continue
        assert not p.is_symlink(), f["resolved"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == f["final_sha256"], f["resolved"]
        st = p.lstat()
        assert f"{st.st_mode & 0o7777:04o}" == f["mode"], f["resolved"]
        assert (st.st_uid, st.st_gid) == (f["uid"], f["gid"]), f["resolved"]


def podman_labels(archive: Path) -> dict:
    """podman load the archive, read the labels, remove the image again."""
    p = run("podman", "load", "-q", "-i", str(archive))
    loaded = [line.split(":", 1)[1].strip() for line in p.stdout.splitlines() if line.startswith("Loaded image")]
    assert loaded, p.stdout
    try:
        out = run("podman", "image", "inspect", loaded[0]).stdout
        return json.loads(out)[0]["Labels"]
    finally:
        for name in loaded:
            subprocess.run(["podman", "rmi", "-f", name], capture_output=True)


# --- the demo image itself --------------------------------------------------------------------
@needs("umoci")
def test_the_demo_image_unpacks_to_the_demo_rootfs(tmp_path: Path) -> None:
    rootfs = unpack(f"oci:{DEMO}:latest", tmp_path)
    build_demo.materialize_rootfs(tmp_path / "mine")
    assert tree_hash(rootfs) == tree_hash(tmp_path / "mine")
    assert os.readlink(rootfs / "bin") == "usr/bin"
    assert os.readlink(rootfs / "etc/alternatives/demo-tool") == "/usr/lib/demo-tool/tool.py"
    assert not (rootfs / build_demo.SITE / "demosvc/legacy.py").exists()  # whited out
    assert sorted(p.name for p in (rootfs / "etc/demosvc/conf.d").iterdir()) == ["00-defaults.conf", "20-workers.conf"]  # opaque
    assert (rootfs / "usr/local/bin/demosvc").stat().st_ino == (rootfs / "usr/local/bin/demosvc-serve").stat().st_ino
    if os.geteuid() == 0:
        assert (rootfs / "home/app/config.toml").stat().st_uid == 1000


def test_the_demo_image_is_rebuilt_byte_for_byte(tmp_path: Path) -> None:
    build_demo.build_image(tmp_path / "again")
    assert tree_hash(tmp_path / "again") == tree_hash(DEMO)


def test_the_top_level_lock_pins_the_demo_image_and_is_fresh(tmp_path: Path) -> None:
    q = copy_demo_queue(tmp_path / "queue")
    imgquilt("check", cwd=q, check=0)
    r = imgquilt("--json", "apply", "--locked", "--image", f"oci:{DEMO}:latest", cwd=q, check=0)
    assert json.loads(r.out)["pinned"] is True


def test_the_queue_files_are_what_the_generator_writes() -> None:
    import make_demo_queue

    series, patches = make_demo_queue.render_queue()
    assert (REPO / "series").read_bytes() == series
    for name, data in patches.items():
        assert (REPO / "patches" / name).read_bytes() == data


# --- outputs, by transport --------------------------------------------------------------------
@needs("skopeo")
@needs("umoci")
@needs("podman")
@pytest.mark.parametrize("transport", ["oci", "oci-archive", "docker-archive"])
def test_output_image_is_accepted_by_skopeo_umoci_and_podman(tmp_path: Path, queue: Path, demo: str, transport: str, own_store) -> None:
    name = f"imgquilt-test-{uuid.uuid4().hex[:8]}"
    path = tmp_path / ("out" if transport == "oci" else "out.tar")
    out_ref = f"{transport}:{path}:" + (f"localhost/{name}:patched" if transport == "docker-archive" else "patched")
    doc = apply_json(queue, "--image", demo, "--output-image", out_ref)
    written = doc["outputs"]["image"]
    assert written["ref"] == out_ref

    read_ref = f"{transport}:{path}" + ("" if transport == "docker-archive" else ":patched")
    info = json.loads(run("skopeo", "inspect", read_ref).stdout)
    assert info["Labels"][LABEL_SERIES] == doc["series_sha256"]
    assert info["Labels"][LABEL_PATCHES] == ",".join(doc["patches"])
    assert len(info["Layers"]) == 4
    if transport != "docker-archive":
        assert info["Digest"] == written["digest"]

    run("skopeo", "copy", "-q", read_ref, f"oci:{tmp_path / 'copied'}:t")
    assert_files_applied(unpack(f"oci:{tmp_path / 'copied'}:t", tmp_path), doc["files"])
    assert_files_applied(unpack(read_ref, tmp_path), doc["files"])

    if transport != "oci":
        labels = podman_labels(path)
        assert labels[LABEL_SERIES] == doc["series_sha256"]
        assert labels[LABEL_PATCHES] == ",".join(doc["patches"])


@needs("skopeo")
@needs("umoci")
@pytest.mark.parametrize("source", ["umoci-oci", "skopeo-docker-archive", "skopeo-oci-archive"])
def test_bases_built_by_umoci_and_converted_by_skopeo(tmp_path: Path, queue: Path, umoci_image: Path, source: str) -> None:
    if source == "umoci-oci":
        base = f"oci:{umoci_image}:latest"
    elif source == "skopeo-docker-archive":
        run("skopeo", "copy", "-q", f"oci:{umoci_image}:latest", f"docker-archive:{tmp_path / 'base.tar'}:imgquilt-test/base:1")
        base = f"docker-archive:{tmp_path / 'base.tar'}"
    else:
        run("skopeo", "copy", "-q", f"oci:{umoci_image}:latest", f"oci-archive:{tmp_path / 'base.tar'}:1")
        base = f"oci-archive:{tmp_path / 'base.tar'}"
    doc = apply_json(queue, "--image", base, "--output-image", f"oci:{tmp_path / 'out'}:patched", "--layer", str(tmp_path / "fix.tar.gz"))
    info = json.loads(run("skopeo", "inspect", f"oci:{tmp_path / 'out'}:patched").stdout)
    assert len(info["Layers"]) == 2
    assert info["Layers"][1] == doc["outputs"]["layer"]["digest"]
    assert_files_applied(unpack(f"oci:{tmp_path / 'out'}:patched", tmp_path), doc["files"])


# --- reproducibility and failure --------------------------------------------------------------
def test_two_applies_give_identical_layers_and_the_same_image_digest(tmp_path: Path, queue: Path, demo: str) -> None:
    digests = []
    for run_no in ("1", "2"):
        doc = apply_json(queue, "--image", demo, "--layer", str(tmp_path / f"fix{run_no}.tar.zst"),
                         "--output-image", f"oci-archive:{tmp_path / f'img{run_no}.tar'}:patched")
        digests.append(doc["outputs"]["image"]["digest"])
    assert (tmp_path / "fix1.tar.zst").read_bytes() == (tmp_path / "fix2.tar.zst").read_bytes()
    assert (tmp_path / "img1.tar").read_bytes() == (tmp_path / "img2.tar").read_bytes()
    assert digests[0] == digests[1]


def outputs_of(tmp_path: Path) -> set[str]:
    """Every path under tmp_path but imgquilt's own cache in the queue."""
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".imgquilt" not in p.parts}


def test_an_unwritable_output_is_a_usage_error_and_leaves_no_file(tmp_path: Path, queue: Path, demo: str) -> None:
    before = outputs_of(tmp_path)
    r = imgquilt("apply", "--image", demo, "--output-image", f"oci-archive:{tmp_path / 'no' / 'such' / 'x.tar'}", cwd=queue)
    assert r.code == 2, r.out + r.err
    assert "does not exist" in r.err + r.out
    r = imgquilt("apply", "--image", demo, "--output-image", f"docker-archive:{tmp_path / 'x.tar'}:Bad/Name:1", cwd=queue)
    assert r.code == 2, r.out + r.err
    assert outputs_of(tmp_path) == before


# --- the benchmark's image builder ------------------------------------------------------------
@needs("skopeo")
@needs("umoci")
def test_the_bench_image_builder_writes_an_image_the_tools_accept(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from build_image import LayerPlan, build_image

    src = tmp_path / "src"
    build_demo.materialize_rootfs(src)
    plans = [LayerPlan("big", ("usr/lib", "usr/local")), LayerPlan("etc", ("etc", "home")), LayerPlan("nothing", ("opt/none",))]
    built = build_image(tmp_path / "img", plans, root=src)
    assert [l.name for l in built.layers] == ["big", "etc"]
    info = json.loads(run("skopeo", "inspect", built.ref).stdout)
    assert info["Digest"] == built.manifest_digest and len(info["Layers"]) == 2
    rootfs = unpack(built.ref, tmp_path)
    for rel in ("usr/lib/demo-tool/tool.py", "etc/passwd", "home/app/config.toml"):
        assert (rootfs / rel).read_bytes() == (src / rel).read_bytes()
    assert (rootfs / "usr/local/bin/demosvc").stat().st_ino == (rootfs / "usr/local/bin/demosvc-serve").stat().st_ino
