"""Seekable layers on real producers' output: zstd:chunked by skopeo, eStargz (and its zstd:chunked) by
ctr-remote. Every target and every absence read from the TOCs equals a full read of the same layers;
a tampered TOC or chunk is exit 6, never used; a TOC that cannot be used means a full read.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from support.imagetools import (blob_path, build_oci, dir_, file, flip_byte, hardlink, manifest, opaque, set_manifest, symlink,
                        whiteout)
from support.qtools import empty_queue, imgquilt, write_patch
from support.seekable_tools import containerd, ctr_remote_convert, zstd_chunked_copy, zstd_toc
from support.layer_semantics import BASE as SEMANTICS_BASE
from imgquilt.cache.layers import LayerCache
from imgquilt.errors import DigestMismatch, ImgquiltError
from imgquilt.image.image_source import ImageSource
from imgquilt.image.layers.blobio import VerifiedBlobs
from imgquilt.sources import open_image

DEEP = b"".join(b"line %d of a deep file\r\n" % i for i in range(2000))
BIG = random.Random(7).randbytes(300_000)  # spans several chunks (content-defined in zstd:chunked)
BASE = [
    *SEMANTICS_BASE,  # test_layer_semantics's layers (merged /usr, alternatives links, hard links, CRLF), and:
    file("srv/data.bin", BIG),
    file("a/b/c/d/deep.txt", DEEP),
    dir_("var/cache/x", mode=0o700, uid=5, gid=6),
    file("var/cache/x/y.bin", b"\0" * 5000 + b"tail"),
    file("empty", b""),
]
MIDDLE = [
    file("usr/share/doc/readme", "new readme\n"),
    whiteout("etc/motd"),
    opaque("opt/app/conf"),
    file("opt/app/conf/c.conf", "c=1\n"),
    hardlink("usr/lib/python3/site-link2.py", "usr/lib/python3/site.py"),
    whiteout("a/b/c"),  # a parent whiteout: a/b/c/d/deep.txt goes with it
    file("var/cache/x", "a file where a directory was\n"),
]
TOP = [
    file("usr/bin/tool", "#!/bin/sh\necho top\n", mode=0o4755, uid=0, gid=50),
    file("usr/bin/tool-copy", "copy\n"),
    hardlink("usr/bin/tool-link", "usr/bin/tool-copy", mode=0o755),
    symlink("usr/bin/py", "../lib/python3/site.py"),
    symlink("etc/motd", "/usr/share/doc/readme"),  # back, as a symlink into a lower layer
    file("a/b/new.txt", "above the whiteout\n"),
]
ABSENT = ["a/b/c/d/deep.txt", "opt/app/conf/a.conf", "var/cache/x/y.bin", "no/such/file", "usr/bin/nothing"]
THROUGH_LINKS = ["bin/tool", "lib/python3/site.py", "etc/os-release", "usr/bin/which", "usr/bin/py", "etc/motd"]
TOC_FILES = {"stargz.index.json", ".prefetch.landmark", ".no.prefetch.landmark"}



@pytest.fixture(autouse=True)
def _walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These local layers are small, so `auto` would read them whole (toc_walk.walk_locally): the walk
    is what is tested here."""
    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "walk")

@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, str]:
    """The same three layers, gzip (umoci), zstd:chunked (skopeo), eStargz and zstd:chunked (ctr-remote)."""
    work = tmp_path_factory.mktemp("seekable")
    src = build_oci(work / "gzip", [BASE, MIDDLE, TOP], tag="v1")
    refs = {"gzip": f"oci:{src}:v1", "skopeo-zstd-chunked": zstd_chunked_copy(f"oci:{src}:v1", work / "zc", "v1")}
    with containerd(work / "containerd") as address:
        refs["estargz"] = ctr_remote_convert(address, refs["gzip"], work / "esgz", "v1", work / "ctr",
                                             chunk_size=100_000)
        refs["ctr-zstd-chunked"] = ctr_remote_convert(address, refs["gzip"], work / "ctrzc", "v1", work / "ctr",
                                                      zstdchunked=True, chunk_size=100_000)
    return refs


def source(ref: str, *, use_tocs: bool = True, cache: LayerCache | None = None, walk_local: bool | None = True) -> ImageSource:
    # these small local layers would be read whole (toc_walk.walk_locally): the walk is what is tested
    return ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref, layer_cache=cache, use_tocs=use_tocs,
                       walk_local=walk_local)


def snapshot(src: ImageSource, paths: list[str]) -> dict[str, tuple]:
    """Everything a read decides about each path, layers named by position (digests differ per format)."""
    digests = [l.descriptor.digest for l in reversed(src.image.layers)]
    out = {}
    for p in paths:  # one at a time: a path that is refused (a directory, a file as a parent) is compared too
        try:
            t = src.read_targets([p])[p]
        except ImgquiltError as exc:
            out[p] = (type(exc).__name__, exc.message)
            continue
        d = src.deletion(p)
        out[p] = (t.resolved, t.data, t.mode, t.uid, t.gid, digests.index(t.layer) if t.layer else None,
                  t.parents, None if d is None else (d.how, d.marker, d.layer))
    return out


SEEKABLE = ["skopeo-zstd-chunked", "estargz", "ctr-zstd-chunked"]


@pytest.mark.parametrize("kind", SEEKABLE)
def test_every_target_and_absence_equals_a_full_read(images, kind):
    whole = source(images[kind], use_tocs=False)
    paths = sorted(set(whole.list_paths()) | set(ABSENT) | set(THROUGH_LINKS))
    expected = snapshot(whole, paths)
    lazy = source(images[kind])
    assert lazy.list_paths() == whole.list_paths()
    assert snapshot(lazy, paths) == expected
    assert len(lazy.stats.layers_from_toc) == 3 and not lazy.stats.toc_unusable
    assert lazy.stats.second_passes == []
    # and the same as the gzip image the producer started from (eStargz adds its own TOC members)
    gz = source(images["gzip"])
    plain = [p for p in paths if p not in TOC_FILES]
    assert snapshot(gz, plain) == {p: v for p, v in expected.items() if p in plain}
    assert TOC_FILES & set(paths) == (set() if "skopeo" in kind else TOC_FILES & set(whole.list_paths()))


@pytest.mark.parametrize("kind", SEEKABLE)
def test_only_the_needed_layers_and_files_are_read(images, kind):
    src = source(images[kind])
    got = src.read_targets(["usr/bin/tool"])  # decided in the top layer
    assert got["usr/bin/tool"].data == b"#!/bin/sh\necho top\n"
    assert len(src.stats.layers_from_toc) == 1 and src.stats.files_by_range == 1
    src.read_targets(["srv/data.bin", "usr/bin/tool-link"])  # a multi-chunk file at the bottom; a hard link
    assert src.stats.files_by_range == 3 and len(src.stats.layers_from_toc) == 3
    assert src.read_targets(["srv/data.bin"])["srv/data.bin"].data == BIG


@pytest.mark.parametrize("kind", SEEKABLE)
def test_a_file_spans_several_chunks(images, kind):
    src = source(images[kind])
    assert src.read_targets(["srv/data.bin"])["srv/data.bin"].data == BIG
    rec = src._view.layers[2].entries["srv/data.bin"]
    (run,) = rec.extent[1]  # one run over the file's frames, walked from the tar stream
    assert run[3] == len(BIG)
    layer = src._layers[2]
    assert _frames(layer.read_range(run[0], run[1] - run[0]), layer.descriptor.media_type) > 1  # several chunks


def _frames(data: bytes, media_type: str) -> int:
    """How many zstd frames or gzip members `data` holds."""
    import zlib

    import zstandard

    n = 0
    while data:
        d = zstandard.ZstdDecompressor().decompressobj() if media_type.endswith("zstd") else zlib.decompressobj(31)
        d.decompress(data)
        data = d.unused_data
        n += 1
    return n


@pytest.mark.parametrize("kind", SEEKABLE)
def test_the_toc_index_and_file_bytes_come_from_the_shared_cache(images, kind, tmp_path):
    cache = LayerCache(tmp_path / "cache")
    paths = ["usr/bin/tool", "lib/python3/site.py", "a/b/c/d/deep.txt", "srv/data.bin"]
    first = source(images[kind], cache=cache)
    cold = snapshot(first, paths)
    second = source(images[kind], cache=cache)
    assert snapshot(second, paths) == cold
    assert len(second.stats.layers_from_cache) == 3 and second.stats.layers_from_toc == []
    assert second.stats.range_bytes == 0 and second.stats.files_from_cache == 3


# --- tampering: never used ----------------------------------------------------------------
def _copy(images, kind, tmp_path) -> tuple[Path, str]:
    import shutil

    layout = Path(images[kind].split(":")[1])
    dest = tmp_path / "img"
    shutil.copytree(layout, dest)
    return dest, f"oci:{dest}:v1"


def test_a_wrong_checksum_annotation_is_exit_6(images, tmp_path):
    layout, ref = _copy(images, "skopeo-zstd-chunked", tmp_path)
    _, m = manifest(layout, "v1")
    for layer in m["layers"]:
        for key in layer["annotations"]:
            if key.endswith("manifest-checksum"):
                layer["annotations"][key] = "sha256:" + "0" * 64
    set_manifest(layout, "v1", m)
    with pytest.raises(DigestMismatch, match="table of contents"):
        source(ref).read_targets(["usr/bin/tool"])


@pytest.mark.parametrize("kind", ["skopeo-zstd-chunked", "ctr-zstd-chunked"])
def test_an_altered_toc_is_exit_6(images, kind, tmp_path):
    layout, ref = _copy(images, kind, tmp_path)
    top = manifest(layout, "v1")[1]["layers"][-1]
    position = next(v for k, v in top["annotations"].items() if k.endswith("manifest-position"))
    offset, length = (int(x) for x in position.split(":")[:2])
    flip_byte(blob_path(layout, top["digest"]), offset + length // 2)
    with pytest.raises(DigestMismatch, match="table of contents"):
        source(ref).read_targets(["usr/bin/tool"])


def test_an_altered_estargz_toc_is_never_used(images, tmp_path):
    layout, ref = _copy(images, "estargz", tmp_path)
    top = manifest(layout, "v1")[1]["layers"][-1]
    blob = blob_path(layout, top["digest"])
    data = blob.read_bytes()
    toc_offset = int(data[-51:][16:32], 16)
    flip_byte(blob, toc_offset + (len(data) - 51 - toc_offset) // 2)
    # a gzip member that no longer inflates is a TOC imgquilt cannot use: read whole, the blob's digest fails
    with pytest.raises(DigestMismatch):
        source(ref).read_targets(["usr/bin/tool"])


def test_an_altered_chunk_is_exit_6(images, tmp_path):
    layout, ref = _copy(images, "skopeo-zstd-chunked", tmp_path)
    top = manifest(layout, "v1")[1]["layers"][-1]
    blob = blob_path(layout, top["digest"])
    toc = zstd_toc(blob.read_bytes(), top["annotations"])
    entry = next(e for e in toc["entries"] if e["name"].endswith("usr/bin/tool"))
    flip_byte(blob, (entry["offset"] + entry["endOffset"]) // 2)
    src = source(ref)
    # the walk of the layer's tar stream finds a frame that does not decompress: the layer is read whole,
    # and its digest says it was altered, as a full read says
    with pytest.raises(DigestMismatch, match="does not match its digest") as err:
        src.read_targets(["usr/bin/tool"])
    assert "Nothing from it was used" in str(err.value)
    assert src.stats.toc_unusable
    with pytest.raises(DigestMismatch, match="does not match its digest"):
        source(ref, use_tocs=False).read_targets(["usr/bin/tool-copy"])


@pytest.mark.parametrize("kind", ["estargz", "ctr-zstd-chunked"])
def test_an_altered_chunk_of_ctr_remote_layers_is_exit_6(images, kind, tmp_path):
    layout, ref = _copy(images, kind, tmp_path)
    src = source(ref)
    src.read_targets(["usr/bin/tool"])  # learn where the file's frames are from the TOC
    rec = src._view.layers[0].entries["usr/bin/tool"]
    start, end = rec.extent[1][0][:2]
    top = manifest(layout, "v1")[1]["layers"][-1]
    # early in the run: its compressed member goes on past the file's bytes (into the next tar headers)
    flip_byte(blob_path(layout, top["digest"]), min(start + 12, end - 1))
    with pytest.raises(DigestMismatch, match="does not match its digest"):  # the walk fails, the full read says why
        source(ref).read_targets(["usr/bin/tool"])


def test_same_layer_digest_under_another_toc_checksum_does_not_reuse_the_index(images, tmp_path):
    """A TOC vouches only for the manifest naming it: its index is cached under layer digest + TOC checksum."""
    cache = LayerCache(tmp_path / "cache")
    layout, ref = _copy(images, "skopeo-zstd-chunked", tmp_path)
    source(ref, cache=cache).read_targets(["usr/bin/tool"])
    _, m = manifest(layout, "v1")
    for key in list(m["layers"][-1]["annotations"]):
        if key.endswith("manifest-checksum"):
            m["layers"][-1]["annotations"][key] = "sha256:" + "1" * 64
    set_manifest(layout, "v1", m)
    with pytest.raises(DigestMismatch, match="table of contents"):
        source(ref, cache=cache).read_targets(["usr/bin/tool"])


def test_a_toc_that_cannot_be_used_means_a_full_read(images, tmp_path):
    layout, ref = _copy(images, "skopeo-zstd-chunked", tmp_path)
    _, m = manifest(layout, "v1")
    for key in list(m["layers"][-1]["annotations"]):
        if key.endswith("manifest-position"):
            m["layers"][-1]["annotations"][key] = "12:34"
    set_manifest(layout, "v1", m)
    src = source(ref)
    assert src.read_targets(["usr/bin/tool"])["usr/bin/tool"].data == b"#!/bin/sh\necho top\n"
    assert src.stats.layers_from_toc == [] and "offset:length:size:type" in src.stats.toc_unusable[0][1]


# --- the CLI over a registry: bytes fetched -----------------------------------------------------
def _blob_bytes(server, since: int) -> int:
    return sum(r.size for r in server.requests()[since:] if r.method == "GET" and "/blobs/" in r.path)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A 3-layer image of ~12 MB (incompressible data) with two small text targets, zstd:chunked."""
    work = tmp_path_factory.mktemp("big")
    noise = lambda seed: os.urandom(512 << 10)  # noqa: E731
    layers = [
        [file(f"usr/lib/big/part{i}.bin", noise(i)) for i in range(8)] + [file("usr/lib/app/main.py", b"print('v1')\n")],
        [file(f"usr/share/big/part{i}.bin", noise(i)) for i in range(8)] + [file("etc/app.conf", b"workers = 2\r\n")],
        [file(f"opt/big/part{i}.bin", noise(i)) for i in range(6)],
    ]
    src = build_oci(work / "gzip", layers, tag="v1")
    return zstd_chunked_copy(f"oci:{src}:v1", work / "zc", "v1"), work


def test_cold_audit_from_a_registry_fetches_under_5_percent(big, tmp_path, cli_env):
    from support.registry_server import seed, start_registry

    ref, work = big
    server = start_registry(tmp_path / "registry")
    try:
        seed(server, ref, "big:zc")
        q = empty_queue(tmp_path / "queue")
        write_patch(q, "0001-main.patch", [("usr/lib/app/main.py", b"print('v1')\n", b"print('v2')\n")])
        write_patch(q, "0002-conf.patch", [("etc/app.conf", b"workers = 2\r\n", b"workers = 4\r\n")])
        write_patch(q, "0003-new.patch", [("usr/local/bin/new-tool", None, b"#!/bin/sh\n")])  # absent everywhere
        layout = Path(ref.split(":")[1])
        image_bytes = sum(l["size"] for l in manifest(layout, "v1")[1]["layers"])
        since = len(server.requests())
        r = imgquilt("--json", "audit", "--image", server.ref("big:zc"), "--expect", "pending", cwd=q, env=cli_env)
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        assert [p["state"] for p in doc["patches"]] == ["pending"] * 3
        fetched = _blob_bytes(server, since)
        assert 0 < fetched < 0.05 * image_bytes, (fetched, image_bytes)
        ranged = [x for x in server.requests()[since:] if "/blobs/" in x.path and x.status == 206]
        assert ranged and all(x.status in (200, 206) for x in server.requests()[since:] if "/blobs/" in x.path)

        # an altered chunk in the registry's storage: exit 6, and the report says nothing was used
        digest = manifest(layout, "v1")[1]["layers"][0]["digest"]
        blob = server.blob_file(digest)
        toc = zstd_toc(blob.read_bytes(), manifest(layout, "v1")[1]["layers"][0]["annotations"])
        entry = next(e for e in toc["entries"] if e["name"].endswith("usr/lib/app/main.py"))
        flip_byte(blob, (entry["offset"] + entry["endOffset"]) // 2)
        cli_env = dict(cli_env, IMGQUILT_CACHE_DIR=str(tmp_path / "fresh-cache"))
        r = imgquilt("audit", "--image", server.ref("big:zc"), cwd=q, env=cli_env)
        assert r.code == 6, r.err  # the walk finds the frame broken; the layer, read whole, fails its digest
        assert "does not match its d" in r.err and "Nothing from it was used" in r.err
    finally:
        server.stop()


def test_a_registry_that_ignores_range_means_full_reads(big, tmp_path):
    """No Range support: the TOCs cannot be fetched, so every layer is read whole (and verified) instead."""
    from support.registry_server import seed, start_fault_proxy, start_registry
    from imgquilt.sources import open_source

    ref, _ = big
    server = start_registry(tmp_path / "registry")
    proxy, httpd = start_fault_proxy(server)
    try:
        seed(server, ref, "big:zc")
        proxy.fault = lambda method, path: ("no-range",) if "/blobs/" in path else None
        src = open_source(proxy.ref("big:zc"))
        got = src.read_targets(["usr/lib/app/main.py", "etc/app.conf", "usr/local/bin/new-tool"])
        assert got["usr/lib/app/main.py"].data == b"print('v1')\n" and got["usr/local/bin/new-tool"].data is None
        assert src.stats.layers_from_toc == [] and len(src.stats.layers_scanned) == 3
        assert {why for _, why in src.stats.toc_unusable} == {"the registry does not serve byte ranges"}
    finally:
        httpd.shutdown()
        httpd.server_close()
        server.stop()
