"""References, registries.conf, WWW-Authenticate challenges and credential-file precedence (no network)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from imgquilt.errors import BadImage, BadInput
from imgquilt.image.registry import is_loopback, parse_registry_ref
from imgquilt.image.registry.auth import parse_challenge
from imgquilt.image.registry.config import is_insecure, load_registries_conf
from imgquilt.image.registry.credentials import Credentials, find_credentials
from imgquilt.image.registry.reference import RegistryRef

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("text, expected", [
    ("ubuntu", RegistryRef("docker.io", "library/ubuntu", "latest")),
    ("docker://ubuntu:22.04", RegistryRef("docker.io", "library/ubuntu", "22.04")),
    ("docker://vllm/vllm-openai:v0.6.0", RegistryRef("docker.io", "vllm/vllm-openai", "v0.6.0")),
    ("docker://docker.io/library/python", RegistryRef("docker.io", "library/python", "latest")),
    ("docker://localhost/a/b", RegistryRef("localhost", "a/b", "latest")),
    ("docker://127.0.0.1:5000/demo:latest", RegistryRef("127.0.0.1:5000", "demo", "latest")),
    ("docker://[::1]:5000/demo", RegistryRef("[::1]:5000", "demo", "latest")),
    (f"docker://ghcr.io/o/r@{DIGEST}", RegistryRef("ghcr.io", "o/r", None, DIGEST)),
    ("docker://quay.io/a/b.c_d-e/f__g:T_1.x-y", RegistryRef("quay.io", "a/b.c_d-e/f__g", "T_1.x-y")),
])
def test_references_parse_with_docker_defaults(text, expected):
    assert parse_registry_ref(text) == expected


def test_reference_hosts_and_names():
    hub = parse_registry_ref("ubuntu")
    assert hub.host == "registry-1.docker.io" and hub.reference == "latest"
    assert str(hub) == "docker://docker.io/library/ubuntu:latest"
    pinned = hub.with_digest(DIGEST)
    assert pinned.reference == DIGEST and str(pinned) == f"docker://docker.io/library/ubuntu@{DIGEST}"
    assert parse_registry_ref("localhost:5000/x").host == "localhost:5000"


@pytest.mark.parametrize("text, says", [
    ("docker://", "names no repository"),
    ("docker://Ubuntu", "invalid repository name"),
    ("docker://host.io/a//b", "invalid repository name"),
    ("docker://host.io/a:-bad", "invalid tag"),
    ("docker://host.io/a@sha256:123", "invalid digest"),
    (f"docker://host.io/a:t@{DIGEST}", "both a tag and a digest"),
    ("docker://ho_st.io/a", "invalid registry host"),
])
def test_bad_references_are_bad_images(text, says):
    with pytest.raises(BadImage, match=says) as err:
        parse_registry_ref(text)
    assert err.value.exit_code == 6


def test_loopback_hosts():
    for host in ("localhost", "localhost:5000", "127.0.0.1", "127.3.4.5:80", "[::1]:5000", "::1", "x.localhost"):
        assert is_loopback(host), host
    for host in ("10.0.0.1:5000", "registry.example.com", "localhost.example.com", "[::2]:5000", "128.0.0.1"):
        assert not is_loopback(host), host


def test_registries_conf_v2_and_v1(tmp_path, monkeypatch):
    conf = tmp_path / "registries.conf"
    conf.write_text(
        'unqualified-search-registries = ["docker.io"]\n'
        '[[registry]]\nlocation = "reg.example.com:5000"\ninsecure = true\n'
        '[[registry]]\nlocation = "secure.example.com"\n'
        '[[registry]]\nprefix = "mixed.example.com/team"\nlocation = "mirror.example.com"\ninsecure = true\n'
        '[[registry]]\nlocation = "*.dev.example.com"\ninsecure = true\n'
        '[registries.insecure]\nregistries = ["old.example.com"]\n')
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    assert is_insecure("reg.example.com:5000")
    assert not is_insecure("reg.example.com")
    assert not is_insecure("secure.example.com")
    assert is_insecure("mixed.example.com", "team/app") and not is_insecure("mixed.example.com", "teams/app")
    assert is_insecure("a.dev.example.com") and not is_insecure("dev.example.com.evil")
    assert is_insecure("old.example.com")
    assert len(load_registries_conf()) == 5
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(tmp_path / "absent.conf"))
    assert not is_insecure("reg.example.com:5000")
    conf.write_text("[[registry]\n")
    monkeypatch.setenv("CONTAINERS_REGISTRIES_CONF", str(conf))
    with pytest.raises(BadInput, match="Cannot read the registries configuration"):
        is_insecure("x")


def test_challenges():
    c = parse_challenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                        'scope="repository:library/ubuntu:pull,push"')
    assert c.scheme == "bearer" and c.get("realm") == "https://auth.docker.io/token"
    assert c.get("scope") == "repository:library/ubuntu:pull,push" and c.get("service") == "registry.docker.io"
    b = parse_challenge('Basic realm="Registry Realm"')
    assert b.scheme == "basic" and b.get("realm") == "Registry Realm"
    assert parse_challenge("Bearer realm=https://x/t, service=svc").get("service") == "svc"
    assert parse_challenge("Negotiate abc") is None and parse_challenge(None) is None


def _write(path: Path, doc: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


def _auth(user: str, password: str) -> dict:
    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_credential_files_in_order_and_most_specific_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    docker = _write(tmp_path / "home/.docker/config.json", {"auths": {
        "https://index.docker.io/v1/": _auth("hubuser", "hubpass"),
        "reg.example.com": {"username": "d", "password": "dp"}}})
    assert find_credentials("docker.io", "library/ubuntu") == Credentials("hubuser", "hubpass", docker)
    assert find_credentials("reg.example.com") == Credentials("d", "dp", docker)
    runtime = _write(tmp_path / "run/containers/auth.json", {"auths": {
        "reg.example.com": _auth("r", "rp"), "reg.example.com/team/app": _auth("team", "tp")}})
    assert find_credentials("reg.example.com", "other") == Credentials("r", "rp", runtime)
    assert find_credentials("reg.example.com", "team/app") == Credentials("team", "tp", runtime)
    assert find_credentials("docker.io", "library/ubuntu") == Credentials("hubuser", "hubpass", docker)
    explicit = _write(tmp_path / "explicit.json", {"auths": {"reg.example.com": _auth("e", "ep:with:colons")}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", explicit)
    assert find_credentials("reg.example.com", "team/app") == Credentials("e", "ep:with:colons", explicit)
    assert find_credentials("elsewhere.example.com") is None
    assert "ep:with" not in repr(find_credentials("reg.example.com"))  # secrets never printed
    _write(tmp_path / "explicit.json", {"auths": {"reg.example.com": {"auth": "not base64!"}}})
    with pytest.raises(BadInput, match="not base64 of user:password"):
        find_credentials("reg.example.com")
