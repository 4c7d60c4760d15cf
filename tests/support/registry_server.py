"""Real registries for the tests: Debian's `docker-registry` (the OCI distribution server) on a free
127.0.0.1 port with its storage in a temp dir, anonymous, with htpasswd Basic auth, or with token auth
served by a small Bearer token endpoint here (JWTs signed RS256 with `openssl`, verified by the
registry itself). The access log (the registry's stdout) tells which requests were made.
"""
from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo-image"
USER, PASSWORD = "alice", "s3cret-pass"
_ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) (\d+|-)')


class QuietServer(ThreadingHTTPServer):
    """A threaded test server that does not print a client's dropped connection."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Request:
    """One line of the registry's access log."""

    method: str
    path: str
    status: int
    size: int


@dataclass
class RegistryServer:
    """A running `docker-registry serve`; `host` is what references name (127.0.0.1:PORT)."""

    root: Path
    port: int
    access_log: Path
    process: subprocess.Popen
    credentials: tuple[str, str] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, name: str) -> str:
        return f"docker://{self.host}/{name}"

    def requests(self) -> list[Request]:
        out = []
        for line in self.access_log.read_text(errors="replace").splitlines():
            m = _ACCESS.search(line)
            if m:
                out.append(Request(m.group(1), urllib.parse.unquote(m.group(2)), int(m.group(3)),
                                   int(m.group(4)) if m.group(4).isdigit() else 0))
        return out

    def count(self, method: str, pattern: str = "") -> int:
        return sum(1 for r in self.requests() if r.method == method and re.search(pattern, r.path))

    def blob_file(self, digest: str) -> Path:
        algo, hexpart = digest.split(":")
        return self.root / "docker/registry/v2/blobs" / algo / hexpart[:2] / hexpart / "data"

    def skopeo_args(self) -> list[str]:
        return [f"--creds={self.credentials[0]}:{self.credentials[1]}"] if self.credentials else []

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_registry(work: Path, *, auth: str = "", credentials: tuple[str, str] | None = None) -> RegistryServer:
    """Start docker-registry with storage under `work`; `auth` is the YAML of its `auth:` section."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = work / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {work / 'storage'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n" + (f"auth:\n{auth}" if auth else "")
    )
    access_log = work / "access.log"
    with open(access_log, "wb") as out, open(work / "registry.log", "wb") as err:
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=err)
    server = RegistryServer(work / "storage", port, access_log, process, credentials)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://{server.host}/v2/", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break  # 401: up, and asking for credentials
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"docker-registry did not start: {(work / 'registry.log').read_text()[-2000:]}")
            time.sleep(0.1)
    return server


def skopeo(*args: str) -> str:
    done = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"skopeo {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def seed(server: RegistryServer, source: str, name: str) -> None:
    """`skopeo copy` an image into the registry as NAME (repo:tag)."""
    creds = [f"--dest-creds={server.credentials[0]}:{server.credentials[1]}"] if server.credentials else []
    skopeo("copy", "--quiet", "--dest-tls-verify=false", *creds, source, server.ref(name))


def inspect_digest(server: RegistryServer, name: str) -> str:
    """The digest `skopeo inspect` reports for NAME."""
    out = skopeo("inspect", "--tls-verify=false", *server.skopeo_args(), server.ref(name))
    return json.loads(out)["Digest"]


# --- the token endpoint ------------------------------------------------------------------------
def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenService:
    """A Bearer token endpoint for `docker-registry`'s `auth: token:`; it logs every token it issues."""

    key: Path
    cert: Path
    port: int = field(default_factory=free_port)
    issued: list[tuple[str | None, tuple[str, ...]]] = field(default_factory=list)
    service: str = "imgquilt-test-registry"
    issuer: str = "imgquilt-test-issuer"

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def registry_auth(self) -> str:
        return (f"  token:\n    realm: {self.realm}\n    service: {self.service}\n    issuer: {self.issuer}\n"
                f"    rootcertbundle: {self.cert}\n")

    def sign(self, claims: dict) -> str:
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], capture_output=True,
                             check=True).stdout
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input.encode(),
                                   capture_output=True, check=True).stdout
        return f"{signing_input}.{_b64url(signature)}"

    def token_for(self, user: str | None, scopes: list[str]) -> str:
        now = int(time.time())
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if a == "pull" or user is not None]
            access.append({"type": kind, "name": name, "actions": granted})
        return self.sign({"iss": self.issuer, "sub": user or "", "aud": self.service, "exp": now + 300,
                          "nbf": now - 10, "iat": now, "jti": str(len(self.issued)), "access": access})


def start_token_service(work: Path) -> tuple[TokenService, ThreadingHTTPServer]:
    work.mkdir(parents=True, exist_ok=True)
    key, cert = work / "token.key", work / "token.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=imgquilt-test-token"], capture_output=True, check=True)
    service = TokenService(key, cert)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlparse(self.path)
            query = urllib.parse.parse_qs(url.query)
            user = None
            header = self.headers.get("Authorization", "")
            if header.startswith("Basic "):
                name, _, password = base64.b64decode(header[6:]).decode().partition(":")
                if (name, password) != (USER, PASSWORD):
                    body = json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": "invalid user or password"}]})
                    self._answer(401, body)
                    return
                user = name
            scopes = query.get("scope", [])
            service.issued.append((user, tuple(scopes)))
            self._answer(200, json.dumps({"access_token": service.token_for(user, scopes), "expires_in": 300}))

        def _answer(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = QuietServer(("127.0.0.1", service.port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return service, httpd


# --- fixtures ----------------------------------------------------------------------------------
def _serving_demo(server: RegistryServer):
    """Seed the demo image as demo:latest, serve the fixture's tests, then stop the registry."""
    try:
        seed(server, f"oci:{DEMO}:latest", "demo:latest")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """An anonymous registry holding the demo image as demo:latest."""
    server = start_registry(tmp_path_factory.mktemp("registry"))
    yield from _serving_demo(server)


@pytest.fixture(scope="module")
def basic_registry(tmp_path_factory):
    """A registry with htpasswd Basic auth (USER / PASSWORD) holding demo:latest."""
    work = tmp_path_factory.mktemp("basic-registry")
    line = subprocess.run(["htpasswd", "-Bbn", USER, PASSWORD], capture_output=True, text=True, check=True).stdout
    (work / "htpasswd").write_text(line.strip() + "\n")
    server = start_registry(work, auth=f"  htpasswd:\n    realm: imgquilt-test\n    path: {work / 'htpasswd'}\n",
                            credentials=(USER, PASSWORD))
    yield from _serving_demo(server)


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    """A registry with token auth (a Bearer token endpoint in this process) holding demo:latest."""
    work = tmp_path_factory.mktemp("token-registry")
    service, httpd = start_token_service(work)
    server = start_registry(work, auth=service.registry_auth(), credentials=(USER, PASSWORD))
    server.token_service = service  # type: ignore[attr-defined]
    try:
        yield from _serving_demo(server)
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- a faulty network in front of a real registry -----------------------------------------------
@dataclass
class FaultProxy:
    """Forwards to a registry, except where `fault(method, path)` returns an answer of its own:
    ("status", CODE, {headers}) answers CODE; ("redirect",) sends blob GETs to the registry by a 307
    (another origin); ("cut", N) forwards the headers but only N bytes of the body; ("drop-header", NAME)
    forwards the answer without that header; ("no-range",) forwards the request without its Range header
    (a registry that ignores Range); ("raw", write) lets write(handler) answer as it likes (endless or
    trickled bodies, Locations elsewhere). `seen` logs requests."""

    upstream: RegistryServer
    fault: object = None
    port: int = field(default_factory=free_port)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, Authorization

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, name: str) -> str:
        return f"docker://{self.host}/{name}"


def start_fault_proxy(upstream: RegistryServer) -> tuple[FaultProxy, ThreadingHTTPServer]:
    import http.client

    proxy = FaultProxy(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self) -> None:
            proxy.seen.append((self.command, self.path, self.headers.get("Authorization")))
            action = proxy.fault(self.command, self.path) if callable(proxy.fault) else None
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if action and action[0] == "raw":
                self.close_connection = True
                try:
                    action[1](self)
                except OSError:  # the client gave up: what hostile answers are for
                    pass
                return
            if action and action[0] == "status":
                data = json.dumps({"errors": [{"code": "TOOMANYREQUESTS" if action[1] == 429 else "UNAVAILABLE",
                                               "message": f"injected {action[1]}"}]}).encode()
                self.send_response(action[1])
                for k, v in (action[2] if len(action) > 2 else {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return
            if action and action[0] == "redirect":
                self.send_response(307)
                self.send_header("Location", f"http://{upstream.host}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            conn = http.client.HTTPConnection(upstream.host, timeout=30)
            dropped_request = ("range",) if action and action[0] == "no-range" else ()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", *dropped_request)}
            conn.request(self.command, self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for k, v in answer.getheaders():
                dropped = action[1].lower() if action and action[0] == "drop-header" else None
                if k.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server", dropped):
                    self.send_header(k, v.replace(upstream.host, proxy.host) if k.lower() == "location" else v)
            self.send_header("Content-Length", answer.getheader("Content-Length") or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                if action and action[0] == "cut":
                    self.wfile.write(data[: action[1]])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(data)
            conn.close()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, *args: object) -> None:
            pass

    httpd = QuietServer(("127.0.0.1", proxy.port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return proxy, httpd


@pytest.fixture
def fault_proxy(registry):
    proxy, httpd = start_fault_proxy(registry)
    try:
        yield proxy
    finally:
        httpd.shutdown()
        httpd.server_close()
