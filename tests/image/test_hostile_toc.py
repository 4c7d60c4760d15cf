"""A zstd:chunked TOC that lies about its layer's tar stream, its checksum annotation updated so that it
verifies: whatever the lie, imgquilt's verdict is the verdict of reading the layer whole (what skopeo,
podman and the layer's diff_id hold), never the TOC's story.

The layer holds app/a.py at its base (OLD) and app/b.py holding the patched bytes (NEW); a later member
replaces app/c.py (first NEW, then OLD). The queue patches a.py and c.py from OLD to NEW: read whole,
both are pending (audit exit 5)."""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from support.imagetools import blob_path, build_oci, file, manifest, put_blob, set_manifest
from support.qtools import empty_queue, imgquilt, write_patch
from support.seekable_tools import zstd_chunked_copy, zstd_toc

OLD = b"VALUE = 'old'\n" + b"# padding\n" * 40
NEW = b"VALUE = 'new'\n" + b"# padding\n" * 40
PAD = b"".join(b"filler %d\n" % i for i in range(3000))



@pytest.fixture(autouse=True)
def _walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These local layers are small, so `auto` would read them whole (toc_walk.walk_locally): the walk
    is what is tested here."""
    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "walk")

@pytest.fixture(scope="module")
def chunked(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("toc-lies")
    src = build_oci(work / "gzip", [[file("app/a.py", OLD), file("app/b.py", NEW), file("app/c.py", NEW),
                                     file("app/pad.txt", PAD), file("app/c.py", OLD)]], tag="v1")
    zstd_chunked_copy(f"oci:{src}:v1", work / "zc", "v1")
    return work / "zc"


def _queue(tmp: Path) -> Path:
    q = empty_queue(tmp / "q")
    write_patch(q, "0001-a.patch", [("app/a.py", OLD, NEW)])
    write_patch(q, "0002-c.patch", [("app/c.py", OLD, NEW)])
    return q


def _skippable(data: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A50, len(data)) + data


def retoc(layout: Path, edit) -> None:
    """Rewrite the top layer's TOC with `edit(entries)`, as the layer's author could: the blob with the
    new compressed TOC and footer, its digest, size and the TOC checksum and position in the manifest."""
    import zstandard

    _, m = manifest(layout, "v1")
    desc = m["layers"][-1]
    blob = blob_path(layout, desc["digest"]).read_bytes()
    toc = zstd_toc(blob, desc["annotations"])
    edit(toc["entries"])
    raw = json.dumps(toc).encode()
    packed = zstandard.ZstdCompressor().compress(raw)
    key = next(k for k in desc["annotations"] if k.endswith("zstd-chunked.manifest-position"))
    offset = int(desc["annotations"][key].split(":")[0])
    footer = struct.pack("<QQQQ", offset, len(packed), len(raw), 1) + b"GnUlInUx"
    new = blob[:offset - 8] + _skippable(packed) + _skippable(footer)
    desc["digest"] = put_blob(layout, new)
    desc["size"] = len(new)
    desc["annotations"][key] = f"{offset}:{len(packed)}:{len(raw)}:1"
    desc["annotations"][key.replace("position", "checksum")] = "sha256:" + hashlib.sha256(packed).hexdigest()
    set_manifest(layout, "v1", m)


def _entry(entries: list[dict], name: str, nth: int = 0) -> dict:
    return [e for e in entries if e.get("name") == name and e.get("type") == "reg"][nth]


def point_a_at_b(entries):  # a.py's offsets and digest are b.py's (b.py holds the patched bytes), b.py "empty"
    a, b = _entry(entries, "app/a.py"), _entry(entries, "app/b.py")
    for k in ("offset", "endOffset", "digest"):
        a[k] = b.pop(k)
    b["size"] = 0


def smaller(entries):  # a.py is said to be shorter than its member, with the digest of that prefix
    a = _entry(entries, "app/a.py")
    a["size"] = len(NEW) - 3
    a["digest"] = "sha256:" + hashlib.sha256(OLD[:len(NEW) - 3]).hexdigest()


def zeroed(entries):  # a.py's chunk is said to be zeros: nothing to fetch
    a = _entry(entries, "app/a.py")
    a["chunkType"] = "zeros"
    a["digest"] = "sha256:" + hashlib.sha256(bytes(len(OLD))).hexdigest()


def deep_name(entries):  # the member that replaces c.py is given a deep name: the TOC keeps c.py's first (NEW)
    _entry(entries, "app/c.py", 1)["name"] = "app/" + "d/" * 60 + "c.py"


def dropped(entries):  # the member that replaces c.py is not listed at all
    entries.remove(_entry(entries, "app/c.py", 1))


@pytest.mark.parametrize("lie", [point_a_at_b, smaller, zeroed, deep_name, dropped], ids=lambda f: f.__name__)
def test_a_lying_toc_gives_the_verdict_of_a_full_read(chunked: Path, tmp_path: Path, cli_env, lie) -> None:
    layout = tmp_path / "img"
    shutil.copytree(chunked, layout)
    retoc(layout, lie)
    q = _queue(tmp_path)
    r = imgquilt("audit", "--image", f"oci:{layout}:v1", "--json", cwd=q, env=cli_env, check=5)
    states = {f["path"]: f["state"] for p in json.loads(r.out)["patches"] for f in p["files"]}
    assert states == {"app/a.py": "pending", "app/c.py": "pending"}, states
    # as the same image read whole (its TOC annotations gone)
    _, m = manifest(layout, "v1")
    m["layers"][-1]["annotations"] = {}
    set_manifest(layout, "v1", m)
    r = imgquilt("audit", "--image", f"oci:{layout}:v1", "--json", cwd=q, env={**cli_env, "IMGQUILT_CACHE_DIR": str(tmp_path / "c2")},
                 check=5)
    assert {f["path"]: f["state"] for p in json.loads(r.out)["patches"] for f in p["files"]} == states


def test_an_honest_toc_is_walked_not_read_whole(chunked: Path, tmp_path: Path) -> None:
    from imgquilt.sources import open_source

    src = open_source(f"oci:{chunked}:v1")
    got = src.read_targets(["app/a.py", "app/c.py"])
    assert (got["app/a.py"].data, got["app/c.py"].data) == (OLD, OLD)
    assert src.stats.layers_from_toc and not src.stats.toc_unusable and not src.stats.second_passes
