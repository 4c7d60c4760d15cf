"""A multi-platform image (a fixture), for the platform and provenance tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.imagetools import make_index, run, skopeo_copy
from support.qtools import REPO

DEMO_REF = f"oci:{REPO}/examples/demo-image:latest"


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    """oci:DIR:multi, an index over the demo image as linux/amd64 and a copy of it made linux/arm64."""
    layout = tmp_path_factory.mktemp("multi") / "img"
    skopeo_copy(DEMO_REF, f"oci:{layout}:amd")
    skopeo_copy(DEMO_REF, f"oci:{layout}:arm")
    run("umoci", "config", "--image", f"{layout}:arm", "--architecture", "arm64")
    make_index(layout, {"linux/amd64": "amd", "linux/arm64": "arm"}, "multi", keep_members=True)
    return layout
