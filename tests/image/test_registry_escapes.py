"""Terminal escapes from a registry (issue 35, points 4 and 6): an error body, a token service's answer
and what a progress line shows are escaped (`\\x1b`), never written raw to the terminal, and each is
exit 6 with one paragraph. The registry is the real `docker-registry` behind the fault proxy."""
from __future__ import annotations

import json

from support.registry_server import fault_proxy, registry  # noqa: F401 (fixtures)
from support.registry_queue import queue  # noqa: F401 (fixture: the demo queue, unlocked)
from support.registry_hostile import Elsewhere, answer, bad, cli, env  # noqa: F401 (env: a fixture)

CSI = "\x1b[2J\x1b[31m"
OSC = "\x1b]0;pwned\x07"


def clean(text: str) -> str:
    bad_chars = sorted({c for c in text if not c.isprintable() and c not in "\n\t"})
    assert not bad_chars, f"raw control characters {bad_chars!r} in:\n{text!r}"
    return text


def test_an_error_body_with_escapes_is_shown_escaped(fault_proxy, queue, env):
    body = json.dumps({"errors": [{"code": "DENIED" + CSI, "message": "go away" + OSC}]}).encode()
    fault_proxy.fault = lambda method, path: answer(403, {"Content-Type": "application/json"}, body) \
        if "/manifests/" in path and method == "GET" else None
    r = cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env)
    bad(r, "403", "DENIED\\x1b[2J\\x1b[31m: go away\\x1b]0;pwned\\x07")
    clean(r.out + r.err)
    doc = json.loads(cli("--json", "audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env).out)
    assert "\\x1b[2J" in doc["error"]["message"]


def test_a_token_service_answer_with_escapes_is_shown_escaped(fault_proxy, queue, env):
    tokens = Elsewhere(lambda h: answer(401, {"Content-Type": "text/plain"}, f"denied{CSI} by{OSC} policy\r\nFAKE".encode())[1](h))
    try:
        fault_proxy.fault = lambda method, path: answer(401, {"WWW-Authenticate": f'Bearer realm="{tokens.base}/token"'}) \
            if path.startswith("/v2/") else None
        r = cli("audit", "--image", fault_proxy.ref("demo:latest"), cwd=queue, env=env)
        bad(r, "refused anonymous access", "denied\\x1b[2J\\x1b[31m by\\x1b]0;pwned\\x07 policy\\r\\nFAKE")
        clean(r.out + r.err)
        assert not any(line.startswith("FAKE") for line in r.err.splitlines())
    finally:
        tokens.close()


def test_progress_lines_of_a_registry_read_are_clean(fault_proxy, queue, env):
    r = cli("--progress=plain", "audit", "--image", fault_proxy.ref("demo:latest"), "--expect", "pending", cwd=queue, env=env)
    assert r.code == 0, r.err
    assert "imgquilt: reading " in clean(r.err)
