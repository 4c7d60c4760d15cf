"""Real producers of seekable layers for the tests.

- zstd:chunked: `skopeo copy --dest-compress-format zstd:chunked` (containers/image's compressor);
- eStargz (and stargz-snapshotter's own zstd:chunked): `ctr-remote image convert --estargz --oci`
  (Debian's stargz-snapshotter) on a containerd started here, as root, with its root, state and socket
  in a temp dir; the image goes in and out as an oci-archive.
"""
from __future__ import annotations

import json
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from support.imagetools import manifest, put_blob, run, set_manifest, skopeo_copy, uncompressed_layer


ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


def rewrite_top_layer_zstd_chunked(layout: Path, tag: str, *, split_max: int | None = None) -> dict[str, str]:
    """Rewrite the top layer of oci:LAYOUT:TAG with imgquilt's own zstd:chunked writer (TOC and tar-split;
    no tar-split past `split_max` bytes of file data); its annotations."""
    from imgquilt.image.sinks.zstd_chunked import zstd_chunked

    _, m = manifest(layout, tag)
    desc = m["layers"][-1]
    kw = {} if split_max is None else {"split_max": split_max}
    blob, annotations = zstd_chunked(uncompressed_layer(layout, desc["digest"]), level=3, mtime=None, **kw)
    desc.update(mediaType=ZSTD_LAYER, digest=put_blob(layout, bytes(blob)), size=len(blob), annotations=annotations)
    set_manifest(layout, tag, m)
    return annotations


def zstd_chunked_copy(src: str, layout: Path, tag: str) -> str:
    """`skopeo copy` `src` into oci:LAYOUT:TAG with zstd:chunked layers; the new reference."""
    skopeo_copy(src, f"oci:{layout}:{tag}", "--dest-compress-format", "zstd:chunked")
    return f"oci:{layout}:{tag}"


@contextmanager
def containerd(work: Path) -> Iterator[str]:
    """A containerd of our own; yields its socket address."""
    work.mkdir(parents=True, exist_ok=True)
    sock = work / "containerd.sock"
    config = work / "config.toml"
    config.write_text(f'version = 2\nroot = "{work / "root"}"\nstate = "{work / "state"}"\n'
                      f'[grpc]\n  address = "{sock}"\n'
                      '[plugins."io.containerd.grpc.v1.cri"]\n  disable_tcp_service = true\n')
    with open(work / "containerd.log", "wb") as log:
        proc = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["ctr", "--address", str(sock), "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("containerd did not start: " + (work / "containerd.log").read_text()[-2000:])
            time.sleep(0.2)
        yield str(sock)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ctr_remote_convert(address: str, src: str, layout: Path, tag: str, work: Path, *, zstdchunked: bool = False,
                       chunk_size: int = 0) -> str:
    """Convert `src` with `ctr-remote image convert --oci --estargz` (or `--zstdchunked`) into
    oci:LAYOUT:TAG; the new reference. `chunk_size`: eStargz's (0: its default, 4 MiB)."""
    work.mkdir(parents=True, exist_ok=True)
    name = f"imgquilt.test/{tag}:src"
    out_name = f"imgquilt.test/{tag}:seekable"
    archive = work / f"{tag}-src.tar"
    skopeo_copy(src, f"oci-archive:{archive}:{name}")
    ctr = ["ctr", "--address", address]
    run(*ctr, "images", "import", "--no-unpack", "--index-name", name, archive)
    run("ctr-remote", "--address", address, "image", "convert", "--oci",
        "--zstdchunked" if zstdchunked else "--estargz", "--estargz-chunk-size", str(chunk_size), name, out_name)
    converted = work / f"{tag}-seekable.tar"
    run(*ctr, "images", "export", converted, out_name)
    skopeo_copy(f"oci-archive:{converted}", f"oci:{layout}:{tag}")  # the one image it holds
    return f"oci:{layout}:{tag}"


def layer_annotations(layout: Path, tag: str) -> list[dict[str, str]]:
    return [l.get("annotations") or {} for l in manifest(layout, tag)[1]["layers"]]


def zstd_toc(blob: bytes, annotations: dict[str, str]) -> dict:
    """The TOC JSON of a zstd:chunked blob, read independently of imgquilt (for tampering tests)."""
    import zstandard

    position = next(v for k, v in annotations.items() if k.endswith("zstd-chunked.manifest-position"))
    offset, length = (int(x) for x in position.split(":")[:2])
    reader = zstandard.ZstdDecompressor().stream_reader(blob[offset:offset + length], read_across_frames=True)
    return json.loads(reader.read())
