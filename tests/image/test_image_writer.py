"""The image sink: base image + the apply's layer as oci:, oci-archive: and docker-archive:.

The base images here are read by a deliberately tiny OCI-layout reader (below), so these tests
pin the writer alone; tests/image/test_interop_images.py runs the whole CLI with the real readers.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest

from imgquilt.engine.result import RECORD_PATH, ApplyResult, FileResult
from imgquilt.errors import DigestMismatch, UsageError
from imgquilt.fs.types import DirMeta, ImageInfo, TargetFile
from imgquilt.image.sinks.image import OutputRef, parse_output_ref
from imgquilt.image.sinks.mutate import ANNOTATION_BASE_DIGEST, ANNOTATION_BASE_NAME, chain_id
from imgquilt.verbs.apply import LABEL_PATCHES, LABEL_SERIES, layer_tar_bytes, write_image
from imgquilt.image.model import Descriptor

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo-image"
needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo not installed")


# --- a tiny reader for the base ---------------------------------------------------------------
@dataclass
class LayoutLayer:
    descriptor: Descriptor
    diff_id: str
    blob_path: Path

    def open_blob(self) -> BinaryIO:
        return open(self.blob_path, "rb")

    def open_tar(self) -> BinaryIO:
        raise NotImplementedError


@dataclass
class LayoutImage:
    ref: str
    manifest_digest: str
    manifest_bytes: bytes
    config_bytes: bytes
    platform: str
    layers: list[LayoutLayer]


def open_layout(root: Path, tag: str, *, link: bool = True) -> LayoutImage:
    index = json.loads((root / "index.json").read_bytes())
    desc = next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
    blob = lambda d: root / "blobs" / "sha256" / d.split(":", 1)[1]  # noqa: E731
    manifest_bytes = blob(desc["digest"]).read_bytes()
    manifest = json.loads(manifest_bytes)
    config_bytes = blob(manifest["config"]["digest"]).read_bytes()
    config = json.loads(config_bytes)
    layers = [
        LayoutLayer(Descriptor(l["mediaType"], l["digest"], l["size"]), diff, blob(l["digest"]))
        for l, diff in zip(manifest["layers"], config["rootfs"]["diff_ids"])
    ]
    img = LayoutImage(f"oci:{root}:{tag}", desc["digest"], manifest_bytes, config_bytes, f"{config['os']}/{config['architecture']}", layers)
    if not link:  # a reader that does not say where its blobs are: open_blob() only
        img.layers = [StreamOnly(l) for l in layers]  # type: ignore[misc]
    return img


class StreamOnly:
    def __init__(self, layer: LayoutLayer) -> None:
        self.descriptor, self.diff_id, self._layer = layer.descriptor, layer.diff_id, layer

    def open_blob(self) -> BinaryIO:
        return self._layer.open_blob()


# --- an apply result --------------------------------------------------------------------------
def result() -> ApplyResult:
    usr = (DirMeta("usr", 0o755, 0, 0), DirMeta("usr/bin", 0o755, 0, 0))
    files = (
        FileResult(TargetFile("home/app/config.toml", "home/app/config.toml", b"a\n", 0o640, 1000, 1000, None,
                              (DirMeta("home", 0o755, 0, 0), DirMeta("home/app", 0o750, 1000, 1000))), b"b\n", 0o640, 1000, 1000, ("0003-cfg.patch",)),
        FileResult(TargetFile("bin/which", "usr/bin/which", b"old\n", 0o755, 0, 0, None, usr), b"new\n", 0o755, 0, 0, ("0001-which.patch",)),
        FileResult(TargetFile(RECORD_PATH, RECORD_PATH, None), b"{}\n", 0o644, 0, 0, ()),
    )
    return ApplyResult(ImageInfo("oci:demo:latest", None), "ab" * 32, ("0001-which.patch", "0003-cfg.patch"), files, True)


@pytest.fixture(autouse=True)
def _no_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


@pytest.fixture
def base() -> LayoutImage:
    return open_layout(DEMO, "latest")


def read_layout(root: Path, tag: str | None) -> tuple[dict, dict, dict]:
    index = json.loads((root / "index.json").read_bytes())
    descs = [m for m in index["manifests"] if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag]
    assert len(descs) == 1
    b = lambda d: (root / "blobs" / "sha256" / d.split(":", 1)[1]).read_bytes()  # noqa: E731
    manifest = json.loads(b(descs[0]["digest"]))
    config = json.loads(b(manifest["config"]["digest"]))
    return descs[0], manifest, config


# --- references -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("oci:out", OutputRef("oci", Path("out"), None)),
        ("oci:out/img:1.0-fixed", OutputRef("oci", Path("out/img"), "1.0-fixed")),
        ("oci-archive:/tmp/x.tar:v2", OutputRef("oci-archive", Path("/tmp/x.tar"), "v2")),
        ("docker-archive:x.tar", OutputRef("docker-archive", Path("x.tar"), None)),
        ("docker-archive:x.tar:demo", OutputRef("docker-archive", Path("x.tar"), "demo:latest")),
        ("docker-archive:x.tar:localhost:5000/team/demo:1.0", OutputRef("docker-archive", Path("x.tar"), "localhost:5000/team/demo:1.0")),
    ],
)
def test_output_references_parse_as_skopeo_spells_them(ref: str, want: OutputRef) -> None:
    assert parse_output_ref(ref) == want


@pytest.mark.parametrize("ref", ["docker://demo:1", "rootfs:/x", "oci:", "oci:x@sha256:" + "0" * 64, "oci:x:bad tag", "docker-archive:x.tar:Upper/Case:1", "out"])
def test_unwritable_references_are_usage_errors(ref: str) -> None:
    with pytest.raises(UsageError):
        parse_output_ref(ref)


# --- oci: -------------------------------------------------------------------------------------
def test_oci_output_is_the_base_plus_one_layer_with_labels_history_and_annotations(tmp_path: Path) -> None:
    shutil.copytree(DEMO, tmp_path / "demo")  # on the output's filesystem: blobs get hard-linked
    base = open_layout(tmp_path / "demo", "latest")
    out = tmp_path / "out"
    w = write_image(base, result(), f"oci:{out}:patched")
    desc, manifest, config = read_layout(out, "patched")
    assert desc["digest"] == w.digest
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    base_manifest = json.loads(base.manifest_bytes)
    assert manifest["layers"][:-1] == base_manifest["layers"]
    new = manifest["layers"][-1]
    assert new["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip" and new["digest"] == w.layer_digest
    assert manifest["annotations"][ANNOTATION_BASE_DIGEST] == base.manifest_digest
    assert manifest["annotations"][ANNOTATION_BASE_NAME] == base.ref
    base_config = json.loads(base.config_bytes)
    assert config["rootfs"]["diff_ids"] == base_config["rootfs"]["diff_ids"] + [w.diff_id]
    assert w.diff_id == "sha256:" + hashlib.sha256(layer_tar_bytes(result())).hexdigest()
    assert config["history"][:-1] == base_config["history"]
    assert config["history"][-1]["created_by"] == "imgquilt apply " + "ab" * 32
    labels = config["config"]["Labels"]
    assert labels[LABEL_SERIES] == "ab" * 32
    assert labels[LABEL_PATCHES] == "0001-which.patch,0003-cfg.patch"
    assert labels["org.opencontainers.image.title"] == "imgquilt demo"  # the base's labels stay
    assert list(config)[: len(base_config)] == list(base_config)  # the base's key order stays
    for layer in base.layers:  # base blobs byte for byte, hard-linked on one filesystem
        copy = out / "blobs" / "sha256" / layer.descriptor.digest.split(":")[1]
        assert copy.read_bytes() == layer.blob_path.read_bytes()
        assert copy.stat().st_ino == layer.blob_path.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo", "out"]


def test_base_blobs_are_streamed_and_verified_when_the_reader_gives_no_file(tmp_path: Path) -> None:
    base = open_layout(DEMO, "latest", link=False)
    w = write_image(base, result(), f"oci:{tmp_path / 'out'}:t")
    for layer in base.layers:
        copy = tmp_path / "out" / "blobs" / "sha256" / layer.descriptor.digest.split(":")[1]
        assert copy.read_bytes() == layer._layer.blob_path.read_bytes()
    assert w.digest == write_image(open_layout(DEMO, "latest"), result(), f"oci:{tmp_path / 'out2'}:t").digest


def test_the_image_digest_is_stable_and_follows_source_date_epoch(tmp_path: Path, base: LayoutImage, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write_image(base, result(), f"oci:{tmp_path / 'a'}:t")
    b = write_image(base, result(), f"oci:{tmp_path / 'b'}:t")
    assert a.digest == b.digest and a.config_digest == b.config_digest
    assert (tmp_path / "a" / "index.json").read_bytes() == (tmp_path / "b" / "index.json").read_bytes()
    _, _, config = read_layout(tmp_path / "a", "t")
    assert config["created"] == config["history"][-1]["created"] == "1970-01-01T00:00:00Z"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    c = write_image(base, result(), f"oci:{tmp_path / 'c'}:t")
    assert c.digest != a.digest
    _, _, config = read_layout(tmp_path / "c", "t")
    assert config["created"] == "2023-11-14T22:13:20Z"


def test_adding_to_an_existing_layout_keeps_its_images_and_replaces_the_tag(tmp_path: Path) -> None:
    layout = tmp_path / "demo"
    shutil.copytree(DEMO, layout)
    base = open_layout(layout, "latest")
    w = write_image(base, result(), f"oci:{layout}:patched")
    tags = [m["annotations"]["org.opencontainers.image.ref.name"] for m in json.loads((layout / "index.json").read_bytes())["manifests"]]
    assert tags == ["latest", "patched"]
    assert read_layout(layout, "latest")[0]["digest"] == base.manifest_digest
    again = write_image(base, result(), f"oci:{layout}:patched")
    assert again.digest == w.digest
    tags = [m["annotations"]["org.opencontainers.image.ref.name"] for m in json.loads((layout / "index.json").read_bytes())["manifests"]]
    assert tags == ["latest", "patched"]
    assert not [p for p in layout.rglob(".*")]  # no temp files
    with pytest.raises(UsageError, match="name a tag"):
        write_image(base, result(), f"oci:{layout}")


def test_a_non_layout_directory_is_refused_untouched(tmp_path: Path, base: LayoutImage) -> None:
    d = tmp_path / "stuff"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        write_image(base, result(), f"oci:{d}:t")
    assert [p.name for p in d.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    write_image(base, result(), f"oci:{empty}:t")
    assert (empty / "oci-layout").is_file()


def test_a_corrupt_base_blob_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    layout = tmp_path / "demo"
    shutil.copytree(DEMO, layout)
    base = open_layout(layout, "latest")
    victim = base.layers[1].blob_path
    data = bytearray(victim.read_bytes())
    data[-20] ^= 0xFF
    victim.write_bytes(bytes(data))
    for link in (True, False):
        b = open_layout(layout, "latest", link=link)
        with pytest.raises(DigestMismatch, match=base.layers[1].descriptor.digest):
            write_image(b, result(), f"oci:{tmp_path / 'out'}:t")
        assert not (tmp_path / "out").exists()
        for ref in (f"oci-archive:{tmp_path / 'o.tar'}", f"docker-archive:{tmp_path / 'd.tar'}:demo:t"):
            with pytest.raises(DigestMismatch):
                write_image(b, result(), ref)
    # adding to an existing layout: the blobs this call created are removed again
    other = tmp_path / "other"
    write_image(open_layout(DEMO, "latest"), result(), f"oci:{other}:first")
    before = sorted(p.name for p in (other / "blobs" / "sha256").iterdir())
    shutil.rmtree(other / "blobs" / "sha256")
    (other / "blobs" / "sha256").mkdir()
    with pytest.raises(DigestMismatch):
        write_image(base, result(), f"oci:{other}:second")
    assert json.loads((other / "index.json").read_bytes())["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "first"
    assert len(json.loads((other / "index.json").read_bytes())["manifests"]) == 1
    assert sorted(p.name for p in (other / "blobs" / "sha256").iterdir()) == []
    assert before  # (the first write did put blobs there)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo", "other"]


def test_docker_media_types_in_the_base_get_their_oci_names(tmp_path: Path) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo not installed")
    v2 = tmp_path / "v2"
    subprocess.run(["skopeo", "copy", "-q", "--format", "v2s2", f"oci:{DEMO}:latest", f"oci:{v2}:latest"], check=True)
    base = open_layout(v2, "latest")
    assert base.layers[0].descriptor.media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip"
    write_image(base, result(), f"oci:{tmp_path / 'out'}:t")
    _, manifest, _ = read_layout(tmp_path / "out", "t")
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert {l["mediaType"] for l in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+gzip"}
    assert [l["digest"] for l in manifest["layers"][:-1]] == [l.descriptor.digest for l in base.layers]


# --- archives ---------------------------------------------------------------------------------
def test_oci_archive_is_a_layout_in_a_tar_and_reproducible(tmp_path: Path, base: LayoutImage) -> None:
    a = write_image(base, result(), f"oci-archive:{tmp_path / 'a.tar'}:patched")
    b = write_image(base, result(), f"oci-archive:{tmp_path / 'b.tar'}:patched")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert a.digest == b.digest
    x = tmp_path / "x"
    with tarfile.open(tmp_path / "a.tar") as tf:
        names = tf.getnames()
        tf.extractall(x)
    assert names[:2] == ["blobs", "blobs/sha256"] and names[-2:] == ["index.json", "oci-layout"]
    desc, manifest, config = read_layout(x, "patched")
    assert desc["digest"] == a.digest
    assert config["config"]["Labels"][LABEL_SERIES] == "ab" * 32
    # the same image as the oci: output
    assert write_image(base, result(), f"oci:{tmp_path / 'dir'}:patched").digest == a.digest


def test_docker_archive_is_the_docker_save_layout(tmp_path: Path, base: LayoutImage) -> None:
    w = write_image(base, result(), f"docker-archive:{tmp_path / 'd.tar'}:imgquilt-test/demo:patched")
    again = write_image(base, result(), f"docker-archive:{tmp_path / 'e.tar'}:imgquilt-test/demo:patched")
    assert (tmp_path / "d.tar").read_bytes() == (tmp_path / "e.tar").read_bytes()
    with tarfile.open(tmp_path / "d.tar") as tf:
        manifest = json.load(tf.extractfile("manifest.json"))
        repositories = json.load(tf.extractfile("repositories"))
        config = json.load(tf.extractfile(manifest[0]["Config"]))
        layer_files = [tf.extractfile(n).read() for n in manifest[0]["Layers"]]
    assert manifest[0]["RepoTags"] == ["imgquilt-test/demo:patched"]
    assert manifest[0]["Config"] == w.config_digest.split(":")[1] + ".json"
    assert len(layer_files) == len(base.layers) + 1
    for layer, data in zip(base.layers, layer_files):  # base layers as stored (gzip), not recompressed
        assert data == layer.blob_path.read_bytes()
    assert "sha256:" + hashlib.sha256(layer_files[-1]).hexdigest() == w.diff_id  # the new layer uncompressed
    assert config["rootfs"]["diff_ids"][-1] == w.diff_id
    assert repositories == {"imgquilt-test/demo": {"patched": chain_id(config["rootfs"]["diff_ids"]).split(":")[1]}}
    assert again.config_digest == w.config_digest


def test_a_failing_archive_write_leaves_no_file(tmp_path: Path, base: LayoutImage, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        write_image(base, result(), f"oci-archive:{tmp_path / 'missing' / 'x.tar'}")
    (tmp_path / "old.tar").write_bytes(b"old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    for ref in (f"oci-archive:{tmp_path / 'old.tar'}", f"docker-archive:{tmp_path / 'new.tar'}"):
        with pytest.raises(UsageError, match="No space left"):
            write_image(base, result(), ref)
    with pytest.raises(UsageError, match="No space left"):
        write_image(base, result(), f"oci:{tmp_path / 'dir'}:t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.tar"]
    assert (tmp_path / "old.tar").read_bytes() == b"old"


# --- real tools -------------------------------------------------------------------------------
@needs_skopeo
@pytest.mark.parametrize("transport", ["oci", "oci-archive", "docker-archive"])
def test_skopeo_inspects_every_transport(tmp_path: Path, base: LayoutImage, transport: str) -> None:
    path = tmp_path / ("out" if transport == "oci" else "out.tar")
    name = "imgquilt-test/demo:patched" if transport == "docker-archive" else "patched"
    w = write_image(base, result(), f"{transport}:{path}:{name}")
    p = subprocess.run(["skopeo", "inspect", f"{transport}:{path}" + ("" if transport == "docker-archive" else ":patched")],
                       check=True, capture_output=True, text=True)
    doc = json.loads(p.stdout)
    assert doc["Labels"][LABEL_SERIES] == "ab" * 32
    assert doc["Labels"][LABEL_PATCHES] == "0001-which.patch,0003-cfg.patch"
    assert len(doc["Layers"]) == len(base.layers) + 1
    if transport != "docker-archive":
        assert doc["Digest"] == w.digest


def test_a_bad_destination_is_caught_before_anything_is_computed(tmp_path: Path) -> None:
    from imgquilt.image.sinks.image import check_image_destination

    assert check_image_destination(f"oci:{tmp_path / 'new'}:t").tag == "t"
    shutil.copytree(DEMO, tmp_path / "layout")
    for bad in (f"oci:{tmp_path / 'layout'}", f"oci-archive:{tmp_path / 'no' / 'x.tar'}", f"oci:{tmp_path / 'no' / 'dir'}:t",
                f"docker-archive:{tmp_path}:demo:1"):
        with pytest.raises(UsageError):
            check_image_destination(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layout"]
