"""The JSON documents of every command, run for real on a copy of the demo queue, against docs/schemas.

Success (exit 0): the document validates against the command's `result` schema and has no `error`.
Failure (exit 2-6): the document validates against the command's schema, carries `error`, and
`error.code` is the exit code (docs/json.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from support.qtools import Run, copy_demo_queue, imgquilt
from support.schemas import SCHEMAS, validator

DEMO = "oci:examples/demo-image:latest"
CONFIG = "home/app/config.toml"
PORT_DIFF = '--- a/home/app/config.toml\n+++ b/home/app/config.toml\n@@ -3,2 +3,2 @@\n host = "0.0.0.0"\n-port = 8080\n+port = 9090\n'
NO_JSON = {"completion"}  # prints a shell script, not a report


def document(r: Run) -> dict:
    """stdout is exactly one JSON document."""
    assert r.out.strip(), f"nothing on stdout (exit {r.code}); stderr:\n{r.err}"
    return json.loads(r.out)


def build_rootfs(queue: Path, dest: Path) -> Path:
    subprocess.run([sys.executable, "examples/build_demo.py", "--rootfs", str(dest)], cwd=queue, check=True, capture_output=True)
    return dest


def edit_bytes(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("IMGQUILT_QUEUE", None)
    e.update(HOME=str(tmp_path_factory.mktemp("home")), IMGQUILT_EDITOR="true", COLUMNS="200",
             GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    return e


@pytest.fixture(scope="module")
def successes(tmp_path_factory, env) -> list[tuple[str, tuple[str, ...], Run]]:
    """One session through every command on a copy of the demo queue, each run with --json."""
    tmp = tmp_path_factory.mktemp("session")
    q = copy_demo_queue(tmp / "queue")
    subprocess.run("git init -q && git add -A && git commit -qm queue", shell=True, cwd=q, env=env, check=True)
    old = build_rootfs(q, tmp / "old")
    root = build_rootfs(q, tmp / "root")
    new = build_rootfs(q, tmp / "new")
    edit_bytes(new / "usr/bin/which", b"#! /bin/sh\n", b"#! /bin/sh\n# which 2.0\n")
    (tmp / "port.diff").write_text(PORT_DIFF)
    runs: list[tuple[str, tuple[str, ...], Run]] = []

    def run(*args: str) -> Run:
        r = imgquilt("--json", *args, cwd=q, env=env)
        runs.append((args[0], args, r))
        return r

    run("init")  # already a queue: nothing created
    run("check")
    run("lock", "--image", DEMO)
    key = tmp / "key.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(tmp / "key.pub")], check=True, capture_output=True)
    run("apply", "--layer", str(tmp / "fix.tar.gz"), "--output-image", f"oci:{tmp}/out:patched", "--attest", str(key))
    run("verify", "--image", f"oci:{tmp}/out:patched", "--key", str(tmp / "key.pub"))
    run("apply", "--image", f"oci:{tmp}/out:patched", "--output-image", f"oci:{tmp}/out:again", "--layer", str(tmp / "none.tar"))
    run("apply", "--root", str(root))
    run("apply", "--reverse", "--root", str(root))
    run("restore", CONFIG, "--root", str(root))
    run("apply", "--overlay", str(tmp / "overlay"))
    run("overlay-args", str(tmp / "overlay"))
    run("overlay-args", str(tmp / "overlay"), "--format", "k8s")
    run("audit", "--image", f"oci:{tmp}/out:patched")
    run("audit", "--root", str(old), "--expect", "pending", "--history")
    run("boot", "--root", str(old))  # the demo root has no Python: every patch "cannot tell", exit 0
    run("series")
    run("applied")
    run("unapplied")
    run("top")
    run("push", "2")
    run("pop")
    run("push", "-a")
    run("new", "0007-port.patch", "-d", "Serve on port 9090")
    run("add", CONFIG)
    edit_bytes(q / ".imgquilt/work" / CONFIG, b"port = 8080", b"port = 9090")
    run("edit", CONFIG)
    run("diff")
    run("refresh")
    run("header")
    run("header", "--set", "Status=wip")
    edit_bytes(q / ".imgquilt/work" / CONFIG, b"port = 9090", b"port = 9091")
    run("diff", "-z")
    run("revert", CONFIG)
    run("files")
    run("next")
    run("previous")
    run("rename", "0007-serve-on-9090.patch")
    run("remove", CONFIG)
    run("delete", "-r")
    run("new", "0007-fold.patch")
    run("fold", str(tmp / "port.diff"))
    run("refresh")
    run("pop", "-a")
    run("delete", "-r", "0007-fold.patch")
    run("import", str(tmp / "port.diff"), "-P", "0000-port.patch")
    run("delete", "-r", "0000-port.patch")
    edit_bytes(q / "patches/0005-config-shared-expert-knob.patch", b'("1", "true", "yes", "on")', b'("1", "true", "yes", "y", "on")')
    run("refresh", "--rehash", "0005-config-shared-expert-knob.patch")
    run("rebase", "--status")
    run("rebase", "--image", f"rootfs:{new}", "--from", DEMO)
    # profiles (docs/profiles.md): one declared on the rebased image
    run("lock", "--profile", "p1", "--image", f"rootfs:{new}", "--env", "P1_MODE=on")
    run("guard", "--list")
    run("guard", "0001-which-skip-empty-path-elements.patch")
    run("select", "p1")
    run("select", "--none")
    run("check", "--profile", "all")
    run("apply", "--profile", "all", "--layer", f"{tmp}/{{profile}}.tar")
    run("audit", "--profile", "all", "--root", str(new), "--expect", "pending")
    run("audit", "--profile", "p1", "--root", str(new), "--expect", "pending")
    run("move", "0003-app-config-longer-timeouts.patch", "--after", "0004-demosvc-healthcheck.patch")
    # port (docs/profiles.md): a patch kept out of p1, copied onto p1's image
    imgquilt("guard", "--new-guard", "0002-demo-tool-honour-no-color.patch", "-p1", cwd=q, env=env, check=0)
    run("port", "0002-demo-tool-honour-no-color.patch", "--profile", "p1")
    run("new", "0008-p1-only.patch", "--guard", "+p1")
    run("rebase", "--forget")
    run("cache")
    run("cache", "prune")
    return runs


def test_every_command_has_a_schema() -> None:
    from imgquilt.cli.main import app

    import typer.main

    commands = set(typer.main.get_command(app).commands) - NO_JSON
    have = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert commands <= have, f"no schema in docs/schemas for: {sorted(commands - have)}"
    assert have <= commands, f"schemas for commands that do not exist: {sorted(have - commands)}"


def test_schemas_are_valid_json_schema() -> None:
    for path in SCHEMAS.glob("*.schema.json"):
        doc = json.loads(path.read_text())
        Draft202012Validator.check_schema(doc)
        assert set(doc["$defs"]) >= {"result", "failure", "error"}, path.name


def test_success_documents_validate(successes) -> None:
    seen = set()
    for command, args, r in successes:
        assert r.code == 0, f"imgquilt {' '.join(args)} exited {r.code}\n{r.out}\n{r.err}"
        doc = document(r)
        assert "error" not in doc, args
        errors = [e.message for e in validator(command, "result").iter_errors(doc)]
        assert not errors, f"imgquilt {' '.join(args)} --json does not match docs/schemas/{command}.schema.json: {errors}"
        seen.add(command)
    on_disk = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert on_disk <= seen, f"no success run for: {sorted(on_disk - seen)}"


def test_success_documents_say_what_happened(successes) -> None:
    """A few values, so the schemas are held against real content and not just shapes."""
    by = {args: document(r) for _, args, r in successes}
    assert by[("check",)]["ok"] is True and by[("check",)]["problems"] == []
    assert by[("lock", "--image", DEMO)]["targets"] == 8
    audits = [d for a, d in by.items() if a[0] == "audit"]
    assert {p["state"] for p in audits[0]["patches"]} == {"live"}
    assert {p["state"] for p in audits[1]["patches"]} == {"pending"} and audits[1]["history"]["commits"] == 1
    rebase = next(d for a, d in by.items() if a[:2] == ("rebase", "--image"))
    assert rebase["status"] == "done" and rebase["summary"]["merged"] == 1
    assert by[("diff", "-z")]["files"][0]["path"] == CONFIG and "+port = 9091" in by[("diff", "-z")]["files"][0]["diff"]
    assert by[("revert", CONFIG)]["reverted"] == [CONFIG] and CONFIG in by[("files",)]["files"]
    assert by[("next",)] == {"next": None} and by[("previous",)] == {"previous": "0006-moe-shared-expert.patch"}
    assert by[("remove", CONFIG)] == {"patch": "0007-serve-on-9090.patch", "removed": [CONFIG], "sections_dropped": [CONFIG],
                                      "targets_lock": {"updated": True, "path": by[("remove", CONFIG)]["targets_lock"]["path"],
                                                       "stale": None, "todo": None}}
    assert by[("refresh",)]["targets_lock"]["updated"] is True and by[("rebase", "--status")] == {"status": "none"}
    reversed_ = by[("apply", "--reverse", "--root", next(a for a in by if a[:2] == ("apply", "--reverse"))[3])]
    assert len(reversed_["written"]) == 8 and reversed_["removed"] == ["usr/local/bin/demosvc-healthcheck"]
    k8s = next(d for a, d in by.items() if a[0] == "overlay-args" and "k8s" in a)
    assert len(k8s["volumes"]) == len(k8s["volumeMounts"]) == 9
    again = next(d for a, d in by.items() if a[:2] == ("apply", "--image"))
    assert again["changes"] is False and set(again["outputs"]) == {"image"} and again["outputs"]["image"]["unchanged"] is True
    rehashed = by[("refresh", "--rehash", "0005-config-shared-expert-knob.patch")]
    assert rehashed["written"] == ["0005-config-shared-expert-knob.patch", "0006-moe-shared-expert.patch"]
    assert [c["patch"] for c in rehashed["rechained"]] == ["0006-moe-shared-expert.patch"] and rehashed["lock"].endswith("targets.lock")


# --- failures ---------------------------------------------------------------------------------
def failure_runs(tmp: Path, env: dict[str, str]) -> list[tuple[str, tuple[str, ...], Run, int]]:
    """Each command made to fail as users make it fail: (command, args, run, the documented exit code)."""
    q = copy_demo_queue(tmp / "queue")
    runs: list[tuple[str, tuple[str, ...], Run, int]] = []

    def run(want: int, *args: str, cwd: Path = q) -> Run:
        r = imgquilt("--json", *args, cwd=cwd, env=env)
        runs.append((args[0], args, r, want))
        return r

    drifted = build_rootfs(q, tmp / "drifted")
    edit_bytes(drifted / CONFIG, b"port = 8080", b"port = 8081")
    conflicted = build_rootfs(q, tmp / "conflicted")
    edit_bytes(conflicted / CONFIG, b"request_timeout_s = 30", b"request_timeout_s = 60")
    (tmp / "port.diff").write_text(PORT_DIFF)
    nowhere = tmp / "not-a-queue"
    nowhere.mkdir()

    (tmp / "a-file").write_bytes(b"")
    run(6, "init", "--queue", str(tmp / "a-file"))
    run(2, "init", "unexpected-argument")
    run(6, "lock", "--image", f"oci:{tmp}/no-such-image")
    run(3, "apply", "--image", f"rootfs:{drifted}")
    run(3, "boot", "--root", str(drifted))  # a base that drifted is refused before any probe, as apply refuses it
    run(5, "audit", "--image", DEMO)
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(tmp / "key.pem")], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(tmp / "key.pem"), "-pubout", "-out", str(tmp / "key.pub")], check=True, capture_output=True)
    run(3, "verify", "--image", DEMO, "--key", str(tmp / "key.pub"))  # nobody attested the demo image
    run(2, "rebase", "--abort")
    run(4, "rebase", "--image", f"rootfs:{conflicted}", "--from", DEMO)
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    run(6, "import", str(tmp / "no-such.diff"))
    run(2, "new", "0001-which-skip-empty-path-elements.patch")
    run(2, "add", CONFIG)
    run(2, "edit", CONFIG)
    run(2, "refresh")
    run(2, "push", "0009-no-such.patch")
    run(2, "pop")
    run(2, "diff")
    run(2, "fold", str(tmp / "port.diff"))  # no patch applied
    run(2, "header", "0009-no-such.patch")
    run(2, "delete", "0009-no-such.patch")
    run(2, "rename", "-P", "0001-which-skip-empty-path-elements.patch", "0002-demo-tool-honour-no-color.patch")
    run(2, "move", "0009-no-such.patch", "--top")
    r = imgquilt("--json", "cache", cwd=q, env={**env, "IMGQUILT_CACHE_MAX": "a lot"})
    runs.append(("cache", ("cache",), r, 2))
    run(6, "init", "--queue", str(tmp / "port.diff" / "queue"))  # a file stands where a directory must be
    run(2, "remove", CONFIG)
    run(2, "revert", CONFIG)
    run(6, "restore", CONFIG, "--root", str(tmp / "port.diff"))  # not a directory
    run(6, "overlay-args", str(tmp))  # no mounts.tsv
    run(2, "guard", "0001-which-skip-empty-path-elements.patch", "+bad guard")
    run(2, "select", "no-such-profile")
    run(2, "port", "0001-which-skip-empty-path-elements.patch", "--profile", "no-such-profile")
    run(2, "apply", "--profile", "no-such-profile")
    for command in ("top", "applied", "unapplied", "series", "files", "next", "previous"):
        run(2, command, cwd=nowhere)
    # last: a stale hash in a patch file breaks the chain and the lock
    edit_bytes(q / "patches/0003-app-config-longer-timeouts.patch", b"Patched-SHA256: 71a5", b"Patched-SHA256: 0000")
    run(6, "check")
    return runs


@pytest.fixture(scope="module")
def failures(tmp_path_factory, env):
    return failure_runs(tmp_path_factory.mktemp("failures"), env)


def test_failures_exit_with_their_documented_code(failures) -> None:
    """The exit codes are the contract today; the document on stdout is checked below."""
    for _, args, r, want in failures:
        assert r.code == want, f"imgquilt {' '.join(args)} exited {r.code}, wanted {want}\n{r.out}\n{r.err}"
    on_disk = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    assert on_disk <= {c for c, *_ in failures}, f"no failure run for: {sorted(on_disk - {c for c, *_ in failures})}"


def test_failure_documents_carry_the_error(failures) -> None:
    """Every command with --json prints one document on failure too: `error` with the exit code."""
    wrong = []
    for command, args, r, _ in failures:
        try:
            doc = document(r)
        except (AssertionError, json.JSONDecodeError) as exc:
            wrong.append(f"imgquilt {' '.join(args)} --json (exit {r.code}): {exc}")
            continue
        errors = [e.message for e in validator(command).iter_errors(doc)]
        if "error" not in doc:
            errors.append("no `error` member")
        elif doc["error"].get("code") != r.code:
            errors.append(f"error.code {doc['error'].get('code')} is not the exit code {r.code}")
        if errors:
            wrong.append(f"imgquilt {' '.join(args)} --json (exit {r.code}): {errors}")
    assert not wrong, "\n".join(wrong)
