"""What goes wrong with a registry, as a user meets it on the command line: exit 6, one clear paragraph,
nothing written locally (no lock, no layer) and nothing remotely (no tag)."""
from __future__ import annotations

import base64
import json
import subprocess

import pytest

from imgquilt.image.registry import parse_registry_ref
from imgquilt.image.sources.registry import registries
from support.qtools import imgquilt
from support.registry_server import PASSWORD, USER, free_port
from support.registry_server import basic_registry, fault_proxy, registry, token_registry  # noqa: F401 (fixtures)
from support.registry_queue import queue  # noqa: F401 (fixtures)


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    cli_env["REGISTRY_AUTH_FILE"] = str(tmp_path / "no-auth.json")
    return cli_env


def has_tag(registry, name: str) -> bool:
    done = subprocess.run(["skopeo", "inspect", "--tls-verify=false", *registry.skopeo_args(), registry.ref(name)],
                          capture_output=True, text=True)
    return done.returncode == 0


def refused(r, *words: str) -> None:
    assert "Traceback" not in r.err and "internal error" not in r.err
    for w in words:
        assert w in r.err, r.err


def test_wrong_credentials(basic_registry, queue, tmp_path, env):
    token = base64.b64encode(f"{USER}:not-{PASSWORD}".encode()).decode()
    (tmp_path / "auth.json").write_text(json.dumps({"auths": {basic_registry.host: {"auth": token}}}))
    env["REGISTRY_AUTH_FILE"] = str(tmp_path / "auth.json")
    r = imgquilt("lock", "--image", basic_registry.ref("demo:latest"), cwd=queue, env=env, check=6)
    refused(r, "401", "podman login")
    assert not (queue / "targets.lock").exists()


def test_missing_tag(registry, queue, env, tmp_path):
    r = imgquilt("lock", "--image", registry.ref("demo:nope"), cwd=queue, env=env, check=6)
    refused(r, "404", "has no manifest demo:nope")
    assert not (queue / "targets.lock").exists()
    r = imgquilt("apply", "--image", registry.ref("demo:nope"), "--layer", str(tmp_path / "l.tar"),
                 "--output-image", registry.ref("demo:out-nope"), cwd=queue, env=env, check=6)
    assert not (tmp_path / "l.tar").exists() and not has_tag(registry, "demo:out-nope")


def test_registry_down(queue, env, tmp_path):
    down = f"docker://127.0.0.1:{free_port()}/demo:latest"
    r = imgquilt("audit", "--image", down, cwd=queue, env=env, check=6)
    refused(r, "Cannot reach the registry")
    r = imgquilt("apply", "--image", "oci:examples/demo-image:latest", "--layer", str(tmp_path / "l.tar"),
                 "--output-image", down, cwd=queue, env=env, check=6)
    refused(r, "Cannot reach the registry")
    assert not (tmp_path / "l.tar").exists()


def test_truncated_blob_writes_nothing_anywhere(registry, fault_proxy, queue, env, tmp_path):
    fault_proxy.fault = lambda method, path: ("cut", 100) if method == "GET" and "/blobs/" in path else None
    r = imgquilt("apply", "--image", fault_proxy.ref("demo:latest"), "--layer", str(tmp_path / "l.tar"),
                 "--output-image", registry.ref("demo:cut"), cwd=queue, env=env, check=6)
    refused(r, "Nothing from it was used")
    assert not (tmp_path / "l.tar").exists() and not has_tag(registry, "demo:cut")


def test_a_failed_upload_pushes_no_tag(registry, fault_proxy, queue, env, tmp_path):
    # the base layers are found; the upload of the new layer fails for good: no manifest, no tag
    fault_proxy.fault = lambda method, path: ("status", 500) if method in ("PUT", "PATCH") and "/blobs/uploads/" in path \
        else None
    r = imgquilt("apply", "--image", registry.ref("demo:latest"), "--output-image", fault_proxy.ref("demo:halfway"),
                 cwd=queue, env=env, check=6)
    refused(r, "500")
    assert not has_tag(registry, "demo:halfway")
    assert not any(m == "PUT" and "/manifests/" in p for m, p, _ in fault_proxy.seen)


def test_token_auth_end_to_end(token_registry, queue, tmp_path, env):
    """Bearer tokens (the registry verifies them): lock, audit and a push, as a logged-in user."""
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (tmp_path / "auth.json").write_text(json.dumps({"auths": {token_registry.host: {"auth": token}}}))
    env["REGISTRY_AUTH_FILE"] = str(tmp_path / "auth.json")
    imgquilt("lock", "--image", token_registry.ref("demo:latest"), cwd=queue, env=env, check=0)
    imgquilt("audit", "--image", token_registry.ref("demo:latest"), "--expect", "pending", cwd=queue, env=env, check=0)
    r = imgquilt("apply", "--output-image", token_registry.ref("demo:fixed"), "--json", cwd=queue, env=env, check=0)
    assert json.loads(r.out)["outputs"]["image"]["digest"] == json.loads(subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", *token_registry.skopeo_args(), token_registry.ref("demo:fixed")],
        capture_output=True, text=True, check=True).stdout)["Digest"]
    imgquilt("audit", "--image", token_registry.ref("demo:fixed"), cwd=queue, env=env, check=0)


def test_tls_verify_is_a_global_option(registry, queue, env):
    """--tls-verify=false is taken anywhere on the line (as skopeo spells it); a bad value is a usage error."""
    imgquilt("audit", "--tls-verify=false", "--image", registry.ref("demo:latest"), "--expect", "pending",
             cwd=queue, env=env, check=0)
    r = imgquilt("audit", "--image", registry.ref("demo:latest"), "--tls-verify=maybe", cwd=queue, env=env, check=2)
    refused(r, "IMGQUILT_TLS_VERIFY='maybe'")


def test_tls_verify_false_allows_plain_http_to_any_registry(monkeypatch):
    """Loopback may be plain HTTP anyway; any other name only with IMGQUILT_TLS_VERIFY=false (--tls-verify=false)."""
    other = parse_registry_ref("docker://registry.imgquilt.test:5000/demo:latest")
    monkeypatch.setenv("IMGQUILT_TLS_VERIFY", "true")
    assert not registries().client(other).insecure
    assert registries().client(parse_registry_ref("docker://127.0.0.1:5000/demo:latest")).insecure
    monkeypatch.setenv("IMGQUILT_TLS_VERIFY", "false")
    assert registries().client(other).insecure
