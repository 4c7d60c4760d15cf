"""`--platform all`: a two-platform index (amd64 + arm64, both holding the demo targets) is audited per
platform, and `apply --output-image` writes an index whose every manifest carries the new layer (an OCI
layout and a registry push, read back with skopeo and umoci); a platform whose bases drifted is refused
by name and nothing is written or pushed."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from support.imagetools import make_index, manifest, run
from support.qtools import REPO, copy_demo_queue, imgquilt
from support.registry_server import registry  # noqa: F401 (fixture)
from support.registry_server import skopeo
from support.platforms import multi  # noqa: F401 (fixtures)

TARGET = "home/app/config.toml"


def lock_final(q: Path, path: str) -> str:
    lock = tomllib.loads((q / "targets.lock").read_text())
    return next(t["final_sha256"] for t in lock["target"] if t["path"] == path)


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


def platform_file(ref: str, arch: str, tmp: Path, path: str) -> bytes:
    """One platform of an index, copied out by skopeo and unpacked by umoci: the bytes of `path`."""
    one = tmp / f"one-{arch}"
    skopeo("copy", "--quiet", "--src-tls-verify=false", "--override-arch", arch, ref, f"oci:{one}:x")
    bundle = tmp / f"bundle-{arch}"
    run("umoci", "unpack", "--rootless", "--image", f"{one}:x", bundle)
    data = (bundle / "rootfs" / path).read_bytes()
    shutil.rmtree(bundle)
    return data


def member_manifest(ref: str, digest: str) -> dict:
    """One manifest of an index, by digest (a registry: asked by skopeo; a layout: its blob)."""
    if ref.startswith("docker://"):
        return json.loads(skopeo("inspect", "--raw", "--tls-verify=false", ref.rsplit(":", 1)[0] + "@" + digest))
    layout = Path(ref[len("oci:"):].rsplit(":", 1)[0])
    return json.loads((layout / "blobs/sha256" / digest.split(":")[1]).read_bytes())


def check_index(ref: str, base: Path, tmp: Path, final: str) -> None:
    index = json.loads(skopeo("inspect", "--raw", "--tls-verify=false", ref))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    plats = [(m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"]]
    assert plats == [("linux", "amd64"), ("linux", "arm64")]
    for m, tag in zip(index["manifests"], ("amd", "arm")):
        base_digest, base_manifest = manifest(base, tag)
        arch = m["platform"]["architecture"]
        record = json.loads(platform_file(ref, arch, tmp, "var/lib/imgquilt/applied.json"))
        assert record["image"]["digest"] == base_digest  # each platform's record names its own image
        one = member_manifest(ref, m["digest"])
        assert one["layers"][:-1] == base_manifest["layers"]  # the base layers, and one new layer on top
        assert len(one["layers"]) == len(base_manifest["layers"]) + 1
        assert hashlib.sha256(platform_file(ref, arch, tmp, TARGET)).hexdigest() == final


def test_apply_platform_all_writes_an_index_with_every_platform_patched(multi, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    final = lock_final(q, TARGET)
    out = tmp_path / "out"
    r = imgquilt("apply", "--image", f"oci:{multi}:multi", "--platform", "all", "--output-image", f"oci:{out}:patched",
                 "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert [p["platform"] for p in doc["platforms"]] == ["linux/amd64", "linux/arm64"]
    assert [p["platform"] for p in doc["outputs"]["image"]["platforms"]] == ["linux/amd64", "linux/arm64"]
    Draft202012Validator(json.loads((REPO / "docs/schemas/apply.schema.json").read_text())).validate(doc)
    check_index(f"oci:{out}:patched", multi, tmp_path, final)
    # audit, per platform: every patch live on both, and a section for each
    a = imgquilt("audit", "--image", f"oci:{out}:patched", "--platform", "all", "--json", cwd=q, env=env, check=0)
    adoc = json.loads(a.out)
    assert [(p["image"]["platform"], {x["state"] for x in p["patches"]}) for p in adoc["platforms"]] == \
        [("linux/amd64", {"live"}), ("linux/arm64", {"live"})]
    Draft202012Validator(json.loads((REPO / "docs/schemas/audit.schema.json").read_text())).validate(adoc)
    human = imgquilt("audit", "--image", f"oci:{multi}:multi", "--platform", "all", cwd=q, env=env, check=5)
    assert "for linux/amd64" in human.out and "for linux/arm64" in human.out
    assert "linux/amd64:" in human.err and "linux/arm64:" in human.err


def test_apply_platform_all_pushes_an_index(registry, multi, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    dest = registry.ref("multi:patched")
    r = imgquilt("apply", "--image", f"oci:{multi}:multi", "--platform", "all", "--output-image", dest,
                 cwd=q, env=env, check=0)
    assert "Wrote image index" in r.out and "linux/arm64" in r.out
    check_index(dest, multi, tmp_path, lock_final(q, TARGET))


def test_a_drifted_platform_is_refused_by_name_and_nothing_is_written(registry, multi, tmp_path, env):
    layout = tmp_path / "drift"
    shutil.copytree(multi, layout)
    from support.imagetools import umoci_edit

    umoci_edit(layout, "arm", lambda root: (root / TARGET).write_text((root / TARGET).read_text() + "# arm tweak\n"))
    make_index(layout, {"linux/amd64": "amd", "linux/arm64": "arm"}, "drifted", keep_members=True)
    q = copy_demo_queue(tmp_path / "q")
    out = tmp_path / "out"
    r = imgquilt("apply", "--image", f"oci:{layout}:drifted", "--platform", "all", "--output-image", f"oci:{out}:patched",
                 cwd=q, env=env, check=3)
    assert "Platform linux/arm64" in r.err and TARGET in r.err and "Nothing was written" in r.err
    assert not out.exists()
    dest = registry.ref("drifted:patched")
    imgquilt("apply", "--image", f"oci:{layout}:drifted", "--platform", "all", "--output-image", dest, cwd=q, env=env, check=3)
    gone = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", dest], capture_output=True, text=True)
    assert gone.returncode != 0 and "manifest unknown" in gone.stderr.lower()
    assert not [x for x in registry.requests() if "/drifted/" in x.path and x.method == "PUT"]
