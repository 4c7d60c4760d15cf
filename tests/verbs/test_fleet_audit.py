"""Fleet audit: several images of one family in a real registry (docker-registry), audited at once into a
patches x images matrix; a layer the images share is downloaded once; shards' documents merge into the
same matrix."""
from __future__ import annotations

import json
import os

import pytest
from jsonschema import Draft202012Validator

from support.imagetools import build_oci, file, layer_digests
from support.qtools import REPO, imgquilt, write_patch
from support.registry_server import seed
from support.registry_server import registry  # noqa: F401 (fixture)

SVC = b"def port():\n    return 8000\n"
OTHER = b"LIMIT = 10\n"


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


@pytest.fixture(scope="module")
def family(registry, tmp_path_factory):
    """fleet:1.0 (unpatched), fleet:1.0-fixed (1.0 plus the queue's layer, pushed by imgquilt) and fleet:1.1
    (a newer release that changed usr/lib/other.py); all three share the two lower layers."""
    layout = tmp_path_factory.mktemp("fleet") / "img"
    base = [file("srv/app/svc.py", SVC.decode()), file("usr/share/big/a.bin", os.urandom(1 << 20))]
    mid = [file("usr/lib/other.py", OTHER.decode())]
    build_oci(layout, [base, mid, [file("etc/release", "1.0\n")]], tag="1.0")
    build_oci(layout, [base, mid, [file("etc/release", "1.1\n"), file("usr/lib/other.py", "LIMIT = 20\n")]], tag="1.1")
    for tag in ("1.0", "1.1"):
        seed(registry, f"oci:{layout}:{tag}", f"fleet:{tag}")
    shared = layer_digests(layout, "1.0")[:2]
    assert shared == layer_digests(layout, "1.1")[:2]
    return layout, shared


def make_queue(path):
    path.mkdir()
    write_patch(path, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    write_patch(path, "0002-limit.patch", [("usr/lib/other.py", OTHER, b"LIMIT = 50\n")])
    return path


def test_three_tags_one_matrix_and_each_shared_blob_downloaded_once(registry, family, tmp_path, env):
    _, shared = family
    q = make_queue(tmp_path / "q")
    fixed = registry.ref("fleet:1.0-fixed")
    imgquilt("apply", "--image", registry.ref("fleet:1.0"), "--output-image", fixed, cwd=q, env=env, check=0)
    refs = [registry.ref("fleet:1.0"), fixed, registry.ref("fleet:1.1")]
    env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cold-cache")  # a cold run: nothing cached
    before = {d: registry.count("GET", f"/blobs/{d}") for d in shared}
    r = imgquilt("audit", *[a for ref in refs for a in ("--image", ref)], "--json", cwd=q, env=env, check=5)
    doc = json.loads(r.out)
    assert {d: registry.count("GET", f"/blobs/{d}") - before[d] for d in shared} == {d: 1 for d in shared}
    assert doc["patches"] == ["0001-port.patch", "0002-limit.patch"]
    assert doc["matrix"] == {
        "0001-port.patch": {refs[0]: "pending", refs[1]: "live", refs[2]: "pending"},
        "0002-limit.patch": {refs[0]: "pending", refs[1]: "live", refs[2]: "drifted"},
    }
    # one entry per image, each the single-image document
    single = json.loads(imgquilt("audit", "--image", refs[1], "--json", cwd=q, env=env, check=0).out)
    assert [d["image"]["ref"] for d in doc["images"]] == refs
    assert doc["images"][1] == single
    assert doc["summary"] == {"images": 3, "as_expected": 1, "not_as_expected": 2, "unreadable": 0}
    assert doc["error"]["code"] == 5 and refs[0] in doc["error"]["message"] and refs[1] not in doc["error"]["message"]
    schema = json.loads((REPO / "docs/schemas/audit.schema.json").read_text())
    Draft202012Validator({**schema["$defs"]["fleet"], "$defs": schema["$defs"]}).validate(doc)


def test_images_from_a_file_in_a_pipe_and_expect_pending(registry, family, tmp_path, env):
    q = make_queue(tmp_path / "q")
    listing = tmp_path / "fleet.txt"
    listing.write_text(f"# the releases still in service\n{registry.ref('fleet:1.0')}\n\n"
                       f"{registry.ref('fleet:1.1')}  # newest\n{registry.ref('fleet:1.0')}\n")
    r = imgquilt("audit", "--images-from", str(listing), cwd=q, env=env, check=5)
    lines = r.out.splitlines()
    assert lines[1] == "\t".join(["patch", registry.ref("fleet:1.0"), registry.ref("fleet:1.1")])  # each image once
    assert lines[2] == "0001-port.patch\tpending\tpending"
    assert lines[3] == "0002-limit.patch\tpending\tdrifted"
    assert "\x1b[" not in r.out and "─" not in r.out  # plain rows in a pipe
    r = imgquilt("audit", "--image", registry.ref("fleet:1.0"), "--image", registry.ref("fleet:1.0"),
                 "--images-from", str(listing), "--expect", "pending", cwd=q, env=env, check=5)
    assert "1.1" in r.err and "not pending" in r.err


def test_an_unreadable_image_is_reported_and_the_others_still_audited(registry, family, tmp_path, env):
    q = make_queue(tmp_path / "q")
    missing = registry.ref("fleet:9.9")
    r = imgquilt("audit", "--image", registry.ref("fleet:1.0"), "--image", missing, "--json", cwd=q, env=env, check=6)
    doc = json.loads(r.out)
    assert doc["matrix"]["0001-port.patch"] == {registry.ref("fleet:1.0"): "pending"}
    assert doc["images"][1]["error"]["code"] == 6 and doc["summary"]["unreadable"] == 1
    assert missing in r.err and "Traceback" not in r.err


def test_shards_merge_into_the_same_matrix(registry, family, tmp_path, env):
    q = make_queue(tmp_path / "q")
    refs = [registry.ref("fleet:1.0"), registry.ref("fleet:1.1")]
    whole = json.loads(imgquilt("audit", "--image", refs[0], "--image", refs[1], "--json", cwd=q, env=env, check=5).out)
    (tmp_path / "a.json").write_text(imgquilt("audit", "--image", refs[0], "--json", cwd=q, env=env, check=5).out)
    (tmp_path / "shard-1.txt").write_text(refs[1] + "\n")
    (tmp_path / "b.json").write_text(imgquilt("audit", "--images-from", str(tmp_path / "shard-1.txt"), "--json",
                                              cwd=q, env=env, check=5).out)
    merged = imgquilt("audit", "--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json",
                      cwd=tmp_path, env=env, check=5)
    doc = json.loads(merged.out)
    assert {k: v for k, v in doc.items() if k != "error"} == {k: v for k, v in whole.items() if k != "error"}
    human = imgquilt("audit", "--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), cwd=tmp_path, env=env, check=5)
    assert "0002-limit.patch\tpending\tdrifted" in human.out
    # the same shards checked for another state; a document that is no audit is bad input
    imgquilt("audit", "--merge", str(tmp_path / "a.json"), "--expect", "pending", cwd=tmp_path, env=env, check=0)
    (tmp_path / "x.json").write_text('{"status": "done"}')
    r = imgquilt("audit", "--merge", str(tmp_path / "x.json"), cwd=tmp_path, env=env, check=6)
    assert "not an imgquilt audit document" in r.err
