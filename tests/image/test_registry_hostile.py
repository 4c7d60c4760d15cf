"""A hostile registry (a fault proxy on 127.0.0.1 in front of the real `docker-registry`): credentials
stay with the origin that challenged, every answer is capped, every request ends by a deadline, and
whatever the registry sends is exit 6 with one paragraph, never exit 1 or a hang.

Each CLI run is a child with its address space capped at 1 GiB and a wall-clock timeout, so an
endless body shows as MemoryError (exit 1) and a trickle as a timeout if a cap or the deadline fails.
"""
from __future__ import annotations

import base64
import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from imgquilt.image.registry import RegistryClient, parse_registry_ref
from support.qtools import copy_demo_queue, write_patch
from support.registry_server import PASSWORD, USER, start_fault_proxy
from support.registry_server import basic_registry, fault_proxy, registry  # noqa: F401 (fixtures)
from support.registry_queue import queue  # noqa: F401 (fixture: the demo queue, unlocked)
from support.registry_hostile import Elsewhere, answer, bad, cli, env  # noqa: F401 (fixtures)


def creds_file(tmp_path: Path, host: str) -> Path:
    path = tmp_path / "auth.json"
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return path


@pytest.fixture
def elsewhere():
    other = Elsewhere()
    yield other
    other.close()


@pytest.fixture
def basic_proxy(basic_registry):
    proxy, httpd = start_fault_proxy(basic_registry)
    yield proxy
    httpd.shutdown()
    httpd.server_close()


def endless(status: int, headers: dict[str, str] | None = None):
    """An answer whose body never ends (no length: until the connection closes)."""
    def write(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Connection", "close")
        h.end_headers()
        chunk = b"{" * (1 << 16)
        while True:
            h.wfile.write(chunk)
    return ("raw", write)


def trickle(status_line_too: bool = False, every: float = 2.0):
    """One byte every `every` seconds: the body (headers sent at once), or the status line itself."""
    def write(h: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n" \
               b"Connection: close\r\nContent-Length: 100000\r\n\r\n"
        if not status_line_too:
            h.wfile.write(head)
            h.wfile.flush()
            head = b"{" * 100000
        for k in range(len(head)):
            h.wfile.write(head[k:k + 1])
            h.wfile.flush()
            time.sleep(every)
    return ("raw", write)


# --- credentials ---------------------------------------------------------------------------------
def test_an_upload_location_on_another_origin_gets_neither_credentials_nor_bytes(basic_proxy, elsewhere, queue,
                                                                                  tmp_path, env):
    env["REGISTRY_AUTH_FILE"] = str(creds_file(tmp_path, basic_proxy.host))
    # every upload start is answered with a Location on another host:port
    basic_proxy.fault = lambda method, path: answer(202, {"Location": f"{elsewhere.base}/v2/demo/blobs/uploads/x"}) \
        if method == "POST" and "/blobs/uploads/" in path else None
    r = cli("apply", "--image", "oci:examples/demo-image:latest", "--output-image", basic_proxy.ref("demo:stolen"),
            cwd=queue, env=env)
    bad(r, "another origin", elsewhere.base.split("//")[1])
    assert elsewhere.seen == []
    # the registry itself got the credentials (the POST carried them)
    assert any(m == "POST" and a and a.startswith("Basic ") for m, p, a in basic_proxy.seen)


def test_a_relative_or_same_origin_location_still_uploads(registry, fault_proxy, queue, tmp_path, env):
    """The guard refuses only other origins: the real registry's own Locations (absolute, same origin) work."""
    r = cli("apply", "--image", "oci:examples/demo-image:latest", "--output-image", fault_proxy.ref("demo:fine"),
            cwd=queue, env=env)
    assert r.code == 0, r.err
    assert any(m == "PUT" and "/manifests/fine" in p for m, p, _ in fault_proxy.seen)


def test_a_blob_redirected_elsewhere_is_fetched_without_credentials(basic_registry, basic_proxy, tmp_path, monkeypatch):
    """A CDN on another origin serves the blob; it sees no Authorization (the registry did)."""
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(creds_file(tmp_path, basic_proxy.host)))

    def cdn(h: BaseHTTPRequestHandler) -> None:
        digest = h.path.rsplit("/", 1)[1]
        data = basic_registry.blob_file(digest).read_bytes()
        h.send_response(200)
        h.send_header("Connection", "close")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    other = Elsewhere(cdn)
    try:
        ref = parse_registry_ref(basic_proxy.ref("demo:latest"))
        with RegistryClient.for_ref(ref) as client:
            doc = json.loads(client.get_manifest(ref.repository, "latest").data)
            layer = doc["layers"][0]
            basic_proxy.fault = lambda method, path: answer(307, {"Location": f"{other.base}/cdn/{layer['digest']}"}) \
                if "/blobs/" in path else None
            data = client.read_blob(ref.repository, layer["digest"], size=layer["size"], limit=1 << 30)
        assert len(data) == layer["size"]
        assert other.seen and all(auth is None for _, _, auth in other.seen)
        assert any(p.endswith(layer["digest"]) and a for _, p, a in basic_proxy.seen)
    finally:
        other.close()


def test_a_token_realm_that_is_no_url_is_bad_input(fault_proxy, queue, env):
    fault_proxy.fault = lambda method, path: answer(401, {"WWW-Authenticate": 'Bearer realm="http://[::1",service="x"'}) \
        if path.startswith("/v2/") else None
    bad(cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env), "not a usable URL")


# --- malformed answers -----------------------------------------------------------------------------
def test_a_redirect_loop_is_bad_input(fault_proxy, queue, env):
    fault_proxy.fault = lambda method, path: answer(307, {"Location": path}) if "/blobs/" in path else None
    bad(cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env), "redirected", "loop")


@pytest.mark.parametrize("location", ["http://[bad", "ftp://127.0.0.1/x", "http://127.0.0.1:99999/x"])
def test_a_blob_redirect_to_an_unusable_url_is_bad_input(fault_proxy, queue, env, location):
    fault_proxy.fault = lambda method, path: answer(307, {"Location": location}) if "/blobs/" in path else None
    bad(cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env), "redirected")


@pytest.mark.parametrize("location", ["http://[bad", "http://127.0.0.1:99999/x"])
def test_an_upload_location_that_is_no_url_is_bad_input(fault_proxy, queue, env, location):
    fault_proxy.fault = lambda method, path: answer(202, {"Location": location}) \
        if method == "POST" and "/blobs/uploads/" in path else None
    r = cli("apply", "--image", "oci:examples/demo-image:latest", "--output-image", fault_proxy.ref("demo:x"),
            cwd=queue, env=env)
    bad(r, "upload location")


def test_a_retry_after_that_is_no_number_falls_back_to_the_backoff(fault_proxy, queue, env):
    left = [1]

    def fault(method, path):
        if "/manifests/" in path and left[0]:
            left[0] -= 1
            return ("status", 503, {"Retry-After": "\u00b2"})  # a superscript two: str.isdigit() says yes
        return None

    fault_proxy.fault = fault
    r = cli("audit", "--image", fault_proxy.ref("demo:latest"), "--expect", "pending", cwd=queue, env=env)
    assert r.code == 0, r.err


# --- caps --------------------------------------------------------------------------------------------
def test_an_endless_v2_answer_is_not_read_whole(fault_proxy, queue, env):
    fault_proxy.fault = lambda method, path: endless(200) if path == "/v2/" else None
    r = cli("audit", "--image", fault_proxy.ref("demo:latest"), "--expect", "pending", cwd=queue, env=env)
    assert r.code == 0, r.err


def test_an_endless_error_answer_is_not_read_whole(fault_proxy, queue, env):
    fault_proxy.fault = lambda method, path: endless(404, {"Content-Type": "application/json"}) \
        if "/manifests/" in path else None
    bad(cli("audit", "--image", fault_proxy.ref("demo@sha256:" + "0" * 64), cwd=queue, env=env), "404")


def test_an_endless_token_answer_is_capped(fault_proxy, queue, env):
    tokens = Elsewhere(lambda h: endless(200, {"Content-Type": "application/json"})[1](h))
    try:
        fault_proxy.fault = lambda method, path: answer(401, {"WWW-Authenticate": f'Bearer realm="{tokens.base}/token"'}) \
            if path.startswith("/v2/") else None
        bad(cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env), "more than")
    finally:
        tokens.close()


def test_a_basic_credential_never_goes_to_a_plain_http_realm_of_an_https_registry():
    from imgquilt.errors import BadImage
    from imgquilt.image.registry.auth import Authenticator, Challenge
    from imgquilt.image.registry.credentials import Credentials

    sent = []
    auth = Authenticator("registry.example", Credentials(USER, PASSWORD, "test"), lambda *a, **k: sent.append(a),
                         lambda *a, **k: a, lambda: "https://registry.example")
    auth.challenge = Challenge("bearer", (("realm", "http://auth.example/token"),))
    with pytest.raises(BadImage, match="plain HTTP"):
        auth.authorization(("repository:x:pull",))
    assert sent == []


# --- deadlines -----------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["body", "status-line"])
def test_a_trickling_manifest_ends_at_the_deadline(fault_proxy, queue, env, where):
    env["IMGQUILT_REGISTRY_DEADLINE"] = "3"
    fault_proxy.fault = lambda method, path: trickle(where == "status-line") \
        if method == "GET" and "/manifests/" in path else None
    start = time.monotonic()
    r = cli("audit", "--image", fault_proxy.ref("demo@sha256:" + "0" * 64), cwd=queue, env=env, timeout=60)
    bad(r, "within 3 s", "IMGQUILT_REGISTRY_DEADLINE")
    assert time.monotonic() - start < 30


def test_a_trickling_blob_is_cut_off(fault_proxy, queue, env):
    env["IMGQUILT_REGISTRY_DEADLINE"] = "3"

    def slow_blob(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Connection", "close")  # no length: the body goes on until the server stops
        h.end_headers()
        while True:
            h.wfile.write(b"\0")
            h.wfile.flush()
            time.sleep(1)

    fault_proxy.fault = lambda method, path: ("raw", slow_blob) if method == "GET" and "/blobs/" in path else None
    r = cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env, timeout=60)
    bad(r, "too slow", "IMGQUILT_REGISTRY_DEADLINE")


def test_a_bad_deadline_value_is_a_usage_error(registry, queue, env):
    env["IMGQUILT_REGISTRY_DEADLINE"] = "soon"
    r = cli("audit", "--image", registry.ref("demo:latest"), cwd=queue, env=env)
    assert r.code == 2 and "IMGQUILT_REGISTRY_DEADLINE" in r.err, r.err


# --- a digest listed again and again --------------------------------------------------------------
def test_a_layer_listed_many_times_is_downloaded_once(registry, tmp_path, env):
    """A manifest that lists the demo's layers 20 times over (and a config to match): every blob is
    fetched from the registry once, and the audit reads the image right."""
    ref = parse_registry_ref(registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        manifest = json.loads(client.get_manifest("demo", "latest").data)
        config = json.loads(client.read_blob("demo", manifest["config"]["digest"], size=manifest["config"]["size"]))
        config["rootfs"]["diff_ids"] = config["rootfs"]["diff_ids"] * 20
        config.pop("history", None)
        raw = json.dumps(config).encode()
        digest = "sha256:" + __import__("hashlib").sha256(raw).hexdigest()
        client.push_blob("demo", digest, raw)
        manifest["config"] = {**manifest["config"], "digest": digest, "size": len(raw)}
        manifest["layers"] = manifest["layers"] * 20
        client.put_manifest("demo", "repeated", json.dumps(manifest).encode(), manifest["mediaType"])
    distinct = {layer["digest"] for layer in manifest["layers"]}
    q = copy_demo_queue(tmp_path / "q")
    (q / "targets.lock").unlink()
    write_patch(q, "9999-new-file.patch", [("opt/new-file.txt", None, b"new\n")])  # absent everywhere: every layer is read
    before = {d: registry.count("GET", f"/blobs/{d}$") for d in distinct}
    r = cli("audit", "--image", registry.ref("demo:repeated"), "--json", cwd=q, env=env)
    assert r.code == 5, r.err  # pending: nothing of the queue is in the image
    assert {p["name"]: p["state"] for p in json.loads(r.out)["patches"]}["9999-new-file.patch"] == "pending"
    assert {d: registry.count("GET", f"/blobs/{d}$") - before[d] for d in distinct} == {d: 1 for d in distinct}


# --- references ----------------------------------------------------------------------------------
BAD_REFS = ["docker://a..b/c", "docker://" + "a" * 70 + ".com/c", "docker://xn--zz.com/c", "docker://a-.example/c",
            "docker://localhost:99999/c", "docker://example.com/" + "a" * 300]


@pytest.mark.parametrize("ref", BAD_REFS)
def test_a_bad_registry_reference_is_bad_input(queue, env, ref):
    bad(cli("audit", "--image", ref, cwd=queue, env=env), "Image reference")


def test_a_bad_line_in_images_from_is_reported_for_that_image_only(registry, queue, env, tmp_path):
    listing = tmp_path / "images.txt"
    listing.write_text("\n".join([registry.ref("demo:latest"), *BAD_REFS[:3]]) + "\n")
    r = cli("audit", "--images-from", str(listing), "--expect", "pending", "--json", cwd=queue, env=env)
    bad(r, "3 of 4 image(s) could not be audited")
    doc = json.loads(r.out)
    assert doc["summary"] == {"images": 4, "as_expected": 1, "not_as_expected": 0, "unreadable": 3}
