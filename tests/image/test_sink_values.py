"""The sinks' values: a new image is built purely from a base and a layer; sources declare their abilities."""
from __future__ import annotations

import json
from pathlib import Path

from imgquilt.fs.types import FileChange, HasRootDir, KnowsDeletions, ListsPaths, PeeksTargets
from imgquilt.image.sinks.layer import build_layer
from imgquilt.image.sinks.mutate import Addendum, History, append
from imgquilt.rootfs.source import RootfsSource
from imgquilt.sources import BackedByImage, base_image, open_image, open_source

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo-image"


def test_append_is_pure_and_puts_the_layer_on_top(tmp_path: Path) -> None:
    base = open_image(f"oci:{DEMO}:latest")
    layer = build_layer([FileChange("etc/x", "etc/x", b"x\n", 0o600, 0, 0)], "gzip", epoch=0)
    before = sorted(p.name for p in tmp_path.iterdir())
    img = append(base, Addendum(layer, History(0, "by", "why"), {"k": "v"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    config = json.loads(img.config)
    manifest = json.loads(img.manifest)
    assert config["rootfs"]["diff_ids"][-1] == layer.diff_id
    assert config["config"]["Labels"]["k"] == "v"
    assert config["history"][-1] == {"created": "1970-01-01T00:00:00Z", "created_by": "by", "comment": "why"}
    assert manifest["layers"][-1]["digest"] == layer.digest
    assert manifest["config"]["digest"] == img.config_digest
    assert [l["digest"] for l in manifest["layers"][:-1]] == [l.descriptor.digest for l in base.layers]
    # the same inputs give the same image
    assert append(base, Addendum(layer, History(0, "by", "why"), {"k": "v"})).manifest_digest == img.manifest_digest


def test_sources_declare_their_optional_abilities(tmp_path: Path) -> None:
    image_source = open_source(f"oci:{DEMO}:latest")
    assert isinstance(image_source, PeeksTargets) and isinstance(image_source, KnowsDeletions)
    assert isinstance(image_source, ListsPaths) and isinstance(image_source, BackedByImage)
    assert not isinstance(image_source, HasRootDir)
    rootfs = open_source(f"rootfs:{tmp_path}")
    assert isinstance(rootfs, RootfsSource) and isinstance(rootfs, HasRootDir)
    assert not isinstance(rootfs, (PeeksTargets, KnowsDeletions, BackedByImage))
    # writing on top reuses the image the source already opened
    assert base_image(image_source, f"oci:{DEMO}:latest") is image_source.image
