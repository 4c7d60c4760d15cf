"""The layer sink: the patched files at their resolved paths, reproducible to the byte."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import subprocess
import struct
import tarfile
import zlib
from pathlib import Path

import pytest
import zstandard

from imgquilt.engine.result import RECORD_PATH, ApplyResult, FileResult
from imgquilt.errors import UsageError
from imgquilt.fs.types import DirMeta, ImageInfo, TargetFile
from imgquilt.image.mediatypes import OCI_LAYER as MEDIA_TAR, OCI_LAYER_GZIP as MEDIA_GZIP, OCI_LAYER_ZSTD as MEDIA_ZSTD
from imgquilt.verbs.apply import build_layer, layer_entries, layer_tar_bytes, write_layer

ROOT = DirMeta("usr", 0o755, 0, 0)
SITE = "usr/local/lib/python3.11/site-packages/demosvc"


def fr(path: str, resolved: str, old: bytes | None, new: bytes | None, *, mode: int = 0o644, uid: int = 0, gid: int = 0,
       parents: tuple[DirMeta, ...] = (), patches: tuple[str, ...] = ("0001-x.patch",)) -> FileResult:
    t = TargetFile(path, resolved, old, mode, uid, gid, "sha256:" + "1" * 64 if old is not None else None, parents)
    return FileResult(t, new, mode, uid, gid, patches)


def demo_result() -> ApplyResult:
    """Like the demo queue: a file through `bin -> usr/bin`, a uid-1000 file, a new file, a deletion."""
    files = [
        fr("bin/which", "usr/bin/which", b"#!/bin/sh\nold\n", b"#!/bin/sh\nnew\n", mode=0o755,
           parents=(ROOT, DirMeta("usr/bin", 0o755, 0, 0))),
        fr("home/app/config.toml", "home/app/config.toml", b"port = 1\n", b"port = 2\n", mode=0o640, uid=1000, gid=1000,
           parents=(DirMeta("home", 0o755, 0, 0), DirMeta("home/app", 0o750, 1000, 1000))),
        fr("usr/local/bin/demosvc-healthcheck", "usr/local/bin/demosvc-healthcheck", None, b"#!/usr/bin/env python3\n", mode=0o755,
           parents=(ROOT, DirMeta("usr/local", 0o755, 0, 0), DirMeta("usr/local/bin", 0o755, 0, 0))),
        fr(f"{SITE}/legacy.py", f"{SITE}/legacy.py", b"old = 1\n", None,
           parents=(ROOT, DirMeta("usr/local", 0o755, 0, 0), DirMeta("usr/local/lib", 0o2775, 0, 50))),
        FileResult(TargetFile(RECORD_PATH, RECORD_PATH, None, parents=(DirMeta("var", 0o755, 0, 0), DirMeta("var/lib", 0o755, 0, 0))),
                   b'{"series_sha256": "ab"}\n', 0o644, 0, 0, ()),
    ]
    files.sort(key=lambda f: f.resolved)
    return ApplyResult(ImageInfo("oci:demo:latest", "sha256:" + "2" * 64), "ab" * 32, ("0001-x.patch",), tuple(files), True)


def members(tar_bytes: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tf:
        return tf.getmembers()


@pytest.fixture(autouse=True)
def _no_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def test_layer_holds_final_files_at_resolved_paths_with_their_owner_and_mode() -> None:
    tar = layer_tar_bytes(demo_result())
    by_name = {m.name: m for m in members(tar)}
    which = by_name["usr/bin/which"]
    assert which.isfile() and which.mode == 0o755 and (which.uid, which.gid) == (0, 0)
    assert "bin/which" not in by_name  # never at the symlinked name
    cfg = by_name["home/app/config.toml"]
    assert (cfg.mode, cfg.uid, cfg.gid) == (0o640, 1000, 1000)
    assert by_name["usr/local/bin/demosvc-healthcheck"].mode == 0o755
    assert by_name[RECORD_PATH].isfile()
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        assert tf.extractfile("usr/bin/which").read() == b"#!/bin/sh\nnew\n"


def test_parents_carry_the_image_metadata_and_missing_ones_are_0755_root() -> None:
    by_name = {m.name: m for m in members(layer_tar_bytes(demo_result()))}
    app = by_name["home/app"]
    assert app.isdir() and (app.mode, app.uid, app.gid) == (0o750, 1000, 1000)
    lib = by_name["usr/local/lib"]
    assert (lib.mode, lib.uid, lib.gid) == (0o2775, 0, 50)  # setgid bit and group kept
    new_dir = by_name["var/lib/imgquilt"]  # not in the image
    assert new_dir.isdir() and (new_dir.mode, new_dir.uid, new_dir.gid) == (0o755, 0, 0)
    # every parent of every member is present
    names = set(by_name)
    for n in names:
        parts = n.split("/")
        assert all("/".join(parts[:i]) in names for i in range(1, len(parts))), n


def test_a_deleted_file_becomes_a_whiteout() -> None:
    by_name = {m.name: m for m in members(layer_tar_bytes(demo_result()))}
    wh = by_name[f"{SITE}/.wh.legacy.py"]
    assert wh.isfile() and wh.size == 0
    assert f"{SITE}/legacy.py" not in by_name


def test_entries_are_sorted_as_a_tree_walk_pax_with_empty_names_and_mtime_zero() -> None:
    tar = layer_tar_bytes(demo_result())
    ms = members(tar)
    names = [m.name for m in ms]
    assert names == sorted(names, key=lambda n: n.split("/"))
    for m in ms:
        assert m.mtime == 0 and m.uname == "" and m.gname == ""
        assert m.devmajor == 0 and m.devminor == 0
    assert tar[257:265] == b"ustar\x0000"  # POSIX magic (PAX format), not GNU's "ustar  \0"


def test_source_date_epoch_sets_every_mtime_and_the_argument_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert {m.mtime for m in members(layer_tar_bytes(demo_result()))} == {1700000000}
    assert {m.mtime for m in members(layer_tar_bytes(demo_result(), epoch=42))} == {42}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        layer_tar_bytes(demo_result())


@pytest.mark.parametrize(
    ("name", "media_type", "decompress"),
    [
        ("fix.tar", MEDIA_TAR, lambda b: b),
        ("fix.tar.gz", MEDIA_GZIP, gzip.decompress),
        ("fix.tar.zst", MEDIA_ZSTD, lambda b: zstandard.ZstdDecompressor().decompress(b)),
    ],
)
def test_two_runs_give_byte_identical_files_with_matching_digests(tmp_path: Path, name: str, media_type: str, decompress) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ia = write_layer(demo_result(), a / name)
    ib = write_layer(demo_result(), b / name)
    data = (a / name).read_bytes()
    assert data == (b / name).read_bytes()
    assert ia.digest == ib.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert ia.media_type == media_type and ia.size == len(data) and ia.path == a / name
    tar = decompress(data)
    assert ia.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert tar == layer_tar_bytes(demo_result())
    assert [p.name for p in a.iterdir()] == [name]  # no temp file left


def test_gzip_header_has_no_name_and_no_time(tmp_path: Path) -> None:
    info = write_layer(demo_result(), tmp_path / "fix.tar.gz")
    head = info.path.read_bytes()[:10]
    assert head[:3] == b"\x1f\x8b\x08"
    assert head[3] == 0  # no FNAME, no FEXTRA, no FCOMMENT
    assert head[4:8] == b"\0\0\0\0"  # mtime 0


def test_gnu_tar_reads_the_layer(tmp_path: Path) -> None:
    info = write_layer(demo_result(), tmp_path / "fix.tar.gz")
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(info.path), "-C", str(out), "--numeric-owner"], check=True)
    assert (out / "usr/bin/which").read_bytes() == b"#!/bin/sh\nnew\n"
    st = (out / "home/app/config.toml").stat()
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert st.st_mode & 0o7777 == 0o640


def test_long_and_non_ascii_paths_are_kept_exactly() -> None:
    deep = "usr/share/" + "/".join(["sehr-langer-verzeichnisname"] * 6) + "/größe.txt"
    res = ApplyResult(ImageInfo("x", None), "0" * 64, ("p",), (fr(deep, deep, b"a\n", b"b\n"),), False)
    tar = layer_tar_bytes(res)
    assert len(deep.encode()) > 100
    assert deep in [m.name for m in members(tar)]
    assert tar == layer_tar_bytes(res)


def test_unknown_suffix_and_missing_directory_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\.tar, \.tar\.gz or \.tar\.zst"):
        write_layer(demo_result(), tmp_path / "fix.zip")
    with pytest.raises(UsageError, match="does not exist"):
        write_layer(demo_result(), tmp_path / "no" / "such" / "fix.tar")
    (tmp_path / "adir.tar").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        write_layer(demo_result(), tmp_path / "adir.tar")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.tar"]


def test_a_failing_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "fix.tar.gz"
    dest.write_bytes(b"previous layer")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(UsageError, match="No space left"):
        write_layer(demo_result(), dest)
    assert dest.read_bytes() == b"previous layer"
    assert [p.name for p in tmp_path.iterdir()] == ["fix.tar.gz"]


def test_a_file_that_is_also_a_parent_is_refused() -> None:
    res = ApplyResult(ImageInfo("x", None), "0" * 64, ("p",), (fr("a", "a", b"1", b"2"), fr("a/b", "a/b", None, b"3")), False)
    with pytest.raises(Exception, match="both a file and a parent"):
        layer_entries(res)


def test_build_layer_compressions_share_one_diff_id() -> None:
    ids = {build_layer(demo_result(), c).diff_id for c in ("none", "gzip", "zstd")}
    assert len(ids) == 1


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_umoci_applies_the_layer_onto_an_image(tmp_path: Path) -> None:
    """umoci raw add-layer takes our tar as a layer; the unpacked rootfs holds the patched files."""
    img = tmp_path / "img"
    subprocess.run(["umoci", "init", "--layout", str(img)], check=True)
    subprocess.run(["umoci", "new", "--image", f"{img}:t"], check=True)
    tar = tmp_path / "fix.tar"
    write_layer(demo_result(), tar)
    subprocess.run(["umoci", "raw", "add-layer", "--image", f"{img}:t", str(tar)], check=True)
    subprocess.run(["umoci", "unpack", "--image", f"{img}:t", str(tmp_path / "bundle")], check=True, capture_output=True)
    rootfs = tmp_path / "bundle" / "rootfs"
    assert (rootfs / "usr/bin/which").read_bytes() == b"#!/bin/sh\nnew\n"
    assert (rootfs / "home/app").stat().st_mode & 0o7777 == 0o750
    assert not (rootfs / SITE / ".wh.legacy.py").exists()


def test_a_bad_destination_is_caught_before_anything_is_computed(tmp_path: Path) -> None:
    from imgquilt.image.sinks.layer import check_layer_destination

    assert check_layer_destination(tmp_path / "fix.tar.zst") == "zstd"
    for bad in (tmp_path / "fix.rar", tmp_path / "missing" / "fix.tar"):
        with pytest.raises(UsageError):
            check_layer_destination(bad)
    assert list(tmp_path.iterdir()) == []


def _big_result() -> ApplyResult:
    """A layer of several compressor pieces (FEED = 1 MiB): text and incompressible bytes."""
    rnd = hashlib.sha256(b"seed").digest() * 1
    noise = b"".join(hashlib.sha256(rnd + i.to_bytes(4, "big")).digest() for i in range(40_000))  # 1.25 MiB
    files = [fr(f"{SITE}/m{i}.py", f"{SITE}/m{i}.py", b"x = 1\n", (f"x = {i}\n" * 40_000).encode() + noise[: i * 300_000],
                parents=(ROOT,)) for i in range(5)]
    return ApplyResult(ImageInfo("oci:demo:latest", "sha256:" + "2" * 64), "ab" * 32, ("0001-x.patch",), tuple(files), True)


def test_a_layer_of_many_pieces_has_the_bytes_of_serial_compression(tmp_path: Path) -> None:
    """The compressor is fed fixed FEED pieces: the blob is byte for byte what compressing the tar piece by
    piece here gives (the bytes every earlier layer of this writer had)."""
    from imgquilt.image.sinks.layer import FEED

    res = _big_result()
    tar = layer_tar_bytes(res)
    assert len(tar) > 4 * FEED
    comp = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
    body = b"".join(comp.compress(tar[i : i + FEED]) for i in range(0, len(tar), FEED)) + comp.flush()
    want_gz = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\xff" + body + struct.pack("<II", zlib.crc32(tar), len(tar))
    zc = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compressobj(size=len(tar))
    want_zst = b"".join(zc.compress(tar[i : i + FEED]) for i in range(0, len(tar), FEED)) + zc.flush()
    for name, want in (("big.tar.gz", want_gz), ("big.tar.zst", want_zst)):
        info = write_layer(res, tmp_path / name)
        got = (tmp_path / name).read_bytes()
        assert got == want
        assert info.digest == "sha256:" + hashlib.sha256(want).hexdigest() and info.size == len(want)
        assert info.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()



def _many_changes(n: int = 40) -> list:
    """A 5 MB layer: 40 files of 120 KB of random bytes."""
    import random

    from imgquilt.verbs.apply import file_changes

    rng = random.Random(7)
    files = tuple(fr(f"{SITE}/m{i:02d}.py", f"{SITE}/m{i:02d}.py", b"x = 1\n", rng.randbytes(120_000),
                     parents=(ROOT,)) for i in range(n))
    return file_changes(ApplyResult(ImageInfo("oci:many:latest", "sha256:" + "2" * 64), "ab" * 32, ("0001-x.patch",), files, True))


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_a_layer_compressed_beside_the_tar_is_the_layer_compressed_inline(compression, monkeypatch) -> None:
    """The compressor's thread changes when the bytes are made, never which: a 5 MB layer written with
    it and with every piece compressed inline on the writer's thread are the same blob."""
    from imgquilt.image.sinks import layer as sinks

    changes = _many_changes()
    threaded = io.BytesIO()
    got = sinks.stream_layer(changes, threaded, compression)
    monkeypatch.setattr(sinks._Sink, "_feed_aside", lambda self, piece: self._feed(piece))
    inline = io.BytesIO()
    assert sinks.stream_layer(changes, inline, compression) == got
    assert threaded.getvalue() == inline.getvalue()
    tar = gzip.decompress(threaded.getvalue()) if compression == "gzip" else zstandard.ZstdDecompressor().decompressobj().decompress(threaded.getvalue())
    assert "sha256:" + hashlib.sha256(tar).hexdigest() == got[1] and len(tar) > 4 * sinks.FEED  # pieces went to the thread


def test_a_write_error_on_the_compressors_thread_is_raised_and_no_thread_is_left() -> None:
    import errno
    import threading

    from imgquilt.image.sinks import layer as sinks

    class Full(io.BytesIO):
        def write(self, data) -> int:
            if self.tell() > 2 * sinks.FEED:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

    changes = _many_changes()
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(OSError) as exc:
        sinks.stream_layer(changes, Full(), "gzip", level=1)
    assert exc.value.errno == errno.ENOSPC
    assert not [t for t in threading.enumerate() if t.name.startswith("imgquilt-compress") and t.name not in before]
