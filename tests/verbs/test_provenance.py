"""Provenance (docs/provenance.md): `apply --attest KEY` signs an in-toto statement of the apply and
stores it as an OCI 1.1 referrer; `verify` and `audit --trust-attestation` check it.

Real components only: keys made by `openssl`, OCI layouts read back by skopeo and umoci, Debian's
docker-registry (no referrers API, so the fallback tag `sha256-<hex>` is used) with its access log,
and every envelope checked here independently of imgquilt (the DSSE PAE spelled out by hand, the
signature checked with `cryptography`, the key id from `openssl pkey -outform DER`).
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jsonschema import Draft202012Validator

from support.imagetools import blob_path, build_oci, file, put_blob, read_index, write_index
from support.qtools import REPO, copy_demo_queue, imgquilt, write_patch
from support.registry_server import fault_proxy, registry  # noqa: F401 (fixtures)
from support.registry_server import seed, skopeo
from support.platforms import multi  # noqa: F401 (fixture)
from support.provenance import DSSE, keys, openssl, subject_of  # noqa: F401 (fixtures)

PREDICATE = "https://imgquilt.example/attestation/apply/v1"
STATEMENT = "https://in-toto.io/Statement/v1"
SCHEMAS = REPO / "docs" / "schemas"
RECORD = "var/lib/imgquilt/applied.json"


def key_id(pub: Path) -> str:
    return hashlib.sha256(openssl("pkey", "-pubin", "-in", str(pub), "-outform", "DER")).hexdigest()


def independent_check(envelope: bytes, pub: Path) -> dict:
    """Verify a DSSE envelope without imgquilt: PAE by hand, the signature with `cryptography`."""
    env = json.loads(envelope)
    payload = base64.b64decode(env["payload"])
    t = env["payloadType"].encode()
    assert t == b"application/vnd.in-toto+json"
    pae = b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(payload)).encode() + b" " + payload
    (sig_entry,) = env["signatures"]
    assert sig_entry["keyid"] == key_id(pub)
    sig = base64.b64decode(sig_entry["sig"])
    key = serialization.load_pem_public_key(pub.read_bytes())
    if isinstance(key, ed25519.Ed25519PublicKey):
        key.verify(sig, pae)
    else:
        decode_dss_signature(sig)  # DER, as cosign writes it
        key.verify(sig, pae, ec.ECDSA(hashes.SHA256()))
    return json.loads(payload)


def openssl_check(envelope: bytes, pub: Path, tmp: Path) -> None:
    """The same with the openssl command line, as docs/provenance.md shows it."""
    env = json.loads(envelope)
    payload = base64.b64decode(env["payload"])
    (tmp / "pae").write_bytes(b"DSSEv1 28 application/vnd.in-toto+json %d " % len(payload) + payload)
    (tmp / "sig").write_bytes(base64.b64decode(env["signatures"][0]["sig"]))
    if isinstance(serialization.load_pem_public_key(pub.read_bytes()), ed25519.Ed25519PublicKey):
        openssl("pkeyutl", "-verify", "-pubin", "-inkey", str(pub), "-rawin", "-in", str(tmp / "pae"), "-sigfile", str(tmp / "sig"))
    else:
        openssl("dgst", "-sha256", "-verify", str(pub), "-signature", str(tmp / "sig"), str(tmp / "pae"))


def predicate_validator() -> Draft202012Validator:
    schema = json.loads((SCHEMAS / "attestation" / "apply-v1.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate(command: str, doc: dict) -> None:
    schema = json.loads((SCHEMAS / f"{command}.schema.json").read_text())
    Draft202012Validator(schema).validate(doc)


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


# --- where attestations live ------------------------------------------------------------------------
def layout_referrers(layout: Path, subject: str) -> list[tuple[str, dict, bytes]]:
    """(manifest digest, manifest, envelope) of each referrer of `subject` listed in index.json."""
    out = []
    for d in read_index(layout)["manifests"]:
        if d.get("artifactType") != DSSE:
            continue
        m = json.loads(blob_path(layout, d["digest"]).read_bytes())
        if m["subject"]["digest"] == subject:
            out.append((d["digest"], m, blob_path(layout, m["layers"][0]["digest"]).read_bytes()))
    return out


def http_get(url: str, accept: str | None = None) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def registry_referrers(server, repo: str, subject: str) -> list[tuple[str, dict, bytes]]:
    """The same, read over plain HTTP from the fallback tag `sha256-<hex>` (no imgquilt code)."""
    base = f"http://{server.host}/v2/{repo}"
    index = json.loads(http_get(f"{base}/manifests/sha256-{subject.split(':')[1]}", "application/vnd.oci.image.index.v1+json"))
    out = []
    for d in index["manifests"]:
        m = json.loads(http_get(f"{base}/manifests/{d['digest']}", "application/vnd.oci.image.manifest.v1+json"))
        out.append((d["digest"], m, http_get(f"{base}/blobs/{m['layers'][0]['digest']}")))
    return out


def check_referrer_manifest(m: dict, subject: str) -> None:
    assert m["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert m["artifactType"] == DSSE
    assert m["config"] == {"mediaType": "application/vnd.oci.empty.v1+json",
                           "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2,
                           "data": "e30="}
    assert [layer["mediaType"] for layer in m["layers"]] == [DSSE]
    assert m["subject"]["digest"] == subject
    assert m["annotations"]["in-toto.io/predicate-type"] == PREDICATE


def check_statement(stmt: dict, subject: str, record: dict) -> None:
    assert stmt["_type"] == STATEMENT and stmt["predicateType"] == PREDICATE
    assert [s["digest"] for s in stmt["subject"]] == [{"sha256": subject.split(":")[1]}]
    predicate_validator().validate(stmt["predicate"])
    assert stmt["predicate"]["record"] == record  # the apply record of the image, as a value


def record_in_layout(layout: Path, manifest_digest: str) -> dict:
    """var/lib/imgquilt/applied.json from the image's top layer (the one apply wrote)."""
    m = json.loads(blob_path(layout, manifest_digest).read_bytes())
    data = gzip.decompress(blob_path(layout, m["layers"][-1]["digest"]).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return json.loads(tar.extractfile(RECORD).read())


def apply_json(q: Path, env, *args: str, check: int = 0) -> dict:
    return json.loads(imgquilt("apply", "--json", *args, cwd=q, env=env, check=check).out)


def verify(q: Path, env, ref: str, pub: Path, *more: str, check: int) -> dict:
    doc = json.loads(imgquilt("verify", "--json", "--image", ref, "--key", str(pub), *more, cwd=q, env=env, check=check).out)
    validate("verify", doc)
    return doc


def tamper(envelope: bytes, change) -> bytes:
    """The envelope with its statement changed by `change`, the signature kept."""
    env = json.loads(envelope)
    stmt = json.loads(base64.b64decode(env["payload"]))
    change(stmt)
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    return json.dumps(env).encode()


def attach_in_layout(layout: Path, subject: dict, envelope: bytes) -> str:
    """What another tool could put in a layout: a referrer manifest of `subject` over `envelope`."""
    config = put_blob(layout, b"{}")
    m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "artifactType": DSSE,
         "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config, "size": 2},
         "layers": [{"mediaType": DSSE, "digest": put_blob(layout, envelope), "size": len(envelope)}],
         "subject": subject, "annotations": {"in-toto.io/predicate-type": PREDICATE}}
    data = json.dumps(m).encode()
    digest = put_blob(layout, data)
    index = read_index(layout)
    index["manifests"].append({"mediaType": m["mediaType"], "digest": digest, "size": len(data), "artifactType": DSSE})
    write_index(layout, index)
    return digest


def attach_in_registry(ref: str, subject: dict, envelope: bytes) -> str:
    """The same in a registry (imgquilt's referrer writer, as `oras attach` would do it)."""
    from imgquilt.image.referrers import Referrer, Subject
    from imgquilt.image.sinks.registry import push_referrer

    r = Referrer(Subject(subject["mediaType"], subject["digest"], subject["size"]), DSSE, DSSE, envelope,
                 {"in-toto.io/predicate-type": PREDICATE})
    assert push_referrer(ref, r).startswith("tag sha256-")
    return r.digest


def change_queue(q: Path) -> None:
    """A change after the apply: a patch's description (the series sha256 changes, its hashes do not)."""
    p = q / "patches" / "0001-which-skip-empty-path-elements.patch"
    p.write_bytes(p.read_bytes().replace(b"never search the current directory", b"never search the current directory (reviewed)", 1))


# --- OCI layouts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("alg", ["ed", "ec"])
def test_layout_attestation_verifies_independently_and_with_verify(alg, keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    out = tmp_path / "out"
    doc = apply_json(q, env, "--output-image", f"oci:{out}:patched", "--attest", str(keys[alg]))
    validate("apply", doc)
    image = doc["outputs"]["image"]
    (att,) = image["attestations"]
    assert att["where"] == "index.json" and att["key_id"] == key_id(keys[f"{alg}.pub"])
    (found,) = layout_referrers(out, image["digest"])
    assert found[0] == att["digest"]
    check_referrer_manifest(found[1], image["digest"])
    check_statement(independent_check(found[2], keys[f"{alg}.pub"]), image["digest"], record_in_layout(out, image["digest"]))
    openssl_check(found[2], keys[f"{alg}.pub"], tmp_path)
    with pytest.raises(subprocess.CalledProcessError):
        openssl_check(found[2].replace(b'"payload":"', b'"payload":"IAAA'), keys[f"{alg}.pub"], tmp_path)  # three bytes more

    ok = verify(q, env, f"oci:{out}:patched", keys[f"{alg}.pub"], check=0)
    assert ok["verified"] and ok["attestation"]["digest"] == att["digest"]
    assert ok["attestation"]["series_sha256"] == doc["series_sha256"]
    wrong = verify(q, env, f"oci:{out}:patched", keys["other.pub"], check=3)
    assert [c["kind"] for c in wrong["candidates"]] == ["wrong-key"] and wrong["error"]["kind"] == "not-attested"
    r = imgquilt("verify", "--image", f"oci:{out}:patched", "--key", str(keys["other.pub"]), cwd=q, env=env, check=3)
    assert "wrong key" in r.err and att["digest"] in r.err

    # the layout stays an image layout for everyone else, and untagged it still names its one image
    assert json.loads(skopeo("inspect", f"oci:{out}:patched"))["Digest"] == image["digest"]
    assert subprocess.run(["umoci", "ls", "--layout", str(out)], capture_output=True, text=True, check=True).stdout.split() == ["patched"]
    imgquilt("audit", "--image", f"oci:{out}", cwd=q, env=env, check=0)


def test_layout_verify_refuses_tampered_envelope_other_subject_and_changed_queue(keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    out = tmp_path / "out"
    image = apply_json(q, env, "--output-image", f"oci:{out}:patched", "--attest", str(keys["ed"]))["outputs"]["image"]
    env2 = {**env, "SOURCE_DATE_EPOCH": "86400"}  # the same apply, another created time: another manifest digest
    other = apply_json(q, env2, "--output-image", f"oci:{out}:other")["outputs"]["image"]
    third = apply_json(q, {**env, "SOURCE_DATE_EPOCH": "172800"}, "--output-image", f"oci:{out}:third")["outputs"]["image"]
    assert len({image["digest"], other["digest"], third["digest"]}) == 3
    (_, _, envelope) = layout_referrers(out, image["digest"])[0]
    subject = {"mediaType": "application/vnd.oci.image.manifest.v1+json"}

    # the genuine envelope listed as a referrer of another image: its signed subject is not that image
    size = lambda d: blob_path(out, d).stat().st_size  # noqa: E731
    attach_in_layout(out, {**subject, "digest": other["digest"], "size": size(other["digest"])}, envelope)
    doc = verify(q, env, f"oci:{out}:other", keys["ed.pub"], check=3)
    assert [c["kind"] for c in doc["candidates"]] == ["other-subject"]
    assert image["digest"] in doc["candidates"][0]["reason"]

    # its statement changed to name the third image: the signature no longer verifies
    forged = tamper(envelope, lambda s: s["subject"][0]["digest"].update(sha256=third["digest"].split(":")[1]))
    attach_in_layout(out, {**subject, "digest": third["digest"], "size": size(third["digest"])}, forged)
    doc = verify(q, env, f"oci:{out}:third", keys["ed.pub"], check=3)
    assert [c["kind"] for c in doc["candidates"]] == ["bad-signature"]

    r = imgquilt("verify", "--image", f"oci:{tmp_path}/none", "--key", str(keys["ed.pub"]), cwd=q, env=env)
    assert r.code == 6  # not an image at all

    # the queue changed after the apply
    verify(q, env, f"oci:{out}:patched", keys["ed.pub"], check=0)
    change_queue(q)
    doc = verify(q, env, f"oci:{out}:patched", keys["ed.pub"], check=3)
    assert [c["kind"] for c in doc["candidates"]] == ["stale-series"]
    assert "stale series" in doc["error"]["message"]


# --- the registry (fallback tag) -----------------------------------------------------------------
def test_registry_fallback_tag_and_a_second_key_keeps_the_first(registry, keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    ref = registry.ref("prov/demo:patched")
    before = len(registry.requests())
    first = apply_json(q, env, "--image", registry.ref("demo:latest"), "--output-image", ref, "--attest", str(keys["ed"]))
    image = first["outputs"]["image"]
    tag = f"sha256-{image['digest'].split(':')[1]}"
    assert first["outputs"]["image"]["attestations"][0]["where"] == f"tag {tag}"
    puts = [r for r in registry.requests()[before:] if r.method == "PUT" and "/manifests/" in r.path]
    assert [r.path.rsplit("/", 1)[1] for r in puts] == ["patched", first["outputs"]["image"]["attestations"][0]["digest"], tag]
    (one,) = registry_referrers(registry, "prov/demo", image["digest"])
    check_referrer_manifest(one[1], image["digest"])
    stmt = independent_check(one[2], keys["ed.pub"])
    assert stmt["subject"][0]["name"] == f"{registry.host}/prov/demo"

    second = apply_json(q, env, "--image", registry.ref("demo:latest"), "--output-image", ref, "--attest", str(keys["ec"]))
    assert second["outputs"]["image"]["digest"] == image["digest"]  # the same image, attested again
    both = registry_referrers(registry, "prov/demo", image["digest"])
    assert [b[0] for b in both] == [one[0], second["outputs"]["image"]["attestations"][0]["digest"]]  # the first kept
    independent_check(both[0][2], keys["ed.pub"])
    check_statement(independent_check(both[1][2], keys["ec.pub"]), image["digest"], stmt["predicate"]["record"])

    assert verify(q, env, ref, keys["ed.pub"], check=0)["attestation"]["digest"] == both[0][0]
    assert verify(q, env, ref, keys["ec.pub"], check=0)["attestation"]["digest"] == both[1][0]
    doc = verify(q, env, ref, keys["other.pub"], check=3)
    assert [c["kind"] for c in doc["candidates"]] == ["wrong-key", "wrong-key"]
    assert [c["where"] for c in doc["candidates"]] == [f"tag {tag}"] * 2
    assert json.loads(skopeo("inspect", "--tls-verify=false", ref))["Digest"] == image["digest"]


def test_registry_verify_refuses_tampered_envelope_other_subject_and_changed_queue(registry, keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    base = registry.ref("demo:latest")
    a, b, c = (registry.ref(f"prov/tamper:{t}") for t in ("a", "b", "c"))
    image = apply_json(q, env, "--image", base, "--output-image", a, "--attest", str(keys["ed"]))["outputs"]["image"]
    apply_json(q, {**env, "SOURCE_DATE_EPOCH": "86400"}, "--image", base, "--output-image", b)
    apply_json(q, {**env, "SOURCE_DATE_EPOCH": "172800"}, "--image", base, "--output-image", c)
    ((_, _, envelope),) = registry_referrers(registry, "prov/tamper", image["digest"])
    sb, sc = subject_of(b), subject_of(c)

    attach_in_registry(b, sb, envelope)
    doc = verify(q, env, b, keys["ed.pub"], check=3)
    assert [x["kind"] for x in doc["candidates"]] == ["other-subject"]

    attach_in_registry(c, sc, tamper(envelope, lambda s: s["subject"][0]["digest"].update(sha256=sc["digest"].split(":")[1])))
    doc = verify(q, env, c, keys["ed.pub"], check=3)
    assert [x["kind"] for x in doc["candidates"]] == ["bad-signature"]

    doc = verify(q, env, registry.ref("demo:latest"), keys["ed.pub"], check=3)
    assert doc["candidates"] == [] and "No attestation found" in doc["error"]["message"]

    change_queue(q)
    doc = verify(q, env, a, keys["ed.pub"], check=3)
    assert [x["kind"] for x in doc["candidates"]] == ["stale-series"]


def test_a_refused_attestation_is_exit_6_after_the_image_was_pushed(fault_proxy, registry, keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    fault_proxy.fault = lambda method, path: ("status", 403) if method == "PUT" and "/manifests/sha256-" in path else None
    r = imgquilt("apply", "--image", fault_proxy.ref("demo:latest"), "--output-image", fault_proxy.ref("prov/refused:1"),
                 "--attest", str(keys["ed"]), cwd=q, env=env, check=6)
    assert "was pushed to" in r.err and "attestation was not stored" in r.err
    pushed = json.loads(skopeo("inspect", "--tls-verify=false", registry.ref("prov/refused:1")))
    assert pushed["Digest"] in r.err  # the image is there, whole


# --- audit --trust-attestation ------------------------------------------------------------------
SVC = b"def port():\n    return 8000\n"
OTHER = b"LIMIT = 10\n"


def make_queue(path: Path) -> Path:
    path.mkdir()
    write_patch(path, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    write_patch(path, "0002-limit.patch", [("usr/lib/other.py", OTHER, b"LIMIT = 50\n")])
    return path


def layers_of(ref: str) -> list[str]:
    return [layer["digest"] for layer in json.loads(skopeo("inspect", "--raw", "--tls-verify=false", ref))["layers"]]


def config_of(ref: str) -> str:
    return json.loads(skopeo("inspect", "--raw", "--tls-verify=false", ref))["config"]["digest"]


def test_fleet_audit_trusting_attestations_reads_no_layer(registry, keys, tmp_path, env):
    layout = tmp_path / "img"
    base = [file("srv/app/svc.py", SVC.decode()), file("usr/share/big/a.bin", os.urandom(1 << 20))]
    for release in ("1", "2", "3"):
        build_oci(layout, [base, [file("usr/lib/other.py", OTHER.decode())], [file("etc/release", release)]], tag=release)
        seed(registry, f"oci:{layout}:{release}", f"trust/app:{release}")
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode()), file("usr/lib/other.py", OTHER.decode()),
                        file("usr/share/big/b.bin", os.urandom(1 << 20))]], tag="plain")
    seed(registry, f"oci:{layout}:plain", "trust/plain:1")
    q = make_queue(tmp_path / "q")
    attested = []
    for release in ("1", "2", "3"):
        out = registry.ref(f"trust/app:{release}-fixed")
        apply_json(q, env, "--image", registry.ref(f"trust/app:{release}"), "--output-image", out, "--attest", str(keys["ed"]))
        attested.append(out)
    plain = registry.ref("trust/plain:1")
    refs = [*attested, plain]
    attested_layers = {d for ref in attested for d in layers_of(ref)}
    allowed = {config_of(ref) for ref in refs}
    for ref in attested:
        allowed |= {m["layers"][0]["digest"] for _, m, _ in registry_referrers(registry, ref.split("/", 3)[3].split(":")[0],
                                                                           subject_of(ref)["digest"])}
    plain_layers = set(layers_of(plain))

    env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cold-cache")  # nothing cached: manifests and configs are fetched
    before = len(registry.requests())
    r = imgquilt("audit", *[a for ref in refs for a in ("--image", ref)], "--trust-attestation", str(keys["ed.pub"]),
                 "--json", cwd=q, env=env, check=5)
    gets = {x.path.rsplit("/", 1)[1] for x in registry.requests()[before:] if x.method == "GET" and "/blobs/" in x.path}
    assert not gets & attested_layers  # zero layer blob GETs for the attested images
    assert gets - plain_layers <= allowed  # only their configs and envelopes
    assert plain_layers & gets  # the image with no attestation was read from its layers
    doc = json.loads(r.out)
    schema = json.loads((SCHEMAS / "audit.schema.json").read_text())
    Draft202012Validator({**schema["$defs"]["fleet"], "$defs": schema["$defs"]}).validate(doc)
    assert doc["answered_from_attestations"] == attested
    assert [d["answered_from"] for d in doc["images"]] == ["attestation"] * 3 + ["layers"]
    assert doc["images"][3]["attestation"]["digest"] is None
    assert "No attestation found" in doc["images"][3]["attestation"]["note"]
    assert doc["matrix"] == {"0001-port.patch": {**{a: "live" for a in attested}, plain: "pending"},
                             "0002-limit.patch": {**{a: "live" for a in attested}, plain: "pending"}}

    # the states an attestation gives are the ones reading the layers gives
    from_layers = json.loads(imgquilt("audit", "--image", attested[0], "--json", cwd=q, env=env, check=0).out)
    trusted = doc["images"][0]
    assert {k: v for k, v in trusted.items() if k not in ("answered_from", "attestation")} == from_layers

    text = imgquilt("audit", *[a for ref in refs for a in ("--image", ref)], "--trust-attestation", str(keys["ed.pub"]),
                    cwd=q, env=env, check=5).out
    assert f"{attested[0]}: answered from attestation" in text
    assert f"{plain}: No attestation found" in text and "the layers were read" in text


def test_single_audit_trusting_the_wrong_key_or_a_changed_queue_reads_the_layers(keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    out = f"oci:{tmp_path}/out:patched"
    apply_json(q, env, "--output-image", out, "--attest", str(keys["ed"]))
    plain = json.loads(imgquilt("audit", "--image", out, "--json", cwd=q, env=env, check=0).out)
    trusted = json.loads(imgquilt("audit", "--image", out, "--trust-attestation", str(keys["ed.pub"]), "--json",
                                  cwd=q, env=env, check=0).out)
    validate("audit", trusted)
    assert trusted["answered_from"] == "attestation"
    assert {k: v for k, v in trusted.items() if k not in ("answered_from", "attestation")} == plain
    wrong = json.loads(imgquilt("audit", "--image", out, "--trust-attestation", str(keys["other.pub"]), "--json",
                                cwd=q, env=env, check=0).out)
    assert wrong["answered_from"] == "layers" and "wrong key" in wrong["attestation"]["rejected"][0]["reason"]
    assert wrong["patches"] == plain["patches"]
    change_queue(q)
    stale = json.loads(imgquilt("audit", "--image", out, "--trust-attestation", str(keys["ed.pub"]), "--json",
                                cwd=q, env=env, check=0).out)
    assert stale["answered_from"] == "layers" and "stale series" in stale["attestation"]["rejected"][0]["reason"]
    r = imgquilt("audit", "--root", str(tmp_path), "--trust-attestation", str(keys["ed.pub"]), cwd=q, env=env, check=2)
    assert "--root has none" in r.err


# --- --platform all, archives, keys -----------------------------------------------------------------
def test_platform_all_attaches_one_attestation_per_platform_manifest(multi, registry, keys, tmp_path, env):  # noqa: F811
    q = copy_demo_queue(tmp_path / "q")
    for out in (f"oci:{tmp_path}/out:multi", registry.ref("prov/multi:patched")):
        doc = apply_json(q, env, "--image", f"oci:{multi}:multi", "--platform", "all", "--output-image", out,
                         "--attest", str(keys["ec"]))
        validate("apply", doc)
        members = doc["outputs"]["image"]["platforms"]
        assert [m["platform"] for m in members] == ["linux/amd64", "linux/arm64"]
        for m in members:
            (att,) = m["attestations"]
            found = (layout_referrers(tmp_path / "out", m["digest"]) if out.startswith("oci:")
                     else registry_referrers(registry, "prov/multi", m["digest"]))
            assert [f[0] for f in found] == [att["digest"]]
            stmt = independent_check(found[0][2], keys["ec.pub"])
            assert stmt["subject"][0]["digest"]["sha256"] == m["digest"].split(":")[1]
            assert stmt["predicate"]["platform"] == m["platform"]
            assert stmt["predicate"]["layer"]["digest"] == m["layer_digest"]
        v = json.loads(imgquilt("verify", "--image", out, "--key", str(keys["ec.pub"]), "--platform", "all", "--json",
                                cwd=q, env=env, check=0).out)
        validate("verify", v)
        assert [p["image"]["platform"] for p in v["platforms"]] == ["linux/amd64", "linux/arm64"] and v["verified"]
        imgquilt("verify", "--image", out, "--key", str(keys["ec.pub"]), "--platform", "linux/arm64", cwd=q, env=env, check=0)
        audited = json.loads(imgquilt("audit", "--image", out, "--platform", "all", "--trust-attestation", str(keys["ec.pub"]),
                                      "--json", cwd=q, env=env, check=0).out)
        assert [p["answered_from"] for p in audited["platforms"]] == ["attestation", "attestation"]
        assert [p["attestation"]["digest"] for p in audited["platforms"]] == [m["attestations"][0]["digest"] for m in members]


def test_archives_oci_archive_holds_the_attestation_docker_archive_cannot(keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    archive = tmp_path / "out.tar"
    doc = apply_json(q, env, "--output-image", f"oci-archive:{archive}:patched", "--attest", str(keys["ed"]))
    assert doc["outputs"]["image"]["attestations"][0]["where"] == "index.json"
    assert json.loads(skopeo("inspect", f"oci-archive:{archive}:patched"))["Digest"] == doc["outputs"]["image"]["digest"]
    verify(q, env, f"oci-archive:{archive}:patched", keys["ed.pub"], check=0)
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(extracted, filter="data")
    (found,) = layout_referrers(extracted, doc["outputs"]["image"]["digest"])
    independent_check(found[2], keys["ed.pub"])

    r = imgquilt("apply", "--output-image", f"docker-archive:{tmp_path}/d.tar", "--attest", str(keys["ed"]), cwd=q, env=env, check=2)
    assert "cannot hold an attestation" in r.err and not (tmp_path / "d.tar").exists()


def test_keys_bad_missing_encrypted_and_misused(keys, tmp_path, env):
    q = copy_demo_queue(tmp_path / "q")
    out = tmp_path / "out"
    rsa = tmp_path / "rsa.pem"
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(rsa))
    r = imgquilt("apply", "--output-image", f"oci:{out}:x", "--attest", str(rsa), cwd=q, env=env, check=6)
    assert "Ed25519 and ECDSA P-256" in r.err and not out.exists()
    imgquilt("apply", "--output-image", f"oci:{out}:x", "--attest", str(keys["ed.pub"]), cwd=q, env=env, check=6)
    imgquilt("apply", "--output-image", f"oci:{out}:x", "--attest", str(tmp_path / "nope.pem"), cwd=q, env=env, check=2)
    r = imgquilt("apply", "--layer", str(tmp_path / "l.tar"), "--attest", str(keys["ed"]), cwd=q, env=env, check=2)
    assert "--output-image" in r.err and not (tmp_path / "l.tar").exists() and not out.exists()

    enc = tmp_path / "enc.pem"
    openssl("genpkey", "-algorithm", "ed25519", "-aes256", "-pass", "pass:sesame", "-out", str(enc))
    r = imgquilt("apply", "--output-image", f"oci:{out}:x", "--attest", str(enc), cwd=q, env=env, check=6)
    assert "IMGQUILT_KEY_PASSWORD" in r.err and not out.exists()
    imgquilt("apply", "--output-image", f"oci:{out}:x", "--attest", str(enc), cwd=q, env={**env, "IMGQUILT_KEY_PASSWORD": "sesame"}, check=0)
    pub = tmp_path / "enc.pub"
    openssl("pkey", "-in", str(enc), "-passin", "pass:sesame", "-pubout", "-out", str(pub))
    verify(q, env, f"oci:{out}:x", pub, check=0)
    r = imgquilt("verify", "--image", f"oci:{out}:x", "--key", str(keys["ed"]), cwd=q, env=env, check=6)
    assert "public half" in r.err
