"""The audit scenario as an OCI image, and the patches applied to it, for the CLI and registry audit tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.audit_scenario import SCENARIO_BASE, SCENARIO_NOW, SCENARIO_PATCHES, write_tree


def applied_patches():
    return [p for p in SCENARIO_PATCHES if p[0] != "0006-missing-f.patch"]


# --- OCI images (umoci builds them; imgquilt reads them) ------------------------------------------------
def umoci(*args: str) -> None:
    subprocess.run(["umoci", *args], check=True, capture_output=True)


def build_scenario_image(tmp_path: Path) -> Path:
    """oci layout with tag `base` (one layer: every base) and tag `now` (plus a layer with the changes
    and a whiteout of etc/f.conf)."""
    img = tmp_path / "img"
    umoci("init", "--layout", str(img))
    umoci("new", "--image", f"{img}:base")
    umoci("unpack", "--image", f"{img}:base", str(tmp_path / "b1"))
    write_tree(tmp_path / "b1/rootfs", SCENARIO_BASE)
    umoci("repack", "--image", f"{img}:base", str(tmp_path / "b1"))
    umoci("unpack", "--image", f"{img}:base", str(tmp_path / "b2"))
    upper = tmp_path / "b2/rootfs"
    for path, data in SCENARIO_NOW.items():
        if data is None:
            (upper / path).unlink()
        elif data != SCENARIO_BASE[path]:
            (upper / path).write_bytes(data)
    umoci("repack", "--image", f"{img}:now", str(tmp_path / "b2"))
    return img
