"""A zstd:chunked layer with a tar-split (containers/storage 1.47 on, and `apply --compression
zstd:chunked`): its TOC is checked against the tar-split instead of walking the tar stream. A TOC, a
tar-split and every size and offset they declare are untrusted until checked: whatever the lie (in the
TOC, in the tar-split, in both, digests updated so that they verify), imgquilt's verdict is that of
reading the layer whole; a tar-split that does not hash to the TOC's tarSplitDigest is exit 6.

The layer holds app/a.py at its base (OLD) and app/b.py holding the patched bytes (NEW); a later member
replaces app/c.py (first NEW, then OLD). The queue patches a.py and c.py from OLD to NEW: read whole,
both are pending (audit exit 5)."""
from __future__ import annotations

import base64
import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from imgquilt.image.image_source import ImageSource
from imgquilt.image.layers.blobio import VerifiedBlobs
from imgquilt.sources import open_image
from support.imagetools import build_oci, blob_path, file, manifest, put_blob, set_manifest
from support.qtools import empty_queue, imgquilt, write_patch
from support.seekable_tools import rewrite_top_layer_zstd_chunked

OLD = b"VALUE = 'old'\n" + b"# padding\n" * 40
NEW = b"VALUE = 'new'\n" + b"# padding\n" * 40
PAD = b"".join(b"filler %d\n" % i for i in range(3000))


def _skippable(data: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A50, len(data)) + data



@pytest.fixture(autouse=True)
def _walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These local layers are small, so `auto` would read them whole (toc_walk.walk_locally): the walk
    is what is tested here."""
    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "walk")

@pytest.fixture(scope="module")
def chunked(tmp_path_factory) -> Path:
    """The image with its layer written by imgquilt's zstd:chunked writer (TOC and tar-split)."""
    work = tmp_path_factory.mktemp("tar-split")
    layout = build_oci(work / "img", [[file("app/a.py", OLD), file("app/b.py", NEW), file("app/c.py", NEW),
                                       file("app/pad.txt", PAD), file("app/c.py", OLD)]], tag="v1")
    rewrite_top_layer_zstd_chunked(layout, "v1")
    return layout


def _parts(layout: Path) -> tuple[dict, bytes, dict, list[dict]]:
    """(layer descriptor, the blob's data frames, TOC, tar-split lines) of the image's layer."""
    import zstandard

    _, m = manifest(layout, "v1")
    desc = m["layers"][-1]
    blob = blob_path(layout, desc["digest"]).read_bytes()
    ann = desc["annotations"]
    t_off, t_len = (int(x) for x in ann["io.containers.zstd-chunked.manifest-position"].split(":")[:2])
    s_off, s_len = (int(x) for x in ann["io.github.containers.zstd-chunked.tarsplit-position"].split(":")[:2])
    d = zstandard.ZstdDecompressor()
    toc = json.loads(d.stream_reader(blob[t_off:t_off + t_len]).read())
    lines = [json.loads(x) for x in d.stream_reader(blob[s_off:s_off + s_len]).read().splitlines()]
    return desc, blob[:t_off - 8], toc, lines


def rewrite(layout: Path, *, edit_toc=None, edit_split=None, honest_digest: bool = True) -> None:
    """Rewrite the layer's TOC and tar-split as its author could: new blob, every digest, size,
    checksum and position updated so that each verifies (the tar-split's only if `honest_digest`)."""
    import zstandard

    _, m = manifest(layout, "v1")
    desc, data, toc, lines = _parts(layout)
    if edit_split:
        edit_split(lines)
    split = b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in lines)
    packed_split = zstandard.ZstdCompressor().compress(split)
    if honest_digest:
        toc["tarSplitDigest"] = "sha256:" + hashlib.sha256(packed_split).hexdigest()
    if edit_toc:
        edit_toc(toc["entries"])
    raw = json.dumps(toc).encode()
    packed = zstandard.ZstdCompressor().compress(raw)
    t_off = len(data) + 8
    s_off = t_off + len(packed) + 8
    footer = struct.pack("<QQQQQQQ", t_off, len(packed), len(raw), 1, s_off, len(packed_split), len(split)) + b"GnUlInUx"
    new = data + _skippable(packed) + _skippable(packed_split) + _skippable(footer)
    layer = m["layers"][-1]
    layer.update(digest=put_blob(layout, new), size=len(new))
    ann = layer["annotations"]
    ann["io.containers.zstd-chunked.manifest-position"] = f"{t_off}:{len(packed)}:{len(raw)}:1"
    ann["io.containers.zstd-chunked.manifest-checksum"] = "sha256:" + hashlib.sha256(packed).hexdigest()
    ann["io.github.containers.zstd-chunked.tarsplit-position"] = f"{s_off}:{len(packed_split)}:{len(split)}"
    set_manifest(layout, "v1", m)


def _queue(tmp: Path) -> Path:
    q = empty_queue(tmp / "q")
    write_patch(q, "0001-a.patch", [("app/a.py", OLD, NEW)])
    write_patch(q, "0002-c.patch", [("app/c.py", OLD, NEW)])
    return q


def _states(r) -> dict[str, str]:
    return {f["path"]: f["state"] for p in json.loads(r.out)["patches"] for f in p["files"]}


# --- lies in the TOC, caught by the tar-split ------------------------------------------------------
def _entry(entries: list[dict], name: str, nth: int = 0) -> dict:
    return [e for e in entries if e.get("name") == name and e.get("type") == "reg"][nth]


def point_a_at_b(entries):  # a.py's frames and digest are b.py's (b.py holds the patched bytes), b.py "empty"
    a, b = _entry(entries, "app/a.py"), _entry(entries, "app/b.py")
    for k in ("offset", "endOffset", "digest"):
        a[k] = b.pop(k)
    b.pop("size")


def smaller(entries):  # a.py is said to be shorter than its member, with the digest of that prefix
    a = _entry(entries, "app/a.py")
    a["size"] = len(NEW) - 3
    a["digest"] = "sha256:" + hashlib.sha256(OLD[:len(NEW) - 3]).hexdigest()


def zeroed(entries):  # a.py's chunk is said to be zeros: nothing to fetch
    a = _entry(entries, "app/a.py")
    a["chunkType"] = "zeros"
    a["digest"] = "sha256:" + hashlib.sha256(bytes(len(OLD))).hexdigest()


def deep_name(entries):  # the member that replaces c.py is given another name: the TOC keeps c.py's first (NEW)
    _entry(entries, "app/c.py", 1)["name"] = "app/" + "d/" * 60 + "c.py"


def dropped(entries):  # the member that replaces c.py is not listed at all
    entries.remove(_entry(entries, "app/c.py", 1))


def overlapping(entries):  # a.py's frames are said to run into b.py's
    _entry(entries, "app/a.py")["endOffset"] = _entry(entries, "app/b.py")["offset"] + 1


def outside(entries):  # a.py's frames are said to lie past the layer's data
    a = _entry(entries, "app/a.py")
    a["offset"], a["endOffset"] = 10 ** 9, 10 ** 9 + 100


# --- lies in the tar-split (the TOC honest, its tarSplitDigest updated) --------------------------------
def _file_line(lines: list[dict], name: str, nth: int = 0) -> dict:
    return [x for x in lines if x["type"] == 1 and x.get("name") == name][nth]


def _header_edit(lines: list[dict], name: str, nth: int, size: int) -> None:
    """Set the tar header's size field of member `name` (its `nth`) in the tar-split's raw segments."""
    seen = 0
    for x in lines:
        if x["type"] != 2:
            continue
        raw = bytearray(base64.b64decode(x["payload"]))
        for at in range(0, len(raw) - 511):
            if raw[at:at + len(name) + 1] == name.encode() + b"\0" and raw[at + 257:at + 262] == b"ustar":
                if seen == nth:
                    raw[at + 124:at + 136] = b"%011o\0" % size
                    raw[at + 148:at + 156] = b" " * 8
                    raw[at + 148:at + 156] = b"%06o\0 " % sum(raw[at:at + 512])
                    x["payload"] = base64.b64encode(bytes(raw)).decode()
                    return
                seen += 1
    raise AssertionError(f"no header for {name}")


def split_wrong_size(lines):  # a.py's data is said to be 512 bytes longer than its header says
    _file_line(lines, "app/a.py")["size"] = len(OLD) + 512


def split_header_and_size(lines):  # a.py's header and file entry agree on a size the TOC does not give
    _header_edit(lines, "app/a.py", 0, len(OLD) + 512)
    _file_line(lines, "app/a.py")["size"] = len(OLD) + 512


def split_dropped(lines):  # the member replacing c.py is left out of the tar-split (header and data)
    i = lines.index(_file_line(lines, "app/c.py", 1))
    del lines[i - 1:i + 1]


def split_renamed(lines):  # the file entry names another path than its header
    _file_line(lines, "app/c.py", 1)["name"] = "app/e.py"


def split_truncated(lines):  # the last lines (the end-of-archive blocks, the last member) are missing
    del lines[-3:]


LIES = [("toc", f) for f in (point_a_at_b, smaller, zeroed, deep_name, dropped, overlapping, outside)] + \
       [("split", f) for f in (split_wrong_size, split_header_and_size, split_dropped, split_renamed, split_truncated)]


@pytest.mark.parametrize("where,lie", LIES, ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_a_lie_in_the_toc_or_tar_split_gives_the_verdict_of_a_full_read(chunked: Path, tmp_path: Path, cli_env,
                                                                         where, lie) -> None:
    layout = tmp_path / "img"
    shutil.copytree(chunked, layout)
    rewrite(layout, **({"edit_toc": lie} if where == "toc" else {"edit_split": lie}))
    ref = f"oci:{layout}:v1"
    src = ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref)
    got = src.read_targets(["app/a.py", "app/c.py"])
    assert (got["app/a.py"].data, got["app/c.py"].data) == (OLD, OLD)
    assert src.stats.toc_unusable, "the lie was believed"
    q = _queue(tmp_path)
    r = imgquilt("audit", "--image", f"oci:{layout}:v1", "--json", cwd=q, env=cli_env, check=5)
    assert _states(r) == {"app/a.py": "pending", "app/c.py": "pending"}


def test_a_tar_split_that_is_not_the_one_the_toc_names_is_exit_6(chunked: Path, tmp_path: Path, cli_env) -> None:
    layout = tmp_path / "img"
    shutil.copytree(chunked, layout)
    rewrite(layout, edit_split=split_wrong_size, honest_digest=False)
    q = _queue(tmp_path)
    r = imgquilt("audit", "--image", f"oci:{layout}:v1", cwd=q, env=cli_env, check=6)
    assert "tar-split" in r.err


def test_an_honest_tar_split_decides_the_layer_without_a_walk(chunked: Path, tmp_path: Path, cli_env) -> None:
    """Lazy and full, cold and warm: the same bytes and the same verdicts; the layer decided by its
    TOC and tar-split alone (nothing of its tar stream fetched but the target's frames)."""
    ref = f"oci:{chunked}:v1"

    def open_source(ref: str, **kw) -> ImageSource:  # no shared cache: every read cold
        return ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref, **kw)

    lazy = open_source(ref)
    whole = open_source(ref, use_tocs=False)  # read whole: what skopeo, podman and the diff_id see
    paths = ["app/a.py", "app/b.py", "app/c.py", "app/pad.txt"]
    got, want = lazy.read_targets(paths), whole.read_targets(paths)
    assert {p: (t.data, t.mode) for p, t in got.items()} == {p: (t.data, t.mode) for p, t in want.items()}
    assert lazy.stats.layers_by_tar_split == 1 and not lazy.stats.toc_unusable and lazy.stats.runs_skipped == 0
    one = open_source(ref)
    assert one.read_targets(["app/a.py"])["app/a.py"].data == OLD
    desc, _, toc, _ = _parts(chunked)
    a = _entry(toc["entries"], "app/a.py")
    ann = desc["annotations"]
    toc_len = int(ann["io.containers.zstd-chunked.manifest-position"].split(":")[1])
    split_len = int(ann["io.github.containers.zstd-chunked.tarsplit-position"].split(":")[1])
    # the TOC, the tar-split and a.py's frames: no byte of the tar stream walked
    assert one.stats.range_bytes == toc_len + split_len + a["endOffset"] - a["offset"]
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-a.patch", [("app/a.py", OLD, NEW)])
    write_patch(q, "0002-c.patch", [("app/b.py", OLD, NEW)])
    env = {**cli_env, "IMGQUILT_CACHE_DIR": str(tmp_path / "cache")}
    cold = imgquilt("audit", "--image", ref, "--json", cwd=q, env=env, check=5)
    warm = imgquilt("audit", "--image", ref, "--json", cwd=q, env=env, check=5)
    _, m = manifest(chunked, "v1")
    full = tmp_path / "full"
    shutil.copytree(chunked, full)
    m["layers"][-1]["annotations"] = {}
    set_manifest(full, "v1", m)
    whole_r = imgquilt("audit", "--image", f"oci:{full}:v1", "--json", cwd=q,
                       env={**cli_env, "IMGQUILT_CACHE_DIR": str(tmp_path / "c2")}, check=5)
    assert _states(cold) == _states(warm) == _states(whole_r) == {"app/a.py": "pending", "app/b.py": "live"}


def test_the_tar_split_written_is_the_tar_stream_without_its_data(chunked: Path) -> None:
    """What `apply --compression zstd:chunked` writes: segments and files in order give back the layer's
    tar byte for byte (as tar-split's asm does), each file line carrying the CRC-64/ISO of its data."""
    from imgquilt.image.layers.tar_split import crc64_iso

    assert crc64_iso([b"123456789"]).hex() == "b90956c775a41001"  # the CRC-64/GO-ISO check value
    _, m = manifest(chunked, "v1")
    diff_id = json.loads(blob_path(chunked, m["config"]["digest"]).read_bytes())["rootfs"]["diff_ids"][-1]
    _, _, _, lines = _parts(chunked)
    import io

    import zstandard

    blob = blob_path(chunked, m["layers"][-1]["digest"]).read_bytes()
    tar = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True).read()
    out = bytearray()
    for x in lines:
        if x["type"] == 2:
            out += base64.b64decode(x["payload"])
        else:
            data = tar[len(out):len(out) + x.get("size", 0)]
            assert x["payload"] is None if not data else base64.b64decode(x["payload"]) == crc64_iso([data])
            out += data
    assert bytes(out) == tar and "sha256:" + hashlib.sha256(out).hexdigest() == diff_id


def test_a_layer_over_the_tar_split_cap_is_written_without_one_and_walked(tmp_path: Path) -> None:
    """The writer's CRC-64 is pure Python: past `split_max` bytes of file data it writes the TOC alone
    (as before), and such a layer is walked, with the same bytes as a full read."""
    layout = build_oci(tmp_path / "img", [[file("app/a.py", OLD), file("app/pad.txt", PAD)]], tag="v1")
    annotations = rewrite_top_layer_zstd_chunked(layout, "v1", split_max=1024)
    assert "io.github.containers.zstd-chunked.tarsplit-position" not in annotations
    ref = f"oci:{layout}:v1"
    src = ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref)
    assert src.read_targets(["app/a.py"])["app/a.py"].data == OLD
    assert src.stats.layers_from_toc and src.stats.layers_by_tar_split == 0 and not src.stats.toc_unusable
