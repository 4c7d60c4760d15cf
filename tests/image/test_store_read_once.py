"""`audit --image containers-storage:...` (issue 37): the reference is resolved to its image ID first, the
image copied once per ID into the shared cache (never below the queue), layers shared by digest with
images copied before, the copies bounded by IMGQUILT_CACHE_MAX, and a copy that is not the image the
store names never used. A private store (the `own_store` fixture): the machine's own is never touched.
skopeo is run through a wrapper on PATH that logs each call, so the tests see what was copied."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, run
from support.qtools import imgquilt, write_patch

SVC = b"def port():\n    return 8000\n"
BIG = os.urandom(256 << 10)
pytestmark = pytest.mark.skipif(shutil.which("podman") is None or shutil.which("skopeo") is None, reason="podman and skopeo")


@pytest.fixture
def store_env(tmp_path: Path, cli_env: dict[str, str], own_store: dict[str, str]):
    """Two images in the private store sharing their base layer; a queue locked on the first; skopeo logged."""
    base = [file("srv/app/svc.py", SVC), file("srv/app/big.bin", BIG)]
    one = build_oci(tmp_path / "one", [base], tag="v1")
    two = build_oci(tmp_path / "two", [base, [file("srv/app/extra.py", b"X = 1\n")]], tag="v1")
    env = {**cli_env, **own_store}
    for layout, name in ((one, "localhost/app:one"), (two, "localhost/app:two")):
        run("skopeo", "copy", "--quiet", f"oci:{layout}:v1", f"containers-storage:{name}")
    shim = tmp_path / "bin"
    shim.mkdir()
    log = tmp_path / "skopeo.log"
    (shim / "skopeo").write_text(f'#!/bin/sh\necho "$1 $2 $3 $4 $5 $6 $7" >> {log}\nexec {shutil.which("skopeo")} "$@"\n')
    (shim / "skopeo").chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    return q, env, log, Path(env["IMGQUILT_CACHE_DIR"]) / "store-images"


def _audit(q: Path, env: dict[str, str], name: str, check: int = 5) -> dict:
    return json.loads(imgquilt("--json", "audit", "--image", f"containers-storage:{name}", cwd=q, env=env, check=check).out)


def _copies(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if " copy " in f" {line} ") if log.exists() else 0


def _blobs(layout: Path) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in (layout / "blobs" / "sha256").iterdir()}


def test_an_unchanged_image_is_copied_once_and_never_below_the_queue(store_env) -> None:
    q, env, log, layout = store_env
    cold = _audit(q, env, "localhost/app:one")
    assert [p["state"] for p in cold["patches"]] == ["pending"]
    assert _copies(log) == 1
    blobs = _blobs(layout)
    changed = {p.name: p.stat().st_ctime_ns for p in (layout / "blobs" / "sha256").iterdir()}
    warm = _audit(q, env, "localhost/app:one")
    assert warm["patches"] == cold["patches"]
    assert _copies(log) == 1  # resolved to its image ID (skopeo inspect), found complete: not copied again
    assert _blobs(layout) == blobs
    # not even touched: a changed ctime would make the blobs' verified markers stale and cost a rehash
    assert {p.name: p.stat().st_ctime_ns for p in (layout / "blobs" / "sha256").iterdir()} == changed
    # the same verdicts as the image read from its OCI layout
    from_layout = json.loads(imgquilt("--json", "audit", "--image", f"oci:{q.parent / 'one'}:v1", cwd=q, env=env, check=5).out)
    assert [(p["name"], p["state"], p["files"]) for p in from_layout["patches"]] == \
        [(p["name"], p["state"], p["files"]) for p in warm["patches"]]
    below = [p for p in q.rglob("*") if p.is_file() and p.stat().st_size > 64 << 10]
    assert below == [], below  # nothing of the image below the queue directory
    assert not (q / ".imgquilt" / "cache" / "skopeo").exists()


def test_layers_already_in_the_shared_cache_are_not_copied(store_env) -> None:
    q, env, log, layout = store_env
    _audit(q, env, "localhost/app:one")
    before = _blobs(layout)
    _audit(q, env, "localhost/app:two")
    assert _copies(log) == 2
    after = _blobs(layout)
    shared = set(before) & set(after)
    # the base layer (with its 256 KiB file) is the same blob, left as it was: skopeo skipped it
    assert any((layout / "blobs" / "sha256" / h).stat().st_size > 256 << 10 for h in shared)
    assert all(after[h] == before[h] for h in shared)


def test_a_copy_that_is_not_the_image_the_store_names_is_not_used(store_env) -> None:
    q, env, log, layout = store_env
    _audit(q, env, "localhost/app:one")
    _audit(q, env, "localhost/app:two")
    index = json.loads((layout / "index.json").read_text())
    ids = [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]]
    by_tag = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    assert len(ids) == 2
    # forge: the tag of image one names image two's manifest (a planted or stale entry)
    first, second = ids
    for m in index["manifests"]:
        if m["annotations"]["org.opencontainers.image.ref.name"] == first:
            m["digest"] = by_tag[second]
    (layout / "index.json").write_text(json.dumps(index))
    got = _audit(q, env, "localhost/app:one")
    assert _copies(log) == 3  # not believed: copied again
    assert [p["state"] for p in got["patches"]] == ["pending"]
    index = json.loads((layout / "index.json").read_text())
    tagged = [m["digest"] for m in index["manifests"] if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == first]
    config = json.loads((layout / "blobs" / "sha256" / tagged[-1][7:]).read_text())["config"]["digest"]
    assert config == "sha256:" + first  # the tag names image one's own manifest again


def test_the_copies_are_bounded_by_the_cache_cap(store_env) -> None:
    q, env, log, layout = store_env
    env = {**env, "IMGQUILT_CACHE_MAX": "1K"}  # under one image: all but what the read in hand needs goes
    _audit(q, env, "localhost/app:one")
    _audit(q, env, "localhost/app:two")  # evicts what image two does not need
    manifests = json.loads((layout / "index.json").read_text())["manifests"]
    two_manifest = json.loads((layout / "blobs" / "sha256" / manifests[-1]["digest"][7:]).read_text())
    keep = {manifests[-1]["digest"][7:], two_manifest["config"]["digest"][7:], *(x["digest"][7:] for x in two_manifest["layers"])}
    left = {p.name for p in (layout / "blobs" / "sha256").iterdir()}
    assert left == keep  # image one's own blobs evicted (least recently used), none that image two's read needs
    two = _audit(q, env, "localhost/app:two")
    assert [p["state"] for p in two["patches"]] == ["pending"]
    assert _copies(log) == 2
    one = _audit(q, env, "localhost/app:one")  # evicted: copied again, and read right
    assert [p["state"] for p in one["patches"]] == ["pending"] and _copies(log) == 3
    imgquilt("cache", "prune", cwd=q, env=env, check=0)
    assert not list((layout / "blobs" / "sha256").glob("*"))
