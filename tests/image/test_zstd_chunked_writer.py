"""`apply --compression zstd:chunked`: the new layer has a TOC and its annotations, stays byte-reproducible,
loads in skopeo and podman (podman 4.3 pulls it *partially* from a registry, by the TOC), and imgquilt
reads it back lazily."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import zstandard

from support.imagetools import blob_path, manifest, skopeo_copy
from support.qtools import copy_demo_queue, imgquilt
from support.registry_server import start_registry
from imgquilt.image.image_source import ImageSource
from imgquilt.image.layers.blobio import VerifiedBlobs
from imgquilt.sources import open_image

CHECKSUM = "io.containers.zstd-chunked.manifest-checksum"
POSITION = "io.containers.zstd-chunked.manifest-position"


def _apply(q: Path, env: dict, out: str, *extra: str, check: int = 0):
    return imgquilt("--json", "apply", "--image", f"oci:{q}/examples/demo-image:latest", "--output-image", out,
                    *extra, cwd=q, env=env, check=check)


@pytest.fixture
def written(tmp_path, cli_env):
    q = copy_demo_queue(tmp_path / "q")
    out = tmp_path / "out"
    doc = json.loads(_apply(q, cli_env, f"oci:{out}:fixed", "--compression", "zstd:chunked").out)
    return q, out, doc


def test_the_new_layer_is_zstd_chunked_with_a_valid_toc(written):
    q, out, doc = written
    layer = manifest(out, "fixed")[1]["layers"][-1]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd"
    assert layer["digest"] == doc["outputs"]["image"]["layer_digest"]
    blob = blob_path(out, layer["digest"]).read_bytes()
    # a plain zstd stream of the layer tar (the TOC and footer are skippable frames)
    tar = zstandard.ZstdDecompressor().stream_reader(blob, read_across_frames=True).read()
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == doc["outputs"]["image"]["diff_id"]
    offset, length, size, kind = (int(x) for x in layer["annotations"][POSITION].split(":"))
    assert kind == 1 and layer["annotations"][CHECKSUM] == "sha256:" + hashlib.sha256(blob[offset:offset + length]).hexdigest()
    toc = json.loads(zstandard.ZstdDecompressor().stream_reader(blob[offset:offset + length]).read())
    assert len(json.dumps(toc, separators=(",", ":"))) <= size
    files = {e["name"]: e for e in toc["entries"] if e["type"] == "reg" and e.get("size")}
    for f in doc["files"]:
        e = files[f["resolved"]]
        assert e["digest"] == "sha256:" + f["final_sha256"]
        frame = zstandard.ZstdDecompressor().stream_reader(blob[e["offset"]:e["endOffset"]]).read()
        assert hashlib.sha256(frame).hexdigest() == f["final_sha256"]  # each file is a frame of its own
    assert blob[-64:][56:] == b"GnUlInUx"  # containers/storage's footer, which also says where the tar-split is


def test_the_layer_is_byte_reproducible(written, tmp_path, cli_env):
    q, out, doc = written
    again = json.loads(_apply(q, cli_env, f"oci:{tmp_path / 'again'}:fixed", "--compression", "zstd:chunked").out)
    assert again["outputs"]["image"]["layer_digest"] == doc["outputs"]["image"]["layer_digest"]
    assert again["outputs"]["image"]["digest"] == doc["outputs"]["image"]["digest"]


def test_imgquilt_reads_it_back_lazily(written, cli_env):
    q, out, doc = written
    ref = f"oci:{out}:fixed"
    lazy = ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref)
    whole = ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref, use_tocs=False)
    paths = [f["path"] for f in doc["files"]]
    got, want = lazy.read_targets(paths), whole.read_targets(paths)
    assert {p: (t.data, t.mode, t.resolved) for p, t in got.items()} == {p: (t.data, t.mode, t.resolved) for p, t in want.items()}
    assert lazy.stats.layers_from_toc == [doc["outputs"]["image"]["layer_digest"]]
    assert lazy.stats.layers_by_tar_split == 1 and lazy.stats.runs_skipped == 0  # checked by its tar-split, not walked
    r = imgquilt("--json", "audit", "--image", ref, cwd=q, env=cli_env, check=0)
    assert {p["state"] for p in json.loads(r.out)["patches"]} == {"live"}


def test_skopeo_and_podman_load_read_it(written, tmp_path, own_store):
    q, out, doc = written
    skopeo_copy(f"oci:{out}:fixed", f"dir:{tmp_path / 'dir'}")
    skopeo_copy(f"oci:{out}:fixed", f"oci-archive:{tmp_path / 'img.tar'}")
    loaded = subprocess.run(["podman", "load", "-q", "-i", str(tmp_path / "img.tar")], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr  # podman checks every layer against its diff_id
    config = doc["outputs"]["image"]["config_digest"]
    subprocess.run(["podman", "rmi", "-f", config.split(":")[1]], capture_output=True)


def test_podman_pulls_it_partially_from_a_registry(written, tmp_path):
    """A real zstd:chunked consumer: podman with partial pulls on fetches the layer by its TOC's ranges."""
    q, out, doc = written
    storage = Path(tempfile.mkdtemp(prefix="iq-", dir="/tmp"))  # podman wants a runroot under 50 characters
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\nrunroot = "{storage}/run"\ngraphroot = "{storage}/root"\n'
                    '[storage.options]\npull_options = {enable_partial_images = "true", use_hard_links = "false", '
                    'ostree_repos = ""}\n')
    env = dict(os.environ, CONTAINERS_STORAGE_CONF=str(conf))
    server = start_registry(tmp_path / "registry")
    podman = ["podman", "--root", str(storage / "root"), "--runroot", str(storage / "run")]
    image_id = doc["outputs"]["image"]["config_digest"].split(":")[1]
    try:
        skopeo_copy(f"oci:{out}:fixed", server.ref("demo:fixed"), "--dest-tls-verify=false")
        since = len(server.requests())
        pulled = subprocess.run([*podman, "--log-level=debug", "pull", "--tls-verify=false", f"{server.host}/demo:fixed"],
                                capture_output=True, text=True, env=env)
        assert pulled.returncode == 0, pulled.stderr[-3000:]
        layer = doc["outputs"]["image"]["layer_digest"]
        assert f"Retrieved partial blob {layer}" in pulled.stderr
        ranges = [r for r in server.requests()[since:] if layer in r.path]
        assert ranges and {r.status for r in ranges} == {206}
        mounted = subprocess.run([*podman, "image", "mount", image_id], capture_output=True, text=True, env=env)
        assert mounted.returncode == 0, mounted.stderr
        root = Path(mounted.stdout.strip())
        try:
            for f in doc["files"]:
                assert hashlib.sha256((root / f["resolved"]).read_bytes()).hexdigest() == f["final_sha256"], f["resolved"]
        finally:
            subprocess.run([*podman, "image", "unmount", image_id], capture_output=True, env=env)
    finally:
        subprocess.run([*podman, "rmi", "-af"], capture_output=True, env=env)
        server.stop()
        shutil.rmtree(storage, ignore_errors=True)


@pytest.mark.parametrize("args, says", [
    (["--compression", "zstd:chunked", "--layer", "x.tar.gz"], "give --output-image"),
    (["--compression", "brotli", "--output-image", "oci:OUT:x"], "Unknown layer compression"),
    (["--compression", "zstd:chunked", "--output-image", "docker-archive:OUT.tar:x:y"], "no layer annotations"),
])
def test_compression_refusals_are_usage_errors(tmp_path, cli_env, args, says):
    q = copy_demo_queue(tmp_path / "q")
    args = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    r = imgquilt("apply", "--image", f"oci:{q}/examples/demo-image:latest", *args, cwd=q, env=cli_env, check=2)
    assert says in r.err and not (tmp_path / "out").exists()
