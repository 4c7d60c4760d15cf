"""Scanning the next layer down ahead, on the second core: it changes how fast, never what is read.

Real OCI layouts (gzip layers). A scan ahead that is not needed is stopped and its errors dropped; one
that is needed gives the same bytes, layers and errors as a read without it.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

import imgquilt.image.image_source as image_source
from support.imagetools import blob_path, build_oci, file, flip_byte, layer_digests, symlink
from imgquilt.errors import DigestMismatch
from imgquilt.sources import open_source
from imgquilt.util.threads import AHEAD_NICENESS, niceness

BOTTOM = [
    file("usr/lib/big.so", bytes(range(256)) * 8192),
    file("etc/conf", "base\n"),
    file("usr/lib/target.py", "print('bottom')\n"),
]
MIDDLE = [
    file("etc/conf", "middle\n"),
    symlink("opt/link", "/usr/lib/target.py"),  # found here; its target lies in the layer below
]
TOP = [file("usr/bin/tool", "top\n")]


@pytest.fixture()
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IMGQUILT_NO_CACHE", "1")  # every read scans: no layer index from an earlier one
    out = tmp_path / "img"
    build_oci(out, [BOTTOM, MIDDLE, TOP], tag="v1", compression="gzip")
    return out


def _read(layout: Path, *paths: str, ahead: bool = True):
    counts: dict[int, int] = {}

    def on_layer(position: int, count: int, digest: str):
        def add(n: int) -> None:
            counts[position] = counts.get(position, 0) + n
        return add

    source = open_source(f"oci:{layout}:v1")
    source.on_layer = on_layer
    with pytest.MonkeyPatch.context() as mp:
        if not ahead:
            mp.setattr(image_source.os, "cpu_count", lambda: 1)  # no core to spare: no scan ahead
        targets = source.read_targets(list(paths))
    return source, targets, counts


def _no_scan_left() -> bool:
    return not [t for t in threading.enumerate() if t.name == "imgquilt-scan-ahead"]


def test_a_scan_ahead_not_needed_is_stopped_and_unused(layout: Path) -> None:
    source, t, _ = _read(layout, "usr/bin/tool")
    assert t["usr/bin/tool"].data == b"top\n"
    assert source.stats.layers_scanned == [layer_digests(layout, "v1")[2]]
    assert _no_scan_left()


def test_a_damaged_layer_scanned_ahead_but_not_needed_is_no_error(layout: Path) -> None:
    bottom = layer_digests(layout, "v1")[0]
    flip_byte(blob_path(layout, bottom), 100)
    # etc/conf is decided by the middle layer: the bottom one was scanned ahead meanwhile, then dropped
    source, t, _ = _read(layout, "usr/bin/tool", "etc/conf")
    assert t["etc/conf"].data == b"middle\n"
    assert bottom not in source.stats.layers_scanned
    assert _no_scan_left()


def test_a_damaged_layer_scanned_ahead_and_needed_is_refused(layout: Path) -> None:
    flip_byte(blob_path(layout, layer_digests(layout, "v1")[0]), 100)
    with pytest.raises(DigestMismatch):
        _read(layout, "usr/lib/target.py")
    assert _no_scan_left()


def test_the_same_bytes_layers_and_progress_with_and_without_the_scan_ahead(layout: Path) -> None:
    paths = ("usr/bin/tool", "etc/conf", "usr/lib/big.so", "opt/link", "usr/lib/target.py", "usr/lib/absent")
    used = []
    real = image_source._Prefetch.result
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(image_source._Prefetch, "result", lambda self: used.append(self.position) or real(self))
        with_ahead = _read(layout, *paths)
    assert used == [1, 2]  # the middle and bottom layers came from scans begun ahead
    without = _read(layout, *paths, ahead=False)
    assert with_ahead[1] == without[1]
    assert with_ahead[0].stats.layers_scanned == without[0].stats.layers_scanned
    assert with_ahead[2] == without[2]  # every layer's bytes reach its progress bar, scanned ahead or not
    assert with_ahead[1]["opt/link"].data == b"print('bottom')\n"
    assert with_ahead[1]["usr/lib/absent"].data is None


def test_a_file_the_scan_ahead_did_not_keep_is_read_in_a_second_pass(layout: Path) -> None:
    # opt/link leads to usr/lib/target.py, which nobody wanted when the bottom layer's scan began
    source, t, _ = _read(layout, "opt/link")
    assert t["opt/link"].data == b"print('bottom')\n"
    assert t["opt/link"].resolved == "usr/lib/target.py"
    assert source.stats.second_passes == [layer_digests(layout, "v1")[0]]


def test_a_scan_ahead_that_ended_whole_serves_the_next_read_down(layout: Path) -> None:
    """The targets were decided in the top layer, but the scans ahead of the two below had ended by
    then: a later read that goes down (the Python check looking up a module) takes them as they are,
    never reading those layers again, with the bytes a fresh read gives."""
    ended = threading.Semaphore(0)
    real_go, real_scan = image_source._Prefetch._go, image_source.ImageSource._scan_layer
    calls: list[int] = []

    def go(self, run):
        try:
            real_go(self, run)
        finally:
            ended.release()

    def scan(self, position, *a, **kw):
        calls.append(position)
        if threading.current_thread().name != "imgquilt-scan-ahead":  # the top layer, read here: after both ahead
            assert ended.acquire(timeout=30) and ended.acquire(timeout=30)
        return real_scan(self, position, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(image_source._Prefetch, "_go", go)
        mp.setattr(image_source.ImageSource, "_scan_layer", scan)
        source, t, _ = _read(layout, "usr/bin/tool")
        assert t["usr/bin/tool"].data == b"top\n"
        assert source.stats.layers_scanned == [layer_digests(layout, "v1")[2]]
        down = source.read_targets(["etc/conf", "opt/link", "usr/lib/big.so"])
    assert sorted(calls) == [0, 1, 2]  # each layer read once in all
    assert source.stats.layers_scanned == [layer_digests(layout, "v1")[i] for i in (2, 1, 0)]
    fresh = _read(layout, "etc/conf", "opt/link", "usr/lib/big.so", ahead=False)[1]
    assert {p: (x.data, x.resolved) for p, x in down.items()} == {p: (x.data, x.resolved) for p, x in fresh.items()}
    assert _no_scan_left()


@pytest.mark.skipif(niceness() is None, reason="a thread's niceness is read on Linux only")
def test_a_scan_ahead_s_decompression_yields_the_cpu_to_the_read_the_command_waits_on(layout: Path) -> None:
    """The thread that decompresses a layer read ahead runs at a higher niceness than the one that
    decompresses the layer the command needs (which keeps its core on a 2-core machine); the threads
    that walk the headers (they hold the GIL) and the caller keep theirs."""
    from imgquilt.image.layers import compression

    seen: dict[str, set[int | None]] = {"scan": set(), "scan ahead": set(), "inflate": set(), "inflate ahead": set()}
    real_scan, real_produce = image_source.ImageSource._scan_layer, compression.Decompressed._produce

    def scan(self, position, *a, **kw):
        seen["scan ahead" if threading.current_thread().name == "imgquilt-scan-ahead" else "scan"].add(niceness())
        return real_scan(self, position, *a, **kw)

    def produce(self):
        try:
            return real_produce(self)
        finally:  # after yield_cpu() at its start
            seen["inflate ahead" if self._yield else "inflate"].add(niceness())

    before = niceness()
    assert before is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(image_source.ImageSource, "_scan_layer", scan)
        mp.setattr(compression.Decompressed, "_produce", produce)
        _, t, _ = _read(layout, "usr/bin/tool", "etc/conf", "usr/lib/target.py")
    assert t["usr/lib/target.py"].data == b"print('bottom')\n"
    assert seen["scan"] == {before} and seen["scan ahead"] == {before}
    assert seen["inflate"] == {before} and seen["inflate ahead"] == {min(19, before + AHEAD_NICENESS)}
    assert niceness() == before
    assert _no_scan_left()

