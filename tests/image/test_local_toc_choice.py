"""A local zstd:chunked layer with no tar-split: walked with its TOC or read whole, whichever costs less.

A walk costs per member, a whole read per byte (toc_walk.walk_locally): a layer of small files (its blob
under 32 times its TOC) is read whole, one of large files walked. The choice is made from the layer's
descriptor alone, so a second read takes the first one's index from the shared cache; it changes how
fast, never what is read. IMGQUILT_LOCAL_TOC forces either way. Layers written by imgquilt's own
zstd:chunked writer, with its tar-split left out (`split_max`).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from imgquilt.errors import UsageError
from imgquilt.image.image_source import ImageSource
from imgquilt.image.layers.blobio import VerifiedBlobs
from imgquilt.image.layers.toc import TocRef
from imgquilt.image.layers.toc_walk import LOCAL_WALK_MIN_RATIO, walk_locally
from imgquilt.sources import open_image
from support.imagetools import build_oci, file
from support.seekable_tools import rewrite_top_layer_zstd_chunked

SMALL = [file(f"app/m{i:03}.py", f"VALUE = {i}\n" * 3) for i in range(300)]
LARGE = [file("app/a.py", "VALUE = 'a'\n"), file("lib/big.so", os.urandom(1 << 20))]  # incompressible: a large blob


def _zstd_chunked_without_tar_split(tmp: Path, members: list[dict]) -> str:
    layout = build_oci(tmp, [members], tag="v1")
    annotations = rewrite_top_layer_zstd_chunked(layout, "v1", split_max=0)
    assert "io.github.containers.zstd-chunked.tarsplit-position" not in annotations
    return f"oci:{layout}:v1"


def _source(ref: str, **kw) -> ImageSource:
    return ImageSource(open_image(ref), verified=VerifiedBlobs(None), ref=ref, **kw)


def test_the_rule() -> None:
    def ref(size: int, split=None, kind="zstd:chunked") -> TocRef:
        return TocRef(kind, "sha256:" + "0" * 64, 100, 10, size, split)

    assert not walk_locally(ref(1000), LOCAL_WALK_MIN_RATIO * 1000 - 1)  # small files: read whole
    assert walk_locally(ref(1000), LOCAL_WALK_MIN_RATIO * 1000)  # large files: walked
    assert walk_locally(ref(1000, split=(1, 2, 3)), 10)  # a tar-split: never walked anyway (tar_split.py)
    assert walk_locally(TocRef("estargz", "sha256:" + "0" * 64), 10)  # no size to judge by
    assert walk_locally(ref(0), 10)
    # IMGQUILT_LOCAL_TOC's walk / whole decide only the layers the rule weighs
    assert walk_locally(ref(1000), 10, forced=True) and not walk_locally(ref(1000), 10**9, forced=False)
    assert walk_locally(ref(1000, split=(1, 2, 3)), 10**9, forced=False)
    assert walk_locally(TocRef("estargz", "sha256:" + "0" * 64), 10**9, forced=False)


def test_whole_leaves_a_layer_with_a_tar_split_to_its_tar_split(tmp_path: Path) -> None:
    layout = build_oci(tmp_path / "img", [SMALL], tag="v1")
    rewrite_top_layer_zstd_chunked(layout, "v1")  # with its tar-split
    src = _source(f"oci:{layout}:v1", walk_local=False)
    assert src.read_targets(["app/m001.py"])["app/m001.py"].data == b"VALUE = 1\n" * 3
    assert src.stats.layers_by_tar_split == 1 and not src.stats.read_whole_locally


@pytest.mark.parametrize("members, walked", [(SMALL, False), (LARGE, True)])
def test_small_files_are_read_whole_large_ones_walked_with_the_same_bytes(tmp_path: Path, monkeypatch, members, walked) -> None:
    monkeypatch.delenv("IMGQUILT_LOCAL_TOC", raising=False)
    ref = _zstd_chunked_without_tar_split(tmp_path / "img", members)
    paths = [m["path"] for m in members] + ["app/absent.py"]
    auto = _source(ref)
    got = auto.read_targets(paths)
    assert bool(auto.stats.layers_from_toc) == walked and bool(auto.stats.read_whole_locally) == (not walked)
    for forced in (True, False):  # IMGQUILT_LOCAL_TOC=walk / whole, through the same parameter
        other = _source(ref, walk_local=forced)
        again = other.read_targets(paths)
        assert bool(other.stats.layers_from_toc) == forced
        assert {p: (t.data, t.mode) for p, t in again.items()} == {p: (t.data, t.mode) for p, t in got.items()}
    assert got["app/absent.py"].data is None


def test_the_choice_keeps_the_index_warm(tmp_path: Path, monkeypatch) -> None:
    from imgquilt.cache.layers import LayerCache

    monkeypatch.delenv("IMGQUILT_NO_CACHE", raising=False)
    monkeypatch.delenv("IMGQUILT_LOCAL_TOC", raising=False)
    ref = _zstd_chunked_without_tar_split(tmp_path / "img", SMALL)
    cold = _source(ref, layer_cache=LayerCache())
    cold.read_targets(["app/m001.py"])
    warm = _source(ref, layer_cache=LayerCache())
    assert warm.read_targets(["app/m001.py"])["app/m001.py"].data == b"VALUE = 1\n" * 3
    assert warm.stats.layers_scanned == [] and len(warm.stats.layers_from_cache) == 1


def test_the_setting(tmp_path: Path, monkeypatch) -> None:
    ref = _zstd_chunked_without_tar_split(tmp_path / "img", SMALL)
    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "walk")
    src = _source(ref)
    src.read_targets(["app/m001.py"])
    assert src.stats.layers_from_toc and not src.stats.read_whole_locally
    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "sometimes")
    with pytest.raises(UsageError, match="IMGQUILT_LOCAL_TOC='sometimes' is not one of auto, walk, whole"):
        _source(ref)
