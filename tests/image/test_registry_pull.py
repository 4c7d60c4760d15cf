"""Reading from a real registry (docker-registry): resolve, manifests, blobs, and what goes wrong."""
from __future__ import annotations

import hashlib
import json

import pytest

from imgquilt.errors import BadImage, DigestMismatch
from imgquilt.image.registry import RegistryClient, RetryPolicy, parse_registry_ref
from support.registry_server import DEMO, free_port, inspect_digest, seed, start_registry
from support.registry_server import registry  # noqa: F401 (fixtures)

FAST = RetryPolicy(attempts=2, base_delay=0.05)

def demo_blobs() -> tuple[dict, dict]:
    index = json.loads((DEMO / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    manifest = json.loads((DEMO / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())
    return index["manifests"][0], manifest


def test_resolve_gives_the_digest_skopeo_reports(registry):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    expected = inspect_digest(registry, "demo:latest")
    heads_before = registry.count("HEAD", "/manifests/")
    gets_before = registry.count("GET", "/manifests/")
    with RegistryClient.for_ref(ref) as client:
        desc = client.resolve(ref)
    assert desc.digest == expected
    assert desc.media_type == "application/vnd.oci.image.manifest.v1+json"
    assert desc.size == demo_blobs()[0]["size"]
    # one HEAD, no GET of the manifest
    assert registry.count("HEAD", "/manifests/") == heads_before + 1
    assert registry.count("GET", "/manifests/") == gets_before


def test_manifest_config_and_layers_fetched_and_verified(registry):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    _, local = demo_blobs()
    with RegistryClient.for_ref(ref) as client:
        desc = client.resolve(ref)
        manifest = client.get_manifest(ref.repository, desc.digest)
        by_tag = client.get_manifest(ref.repository, "latest")
        assert manifest.digest == by_tag.digest == desc.digest
        assert json.loads(manifest.data) == local
        doc = json.loads(manifest.data)
        config = client.read_blob(ref.repository, doc["config"]["digest"], size=doc["config"]["size"], what="config")
        assert "sha256:" + hashlib.sha256(config).hexdigest() == doc["config"]["digest"]
        for layer in doc["layers"]:
            with client.open_blob(ref.repository, layer["digest"], size=layer["size"], what="layer") as stream:
                head = stream.peek(10)
                data = stream.read(7) + stream.read()
                assert stream.verified
            assert data[:10] == head
            assert data == (DEMO / "blobs" / "sha256" / layer["digest"].split(":")[1]).read_bytes()


def test_one_connection_reused_for_many_requests(registry):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        for _ in range(5):
            client.resolve(ref)
        pool = client._http._transport._pool  # httpx's connection pool: one open connection
        assert len(pool.connections) == 1


@pytest.fixture
def own_registry(tmp_path):
    """A registry this test may damage: demo:latest copied in."""
    server = start_registry(tmp_path / "reg")
    try:
        seed(server, f"oci:{DEMO}:latest", "demo:latest")
        yield server
    finally:
        server.stop()


def _first_layer(server):
    ref = parse_registry_ref(server.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        doc = json.loads(client.get_manifest(ref.repository, "latest").data)
    return ref, doc["layers"][0]


def test_corrupted_blob_in_storage_is_a_digest_mismatch(own_registry):
    ref, layer = _first_layer(own_registry)
    path = own_registry.blob_file(layer["digest"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with RegistryClient.for_ref(ref) as client, \
            client.open_blob(ref.repository, layer["digest"], size=layer["size"]) as stream:
        with pytest.raises(DigestMismatch, match="does not match its descriptor") as err:
            stream.drain()
    assert err.value.exit_code == 6


def test_truncated_blob_in_storage_is_detected(own_registry):
    ref, layer = _first_layer(own_registry)
    path = own_registry.blob_file(layer["digest"])
    path.write_bytes(path.read_bytes()[: layer["size"] // 2])
    with RegistryClient.for_ref(ref, retry=FAST) as client:
        with pytest.raises(BadImage, match=f"is {layer['size'] // 2} bytes; its descriptor says") as err:
            client.open_blob(ref.repository, layer["digest"], size=layer["size"])
        # without the descriptor's size, the digest still catches it, at the end and before any use
        with client.open_blob(ref.repository, layer["digest"]) as stream:
            with pytest.raises(DigestMismatch, match="does not match its digest"):
                stream.read()
    assert err.value.exit_code == 6


def test_missing_tag_and_missing_repository_are_clear(registry):
    # docker-registry 2.8 says MANIFEST_UNKNOWN for a missing repository too; others say NAME_UNKNOWN
    for name, said in (("demo:nope", "MANIFEST_UNKNOWN"), ("nothere:latest", "_UNKNOWN")):
        ref = parse_registry_ref(registry.ref(name))
        with RegistryClient.for_ref(ref) as client:
            with pytest.raises(BadImage) as err:
                client.get_manifest(ref.repository, ref.reference)
        text = err.value.render()
        assert "404 not found" in text and said in text and "Check the repository" in text
        assert err.value.exit_code == 6
    ref = parse_registry_ref(registry.ref("demo:nope"))
    with RegistryClient.for_ref(ref) as client, pytest.raises(BadImage, match="has no manifest demo:nope"):
        client.resolve(ref)  # a HEAD has no body: the status still says what is missing


def test_missing_blob_is_clear(registry):
    ref = parse_registry_ref(registry.ref("demo:latest"))
    digest = "sha256:" + "ab" * 32
    with RegistryClient.for_ref(ref) as client:
        assert not client.blob_exists(ref.repository, digest)
        with pytest.raises(BadImage, match="BLOB_UNKNOWN"):
            client.open_blob(ref.repository, digest)


def test_registry_down_is_a_clear_error():
    ref = parse_registry_ref(f"docker://127.0.0.1:{free_port()}/demo:latest")
    with RegistryClient.for_ref(ref, retry=FAST) as client, pytest.raises(BadImage) as err:
        client.resolve(ref)
    assert "Cannot reach the registry 127.0.0.1:" in err.value.render()
    assert "running" in err.value.render()


def test_non_loopback_plain_http_needs_tls_verify_false_or_insecure(registry, tmp_path, monkeypatch):
    import imgquilt.image.registry.client as client_module

    # the registry listens on 127.0.0.1 only; treat that address as a remote host for this test
    monkeypatch.setattr(client_module, "is_loopback", lambda host: False)
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(tmp_path / "none.conf"))
    ref = parse_registry_ref(registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref, retry=FAST) as client, pytest.raises(BadImage) as err:
        client.resolve(ref)
    assert "Cannot reach the registry" in err.value.render() and "--tls-verify=false" in err.value.render()
    expected = inspect_digest(registry, "demo:latest")
    with RegistryClient.for_ref(ref, tls_verify=False) as client:
        assert client.resolve(ref).digest == expected
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nlocation = "{registry.host}"\ninsecure = true\n')
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    with RegistryClient.for_ref(ref) as client:
        assert client.resolve(ref).digest == expected


def test_a_failure_never_shows_a_traceback_through_the_cli_shape(registry):
    """Every failure is a BadImage: render() is one paragraph with a hint."""
    ref = parse_registry_ref(registry.ref("demo:nope"))
    with RegistryClient.for_ref(ref) as client, pytest.raises(BadImage) as err:
        client.resolve(ref)
    assert "Traceback" not in err.value.render() and err.value.hint
