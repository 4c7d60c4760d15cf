"""Pushing to a real registry: only new blobs are uploaded, and skopeo reads what was pushed."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess

import pytest

from imgquilt.errors import DigestMismatch
from imgquilt.image.registry import RegistryClient, parse_registry_ref
from imgquilt.image.mediatypes import OCI_LAYER_GZIP, OCI_MANIFEST
from support.imagetools import file, layer_bytes
from support.registry_server import inspect_digest, skopeo
from support.registry_server import registry  # noqa: F401 (fixtures)

def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def patched_image(client: RegistryClient, repo: str) -> tuple[bytes, bytes, dict, bytes]:
    """demo:latest plus one small layer: (new layer, new config, manifest dict, manifest bytes)."""
    base = json.loads(client.get_manifest(repo, "latest").data)
    config = json.loads(client.read_blob(repo, base["config"]["digest"], size=base["config"]["size"]))
    tar = layer_bytes([file("etc/imgquilt-pushed.txt", "pushed by the registry client\n")])
    layer = gzip.compress(tar, mtime=0)
    config["rootfs"]["diff_ids"].append(sha(tar))
    config_bytes = json.dumps(config).encode()
    manifest = dict(base)
    manifest["config"] = {**base["config"], "digest": sha(config_bytes), "size": len(config_bytes)}
    manifest["layers"] = base["layers"] + [{"mediaType": OCI_LAYER_GZIP, "digest": sha(layer), "size": len(layer)}]
    return layer, config_bytes, manifest, json.dumps(manifest).encode()


def test_push_uploads_only_the_new_blobs_and_skopeo_reads_the_result(registry, tmp_path):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        layer, config, manifest, manifest_bytes = patched_image(client, ref.repository)
        puts, patches, posts = (registry.count("PUT", "/blobs/uploads/"), registry.count("PATCH"),
                                registry.count("POST", "/blobs/uploads/"))
        outcomes = {}
        for desc in manifest["layers"]:
            data = layer if desc["digest"] == sha(layer) else None
            outcomes[desc["digest"]] = client.push_blob(ref.repository, desc["digest"], data)
        outcomes["config"] = client.push_blob(ref.repository, manifest["config"]["digest"], io.BytesIO(config))
        pushed = client.put_manifest(ref.repository, "patched", manifest_bytes, OCI_MANIFEST)
    assert list(outcomes.values()) == ["exists"] * (len(manifest["layers"]) - 1) + ["uploaded", "uploaded"]
    # two uploads (the new layer and the config), each one POST and one monolithic PUT, no PATCH
    assert registry.count("POST", "/blobs/uploads/") == posts + 2
    assert registry.count("PUT", "/blobs/uploads/") == puts + 2
    assert registry.count("PATCH") == patches
    assert pushed == sha(manifest_bytes) == inspect_digest(registry, "demo:patched")
    # skopeo copies the pushed image out, and umoci unpacks the new file from it
    skopeo("copy", "--quiet", "--src-tls-verify=false", registry.ref("demo:patched"), f"oci:{tmp_path / 'out'}:p")
    subprocess.run(["umoci", "raw", "unpack", "--rootless", "--image", f"{tmp_path / 'out'}:p", str(tmp_path / "root")],
                   check=True, capture_output=True)
    assert (tmp_path / "root/etc/imgquilt-pushed.txt").read_text() == "pushed by the registry client\n"


def test_a_stream_is_uploaded_in_chunks(registry):
    ref = parse_registry_ref(registry.ref("chunked:latest"))
    data = bytes(range(256)) * 1000  # 256000 bytes: 4 chunks of 64 KiB
    digest = sha(data)
    with RegistryClient.for_ref(ref) as client:
        patches = registry.count("PATCH", "/chunked/")
        client.upload_blob(ref.repository, digest, io.BytesIO(data), chunk_size=64 << 10)
        assert registry.count("PATCH", "/chunked/") == patches + 3  # the last chunk goes with the PUT
        assert client.blob_exists(ref.repository, digest)
        assert client.read_blob(ref.repository, digest, size=len(data)) == data


def test_a_stream_that_does_not_match_its_digest_is_never_committed(registry):
    ref = parse_registry_ref(registry.ref("badstream:latest"))
    data = b"x" * 200000
    wrong = sha(b"something else")
    with RegistryClient.for_ref(ref) as client:
        with pytest.raises(DigestMismatch, match="does not match its digest"):
            client.upload_blob(ref.repository, wrong, io.BytesIO(data), chunk_size=64 << 10)
        assert not client.blob_exists(ref.repository, wrong)
        with pytest.raises(DigestMismatch, match="blob to upload does not match"):
            client.upload_blob(ref.repository, wrong, data)


def test_cross_repository_mount(registry):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        base = json.loads(client.get_manifest("demo", "latest").data)
        digest = base["layers"][0]["digest"]
        puts = registry.count("PUT", "/blobs/uploads/")
        assert client.push_blob("mounted", digest, None, mount_from="demo") == "mounted"
        assert client.blob_exists("mounted", digest)
        assert client.push_blob("mounted", digest, None, mount_from="demo") == "exists"
        # a blob the source repository lacks cannot be mounted: the offered upload is cancelled
        missing = sha(b"not in demo")
        assert client.mount_blob("mounted2", missing, "demo") is False
    assert registry.count("PUT", "/blobs/uploads/") == puts
    assert registry.count("POST", "mount=") >= 2
