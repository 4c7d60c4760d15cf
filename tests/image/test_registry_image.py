"""`--image docker://...` read natively from a real registry (docker-registry), compared with the same
image in an OCI layout; the access log shows what was downloaded."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from imgquilt.engine.result import RECORD_PATH
from support.qtools import imgquilt, write_patch
from support.registry_server import inspect_digest, seed, skopeo
from support.registry_server import registry  # noqa: F401 (fixture)
from support.audit_scenario import check_scenario, write_queue
from support.audit_image import applied_patches, build_scenario_image
from support.audit_scenario import SCENARIO_PATCHES


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


@pytest.fixture(scope="module")
def scenario(registry, tmp_path_factory):
    """The audit scenario image (tags base and now) in a layout and in the registry as scenario:base/now."""
    img = build_scenario_image(tmp_path_factory.mktemp("scenario"))
    for tag in ("base", "now"):
        seed(registry, f"oci:{img}:{tag}", f"scenario:{tag}")
    return img


def members(layer: Path) -> dict:
    """Every member of a layer tar, the apply record without the image reference (which names the transport)."""
    out = {}
    with tarfile.open(layer) as tar:
        for m in tar.getmembers():
            data = tar.extractfile(m).read() if m.isfile() else b""
            if m.name == RECORD_PATH:
                doc = json.loads(data)
                doc["image"].pop("ref")
                data = json.dumps(doc, sort_keys=True).encode()
            out[m.name] = (m.mode, m.uid, m.gid, m.type, data)
    return out


def test_lock_pins_the_digest_skopeo_reports(registry, scenario, tmp_path, env):
    q = write_queue(tmp_path / "q", applied_patches())
    ref = registry.ref("scenario:base")
    heads = registry.count("HEAD", "/manifests/base")
    imgquilt("lock", "--image", ref, cwd=q, env=env, check=0)
    lock = (q / "targets.lock").read_text()
    assert f'digest = "{inspect_digest(registry, "scenario:base")}"' in lock
    assert f'ref = "{ref}"' in lock
    assert registry.count("HEAD", "/manifests/base") == heads + 1  # the tag resolved with one HEAD
    # the same lock as from the layout (same digest, same targets)
    q2 = write_queue(tmp_path / "q2", applied_patches())
    imgquilt("lock", "--image", f"oci:{scenario}:base", cwd=q2, env=env, check=0)
    assert lock.replace(ref, "X") == (q2 / "targets.lock").read_text().replace(f"oci:{scenario}:base", "X")


def test_audit_and_apply_match_the_oci_layout(registry, scenario, tmp_path, env):
    q = write_queue(tmp_path / "q", SCENARIO_PATCHES)
    from_registry = json.loads(imgquilt("audit", "--image", registry.ref("scenario:now"), "--json",
                                        cwd=q, env=env, check=5).out)
    from_layout = json.loads(imgquilt("audit", "--image", f"oci:{scenario}:now", "--json", cwd=q, env=env, check=5).out)
    check_scenario(from_registry)
    assert from_registry["patches"] == from_layout["patches"]
    assert from_registry["image"]["digest"] == from_layout["image"]["digest"]
    # apply: the same layer, byte for byte
    q = write_queue(tmp_path / "qa", applied_patches())
    imgquilt("apply", "--image", registry.ref("scenario:base"), "--layer", str(tmp_path / "r.tar"), cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"oci:{scenario}:base", "--layer", str(tmp_path / "l.tar"), cwd=q, env=env, check=0)
    assert members(tmp_path / "r.tar") == members(tmp_path / "l.tar")
    assert not (q / ".imgquilt" / "cache" / "skopeo").exists()  # nothing copied


def test_a_digest_is_never_resolved_and_a_warm_run_fetches_no_manifest_or_config(registry, scenario, tmp_path, env):
    q = write_queue(tmp_path / "q", SCENARIO_PATCHES)
    env = dict(env, IMGQUILT_LAYER_READS="1")  # one layer at a time: none is fetched ahead (and cancelled)
    digest = inspect_digest(registry, "scenario:now")
    ref = registry.ref(f"scenario@{digest}")
    config = json.loads(skopeo("inspect", "--raw", "--tls-verify=false", ref))["config"]["digest"]
    before = registry.requests()
    imgquilt("audit", "--image", ref, "--json", cwd=q, env=env, check=5)
    cold = registry.requests()[len(before):]
    doc = json.loads(imgquilt("audit", "--image", ref, "--json", cwd=q, env=env, check=5).out)
    warm = registry.requests()[len(before) + len(cold):]
    check_scenario(doc)
    assert not [r for r in cold + warm if "/manifests/" in r.path and r.method == "HEAD"]  # a digest: never resolved
    assert [r.path for r in warm if "/manifests/" in r.path or config in r.path] == []  # both cached by digest
    layers = lambda reqs: [r.path for r in reqs if r.method == "GET" and "/blobs/" in r.path and config not in r.path]
    assert len(layers(cold)) == 2  # the two layers the targets need, never more
    assert layers(warm) == []  # warm: the layer indexes and file bytes come from the shared cache, no blob downloaded


def test_layers_below_the_targets_are_never_downloaded_one_layer_at_a_time(registry, tmp_path, env):
    from support.imagetools import layer_digests, service_on_top

    env = dict(env, IMGQUILT_LAYER_READS="1")  # by default lower layers are fetched ahead, and cancelled
    layout, q = service_on_top(tmp_path)
    seed(registry, f"oci:{layout}:v1", "layers:v1")
    lower = layer_digests(layout, "v1")[:2]
    imgquilt("audit", "--image", registry.ref("layers:v1"), "--expect", "pending", cwd=q, env=env, check=0)
    imgquilt("apply", "--image", registry.ref("layers:v1"), "--layer", str(tmp_path / "fix.tar"), cwd=q, env=env, check=0)
    assert all(registry.count("GET", f"/blobs/{d}") == 0 for d in lower)
    assert registry.count("GET", f"/blobs/{layer_digests(layout, 'v1')[2]}") == 1  # once: apply reads it from the shared cache


def test_rebase_onto_a_registry_image(registry, tmp_path, env):
    from support.qtools import copy_demo_queue

    q = copy_demo_queue(tmp_path / "q")
    r = imgquilt("rebase", "--image", registry.ref("demo:latest"), "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["status"] == "done"
    assert f'ref = "{registry.ref("demo:latest")}"' in (q / "targets.lock").read_text()


def test_a_multi_platform_index_in_the_registry(registry, tmp_path, env):
    """The index is resolved and cached by digest; --platform picks a member (default linux/amd64)."""
    from support.imagetools import build_oci, file, make_index

    from support.registry_server import skopeo as run_skopeo

    layout = tmp_path / "multi"
    build_oci(layout, [[file("etc/arch", "amd64\n")]], tag="amd", platform="linux/amd64")
    build_oci(layout, [[file("etc/arch", "arm64\n")]], tag="arm", platform="linux/arm64/v8")
    make_index(layout, {"linux/amd64": "amd", "linux/arm64/v8": "arm"}, "multi", keep_members=True)
    run_skopeo("copy", "--quiet", "--all", "--dest-tls-verify=false", f"oci:{layout}:multi", registry.ref("multi:1"))
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-arch.patch", [("etc/arch", b"arm64\n", b"arm64 (patched)\n")])
    imgquilt("audit", "--image", registry.ref("multi:1"), "--platform", "linux/arm64", "--expect", "pending",
             cwd=q, env=env, check=0)
    doc = json.loads(imgquilt("audit", "--image", registry.ref("multi:1"), "--json", cwd=q, env=env, check=5).out)
    assert doc["image"]["platform"] == "linux/amd64" and doc["patches"][0]["state"] == "drifted"
    r = imgquilt("audit", "--image", registry.ref("multi:1"), "--platform", "linux/s390x", cwd=q, env=env, check=6)
    assert "linux/amd64" in r.err and "linux/arm64/v8" in r.err
