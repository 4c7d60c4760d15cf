"""A client for one registry (OCI distribution spec / Docker Registry HTTP API v2).

One httpx.Client per registry, so connections are reused; bounded retries with backoff on 429, 5xx
and connection errors; every manifest and blob checked against its digest. Which scheme: HTTPS with
verification, except for loopback hosts, `tls_verify=False` or `insecure = true` in registries.conf,
where HTTPS is tried without verification and plain HTTP is used if it fails, as docker and podman do.

What the registry is trusted with and for: credentials (Basic, or the Bearer token they buy) go
only to the origin (scheme, host, port) whose challenge they answer; a blob redirect elsewhere (a
CDN) is followed without them (httpx drops them), a 401 from elsewhere teaches nothing, and an
upload `Location:` on another origin is refused before anything is sent there. Every answer is
capped (small bodies at SMALL_BODY, manifests at MAX_MANIFEST) and every request has an overall
deadline (deadline.py). Nothing is decoded on the way (`Accept-Encoding: identity`), so a
compressed body cannot grow past a cap.
"""
from __future__ import annotations

import hashlib
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from typing import BinaryIO

import httpx

from ... import __version__
from ...errors import BadImage
from ...util.jsonin import member_or_none
from ..digests import check_digest, digest_of, new_hasher, split_digest, verify_digest
from ..mediatypes import DOCKER_MANIFEST_V1, DOCKER_MANIFEST_V1_SIGNED, INDEXES, MANIFESTS, OCI_INDEX
from .auth import Authenticator, repository_scope
from .blobstream import RegistryBlobStream
from .config import is_insecure
from .credentials import Credentials, find_credentials
from .deadline import Deadline, DeadlinePolicy, install
from .problems import http_problem, unreachable
from .reference import RegistryRef, is_loopback

MANIFEST_TYPES = tuple(sorted(MANIFESTS | INDEXES))
MAX_MANIFEST = 4 << 20  # the distribution spec lets registries refuse bigger ones; so do we
UPLOAD_CHUNK = 8 << 20
SMALL_BODY = 64 << 10  # what imgquilt reads of an answer it needs no body of (an error's JSON, /v2/)
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_LOOKUP = object()  # "find the credentials in the usual files"


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry 429/5xx answers and connection failures."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 10.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        seconds = (retry_after or "").strip()
        if seconds.isascii() and seconds.isdigit() and len(seconds) < 10:  # an HTTP-date or junk: our backoff
            return min(float(seconds), self.max_delay)
        return min(self.base_delay * (2 ** attempt), self.max_delay)


@dataclass(frozen=True)
class Descriptor:
    """What a reference resolves to: the manifest's digest, media type and size."""

    digest: str
    media_type: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """A manifest or index as the registry stores it, byte for byte, with its checked digest."""

    digest: str
    media_type: str
    data: bytes


def _hexdigest(data: bytes, like: str) -> str:
    return split_digest(digest_of(data, like))[1]


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";", 1)[0].strip()


def same_origin(url: httpx.URL, base: str) -> bool:
    """Whether `url` is on the origin (scheme, host, port) `base` names."""
    other = httpx.URL(base)
    return (url.scheme, url.host, url.port or _PORTS.get(url.scheme)) == \
        (other.scheme, other.host, other.port or _PORTS.get(other.scheme))


_PORTS = {"http": 80, "https": 443}


def read_capped(response: httpx.Response, cap: int, deadline: Deadline, what: str, *,
                strict: bool = False) -> tuple[bytes, bool]:
    """Up to `cap` bytes of a streamed body, as sent (nothing decoded), within the request's deadline;
    (bytes, whether more followed). `strict`: more than `cap` is BadImage. The response is closed."""
    data = bytearray()
    more = False
    try:
        with deadline.active():
            for chunk in response.iter_raw():
                data += chunk
                if len(data) > cap:
                    more = True
                    break
    except httpx.HTTPError as exc:
        if deadline.passed():
            raise _late(what, deadline) from None
        raise BadImage(f"Reading the {what} failed: {exc.__class__.__name__}: {exc}.", hint="Try again.") from None
    finally:
        response.close()
    if more and strict:
        raise BadImage(f"The {what} is bigger than {cap} bytes; imgquilt does not read it.",
                       hint="The registry is misbehaving; tell its operator.")
    return bytes(data[:cap]), more


def _failed_url(exc: httpx.HTTPError) -> httpx.URL | None:
    """The URL of the request that failed (after redirects: not the one sent first)."""
    try:
        return exc.request.url
    except RuntimeError:
        return None


def _late(what: str, deadline: Deadline) -> BadImage:
    from .deadline import DEADLINE_ENV

    return BadImage(f"The registry did not finish the {what} within {deadline.policy.seconds:g} s; imgquilt "
                    "gave up on it (it answers too slowly, or trickles).",
                    hint=f"Try again later; {DEADLINE_ENV}=SECONDS allows more time for each request.")


def _declared_media_type(data: bytes) -> str | None:
    declared = member_or_none(data, "mediaType")
    return declared if isinstance(declared, str) else None


class RegistryClient:
    """Requests to one registry; `domain` as written in references (docker.io for Docker Hub)."""

    def __init__(self, domain: str, *, tls_verify: bool | None = None, credentials: object = _LOOKUP,
                 repository: str = "", retry: RetryPolicy = RetryPolicy(), timeout: float = 60.0,
                 deadline: DeadlinePolicy | None = None) -> None:
        self.domain = domain
        self.host = RegistryRef(domain, "x").host
        self.retry = retry
        self.deadline = deadline or DeadlinePolicy.from_env()
        # loopback is trusted to be plain HTTP, as docker does; otherwise only when told so
        self.insecure = tls_verify is False or is_loopback(self.host) or is_insecure(domain, repository)
        self.credentials: Credentials | None = (find_credentials(domain, repository) if credentials is _LOOKUP
                                                else credentials)  # type: ignore[assignment]
        self._http = httpx.Client(
            verify=not self.insecure, follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0)),
            headers={"User-Agent": f"imgquilt/{__version__}", "Docker-Distribution-Api-Version": "registry/2.0",
                     "Accept-Encoding": "identity"},
        )
        install(self._http)  # every socket read and write under the request's deadline
        self._auth = Authenticator(self.domain, self.credentials, self._send, self._build, self._base_url)
        self._base: str | None = None
        self._ready = threading.Lock()
        self._push_repos: set[str] = set()
        self._last_subject: dict[str, str] = {}  # manifest digest -> the OCI-Subject its PUT answered

    @classmethod
    def for_ref(cls, ref: RegistryRef, **kwargs) -> "RegistryClient":
        return cls(ref.domain, repository=ref.repository, **kwargs)

    # --- plumbing -------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RegistryClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self, method: str, url: str | httpx.URL, **kwargs) -> httpx.Request:
        """A request; a URL httpx cannot take (from a Location or a realm) is BadImage."""
        try:
            return self._http.build_request(method, url, **kwargs)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, UnicodeError, ValueError) as exc:
            raise BadImage(f"The registry {self.domain} sent imgquilt to {str(url)[:200]!r}, which is not a usable "
                           f"URL ({exc}).", hint="The registry is misconfigured; tell its operator.") from None

    def _send(self, request: httpx.Request, *, stream: bool = False, follow: bool = False,
              attempts: int | None = None, body_cap: int = SMALL_BODY) -> httpx.Response:
        """Send with bounded retries, all within one deadline; a registry that stays unreachable is BadImage.

        Without `stream`, at most `body_cap` bytes of the answer are read (the rest is dropped, and
        `response.extensions["imgquilt_cut"]` says so); with it, the caller reads the body."""
        attempts = attempts or self.retry.attempts
        deadline = self.deadline.start()
        what = f"answer to {request.method} {request.url.path}"
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                with deadline.active(len(request.content) if request.method in ("PUT", "PATCH", "POST") else 0):
                    response = self._http.send(request, stream=True, follow_redirects=follow)
            except httpx.TooManyRedirects:
                raise BadImage(f"The registry {self.domain} redirected the {what} in a loop (or more than "
                               f"{self._http.max_redirects} times).", hint="The registry is misconfigured; tell its operator.") from None
            except httpx.UnsupportedProtocol as exc:
                raise BadImage(f"The registry {self.domain} redirected the {what} to a URL imgquilt does not "
                               f"follow ({exc}).", hint="The registry is misconfigured; tell its operator.") from None
            except httpx.TransportError as exc:
                if deadline.passed():
                    raise _late(what, deadline) from None
                elsewhere = _failed_url(exc)
                if elsewhere is not None and elsewhere != request.url:
                    raise BadImage(f"The registry {self.domain} redirected the {what} to "
                                   f"{str(elsewhere)[:200]}, which cannot be reached ({exc.__class__.__name__}: {exc}).",
                                   hint="The registry (or its storage backend) is misconfigured or down; tell its "
                                        "operator, or try again later.") from None
                # a request that may have reached the server is only re-sent if repeating it is harmless
                repeatable = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) or \
                    request.method in ("GET", "HEAD")
                if last or not repeatable:
                    raise unreachable(self.domain, exc, plain_http_allowed=self.insecure) from None
                time.sleep(self.retry.delay(attempt))
                continue
            except (httpx.InvalidURL, UnicodeError, ValueError) as exc:  # a redirect's Location httpx cannot take
                raise BadImage(f"The registry {self.domain} redirected the {what} to a URL that is not usable "
                               f"({exc}).", hint="The registry is misconfigured; tell its operator.") from None
            if response.status_code in _RETRY_STATUS and not last:
                wait = self.retry.delay(attempt, response.headers.get("retry-after"))
                response.close()
                if time.monotonic() + wait > deadline.at():
                    raise _late(what, deadline)
                time.sleep(wait)
                continue
            if stream:
                return response
            body, cut = read_capped(response, body_cap, deadline, what)
            return httpx.Response(response.status_code, headers=response.headers, content=body,
                                  request=response.request, extensions={"imgquilt_cut": cut})
        raise AssertionError("unreachable")  # pragma: no cover

    def _base_url(self) -> str:
        """https://HOST or (insecure registries without HTTPS) http://HOST, found by pinging /v2/."""
        with self._ready:
            if self._base is None:
                self._base = self._ping()
            return self._base

    def _ping(self) -> str:
        schemes = ("https", "http") if self.insecure else ("https",)
        for i, scheme in enumerate(schemes):
            base = f"{scheme}://{self.host}"
            request = self._build("GET", f"{base}/v2/")
            try:
                # an HTTPS failure on a host that may be plain HTTP is not retried: try HTTP at once
                response = self._send(request, attempts=1 if i + 1 < len(schemes) else None)
            except BadImage:
                if i + 1 < len(schemes):
                    continue
                raise
            response.close()
            if response.status_code == 401:
                self._auth.learn(response.headers.get("www-authenticate"))
            return base
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, method: str, repo: str, path: str, *, what: str, headers: dict[str, str] | None = None,
              content: bytes | None = None, params: dict[str, str] | None = None, url: str | httpx.URL | None = None,
              extra_scopes: tuple[str, ...] = (), stream: bool = False, follow: bool = False) -> httpx.Response:
        """One authenticated request about `repo`; a 401 is answered once with (new) credentials.

        Credentials go only to the registry's own origin: a `url` elsewhere (an upload Location) is
        refused, and a 401 from elsewhere (a redirect's target) is not taken for the registry's."""
        base = self._base_url()
        scopes = (repository_scope(repo, push=repo in self._push_repos),) + extra_scopes
        target = self._build(method, url or f"{base}/v2/{repo}/{path}", params=params).url
        if not same_origin(target, base):
            raise BadImage(f"The registry {self.domain} ({base}) sent the {what} to another origin, "
                           f"{target.scheme}://{target.netloc.decode('ascii', 'replace')}; imgquilt sends neither "
                           "your credentials nor image content there.",
                           hint="The registry (or a proxy in front of it) is misconfigured; tell its operator.")
        for attempt in range(2):
            all_headers = dict(headers or {})
            authorization = self._auth.authorization(scopes)
            if authorization:
                all_headers["Authorization"] = authorization
            request = self._build(method, target, headers=all_headers, content=content)
            response = self._send(request, stream=stream, follow=follow)
            if response.status_code == 401 and attempt == 0 and same_origin(response.url, base):
                learned = self._auth.learn(response.headers.get("www-authenticate"))
                if learned or self._auth.challenge is not None and self._auth.challenge.scheme == "bearer":
                    self._auth.forget(scopes)  # the token may have expired: one fresh try
                    response.close()
                    continue
            return response
        return response

    def _fail(self, response: httpx.Response, what: str) -> BadImage:
        if not response.is_stream_consumed:  # a streamed answer: read a little of it for the message
            body, _ = read_capped(response, SMALL_BODY, self.deadline.start(), f"answer about the {what}")
            response = httpx.Response(response.status_code, headers=response.headers, content=body,
                                      request=response.request)
        return http_problem(response, what=what, registry=self.domain,
                            credentials_source=self.credentials.source if self.credentials else None)

    # --- manifests ------------------------------------------------------------------------------
    def resolve(self, ref: RegistryRef) -> Descriptor:
        """The digest, media type and size `ref` names now: one HEAD (a GET if the HEAD gives no digest)."""
        what = f"manifest {ref.repository}:{ref.reference}" if not ref.digest else f"manifest {ref}"
        response = self._call("HEAD", ref.repository, f"manifests/{ref.reference}", what=what,
                              headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if response.status_code != 200:
            raise self._fail(response, what)
        response.close()
        digest = response.headers.get("docker-content-digest")
        media_type = _media_type(response)
        length = response.headers.get("content-length", "")
        if digest and media_type and length.isdigit():
            check_digest(digest, what=f"registry's answer for {what}")
            if ref.digest and digest != ref.digest:
                raise BadImage(f"The registry {self.domain} answered {digest} for {ref}.",
                               hint="The registry is misbehaving; tell its operator.")
            return Descriptor(digest, media_type, int(length))
        manifest = self.get_manifest(ref.repository, ref.reference)
        return Descriptor(manifest.digest, manifest.media_type, len(manifest.data))

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        """The manifest or index `reference` (tag or digest) names, verified against its digest."""
        # a tag cannot hold ':', so a reference with one is a digest
        what = f"manifest {repo}@{reference}" if ":" in reference else f"manifest {repo}:{reference}"
        expected = check_digest(reference, what=what) if ":" in reference else None
        response = self._call("GET", repo, f"manifests/{reference}", what=what, stream=True,
                              headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if response.status_code != 200:
            raise self._fail(response, what)
        data = self._read_limited(response, what)
        media_type = _media_type(response)
        if media_type not in MANIFEST_TYPES:
            media_type = _declared_media_type(data) or media_type  # some registries say application/json
        if media_type in (DOCKER_MANIFEST_V1, DOCKER_MANIFEST_V1_SIGNED):
            raise BadImage(f"The {what} is a Docker schema 1 manifest, which imgquilt does not read.",
                           hint="Push the image again with a current docker, podman or skopeo (schema 2 or OCI).")
        if media_type not in MANIFEST_TYPES:
            raise BadImage(f"The {what} has media type {media_type!r}, not an OCI or Docker v2 manifest or index.")
        claimed = response.headers.get("docker-content-digest")
        digest = expected or (check_digest(claimed, what=f"registry's answer for {what}") if claimed else None)
        if digest is None:
            return Manifest("sha256:" + hashlib.sha256(data).hexdigest(), media_type, data)
        verify_digest(digest, _hexdigest(data, digest), what=what, where=self.domain,
                      hint="The registry holds a corrupt manifest; push it again.")
        return Manifest(digest, media_type, data)

    def _read_limited(self, response: httpx.Response, what: str) -> bytes:
        return read_capped(response, MAX_MANIFEST, self.deadline.start(), f"{what} from {self.domain}", strict=True)[0]

    def put_manifest(self, repo: str, tag: str, data: bytes, media_type: str) -> str:
        """Store a manifest under `tag` (or a digest); returns the digest the registry reports."""
        self._push_repos.add(repo)
        local = "sha256:" + hashlib.sha256(data).hexdigest()
        what = f"manifest {repo}:{tag}"
        response = self._call("PUT", repo, f"manifests/{tag}", what=what, content=data,
                              headers={"Content-Type": media_type})
        if response.status_code not in (200, 201):
            raise self._fail(response, f"upload of the {what}")
        response.close()
        remote = response.headers.get("docker-content-digest") or local
        if response.headers.get("oci-subject"):
            self._last_subject[local] = response.headers["oci-subject"]
        if remote != local:
            raise BadImage(f"The registry {self.domain} stored the {what} as {remote}, but its bytes hash "
                           f"to {local}.", hint="The registry rewrote the manifest; tell its operator.")
        return remote

    # --- blobs ----------------------------------------------------------------------------------
    def open_blob(self, repo: str, digest: str, *, size: int | None = None, what: str = "blob") -> RegistryBlobStream:
        """Stream a blob (redirects followed); the end of the stream comes only after size and digest match."""
        check_digest(digest, what=what)
        response = self._call("GET", repo, f"blobs/{digest}", what=f"{what} {digest}", stream=True, follow=True)
        if response.status_code != 200:
            raise self._fail(response, f"{what} {repo}@{digest}")
        length = response.headers.get("content-length", "")
        if size is not None and length.isdigit() and int(length) != size:
            response.close()
            raise BadImage(f"The {what} {digest} in {self.domain}/{repo} is {length} bytes; its descriptor "
                           f"says {size}. Nothing from it was used.",
                           hint="The registry holds a damaged blob; push the image again.")
        return RegistryBlobStream(response, digest, size=size, what=what, deadline=self.deadline.start())

    def read_blob(self, repo: str, digest: str, *, size: int | None = None, what: str = "blob",
                  limit: int = MAX_MANIFEST) -> bytes:
        """A small blob (a config) whole, verified."""
        if size is not None and size > limit:
            raise BadImage(f"The {what} {digest} is {size} bytes; more than imgquilt accepts ({limit}).")
        with self.open_blob(repo, digest, size=size, what=what) as stream:
            data = stream.read(limit + 1)
            if len(data) > limit:
                raise BadImage(f"The {what} {digest} is more than {limit} bytes; imgquilt does not read it whole.")
            stream.drain()
        return data

    def read_blob_range(self, repo: str, digest: str, offset: int, length: int, *, what: str = "blob") -> bytes | None:
        """`length` bytes at `offset` of a blob, by one HTTP Range request (redirects followed); None when
        the registry answers with the whole blob (it ignores Range). The bytes are not checked against the
        blob's digest, which only the whole blob can be: the caller checks them against a digest of its own."""
        check_digest(digest, what=what)
        if length <= 0:
            return b""
        last = offset + length - 1
        response = self._call("GET", repo, f"blobs/{digest}", what=f"{what} {digest}", stream=True, follow=True,
                              headers={"Range": f"bytes={offset}-{last}"})
        try:
            if response.status_code == 200:
                return None
            if response.status_code != 206:
                raise self._fail(response, f"{what} {repo}@{digest} (bytes {offset}-{last})")
            answered = response.headers.get("content-range", "")
            if not answered.startswith(f"bytes {offset}-{last}/"):
                raise BadImage(f"The registry {self.domain} answered bytes {answered!r} of the {what} {digest} "
                               f"when asked for {offset}-{last}.", hint="The registry is misbehaving; tell its operator.")
            data = bytearray()
            try:
                for chunk in response.iter_raw():
                    data += chunk
                    if len(data) > length:
                        break
            except httpx.HTTPError as exc:
                raise BadImage(f"Reading bytes {offset}-{last} of the {what} {digest} from {self.domain} failed: "
                               f"{exc}.", hint="Try again.") from None
            if len(data) != length:
                raise BadImage(f"The registry {self.domain} sent {len(data)} bytes of the {what} {digest} for a "
                               f"range of {length}.", hint="The registry or the network failed; try again.")
            return bytes(data)
        finally:
            response.close()

    def blob_exists(self, repo: str, digest: str) -> bool:
        """Whether `repo` holds the blob (HEAD)."""
        response = self._call("HEAD", repo, f"blobs/{digest}", what=f"blob {digest}", follow=True)
        response.close()
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise self._fail(response, f"blob {repo}@{digest}")

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount; False when the registry cannot (it then offers an upload, which is dropped)."""
        self._push_repos.add(repo)
        what = f"mount of blob {digest} from {from_repo} into {repo}"
        response = self._call("POST", repo, "blobs/uploads/", what=what, params={"mount": digest, "from": from_repo},
                              extra_scopes=(repository_scope(from_repo),))
        response.close()
        if response.status_code == 201:
            return True
        if response.status_code == 202:
            self._cancel_upload(repo, response)
            return False
        raise self._fail(response, what)

    def check_push(self, repo: str) -> None:
        """Fail now (unreachable, unauthorized, denied) rather than halfway through a push: start an
        upload and cancel it."""
        self._push_repos.add(repo)
        what = f"upload to {repo} (checked before anything is read)"
        response = self._call("POST", repo, "blobs/uploads/", what=what)
        response.close()
        if response.status_code != 202:
            raise self._fail(response, what)
        self._cancel_upload(repo, response)

    def _upload_url(self, response: httpx.Response, what: str) -> httpx.URL:
        """Where the upload goes on: the answer's Location, which must be on the registry's own origin."""
        location = response.headers.get("location")
        if not location:
            raise BadImage(f"The registry {self.domain} started the {what} but named no upload location.",
                           hint="The registry does not follow the distribution spec; tell its operator.")
        try:
            url = response.url.join(location)
        except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
            raise BadImage(f"The registry {self.domain} named the upload location {location[:200]!r}, which is "
                           f"not a URL ({exc}).", hint="The registry is misconfigured; tell its operator.") from None
        if not same_origin(url, self._base_url()):
            raise BadImage(f"The registry {self.domain} ({self._base_url()}) named an upload location on another "
                           f"origin ({url.scheme}://{url.netloc.decode('ascii', 'replace')}); imgquilt sends neither "
                           "your credentials nor image content there. Nothing was uploaded.",
                           hint="The registry (or a proxy in front of it) is misconfigured; tell its operator.")
        return url

    def _cancel_upload(self, repo: str, response: httpx.Response) -> None:
        if response.headers.get("location"):
            self._call("DELETE", repo, "", what="upload", url=self._upload_url(response, "upload")).close()

    def upload_blob(self, repo: str, digest: str, data: bytes | BinaryIO, *, chunk_size: int = UPLOAD_CHUNK) -> None:
        """Upload a blob: bytes (or a stream of one chunk) in one PUT, a longer stream in PATCH chunks.

        The bytes are hashed on the way; a stream that does not match `digest` is never committed."""
        check_digest(digest, what="blob to upload")
        self._push_repos.add(repo)
        what = f"upload of blob {digest} to {repo}"
        if isinstance(data, (bytes, bytearray, memoryview)):
            first, rest = bytes(data), None
            verify_digest(digest, _hexdigest(first, digest), what="blob to upload",
                          hint="Nothing was uploaded.")
        else:
            first, rest = data.read(chunk_size), data
        response = self._call("POST", repo, "blobs/uploads/", what=what)
        if response.status_code != 202:
            raise self._fail(response, what)
        response.close()
        url = self._upload_url(response, what)
        if rest is not None:
            hasher = new_hasher(digest)
            offset, chunk = 0, first
            following = rest.read(chunk_size) if chunk else b""
            while following:  # more than one chunk: PATCH each, the last one goes with the PUT
                hasher.update(chunk)
                url = self._patch(repo, url, chunk, offset, what)
                offset += len(chunk)
                chunk, following = following, rest.read(chunk_size)
            hasher.update(chunk)
            if f"{split_digest(digest)[0]}:{hasher.hexdigest()}" != digest:
                self._call("DELETE", repo, "", what=what, url=url).close()
            verify_digest(digest, hasher.hexdigest(), what="blob streamed for upload",
                          hint="The upload was cancelled; nothing was stored.")
            first = chunk
        response = self._call("PUT", repo, "", what=what, url=url.copy_merge_params({"digest": digest}),
                              content=first, headers={"Content-Type": "application/octet-stream"})
        if response.status_code not in (201, 204):
            raise self._fail(response, what)
        response.close()
        stored = response.headers.get("docker-content-digest")
        if stored and stored != digest:
            raise BadImage(f"The registry {self.domain} stored the blob as {stored}, not {digest}.",
                           hint="The registry is misbehaving; tell its operator.")

    def _patch(self, repo: str, url: httpx.URL, chunk: bytes, offset: int, what: str) -> httpx.URL:
        response = self._call("PATCH", repo, "", what=what, url=url, content=chunk, headers={
            "Content-Type": "application/octet-stream",
            "Content-Range": f"{offset}-{offset + len(chunk) - 1}",
        })
        if response.status_code != 202:
            raise self._fail(response, what)
        response.close()
        return self._upload_url(response, what)

    def push_blob(self, repo: str, digest: str, data: bytes | BinaryIO | None = None, *,
                  mount_from: str | None = None) -> str:
        """Make sure `repo` holds the blob: "exists", "mounted" or "uploaded" (needs `data`)."""
        if self.blob_exists(repo, digest):
            return "exists"
        if mount_from and mount_from != repo and self.mount_blob(repo, digest, mount_from):
            return "mounted"
        if data is None:
            raise BadImage(f"The registry {self.domain} lacks the blob {digest} in {repo}, and it could not be "
                           f"mounted{' from ' + mount_from if mount_from else ''}.",
                           hint="Push the base image to that repository first.")
        self.upload_blob(repo, digest, data)
        return "uploaded"

    # --- referrers (OCI 1.1) ----------------------------------------------------------------------
    def referrers(self, repo: str, digest: str, *, max_pages: int = 16) -> list[dict] | None:
        """The descriptors the referrers API lists for `digest` (pages followed), or None when the
        registry has no referrers API (it answers 404, as the distribution spec says it must)."""
        check_digest(digest, what="subject")
        what = f"referrers of {repo}@{digest}"
        url: str | None = None
        found: list[dict] = []
        for _page in range(max_pages):
            response = self._call("GET", repo, f"referrers/{digest}", what=what, url=url, stream=True,
                                  headers={"Accept": OCI_INDEX})
            if response.status_code != 200:
                if response.status_code == 404 and url is None:  # no referrers API: the caller reads the fallback tag
                    response.close()
                    return None
                raise self._fail(response, what)
            with closing(response):
                data = self._read_limited(response, what)
            manifests = member_or_none(data, "manifests")
            if not isinstance(manifests, list):
                raise BadImage(f"The registry {self.domain} answered the {what} with something that is not an image index.")
            found += [m for m in manifests if isinstance(m, dict)]
            following = response.links.get("next", {}).get("url")
            if not following:
                return found
            url = str(response.url.join(following))
        return found

    def find_manifest(self, repo: str, reference: str) -> Manifest | None:
        """The manifest `reference` names, or None when the registry holds none (404)."""
        what = f"manifest {repo}:{reference}"
        response = self._call("HEAD", repo, f"manifests/{reference}", what=what,
                              headers={"Accept": ", ".join(MANIFEST_TYPES)})
        response.close()
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(response, what)
        return self.get_manifest(repo, reference)

    def put_referrer(self, repo: str, data: bytes, media_type: str) -> tuple[str, str | None]:
        """Store a manifest with a `subject` under its digest: (the digest, the OCI-Subject header the
        registry answered, None when it did not: then it has no referrers API and the client keeps the
        fallback tag)."""
        digest = self.put_manifest(repo, "sha256:" + hashlib.sha256(data).hexdigest(), data, media_type)
        return digest, self._last_subject.pop(digest, None)


class Registries:
    """One RegistryClient per registry (and TLS choice), shared by every reference that names it."""

    def __init__(self, *, tls_verify: bool | None = None, retry: RetryPolicy = RetryPolicy()) -> None:
        self.tls_verify = tls_verify
        self.retry = retry
        self._clients: dict[str, RegistryClient] = {}
        self._lock = threading.Lock()

    def client(self, ref: RegistryRef) -> RegistryClient:
        with self._lock:
            client = self._clients.get(ref.domain)
            if client is None:
                client = RegistryClient.for_ref(ref, tls_verify=self.tls_verify, retry=self.retry)
                self._clients[ref.domain] = client
            return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def __enter__(self) -> "Registries":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
