"""Image references and transports: real images built by umoci, converted by skopeo.

Covers oci:, oci-archive:, docker-archive: (skopeo's legacy layout and the Docker 25+ OCI-in-tar
layout), dir:, tar:, bare paths, the skopeo fallback, platform selection, and every way an image
can be bad (wrong digest, truncated, unknown media type, missing tag, ambiguous archive).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.imagetools import (
    blob_path,
    build_oci,
    docker25_archive,
    file,
    flip_byte,
    layer_bytes,
    layer_digests,
    make_index,
    manifest,
    merge_docker_archives,
    recompress_layer,
    run,
    sha256_hex,
    skopeo_copy,
    symlink,
    uncompressed_layer,
)
from imgquilt.errors import BadImage, DigestMismatch, UsageError
from imgquilt.image.reference import parse_ref, resolve_ref
from imgquilt.sources import open_image, open_source
from imgquilt.image.sources.skopeo_copy import copy_with_skopeo
from imgquilt.rootfs.source import RootfsSource

V1 = [
    [file("usr/bin/app", "#!/bin/sh\necho v1\n", mode=0o755), symlink("bin", "usr/bin"),
     file("etc/os-release", "ID=test\n")],
    [file("etc/app.conf", "mode=v1\n")],
]
V2 = V1 + [[file("etc/app.conf", "mode=v2\n")]]


def skopeo_digest(ref: str) -> str:
    return json.loads(run("skopeo", "inspect", ref))["Digest"]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    layout = root / "layout"
    build_oci(layout, V1, tag="v1")
    build_oci(layout, V2, tag="v2")
    out = {"layout": layout}
    out["oci-archive"] = root / "img.oci.tar"
    skopeo_copy(f"oci:{layout}:v2", f"oci-archive:{out['oci-archive']}:v2")
    out["docker-archive"] = root / "img.docker.tar"
    skopeo_copy(f"oci:{layout}:v2", f"docker-archive:{out['docker-archive']}:example.org/app:2.0")
    other = root / "other.docker.tar"
    skopeo_copy(f"oci:{layout}:v1", f"docker-archive:{other}:example.org/app:1.0")
    out["docker-multi"] = merge_docker_archives([out["docker-archive"], other], root / "multi.docker.tar")
    out["docker25"] = docker25_archive(layout, "v2", root / "img.docker25.tar", "example.org/app:2.0")
    out["dir"] = root / "dirimg"
    skopeo_copy(f"oci:{layout}:v2", f"dir:{out['dir']}")
    return out


def read(ref: str, *paths: str, **kw):
    source = open_source(ref, **kw)
    return source, source.read_targets(list(paths) or ["etc/app.conf", "bin/app"])


def check_v2(targets) -> None:
    assert targets["etc/app.conf"].data == b"mode=v2\n"
    assert targets["bin/app"].resolved == "usr/bin/app"
    assert targets["bin/app"].data == b"#!/bin/sh\necho v1\n" and targets["bin/app"].mode == 0o755


# --- transports -------------------------------------------------------------------------------
def test_oci_layout_by_tag(images):
    layout = images["layout"]
    source, t = read(f"oci:{layout}:v2")
    check_v2(t)
    info = source.info()
    assert info.digest == manifest(layout, "v2")[0] == skopeo_digest(f"oci:{layout}:v2")
    assert (info.platform, info.kind, info.ref) == ("linux/amd64", "image", f"oci:{layout}:v2")
    _, t1 = read(f"oci:{layout}:v1")
    assert t1["etc/app.conf"].data == b"mode=v1\n"
    _, t1 = read(f"{layout}:v1")  # a bare path with a tag
    assert t1["etc/app.conf"].data == b"mode=v1\n"


def test_oci_layout_by_digest(images):
    layout = images["layout"]
    digest = manifest(layout, "v1")[0]
    source, t = read(f"oci:{layout}@{digest}")
    assert t["etc/app.conf"].data == b"mode=v1\n" and source.info().digest == digest


def test_oci_layout_missing_tag_lists_tags(images):
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{images['layout']}:v9")
    assert exc.value.exit_code == 6
    assert "'v9'" in exc.value.message and "v1" in exc.value.message and "v2" in exc.value.message


def test_oci_layout_with_several_images_needs_a_tag(images):
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{images['layout']}")
    assert "holds 2 images" in exc.value.message and "v1" in exc.value.message and "v2" in exc.value.message


def test_oci_archive(images):
    archive = images["oci-archive"]
    for ref in (f"oci-archive:{archive}:v2", f"oci-archive:{archive}", str(archive)):
        source, t = read(ref)
        check_v2(t)
        assert source.info().digest == skopeo_digest(f"oci-archive:{archive}:v2")
    with pytest.raises(BadImage) as exc:
        open_source(f"oci-archive:{archive}:nope")
    assert "available tags: v2" in exc.value.message


def test_docker_archive_legacy_layout(images):
    archive = images["docker-archive"]
    for ref in (f"docker-archive:{archive}", f"docker-archive:{archive}:example.org/app:2.0", str(archive)):
        source, t = read(ref)
        check_v2(t)
        # the manifest skopeo makes up for a docker archive, byte for byte
        assert source.info().digest == skopeo_digest(f"docker-archive:{archive}")
    image = open_image(f"docker-archive:{archive}")
    assert image.names == ("example.org/app:2.0",)
    assert [layer.diff_id for layer in image.layers] == json.loads(image.config_bytes)["rootfs"]["diff_ids"]
    with pytest.raises(BadImage) as exc:
        open_source(f"docker-archive:{archive}:example.org/app:9")
    assert "example.org/app:2.0" in exc.value.message


def test_docker_archive_with_several_images(images):
    archive = images["docker-multi"]
    with pytest.raises(BadImage) as exc:
        open_source(f"docker-archive:{archive}")
    assert exc.value.exit_code == 6
    assert "holds 2 images" in exc.value.message
    assert "example.org/app:1.0" in exc.value.message and "example.org/app:2.0" in exc.value.message
    _, t = read(f"docker-archive:{archive}:example.org/app:1.0")
    assert t["etc/app.conf"].data == b"mode=v1\n"
    _, t = read(f"docker-archive:{archive}:@0")
    assert t["etc/app.conf"].data == b"mode=v2\n"
    _, t = read(f"{archive}:example.org/app:1.0")  # a bare path with a tag
    assert t["etc/app.conf"].data == b"mode=v1\n"


def test_docker25_oci_in_tar(images):
    archive = images["docker25"]
    layout = images["layout"]
    for ref in (f"docker-archive:{archive}", f"docker-archive:{archive}:example.org/app:2.0", str(archive)):
        source, t = read(ref)
        check_v2(t)
        assert source.info().digest == manifest(layout, "v2")[0]
    assert resolve_ref(str(archive)).transport == "docker-archive"
    with pytest.raises(BadImage) as exc:
        open_source(f"docker-archive:{archive}:example.org/app:1.0")
    assert "example.org/app:2.0" in exc.value.message


def test_dir_transport(images):
    source, t = read(f"dir:{images['dir']}")
    check_v2(t)
    assert source.info().digest == manifest(images["layout"], "v2")[0]
    _, t = read(str(images["dir"]))  # detected
    check_v2(t)


def test_flat_tar_and_compressed_flat_tar(tmp_path):
    data = layer_bytes([file("usr/bin/app", "flat\n", mode=0o700), symlink("bin", "usr/bin")])
    plain = tmp_path / "export.tar"
    plain.write_bytes(data)
    packed = tmp_path / "export.tar.gz"
    packed.write_bytes(gzip.compress(data))
    for ref in (f"tar:{plain}", str(plain), f"tar:{packed}", str(packed)):
        source, t = read(ref, "bin/app")
        assert t["bin/app"].data == b"flat\n" and t["bin/app"].mode == 0o700
        assert source.info().kind == "tar" and source.info().digest is None
    with pytest.raises(BadImage) as exc:
        open_source(f"tar:{tmp_path / 'missing.tar'}")
    assert exc.value.exit_code == 6


def test_flat_tar_as_image_for_writers(tmp_path):
    data = layer_bytes([file("a", "a\n")])
    plain = tmp_path / "export.tar"
    plain.write_bytes(data)
    image = open_image(f"tar:{plain}")
    assert image.layers[0].diff_id == "sha256:" + sha256_hex(data)
    assert json.loads(image.config_bytes)["rootfs"]["diff_ids"] == [image.layers[0].diff_id]
    assert image.manifest_digest == "sha256:" + sha256_hex(image.manifest_bytes)


def test_rootfs_and_bare_directory(tmp_path, images):
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_text("mode=rootfs\n")
    for ref in (f"rootfs:{root}", str(root)):
        source = open_source(ref)
        assert isinstance(source, RootfsSource)
        assert source.read_targets(["etc/app.conf"])["etc/app.conf"].data == b"mode=rootfs\n"
    assert resolve_ref(str(images["layout"])).transport == "oci"
    with pytest.raises(BadImage):
        open_image(f"rootfs:{root}")


def test_unknown_reference(tmp_path):
    with pytest.raises(BadImage) as exc:
        open_source(str(tmp_path / "nothing-here"))
    assert exc.value.exit_code == 6
    assert parse_ref("docker://example.org/x:1").transport == "docker"  # read natively (sources/registry.py)
    assert parse_ref("containers-storage:localhost/x:1").transport == "skopeo"
    assert parse_ref("oci:/a/b:tag") == parse_ref("oci:/a/b:tag")
    assert (parse_ref("oci:/a/b:tag").path, parse_ref("oci:/a/b:tag").tag) == ("/a/b", "tag")
    assert parse_ref("docker-archive:x.tar:example.org:5000/a:1").tag == "example.org:5000/a:1"


# --- the skopeo fallback --------------------------------------------------------------------
def test_skopeo_copies_other_transports_into_the_cache(tmp_path, images):
    # skopeo reads the oci: layout itself here; any transport it knows takes the same path
    cache = tmp_path / "cache"
    copied = copy_with_skopeo(f"oci:{images['layout']}:v2", platform=None, cache_dir=cache)
    assert copied.parent == cache / "skopeo" and (copied / "manifest.json").exists()
    assert not [p for p in (cache / "skopeo").iterdir() if p.name.startswith(".")]  # no temp left
    source, t = read(f"dir:{copied}")
    check_v2(t)
    assert source.info().digest == manifest(images["layout"], "v2")[0]  # the manifest is kept as is


def test_containers_storage_through_skopeo(tmp_path, images, own_store):
    name = f"localhost/imgquilt-test-{os.getpid()}:v2"
    try:
        skopeo_copy(f"oci:{images['layout']}:v2", f"containers-storage:{name}")
    except RuntimeError as exc:
        pytest.skip(f"no usable containers-storage here: {exc}")
    try:
        source, t = read(f"containers-storage:{name}", cache_dir=tmp_path / "cache")
        check_v2(t)
        assert source.info().digest.startswith("sha256:")
        assert source.info().ref == f"containers-storage:{name}"
    finally:
        subprocess.run(["skopeo", "delete", f"containers-storage:{name}"], capture_output=True)


def test_missing_skopeo_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: skopeo is not installed
    with pytest.raises(BadImage) as exc:
        open_source("docker-daemon:example.org/app:1", cache_dir=tmp_path)
    assert "skopeo" in exc.value.message and "not installed" in exc.value.message


def test_skopeo_failure_is_bad_image(tmp_path, own_store):
    with pytest.raises(BadImage) as exc:
        open_source(f"containers-storage:localhost/imgquilt-no-such-image-{os.getpid()}:1", cache_dir=tmp_path)
    assert "skopeo could not read" in exc.value.message
    assert "level=" not in exc.value.message and "time=" not in exc.value.message  # its log framing is dropped


# --- platforms --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def multiarch(tmp_path_factory) -> Path:
    layout = tmp_path_factory.mktemp("multi") / "layout"
    build_oci(layout, [[file("etc/arch", "amd64\n")]], tag="amd", platform="linux/amd64")
    build_oci(layout, [[file("etc/arch", "arm64\n")]], tag="arm", platform="linux/arm64/v8")
    build_oci(layout, [[file("etc/arch", "s390x\n")]], tag="s390x", platform="linux/s390x")
    make_index(layout, {"linux/amd64": "amd", "linux/arm64/v8": "arm"}, "multi", keep_members=True)
    make_index(layout, {"linux/arm64/v8": "arm", "linux/s390x": "s390x"}, "noamd")
    return layout


def test_platform_defaults_to_linux_amd64(multiarch):
    source, t = read(f"oci:{multiarch}:multi", "etc/arch")
    assert t["etc/arch"].data == b"amd64\n" and source.info().platform == "linux/amd64"


def test_platform_picks_from_the_index(multiarch, tmp_path):
    source, t = read(f"oci:{multiarch}:multi", "etc/arch", platform="linux/arm64")
    assert t["etc/arch"].data == b"arm64\n" and source.info().platform == "linux/arm64/v8"
    # the same through an oci-archive written by skopeo --all
    archive = tmp_path / "multi.tar"
    skopeo_copy(f"oci:{multiarch}:multi", f"oci-archive:{archive}:multi", "--all")
    _, t = read(f"oci-archive:{archive}", "etc/arch", platform="linux/arm64/v8")
    assert t["etc/arch"].data == b"arm64\n"


def test_platform_not_in_the_index_lists_platforms(multiarch):
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{multiarch}:multi", platform="linux/ppc64le")
    assert "linux/amd64" in exc.value.message and "linux/arm64/v8" in exc.value.message
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{multiarch}:noamd")
    assert "linux/arm64/v8, linux/s390x" in exc.value.message and "--platform" in exc.value.render()
    with pytest.raises(UsageError):
        open_source(f"oci:{multiarch}:multi", platform="amd64")


# --- bad images -------------------------------------------------------------------------------
@pytest.fixture
def layout_copy(images, tmp_path) -> Path:
    dst = tmp_path / "layout"
    shutil.copytree(images["layout"], dst)
    return dst


@pytest.mark.parametrize("compression", ["gzip", "zstd", None])
def test_layer_with_wrong_digest(layout_copy, compression):
    if compression != "gzip":
        recompress_layer(layout_copy, "v2", 2, compression)
    top = layer_digests(layout_copy, "v2")[2]
    path = blob_path(layout_copy, top)
    flip_byte(path, path.stat().st_size - 3)  # same size, different bytes
    source = open_source(f"oci:{layout_copy}:v2")
    with pytest.raises(DigestMismatch) as exc:
        source.read_targets(["etc/app.conf"])
    assert exc.value.exit_code == 6
    assert top in exc.value.message and "does not match" in exc.value.message


def test_digest_mismatch_is_constructed_in_one_helper():
    """Safety code once (issue 35, point 8): every DigestMismatch, the TOC walk's included, is made by
    image.digests.mismatch, so each one says the same thing the same way (exit 6, nothing used)."""
    import ast

    from imgquilt.image.digests import mismatch

    made = []
    tool = Path(__file__).resolve().parents[2] / "tool"
    for path in sorted((tool / "imgquilt").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "DigestMismatch":
                        made.append(f"{path.relative_to(tool)}:{fn.name}")
    assert sorted(set(made)) == ["imgquilt/image/digests.py:mismatch"], made
    err = mismatch("The layer sha256:ab does not match its digest.", hint="Fetch it again.")
    assert isinstance(err, DigestMismatch) and err.exit_code == 6
    assert err.message == "The layer sha256:ab does not match its digest. Nothing from it was used." and err.hint == "Fetch it again."


def test_corrupt_manifest_and_config(layout_copy):
    digest, m = manifest(layout_copy, "v2")
    flip_byte(blob_path(layout_copy, m["config"]["digest"]), 5)
    with pytest.raises(DigestMismatch):
        open_source(f"oci:{layout_copy}:v2")
    flip_byte(blob_path(layout_copy, digest), 5)
    with pytest.raises(DigestMismatch) as exc:
        open_source(f"oci:{layout_copy}:v2")
    assert digest in exc.value.message


def test_unknown_layer_media_type(layout_copy):
    recompress_layer(layout_copy, "v2", 1, "gzip", media_type="application/vnd.example.layer.v1+lzma")
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{layout_copy}:v2")
    assert exc.value.exit_code == 6 and "application/vnd.example.layer.v1+lzma" in exc.value.message


def test_missing_blob_and_wrong_size(layout_copy):
    top = layer_digests(layout_copy, "v2")[2]
    path = blob_path(layout_copy, top)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{layout_copy}:v2")
    assert "truncated" in exc.value.message
    path.unlink()
    with pytest.raises(BadImage) as exc:
        open_source(f"oci:{layout_copy}:v2")
    assert "lacks layer blob" in exc.value.message


@pytest.mark.parametrize("kind", ["oci-archive", "docker-archive", "docker25"])
def test_truncated_archive(images, tmp_path, kind):
    src = images[kind]
    cut = tmp_path / "cut.tar"
    with tarfile.open(src) as tf:  # cut in the middle of the largest member (a layer blob)
        largest = max(tf.getmembers(), key=lambda m: m.size)
    cut.write_bytes(src.read_bytes()[: largest.offset_data + largest.size // 2])
    transport = "oci-archive" if kind == "oci-archive" else "docker-archive"
    with pytest.raises(BadImage) as exc:
        source = open_source(f"{transport}:{cut}")
        source.read_targets(["etc/app.conf"])
    assert exc.value.exit_code == 6
    assert "truncated" in exc.value.message or "lacks" in exc.value.message or "no index.json" in exc.value.message


def test_compressed_archive_is_explained(images, tmp_path):
    packed = tmp_path / "img.oci.tar.gz"
    packed.write_bytes(gzip.compress(images["oci-archive"].read_bytes()))
    with pytest.raises(BadImage) as exc:
        open_source(f"oci-archive:{packed}")
    assert "compressed" in exc.value.message and "gunzip" in exc.value.render()
    saved = tmp_path / "img.docker.tar.gz"  # `docker save | gzip`, passed as a bare path
    saved.write_bytes(gzip.compress(images["docker-archive"].read_bytes()))
    with pytest.raises(BadImage) as exc:
        open_source(str(saved))
    assert "compressed image archive" in exc.value.message


def test_docker_archive_layer_with_wrong_digest(images, tmp_path):
    archive = tmp_path / "bad.docker.tar"
    shutil.copy(images["docker-archive"], archive)
    image = open_image(f"docker-archive:{archive}")
    top = image.layers[-1].location
    flip_byte(archive, top.offset + top.size - 700)  # inside the top layer's tar data
    with pytest.raises(DigestMismatch):
        open_source(f"docker-archive:{archive}").read_targets(["etc/app.conf"])


# --- the Image model for writers -------------------------------------------------------------
def test_open_image_layers_stream_verified_bytes(images):
    layout = images["layout"]
    image = open_image(f"oci:{layout}:v2")
    digest, m = manifest(layout, "v2")
    assert image.manifest_digest == digest
    assert image.manifest_bytes == blob_path(layout, digest).read_bytes()
    assert image.config_bytes == blob_path(layout, m["config"]["digest"]).read_bytes()
    assert image.platform == "linux/amd64"
    for layer, desc in zip(image.layers, m["layers"]):
        assert layer.descriptor.digest == desc["digest"] and layer.descriptor.media_type == desc["mediaType"]
        with layer.open_blob() as f:
            assert f.read() == blob_path(layout, desc["digest"]).read_bytes()
        with layer.open_tar() as f:
            assert f.read() == uncompressed_layer(layout, desc["digest"])
        assert layer.diff_id == "sha256:" + sha256_hex(uncompressed_layer(layout, desc["digest"]))


def test_open_blob_raises_at_the_end_of_a_bad_blob(layout_copy):
    image = open_image(f"oci:{layout_copy}:v2")
    path = blob_path(layout_copy, image.layers[0].descriptor.digest)
    flip_byte(path, 100)
    with image.layers[0].open_blob() as f, pytest.raises(DigestMismatch):
        while f.read(1 << 16):
            pass


def test_verified_blobs_are_remembered_in_the_cache(tmp_path, layout_copy, monkeypatch):
    recompress_layer(layout_copy, "v2", 2, None)
    cache = tmp_path / "cache"
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "shared"))  # markers live in the shared cache
    source = open_source(f"oci:{layout_copy}:v2", cache_dir=cache)
    source.read_targets(["etc/app.conf"])
    markers = list((tmp_path / "shared" / "verified").iterdir())
    assert len(markers) == 1
    # a second run trusts the unchanged blob (it may seek through it) and reads the same bytes
    again = open_source(f"oci:{layout_copy}:v2", cache_dir=cache).read_targets(["etc/app.conf"])
    assert again["etc/app.conf"].data == b"mode=v2\n"
    # any change to the file (its ctime moves) ends the trust: the digest is checked again
    top = blob_path(layout_copy, layer_digests(layout_copy, "v2")[2])
    flip_byte(top, 600)
    with pytest.raises(DigestMismatch):
        open_source(f"oci:{layout_copy}:v2", cache_dir=cache).read_targets(["etc/app.conf"])


def test_docker_media_types(images, tmp_path):
    # skopeo converts to a Docker schema 2 manifest (Docker config and layer media types)
    dst = tmp_path / "v2s2"
    skopeo_copy(f"oci:{images['layout']}:v2", f"dir:{dst}", "--format", "v2s2")
    m = json.loads((dst / "manifest.json").read_text())
    assert m["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert m["layers"][0]["mediaType"] == "application/vnd.docker.image.rootfs.diff.tar.gzip"
    source, t = read(f"dir:{dst}")
    check_v2(t)
    assert source.info().digest == skopeo_digest(f"dir:{dst}")


def test_docker_archive_with_gzip_compressed_layer_tars(images, tmp_path):
    # some `docker save` producers store layer.tar gzip-compressed: checked against the diff_id
    out = tmp_path / "gz.docker.tar"
    with tarfile.open(images["docker-archive"]) as src, tarfile.open(out, "w") as dst:
        for m in src:
            data = src.extractfile(m).read() if m.isfile() else None
            if data is not None and m.name.endswith(".tar"):
                data = gzip.compress(data)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    source, t = read(f"docker-archive:{out}")
    check_v2(t)
    image = open_image(f"docker-archive:{out}")
    assert image.layers[-1].descriptor.media_type == "application/vnd.oci.image.layer.v1.tar+gzip"
    # a changed byte inside the compressed top layer is caught (gzip CRC or the diff_id)
    top = image.layers[-1].location
    flip_byte(out, top.offset + top.size // 2)
    with pytest.raises(BadImage):
        open_source(f"docker-archive:{out}").read_targets(["etc/app.conf"])
