"""What a registry's error answer means, in one paragraph with what to do (all exit 6, BadImage)."""
from __future__ import annotations

import httpx

from ...errors import BadImage, shown
from ...util.jsonin import member_or_none


def registry_messages(response: httpx.Response) -> str:
    """The registry's own words: `CODE: message` of each entry of its JSON `errors` body (read by the
    client, capped; control characters are shown escaped, so they cannot start a line of output)."""
    try:
        body = response.read()
    except httpx.HTTPError:
        body = b""
    errors = member_or_none(body, "errors") if body else None
    if not isinstance(errors, list):
        return ""
    parts = []
    for e in errors:
        if isinstance(e, dict):
            code, message = e.get("code"), e.get("message")
            parts.append(": ".join(str(p) for p in (code, message) if p))
    said = "; ".join(p for p in parts if p)[:1000]
    return shown(said)


def http_problem(response: httpx.Response, *, what: str, registry: str, credentials_source: str | None) -> BadImage:
    """A BadImage for an unexpected answer to a request about `what` (e.g. "manifest demo:latest")."""
    status = response.status_code
    said = registry_messages(response)
    says = f" The registry says: {said}." if said else ""
    if status == 401:
        who = f"the credentials from {credentials_source}" if credentials_source else "no credentials (anonymous)"
        return BadImage(f"The registry {registry} refused access to the {what} with {who} (401 unauthorized).{says}",
                        hint=f"Log in (`podman login {registry}` or `docker login {registry}`), or set "
                             "REGISTRY_AUTH_FILE to an auth.json holding valid credentials.")
    if status == 403:
        return BadImage(f"The registry {registry} denied access to the {what} (403 forbidden).{says}",
                        hint="The account lacks permission on this repository; check the name and your rights.")
    if status == 404:
        return BadImage(f"The registry {registry} has no {what} (404 not found).{says}",
                        hint="Check the repository, tag or digest (e.g. `skopeo list-tags docker://...`).")
    if status == 429:
        return BadImage(f"The registry {registry} is rate-limiting requests for the {what} (429 too many "
                        f"requests), still after retrying.{says}",
                        hint="Wait and try again later, or log in: authenticated pulls have higher limits.")
    if status >= 500:
        return BadImage(f"The registry {registry} failed on the {what} ({status} server error), still after "
                        f"retrying.{says}", hint="The registry has a problem; try again later.")
    return BadImage(f"The registry {registry} answered {status} to the request for the {what}.{says}",
                    hint="The registry may not speak the OCI distribution API (Docker Registry HTTP API v2).")


def unreachable(registry: str, exc: Exception, *, plain_http_allowed: bool) -> BadImage:
    """A registry that cannot be reached (refused, DNS, TLS, timeout)."""
    hint = "Check that the registry is running and the address is right."
    if not plain_http_allowed:
        hint += (" A registry without valid HTTPS needs --tls-verify=false, or `insecure = true` for it in "
                 "registries.conf.")
    return BadImage(f"Cannot reach the registry {registry}: {exc.__class__.__name__}: {exc}.", hint=hint)
