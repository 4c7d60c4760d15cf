"""The client on a bad network (a fault-injecting proxy in front of the real registry): retries with
backoff, Retry-After, blob redirects to another origin, and a body cut off mid-way."""
from __future__ import annotations

import json
import time

import pytest

from imgquilt.errors import BadImage
from imgquilt.image.registry import RegistryClient, RetryPolicy, parse_registry_ref
from support.registry_server import inspect_digest
from support.registry_server import fault_proxy, registry  # noqa: F401 (fixtures)

FAST = RetryPolicy(attempts=3, base_delay=0.05, max_delay=1.0)

def failing(times: int, status: int, path_part: str, headers: dict | None = None):
    """A fault: answer `status` to the first `times` requests whose path holds `path_part`."""
    left = [times]

    def fault(method: str, path: str):
        if path_part in path and left[0] > 0:
            left[0] -= 1
            return ("status", status, headers or {})
        return None
    return fault


def test_5xx_and_429_are_retried_with_backoff(fault_proxy, registry):
    ref = parse_registry_ref(fault_proxy.ref("demo:latest"))
    expected = inspect_digest(registry, "demo:latest")
    fault_proxy.fault = failing(2, 503, "/manifests/")
    with RegistryClient.for_ref(ref, retry=FAST) as client:
        start = time.monotonic()
        assert client.resolve(ref).digest == expected
        assert time.monotonic() - start >= 0.05 + 0.1  # two backoffs
        fault_proxy.fault = failing(1, 429, "/manifests/", {"Retry-After": "1"})
        start = time.monotonic()
        assert client.resolve(ref).digest == expected
        assert time.monotonic() - start >= 1.0  # Retry-After honoured
    assert sum(1 for m, p, _ in fault_proxy.seen if "/manifests/" in p) == 3 + 2


def test_rate_limit_that_persists_is_a_clear_error(fault_proxy):
    ref = parse_registry_ref(fault_proxy.ref("demo:latest"))
    fault_proxy.fault = failing(100, 429, "/manifests/")
    with RegistryClient.for_ref(ref, retry=FAST) as client, pytest.raises(BadImage) as err:
        client.get_manifest(ref.repository, "latest")
    text = err.value.render()
    assert "rate-limiting" in text and "TOOMANYREQUESTS: injected 429" in text and "try again later" in text
    assert sum(1 for m, p, _ in fault_proxy.seen if "/manifests/" in p) == FAST.attempts


def test_blob_redirect_to_another_origin_is_followed(fault_proxy, registry):
    ref = parse_registry_ref(fault_proxy.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        doc = json.loads(client.get_manifest(ref.repository, "latest").data)
        layer = doc["layers"][0]
        path = f"/v2/demo/blobs/{layer['digest']}"
        fault_proxy.fault = lambda method, p: ("redirect",) if "/blobs/" in p else None
        served = registry.count("GET", f"^{path}$")
        data = client.read_blob(ref.repository, layer["digest"], size=layer["size"], limit=1 << 30)
    assert len(data) == layer["size"]
    # the proxy only redirected; the registry (another origin) served the bytes
    assert sum(1 for m, p, _ in fault_proxy.seen if m == "GET" and p == path) == 1
    assert registry.count("GET", f"^{path}$") == served + 1


def test_a_body_cut_off_mid_way_is_detected(fault_proxy):
    ref = parse_registry_ref(fault_proxy.ref("demo:latest"))
    with RegistryClient.for_ref(ref, retry=FAST) as client:
        doc = json.loads(client.get_manifest(ref.repository, "latest").data)
        layer = doc["layers"][0]
        fault_proxy.fault = lambda method, path: ("cut", 100) if "/blobs/" in path else None
        with client.open_blob(ref.repository, layer["digest"], size=layer["size"]) as stream:
            with pytest.raises(BadImage, match=r"was cut off mid-download.*received 100 bytes, expected") as err:
                stream.drain()
    assert err.value.exit_code == 6


def test_resolve_falls_back_to_get_when_head_gives_no_digest(fault_proxy, registry):
    ref = parse_registry_ref(fault_proxy.ref("demo:latest"))
    expected = inspect_digest(registry, "demo:latest")
    fault_proxy.fault = lambda method, path: ("drop-header", "Docker-Content-Digest") if "/manifests/" in path else None
    with RegistryClient.for_ref(ref) as client:
        desc = client.resolve(ref)
    assert desc.digest == expected and desc.media_type == "application/vnd.oci.image.manifest.v1+json"
    assert [m for m, p, _ in fault_proxy.seen if "/manifests/" in p] == ["HEAD", "GET"]
