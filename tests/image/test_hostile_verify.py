"""`verify` and attestation reads are bounded: each listed digest fetched once, one candidate held at a
time, a byte budget across candidates; a referrers index of any JSON shape or depth is a candidate's
problem (exit 3), or after a push exit 6 naming the pushed image; never exit 1."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import TOOL, copy_demo_queue, imgquilt
from support.registry_server import fault_proxy, registry  # noqa: F401 (fixtures)
from support.registry_server import seed
from support.provenance import DEMO, DSSE, keys, subject_of  # noqa: F401 (fixture)

INDEX = "application/vnd.oci.image.index.v1+json"
HOSTILE_INDEXES = {
    "manifests-int": b'{"schemaVersion": 2, "manifests": 5}',
    "manifests-true": b'{"schemaVersion": 2, "manifests": true}',
    "deep": b'{"manifests": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",  # 400 kB: under the 4 MiB cap
    "not-json": b"\x00\xffnot json at all",
}


def run_measured(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, int]:
    """(exit code, stdout, peak RSS in MiB) of one imgquilt run."""
    e = dict(env, PYTHONPATH=str(TOOL))
    with open(cwd / ".out", "w+b") as out:
        p = subprocess.Popen([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=e, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read().decode(), usage.ru_maxrss >> 10


def test_a_referrer_listed_many_times_is_read_once_within_a_budget(registry, keys, tmp_path, cli_env):  # noqa: F811
    """Five 16 MiB referrers, each listed 13 times in the fallback tag's index: each is fetched once, four
    fit the 64 MiB budget, the fifth is reported unread; the process never holds more than one."""
    from imgquilt.image.mediatypes import OCI_MANIFEST
    from imgquilt.image.referrers import Referrer, Subject, fallback_tag
    from imgquilt.image.registry import parse_registry_ref
    from imgquilt.image.sources.registry import registries

    seed(registry, DEMO, "verify/big:1")
    ref = registry.ref("verify/big:1")
    subject = subject_of(ref)
    client = registries().client(parse_registry_ref(ref))
    descriptors, payloads = [], []
    for k in range(5):
        r = Referrer(Subject(subject["mediaType"], subject["digest"], subject["size"]), DSSE, DSSE, os.urandom(16 << 20))
        for digest, data in r.blobs:
            client.push_blob("verify/big", digest, data)
        client.put_referrer("verify/big", r.manifest, OCI_MANIFEST)
        descriptors.append(r.descriptor())
        payloads.append(r.payload_digest)
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": descriptors * 13}
    client.put_manifest("verify/big", fallback_tag(subject["digest"]), json.dumps(index).encode(), INDEX)
    q = copy_demo_queue(tmp_path / "q")
    before = len(registry.requests())
    code, out, rss = run_measured(["verify", "--json", "--image", ref, "--key", str(keys["ed.pub"])], q, cli_env)
    assert code == 3, out
    doc = json.loads(out)
    kinds = [c["kind"] for c in doc["candidates"]]
    assert len(kinds) == 5 and kinds.count("unreadable") == 1 and "not read" in doc["candidates"][-1]["reason"], doc["candidates"]
    gets = [x.path for x in registry.requests()[before:] if x.method == "GET" and "/blobs/" in x.path]
    assert all(sum(p.endswith(d) for p in gets) <= 1 for d in payloads), gets
    assert rss < 400, f"peak RSS {rss} MiB"  # one 16 MiB candidate at a time (reading all 65 at once: > 1 GiB)


def _serving(tag_path: str, body: bytes):
    """A fault that answers the fallback tag's manifest with `body` as an OCI index."""
    def write(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", INDEX)
        handler.send_header("Docker-Content-Digest", "sha256:" + hashlib.sha256(body).hexdigest())
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)

    return lambda method, path: ("raw", write) if method in ("GET", "HEAD") and path.endswith(tag_path) else None


@pytest.mark.parametrize("case", sorted(HOSTILE_INDEXES))
def test_a_hostile_referrers_index_is_exit_3_and_the_layers_answer(fault_proxy, keys, tmp_path, cli_env, case):  # noqa: F811
    from imgquilt.image.referrers import fallback_tag

    ref = fault_proxy.ref("demo:latest")
    tag = fallback_tag(subject_of(fault_proxy.upstream.ref("demo:latest"))["digest"])
    fault_proxy.fault = _serving(f"/manifests/{tag}", HOSTILE_INDEXES[case])
    q = copy_demo_queue(tmp_path / "q")
    r = imgquilt("verify", "--json", "--image", ref, "--key", str(keys["ed.pub"]), cwd=q, env=cli_env, check=3)
    (c,) = json.loads(r.out)["candidates"]
    assert c["kind"] == "unreadable" and ("not an image index" in c["reason"] or "not a JSON object" in c["reason"]), c
    # audit --trust-attestation reads the layers instead, and says why; a fleet audits every image
    r = imgquilt("audit", "--json", "--image", ref, "--trust-attestation", str(keys["ed.pub"]), cwd=q, env=cli_env, check=5)
    assert json.loads(r.out)["answered_from"] == "layers"
    r = imgquilt("audit", "--json", "--image", ref, "--image", fault_proxy.upstream.ref("demo:latest"),
                 "--trust-attestation", str(keys["ed.pub"]), cwd=q, env=cli_env, check=5)
    assert [bool(d.get("patches")) for d in json.loads(r.out)["images"]] == [True, True]


@pytest.mark.parametrize("case", ["deep", "not-json"])
def test_apply_attest_after_the_push_is_exit_6_naming_the_image(fault_proxy, keys, tmp_path, cli_env, case):  # noqa: F811
    q = copy_demo_queue(tmp_path / "q")
    fault_proxy.fault = lambda method, path: (_serving(path, HOSTILE_INDEXES[case])(method, path)
                                              if "/manifests/sha256-" in path else None)
    dest = fault_proxy.ref(f"prov/hostile-{case}:1")
    r = imgquilt("apply", "--image", fault_proxy.ref("demo:latest"), "--output-image", dest, "--attest", str(keys["ed"]),
                 cwd=q, env=cli_env, check=6)
    pushed = subject_of(fault_proxy.upstream.ref(f"prov/hostile-{case}:1"))["digest"]
    assert "was pushed to" in r.err and "attestation was not stored" in r.err and pushed in r.err, r.err
