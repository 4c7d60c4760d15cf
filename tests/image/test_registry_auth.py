"""Auth against real registries: htpasswd Basic, token (Bearer) auth, and where credentials come from."""
from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from imgquilt.errors import BadImage, BadInput
from imgquilt.image.registry import RegistryClient, parse_registry_ref
from imgquilt.image.registry.credentials import Credentials, find_credentials
from support.registry_server import PASSWORD, USER, inspect_digest
from support.registry_server import basic_registry, token_registry  # noqa: F401 (fixtures)

@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """An environment without any credential file, for the test to add its own."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def auth_json(path: Path, host: str, user: str, password: str) -> Path:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return path


def test_basic_auth_with_credentials_from_registry_auth_file(basic_registry, no_credentials, monkeypatch):
    ref = parse_registry_ref(basic_registry.ref("demo:latest"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth_json(no_credentials / "auth.json", basic_registry.host,
                                                           USER, PASSWORD)))
    with RegistryClient.for_ref(ref) as client:
        assert client.credentials is not None and client.credentials.username == USER
        assert client.resolve(ref).digest == inspect_digest(basic_registry, "demo:latest")


def test_basic_auth_anonymous_and_wrong_credentials_are_clear(basic_registry, no_credentials, monkeypatch):
    ref = parse_registry_ref(basic_registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client, pytest.raises(BadImage) as err:
        client.resolve(ref)
    assert "refused access to the manifest demo:latest with no credentials (anonymous) (401" in err.value.render()
    assert "podman login" in err.value.render()
    path = auth_json(no_credentials / "auth.json", basic_registry.host, USER, "wrong")
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(path))
    with RegistryClient.for_ref(ref) as client, pytest.raises(BadImage) as err:
        client.get_manifest(ref.repository, "latest")
    text = err.value.render()
    assert f"with the credentials from {path} (401 unauthorized)" in text
    assert "The registry says: UNAUTHORIZED: authentication required" in text
    assert err.value.exit_code == 6


def test_token_auth_pull_and_push_with_one_token_per_scope(token_registry, no_credentials, monkeypatch):
    service = token_registry.token_service
    path = auth_json(no_credentials / "run/containers/auth.json", token_registry.host, USER, PASSWORD)
    assert find_credentials(token_registry.host) == Credentials(USER, PASSWORD, str(path))
    ref = parse_registry_ref(token_registry.ref("demo:latest"))
    issued = len(service.issued)
    with RegistryClient.for_ref(ref) as client:
        desc = client.resolve(ref)
        manifest = client.get_manifest(ref.repository, desc.digest)
        doc = json.loads(manifest.data)
        client.read_blob(ref.repository, doc["config"]["digest"], size=doc["config"]["size"])
        assert len(service.issued) == issued + 1  # one pull token, reused for every request
        assert service.issued[-1] == (USER, ("repository:demo:pull",))
        assert client.push_blob(ref.repository, doc["layers"][0]["digest"]) == "exists"
        pushed = client.put_manifest(ref.repository, "again", manifest.data, manifest.media_type)
        assert pushed == desc.digest
        assert service.issued[-1] == (USER, ("repository:demo:pull,push",))
        assert len(service.issued) == issued + 2
        # a mount asks for push on the target and pull on the source, in one token
        assert client.push_blob("copy", doc["layers"][0]["digest"], mount_from="demo") == "mounted"
        assert service.issued[-1] == (USER, ("repository:copy:pull,push", "repository:demo:pull"))
    assert inspect_digest(token_registry, "demo:again") == desc.digest


def test_token_auth_anonymous_may_pull_but_not_push(token_registry, no_credentials):
    ref = parse_registry_ref(token_registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        assert client.credentials is None
        manifest = client.get_manifest(ref.repository, "latest")
        assert token_registry.token_service.issued[-1] == (None, ("repository:demo:pull",))
        with pytest.raises(BadImage) as err:
            client.put_manifest(ref.repository, "anon", manifest.data, manifest.media_type)
    assert "refused access to the upload of the manifest demo:anon with no credentials" in err.value.render()


def test_token_service_refusing_wrong_credentials_is_clear(token_registry, no_credentials, monkeypatch):
    path = auth_json(no_credentials / "docker/config.json", token_registry.host, USER, "wrong")
    ref = parse_registry_ref(token_registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client, pytest.raises(BadImage) as err:
        client.resolve(ref)
    text = err.value.render()
    assert f"refused the credentials from {path} for repository:demo:pull (401)" in text
    assert "invalid user or password" in text


def test_credential_helper_from_docker_config(basic_registry, no_credentials, monkeypatch):
    bin_dir = no_credentials / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-test"
    log = no_credentials / "helper.log"
    helper.write_text(
        "#!/bin/sh\n"
        f'read server; echo "$1 $server" >> {log}\n'
        f'[ "$server" = "{basic_registry.host}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}\n'
        f"echo '{{\"ServerURL\": \"'$server'\", \"Username\": \"{USER}\", \"Secret\": \"{PASSWORD}\"}}'\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = no_credentials / "docker/config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"auths": {basic_registry.host: {}}, "credHelpers": {basic_registry.host: "test"}}))
    ref = parse_registry_ref(basic_registry.ref("demo:latest"))
    with RegistryClient.for_ref(ref) as client:
        assert client.credentials == Credentials(USER, PASSWORD, "docker-credential-test")
        assert client.resolve(ref).digest == inspect_digest(basic_registry, "demo:latest")
    assert log.read_text() == f"get {basic_registry.host}\n"
    # credsStore: asked for any registry; "not found" means anonymous
    config.write_text(json.dumps({"credsStore": "test"}))
    assert find_credentials("other.example:5000") is None
    assert find_credentials(basic_registry.host) == Credentials(USER, PASSWORD, "docker-credential-test")
    config.write_text(json.dumps({"credsStore": "missing-helper"}))
    with pytest.raises(BadInput, match="docker-credential-missing-helper .* is not installed"):
        find_credentials(basic_registry.host)
