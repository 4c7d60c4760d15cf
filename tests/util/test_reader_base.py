"""One reader base for the stream classes (issue 33, point 3): every stream gives its own `_read_some`
(and `_skip_some` where it can move without reading); read, readinto, read_exactly, skip, drain,
iteration, close and `with` are util.reader's. The checks stay as strict as before: a skip or drain
through a hashing stream still reads every byte through the hash, a wrong digest, a short blob and a
size other than the descriptor's are refused."""

from __future__ import annotations

import ast
import hashlib
import inspect
import io
import os
from pathlib import Path

import httpx
import pytest

from imgquilt.errors import BadImage, DigestMismatch
from imgquilt.image import image_source
from imgquilt.image.digests import CopyCheck
from imgquilt.image.layers import blob_layer, blobio, readahead, tar_split, tarwalk, toc_walk
from imgquilt.image.layers.compression import Decompressed
from imgquilt.image.registry.blobstream import RegistryBlobStream
from imgquilt.util.reader import Reader, Wrapper

STREAMS = [
    blobio.FileRange,
    blobio.FoldedRange,
    blobio.CheckedRange,
    blobio.HashingRange,
    blobio.HashingStream,
    RegistryBlobStream,
    readahead.ChunkQueue,
    readahead.ReadAhead,
    readahead.SharedHandle,
    Decompressed,
    blob_layer.TarStream,
    tarwalk.BytesStream,
    tar_split._SplitStream,
    toc_walk._WalkStream,
    image_source._Cancellable,
    image_source._Counted,
]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("cls", STREAMS, ids=lambda c: c.__name__)
def test_every_stream_is_on_the_base_and_writes_no_read_or_skip_of_its_own(cls):
    assert issubclass(cls, Reader)
    for name in ("read", "skip", "drain", "__enter__", "__exit__", "__iter__", "read_exactly"):
        owner = next(k for k in cls.__mro__ if name in k.__dict__)
        allowed = (Reader, Wrapper) if name != "drain" else (Reader, Wrapper, blobio.CheckedRange, Decompressed)
        assert owner in allowed, f"{cls.__name__}.{name} is written again in {owner.__name__}"


def test_no_other_read_or_skip_in_the_image_package():
    """read/skip/drain/readinto are written in util/reader.py only (blobio and the registry stream each had
    a skip of their own, nearly every stream a read); what is left are fast paths and the io adapter."""
    root = Path(inspect.getfile(blobio)).parents[1]
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for fn in node.body:
                stub = (
                    isinstance(fn, ast.FunctionDef)
                    and len(fn.body) == 1
                    and isinstance(fn.body[0], ast.Expr)
                    and getattr(fn.body[0].value, "value", None) is Ellipsis
                )
                if (
                    isinstance(fn, ast.FunctionDef)
                    and fn.name in ("read", "skip", "drain", "readinto")
                    and not stub
                    and [a.arg for a in fn.args.args[1:2]] in ([], ["n"], ["b"])
                ):
                    found.append(f"{node.name}.{fn.name}")
    # left: preadv straight into the caller's buffer (FileRange, FoldedRange); a seek to the end then the
    # check, and the raw blob's check (the drains); the io.RawIOBase face of a blob (BlobFile, for
    # Layer.open_blob); toc_walk's cursor over fetched ranges (exact takes, give_back, its end an error)
    assert sorted(found) == sorted(
        ["FileRange.readinto", "FoldedRange.readinto", "CheckedRange.drain", "Decompressed.drain"]
        + ["BlobFile.readinto", "BlobFile.read", "_Cursor.skip"]
    )


def _blob(tmp_path: Path, data: bytes) -> blobio.BlobLocation:
    path = tmp_path / "blob"
    path.write_bytes(b"head" + data + b"tail")
    return blobio.BlobLocation(path, 4, len(data))


class Pieces(Reader):
    """A stream handing out at most 3 bytes a read: the base must loop."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def _read_some(self, n: int) -> bytes:
        out = self._data[self._at : self._at + min(n, 3)]
        self._at += len(out)
        return out


def test_base_read_exactly_readinto_iteration_skip_and_with():
    data = bytes(range(200)) * 3
    s = Pieces(data)
    assert s.read(0) == b""
    assert s.read(10) == data[:3]  # a read may be short; read_exactly is not
    assert s.read_exactly(10) == data[3:13]
    buf = bytearray(5)
    assert s.readinto(buf) == 3 and bytes(buf[:3]) == data[13:16]
    assert s.skip(100) == 100
    s.chunk = 7
    assert b"".join(s) == data[116:]
    assert s.read_exactly(4) == b"" and s.skip(4) == 0 and s.read() == b""
    with Pieces(data) as t:
        assert t.read() == data and not t.closed
    assert t.closed


def test_file_range_skip_seeks_and_read_exactly_stops_at_the_range_end(tmp_path):
    data = os.urandom(5000)
    with blobio.FileRange(_blob(tmp_path, data)) as f:
        assert f.seekable and f.skip(1000) == 1000 and f.bytes_read == 0  # a seek, nothing read
        assert f.read_exactly(10) == data[1000:1010]
        buf = bytearray(100)
        assert f.readinto(buf) == 100 and bytes(buf) == data[1010:1110]
        assert f.read() == data[1110:]  # never past the range: the file's tail is not the blob's
        assert f.read_exactly(5) == b""
    assert f.closed


def test_a_range_past_the_file_end_is_refused_on_open(tmp_path):
    loc = _blob(tmp_path, b"x" * 10)
    with pytest.raises(BadImage, match="is truncated: it should hold 20 bytes but the file ends after 14"):
        blobio.FileRange(blobio.BlobLocation(loc.path, 4, 20))


@pytest.mark.parametrize("end", ["read", "skip", "drain", "iterate"])
def test_hashing_range_checks_its_digest_however_its_end_is_reached(tmp_path, end):
    data = os.urandom(3 << 20)  # more than one 2 MiB step
    loc = _blob(tmp_path, data)

    def finish(s):
        if end == "read":
            return s.read()
        if end == "skip":
            assert s.skip(len(data)) == len(data)
            return s.read(1)  # the end: the digest is checked there
        if end == "drain":
            return s.drain()
        return list(s)

    with blobio.HashingRange(loc, sha(data)) as good:
        finish(good)
        assert good.verified and good.bytes_read == len(data)  # a skip read every byte through the hash
    with blobio.HashingRange(loc, sha(data + b"!")) as bad, pytest.raises(DigestMismatch, match="does not match"):
        finish(bad)
    assert not bad.verified


def test_hashing_range_copy_refuses_a_short_blob_by_its_byte_count(tmp_path):
    data = b"abc" * 100
    path = tmp_path / "blob"
    path.write_bytes(data)
    loc = blobio.BlobLocation(path, 0, len(data) + 10)  # the descriptor says 10 bytes more
    with blobio.HashingRange(loc, sha(data), copy=CopyCheck(len(data) + 10, "copy again")) as s:
        with pytest.raises(DigestMismatch, match=r"read 300 bytes with digest .* expected 310 bytes"):
            s.drain()


def test_checked_range_skip_seeks_but_its_end_and_drain_check(tmp_path):
    data = os.urandom(1 << 20)
    loc = _blob(tmp_path, data)
    with blobio.CheckedRange(loc, sha(data + b"x")) as s:
        assert s.skip(len(data) - 5) == len(data) - 5 and not s.verified  # a seek checks nothing yet
        assert s.read(100) == data[-5:]
        with pytest.raises(DigestMismatch):
            s.read(100)
    with blobio.CheckedRange(loc, sha(data + b"x")) as s, pytest.raises(DigestMismatch):
        s.drain()
    with blobio.CheckedRange(loc, sha(data), fold=True) as s:
        inner = s.dup()
        assert inner.skip(1000) == 1000 and s.read_exactly(10) == data[:10]  # the fold's reader hashes its skip
        inner.close()
        s.drain()
        assert s.verified


def test_hashing_stream_checks_at_the_end_of_a_whole_read(tmp_path):
    data = os.urandom(70000)
    loc = _blob(tmp_path, data)
    assert blobio.HashingStream(blobio.FileRange(loc), sha(data), what="tar").read() == data
    s = blobio.HashingStream(blobio.FileRange(loc), sha(b"other"), what="tar")
    with pytest.raises(DigestMismatch):
        s.read()  # read(-1) reaches the end, so the digest is checked before the bytes are handed out
    s = blobio.HashingStream(blobio.FileRange(loc), sha(b"other"), what="tar")
    with pytest.raises(DigestMismatch):
        s.skip(len(data) + 1)  # skipping reads through the hash


def _response(body: bytes, pieces: int = 7) -> httpx.Response:
    step = max(1, len(body) // pieces)
    return httpx.Response(200, stream=httpx.ByteStream(body) if pieces == 1 else _Chunks(body, step))


class _Chunks(httpx.SyncByteStream):
    def __init__(self, body: bytes, step: int) -> None:
        self._body, self._step = body, step

    def __iter__(self):
        for at in range(0, len(self._body), self._step):
            yield self._body[at : at + self._step]


@pytest.mark.parametrize("end", ["read", "skip", "drain"])
def test_registry_stream_refuses_a_wrong_digest_or_size_however_its_end_is_reached(end):
    body = os.urandom(300000)

    def finish(s):
        if end == "read":
            return s.read()
        if end == "skip":
            s.skip(len(body) + 1)
            return s.read(1)
        return s.drain()

    with RegistryBlobStream(_response(body), sha(body), size=len(body), what="layer") as s:
        head = s.peek(10)
        assert head == body[:10] and s.read_exactly(10) == head
        finish(s)
        assert s.verified and s.bytes_read == len(body)
    with RegistryBlobStream(_response(body), sha(body + b"x"), size=None, what="layer") as s:
        with pytest.raises(DigestMismatch, match="the registry does not match its digest"):
            finish(s)
    with RegistryBlobStream(_response(body), sha(body), size=len(body) - 1, what="layer") as s:
        with pytest.raises(DigestMismatch, match=rf"read {len(body)} bytes .* expected {len(body) - 1} bytes"):
            finish(s)  # longer than its descriptor: refused as it arrives, whatever the digest
    with RegistryBlobStream(_response(body), sha(body), size=len(body) + 1, what="layer") as s:
        with pytest.raises(DigestMismatch, match=rf"read {len(body)} bytes .* expected {len(body) + 1} bytes"):
            finish(s)  # a short body
    s = RegistryBlobStream(_response(body), sha(body), size=len(body), what="layer")
    s.close()
    assert s.closed
    with pytest.raises(BadImage, match="was closed before its end"):
        s.read(1)


def test_read_ahead_and_its_shared_handle_hand_over_the_inner_bytes_and_its_check(tmp_path):
    data = os.urandom(3 << 20)
    loc = _blob(tmp_path, data)
    ahead = readahead.ReadAhead(blobio.HashingRange(loc, sha(data)))
    handle = ahead.dup()
    assert handle.read_exactly(5) == data[:5] and ahead.skip(10) == 10 and ahead.read_exactly(5) == data[15:20]
    handle.close()
    assert handle.closed and not ahead.closed  # closing the handle closes nothing
    ahead.drain()
    assert ahead.verified
    ahead.close()
    assert ahead.closed
    bad = readahead.ReadAhead(blobio.HashingRange(loc, sha(b"")))
    with pytest.raises(DigestMismatch):
        bad.drain()  # drops the chunks, but they were hashed as they were read
    bad.close()


def test_bytes_stream_reads_bytes_and_spooled_contents_alike(tmp_path):
    from imgquilt.fs.content import SpoolWriter

    data = os.urandom(50000)
    w = SpoolWriter(at=1000)
    w.write(data)
    spooled = w.finish()
    for content in (data, spooled):
        s = tarwalk.BytesStream(content)
        assert s.read(3) == data[:3] and s.skip(10) == 10 and s.read_exactly(7) == data[13:20]
        assert s.read() == data[20:] and s.skip(1) == 0


def test_blob_file_is_still_an_io_reader(tmp_path):
    data = os.urandom(10000)
    f = blobio.BlobFile(blobio.HashingRange(_blob(tmp_path, data), sha(data)))
    assert io.BufferedReader(f).read() == data
