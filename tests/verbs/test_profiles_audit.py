"""Audits that know the profile (issue 34, point 7): the fleet audit judges each image by its own
profile, as `audit --profile all` does image by image; `audit --pid` checks the profile's env
defaults against the running process's environment; `audit --root` of another profile's root names
that profile. The queue and images are test_profiles.py's (umoci-built, three profiles)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.qtools import REPO, imgquilt
from support.profiles import ENV, SELECTS, images, make_queue, unpack  # noqa: F401 (images: fixture)

needs = lambda name: pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} not installed")  # noqa: E731


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, images):  # noqa: F811
    """The queue, and every profile's output image beside the two bases."""
    tmp = tmp_path_factory.mktemp("fleet")
    q, env = make_queue(tmp, images)
    out = tmp / "out"
    imgquilt("apply", "--profile", "all", "--output-image", f"oci:{out}:{{profile}}", cwd=q, env=env, check=0)
    refs = [f"oci:{images['a']}:latest", f"oci:{images['b']}:latest", *(f"oci:{out}:{n}" for n in SELECTS)]
    return q, env, refs


def _valid(doc: dict, part: str | None = None) -> None:
    """The document is what docs/schemas/audit.schema.json says (the fleet's, or a single image's)."""
    from jsonschema import Draft202012Validator

    schema = json.loads((REPO / "docs/schemas/audit.schema.json").read_text())
    Draft202012Validator({**schema["$defs"][part], "$defs": schema["$defs"]} if part else schema).validate(doc)
    if part == "fleet":  # each image's own document, as the schema's `result` says it
        for d in doc["images"]:
            Draft202012Validator({**schema["$defs"]["result"], "$defs": schema["$defs"]}).validate(d)


def _states(doc: dict) -> dict[str, str]:
    return {p["name"]: p["state"] for p in doc["patches"]}


def _by_profile_all(q: Path, env: dict, ref: str, expect: str) -> dict[str, dict]:
    r = imgquilt("--json", "audit", "--profile", "all", "--image", ref, "--expect", expect, cwd=q, env=env)
    assert r.code in (0, 5), r.err
    return {d["profile"]: d for d in json.loads(r.out)["profiles"]}


@needs("umoci")
@pytest.mark.parametrize("expect", ["live", "pending"])
def test_fleet_audit_judges_each_image_by_its_own_profile_as_profile_all_does(fleet, expect: str) -> None:
    q, env, refs = fleet
    r = imgquilt("--json", "audit", *[a for ref in refs for a in ("--image", ref)], "--expect", expect, cwd=q, env=env)
    doc = json.loads(r.out)
    _valid(doc, "fleet")
    by_ref = {d["image"]["ref"]: d for d in doc["images"]}
    assert doc["profiles"] == {ref: by_ref[ref]["profile"] for ref in refs}
    base_a, base_b, *outs = refs
    # each output by the profile whose apply wrote it (its record), the qwen base by its digest's only pin
    for name, ref in zip(SELECTS, outs):
        assert (by_ref[ref]["profile"], by_ref[ref]["profile_by"]) == (name, "record")
    assert (by_ref[base_b]["profile"], by_ref[base_b]["profile_by"]) == ("qwen", "digest")
    # image a is pinned by glm53 and rocm: the first it matches (pending), else the closer (live: a tie, the first)
    assert by_ref[base_a]["profile"] == "glm53" and by_ref[base_a]["profile_by"] == ("match" if expect == "pending" else "closest")
    for ref in refs:
        one = by_ref[ref]
        # the verdicts are audit --profile all's, for the profile named, image by image
        judged = _by_profile_all(q, env, ref, expect)[one["profile"]]
        assert _states(one) == _states(judged) and one["env"] == judged["env"], ref
        assert sorted(_states(one)) == SELECTS[one["profile"]]  # that profile's patches only
        assert doc["matrix"]["0003-rocm-kernel.patch"].get(ref) == _states(one).get("0003-rocm-kernel.patch")
        failing = ref in [d["image"]["ref"] for d in doc["images"] if any(p["state"] != expect for p in d["patches"])]
        assert failing == (not judged["matches"] if one["profile_by"] != "closest" else True)
    if expect == "live":
        # the issue's case: the rocm-only patch is not judged in glm53's output at all (no longer "live" there)
        assert "0003-rocm-kernel.patch" not in _states(by_ref[outs[0]])
        assert doc["summary"] == {"images": 5, "as_expected": 3, "not_as_expected": 2, "unreadable": 0}
        assert r.code == 5
    else:
        assert doc["summary"]["as_expected"] == 2 and r.code == 5  # the outputs are not pending
    # the table names each image's profile and why; --format github names it in each annotation
    t = imgquilt("audit", *[a for ref in refs for a in ("--image", ref)], "--expect", expect, "--format", "github",
                 cwd=q, env=env, check=5)
    assert "Profile of each image" in t.out
    for ref in refs:
        line = next(ln for ln in t.out.splitlines() if ln.startswith(ref + "\t"))
        assert line.split("\t")[1] == by_ref[ref]["profile"]
    if expect == "live":
        assert f"is pending, not live, in {base_b} (profile qwen)." in t.out
        assert f"in {base_a} (profile glm53)." in t.out


@needs("umoci")
def test_merged_shards_keep_each_images_profile(fleet, tmp_path: Path) -> None:
    q, env, refs = fleet
    shards = []
    for i, part in enumerate((refs[:2], refs[2:])):
        r = imgquilt("--json", "audit", *[a for ref in part for a in ("--image", ref)], cwd=q, env=env)
        shards.append(tmp_path / f"shard-{i}.json")
        shards[-1].write_text(r.out)
    whole = json.loads(imgquilt("--json", "audit", *[a for ref in refs for a in ("--image", ref)], cwd=q, env=env, check=5).out)
    merged = json.loads(imgquilt("--json", "audit", "--merge", *map(str, shards), cwd=q, env=env, check=5).out)
    _valid(merged, "fleet")
    assert merged["profiles"] == whole["profiles"] and merged["matrix"] == whole["matrix"]
    assert merged["summary"] == whole["summary"]
    # a shard of an older selection of one profile is refused, naming the profile
    doc = json.loads(shards[1].read_text())
    doc["images"][0]["series_sha256"] = "0" * 64
    shards[1].write_text(json.dumps(doc))
    r = imgquilt("audit", "--merge", *map(str, shards), cwd=q, env=env, check=6)
    assert f"different series for profile {doc['images'][0]['profile']}" in r.err


# --- a running process --------------------------------------------------------------------------------
SLEEPER = "import os, sys, time\nos.chroot(sys.argv[1])\nos.chdir('/')\nprint('ready', flush=True)\ntime.sleep(300)\n"


def _start_in(root: Path, environ: dict[str, str]) -> subprocess.Popen:
    """A process whose /proc/PID/root is `root` and whose environment is `environ` (as execve gave it)."""
    p = subprocess.Popen([sys.executable, "-c", SLEEPER, str(root)], env=environ, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


@pytest.fixture(scope="module")
def rocm_root(tmp_path_factory, images):  # noqa: F811
    """A root unpacked from image a with profile rocm applied in place by imgquilt."""
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    tmp = tmp_path_factory.mktemp("proc")
    q, env = make_queue(tmp, images)
    root = unpack(images["a"], "latest", tmp / "unpacked")
    imgquilt("apply", "--profile", "rocm", "--root", str(root), cwd=q, env=env, check=0)
    time.sleep(0.05)  # the process starts after the files changed: they are not restart-pending
    return q, env, root


@needs("umoci")
def test_audit_pid_checks_the_profiles_env_in_the_process(rocm_root) -> None:
    q, env, root = rocm_root
    bare = _start_in(root, {"PATH": "/usr/bin"})  # started without the kill switch HIP_FORCE=1
    good = _start_in(root, {"PATH": "/usr/bin", "HIP_FORCE": "1"})
    wrong = _start_in(root, {"PATH": "/usr/bin", "HIP_FORCE": "0"})
    try:
        # without --profile: the record names rocm; every patch live, but the env default is missing
        r = imgquilt("audit", "--pid", str(bare.pid), cwd=q, env=env, check=5)
        assert "Every patch of profile rocm is live, but the process's environment lacks 1 of its default(s): HIP_FORCE=1" in r.err
        assert "env not set in the process's environment: HIP_FORCE=1" in r.out
        doc = json.loads(imgquilt("--json", "audit", "--pid", str(wrong.pid), cwd=q, env=env, check=5).out)
        _valid(doc)
        assert doc["env"] == {"expected": ENV["rocm"], "checked": True, "source": "process",
                              "missing": [{"key": "HIP_FORCE", "value": "1", "found": "0"}]}
        assert all(p["state"] == "live" for p in doc["patches"])
        doc = json.loads(imgquilt("--json", "audit", "--pid", str(good.pid), cwd=q, env=env, check=0).out)
        assert doc["profile"] == "rocm" and doc["env"]["missing"] == []
        # --profile all: the process with the default is rocm; the one without matches no profile
        doc = json.loads(imgquilt("--json", "audit", "--pid", str(good.pid), "--profile", "all", cwd=q, env=env, check=0).out)
        assert doc["matching"] == ["rocm"]
        assert {d["profile"]: d["process"]["pid"] for d in doc["profiles"]} == {n: good.pid for n in sorted(SELECTS)}
        r = imgquilt("--json", "audit", "--pid", str(bare.pid), "--profile", "all", cwd=q, env=env, check=5)
        doc = json.loads(r.out)
        assert doc["matching"] == []
        rocm = next(d for d in doc["profiles"] if d["profile"] == "rocm")
        assert rocm["env"]["missing"] == [{"key": "HIP_FORCE", "value": "1", "found": None}]
        assert "rocm: Every patch of profile rocm is live, but the process's environment lacks" in r.err
    finally:
        for p in (bare, good, wrong):
            p.kill()
            p.wait()


@needs("umoci")
def test_audit_root_of_another_profiles_apply_names_that_profile(rocm_root) -> None:
    q, env, root = rocm_root
    r = imgquilt("audit", "--root", str(root), "--profile", "glm53", cwd=q, env=env, check=5)
    assert ("written by an apply of profile rocm's selection, not profile glm53's (judge it as that deployment with "
            "--profile rocm)") in r.out
    assert "the queue changed since this apply" not in r.out + r.err
    # without --profile the record names rocm: judged as rocm (the root has no config: env not checked)
    r = imgquilt("audit", "--root", str(root), cwd=q, env=env, check=0)
    assert "as profile rocm" in r.out and "Env defaults of profile rocm not checked" in r.out


# --- true messages (point 9) -------------------------------------------------------------------------
@needs("umoci")
def test_apply_reverse_root_takes_the_profile_line_repeated(images, tmp_path: Path) -> None:  # noqa: F811
    from support.qtools import tree_hash

    q, env = make_queue(tmp_path, images)
    base = unpack(images["a"], "latest", tmp_path / "base")
    root = unpack(images["a"], "latest", tmp_path / "root")
    imgquilt("apply", "--profile", "rocm", "--root", str(root), cwd=q, env=env, check=0)
    applied = tree_hash(root)
    # another profile's line, or all: refused before any write, naming the profile that applied it
    r = imgquilt("apply", "--profile", "glm53", "--root", str(root), "--reverse", cwd=q, env=env, check=2)
    assert f"{root} was applied as profile rocm, not profile glm53" in r.err and "with --profile rocm" in r.err
    r = imgquilt("apply", "--profile", "all", "--root", str(root), "--reverse", cwd=q, env=env, check=2)
    assert "takes one --profile NAME, not all" in r.err
    r = imgquilt("apply", "--profile", "rcom", "--root", str(root), "--reverse", cwd=q, env=env, check=2)
    assert "Did you mean 'rocm'?" in r.err
    assert tree_hash(root) == applied
    # the apply line repeated with --reverse: the root is the base again, byte for byte
    r = imgquilt("apply", "--profile", "rocm", "--root", str(root), "--reverse", cwd=q, env=env, check=0)
    assert "Took the queue" in r.out
    assert tree_hash(root) == tree_hash(base)


@needs("umoci")
def test_an_output_of_an_older_queue_is_told_to_rebuild_not_rebase(images, tmp_path: Path) -> None:  # noqa: F811
    from support.qtools import write_patch
    from support.profiles import CONFIG

    q, env = make_queue(tmp_path, images)
    out = tmp_path / "out"
    imgquilt("apply", "--profile", "glm53", "--output-image", f"oci:{out}:old", cwd=q, env=env, check=0)
    root = unpack(images["a"], "latest", tmp_path / "root")
    imgquilt("apply", "--profile", "glm53", "--root", str(root), cwd=q, env=env, check=0)
    # the queue moves on: the timeout fix now sets another value (same base)
    series = (q / "series").read_bytes()
    write_patch(q, "0002-cuda-timeouts.patch", [("app/config.toml", CONFIG[0], CONFIG[0].replace(b"30", b"120"))])
    (q / "series").write_bytes(series)  # the patch rewritten in place, its guard kept
    imgquilt("lock", "--profile", "glm53", cwd=q, env=env, check=0)
    r = imgquilt("audit", "--profile", "glm53", "--image", f"oci:{out}:old", cwd=q, env=env, check=5)
    assert "0002-cuda-timeouts.patch (drifted)" in r.err
    assert "built by an older version of this queue" in r.err and "Not a rebase" in r.err
    digest = json.loads(imgquilt("--json", "audit", "--profile", "glm53", "--image", f"oci:{out}:old", cwd=q, env=env).out)["record"]["image"]["digest"]
    assert f"from {digest}). Not a rebase, its base did not change: rebuild it from that base, `imgquilt apply --profile glm53 --output-image REF`" in r.err
    assert "imgquilt rebase" not in r.err
    r = imgquilt("audit", "--profile", "glm53", "--root", str(root), cwd=q, env=env, check=5)
    assert "`imgquilt apply --profile glm53 --reverse --root ROOT` then `imgquilt apply --profile glm53 --root ROOT`" in r.err
    assert "imgquilt rebase" not in r.err
    # that advice is true: the rebuild makes every patch live
    imgquilt("apply", "--profile", "glm53", "--image", f"oci:{images['a']}:latest", "--output-image", f"oci:{out}:new",
             cwd=q, env=env, check=0)
    imgquilt("audit", "--profile", "glm53", "--image", f"oci:{out}:new", cwd=q, env=env, check=0)
