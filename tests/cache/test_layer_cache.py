"""The shared layer index: a warm read decompresses nothing, is shared across queues and transports,
gives the same bytes as a cold one, and a damaged cache entry is detected and rebuilt."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, hardlink, skopeo_copy, symlink, whiteout
from imgquilt.cache.layers import LayerCache
from imgquilt.errors import DigestMismatch
from imgquilt.sources import open_source
from support.qtools import imgquilt, write_patch

APP = b"import os\n\n\ndef main():\n    return os.getcwd()\n"
CONF = b"[a]\r\nx = 1\r\n"
BIG = b"".join(b"line %d\n" % i for i in range(5000))


@pytest.fixture
def image(tmp_path: Path) -> Path:
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("usr/lib/app/main.py", APP), file("etc/app.conf", CONF), file("usr/share/big.txt", BIG),
         file("etc/gone", b"x\n")],
        [symlink("lib", "usr/lib"), hardlink("usr/lib/app/alias.py", "usr/lib/app/main.py"), whiteout("etc/gone"),
         file("etc/other", b"y\n")],
    ])
    return layout


def _read(ref: str) -> tuple[dict, object]:
    src = open_source(ref)
    got = src.read_targets(["lib/app/main.py", "etc/app.conf", "usr/lib/app/alias.py", "etc/gone", "etc/new"])
    return {p: (t.resolved, t.data, t.mode, t.layer) for p, t in got.items()}, src.stats


def test_warm_read_uses_no_layer_and_gives_the_same_answer(image: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "cache"))
    cold, stats = _read(f"oci:{image}:latest")
    assert len(stats.layers_scanned) == 2 and not stats.layers_from_cache
    assert cold["lib/app/main.py"][1] == APP and cold["etc/gone"][1] is None
    warm, stats = _read(f"oci:{image}:latest")
    assert warm == cold
    assert stats.layers_scanned == [] and stats.second_passes == [] and len(stats.layers_from_cache) == 2
    assert stats.files_from_cache >= 2

    # a file no earlier run needed: its layer is read once more, and the store extended
    src = open_source(f"oci:{image}:latest")
    assert src.read_targets(["usr/share/big.txt"])["usr/share/big.txt"].data == BIG
    assert src.stats.second_passes and not src.stats.layers_scanned
    src = open_source(f"oci:{image}:latest")
    assert src.read_targets(["usr/share/big.txt"])["usr/share/big.txt"].data == BIG
    assert not src.stats.second_passes and not src.stats.layers_scanned


def test_shared_between_transports(image: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "cache"))
    cold, _ = _read(f"oci:{image}:latest")
    archive = tmp_path / "img.tar"
    skopeo_copy(f"oci:{image}:latest", f"oci-archive:{archive}:latest")
    warm, stats = _read(f"oci-archive:{archive}:latest")
    assert warm == cold and stats.layers_scanned == [] and len(stats.layers_from_cache) == 2


def _entries(cache: Path, kind: str) -> list[Path]:
    return sorted(p for p in (cache / kind).glob("??/*"))


@pytest.mark.parametrize("damage", ["index", "pointer", "file", "foreign-index"])
def test_a_damaged_entry_is_detected_and_rebuilt(image: Path, tmp_path: Path, monkeypatch, damage: str) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(cache))
    cold, _ = _read(f"oci:{image}:latest")
    pointers = sorted((cache / "layers").iterdir())
    if damage == "index":
        victim = _entries(cache, "layer-index")[0]
        victim.chmod(0o644)
        victim.write_bytes(victim.read_bytes()[:-3] + b"zzz")
    elif damage == "pointer":
        for p in pointers:
            p.write_text("0" * 64 + "\n")
    elif damage == "file":
        for victim in _entries(cache, "files"):
            victim.chmod(0o644)
            victim.write_bytes(b"tampered\n")
    else:  # a sound index entry, but another layer's: swap the pointers
        a, b = pointers[0].read_bytes(), pointers[1].read_bytes()
        pointers[0].write_bytes(b)
        pointers[1].write_bytes(a)
    warm, stats = _read(f"oci:{image}:latest")
    assert warm == cold  # never the damaged bytes
    assert stats.layers_scanned or stats.second_passes  # the layer was read again
    again, stats = _read(f"oci:{image}:latest")  # ... and the cache rebuilt
    assert again == cold and stats.layers_scanned == [] and stats.second_passes == []


def test_cli_two_queues_share_the_index_and_write_the_same_bytes(image: Path, tmp_path: Path, cli_env) -> None:
    queues = []
    for name in ("q1", "q2"):
        q = tmp_path / name
        q.mkdir()
        write_patch(q, "0001-app.patch", [("lib/app/main.py", APP, APP.replace(b"getcwd", b"getcwdb"))])
        queues.append(q)
    ref = f"oci:{image}:latest"
    cold = tmp_path / "cold.tar"
    imgquilt("apply", "--image", ref, "--layer", str(cold), cwd=queues[0], env=cli_env, check=0)
    assert list((Path(cli_env["IMGQUILT_CACHE_DIR"]) / "layers").iterdir())
    warm = tmp_path / "warm.tar"
    r = imgquilt("--json", "apply", "--image", ref, "--layer", str(warm), cwd=queues[1], env=cli_env, check=0)
    assert json.loads(r.out)["files"]
    assert warm.read_bytes() == cold.read_bytes()
    off = tmp_path / "off.tar"
    imgquilt("apply", "--image", ref, "--layer", str(off), cwd=queues[1],
             env={**cli_env, "IMGQUILT_NO_CACHE": "1"}, check=0)
    assert off.read_bytes() == cold.read_bytes()


def test_a_new_copy_is_hashed_not_decompressed_and_a_damaged_one_refused(image: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "cache"))
    cold, _ = _read(f"oci:{image}:latest")
    copy = tmp_path / "copy"
    shutil.copytree(image, copy)  # other files: not known to be verified
    warm, stats = _read(f"oci:{copy}:latest")
    assert warm == cold and stats.layers_scanned == [] and stats.second_passes == []
    blobs = copy / "blobs" / "sha256"
    manifest = json.loads((blobs / json.loads((copy / "index.json").read_text())["manifests"][0]["digest"][7:]).read_text())
    top = blobs / manifest["layers"][-1]["digest"][7:]
    data = bytearray(top.read_bytes())
    data[100] ^= 0xFF
    top.unlink()
    top.write_bytes(bytes(data))
    with pytest.raises(DigestMismatch):
        _read(f"oci:{copy}:latest")
    assert LayerCache(tmp_path / "cache").load(manifest["layers"][-1]["digest"]) is not None  # the index is fine
