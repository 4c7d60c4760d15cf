"""Small images and cache rows, clean and forged, for the cache trust and seal tests."""

from __future__ import annotations

import json
from pathlib import Path

from support.imagetools import build_oci, file

GOOD = b"def serve():\n    return 1\n"


BROKEN = b"def serve(:\n    return 1\n"


# --- the relabelled index ----------------------------------------------------------------------------
def _images(tmp_path: Path) -> tuple[Path, Path]:
    a = build_oci(tmp_path / "a", [[file("etc/app.conf", b"workers = 2\n"), file("etc/other", b"a\n")]])
    b = build_oci(tmp_path / "b", [[file("etc/app.conf", b"workers = 3\n"), file("etc/other", b"b\n")]])
    return a, b


def _layer(layout: Path) -> str:
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs/sha256" / digest).read_text())
    return manifest["layers"][-1]["digest"]
