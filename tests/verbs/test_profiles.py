"""Profiles (issue 24): one queue, three deployments over two real images.

The images are built with umoci: `a` (app/shared.py, app/config.toml, app/rocm.py, app/extra.txt,
an Env) and `b`, the same plus one layer that changes app/extra.txt. The queue:

    0001-shared.patch                       app/shared.py v0 -> v1     every profile
    0002-cuda-timeouts.patch   #-rocm       app/config.toml            not rocm
    0003-rocm-kernel.patch     #+rocm       app/rocm.py                rocm only
    0004-extra-a.patch         #-qwen       app/extra.txt (image a)    not qwen
    0005-extra-b.patch         #+qwen       app/extra.txt (image b)    qwen only
    0006-glm-prep.patch        #+glm53      app/shared.py v1 -> v2     glm53 only: a file 0001 touches

and the profiles glm53 (image a, VLLM_GLM53_PREP_FUSED=0), rocm (image a, HIP_FORCE=1) and qwen
(image b, QWEN_MODE=fast, PATH replaced). Every expectation is what real tools say: GNU `patch -p1`
gives each profile's tree, umoci unpacks the outputs, skopeo and podman read them.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import run as tool, umoci_edit
from support.qtools import copy_demo_queue, imgquilt, write_patch
from support.profiles import CONFIG, ENV, EXTRA_A, EXTRA_B, RECORD, ROCM, SELECTS, SHARED, base_files, env_of, files_of, images, make_queue, snapshot, unpack  # noqa: F401 (fixtures)

needs = lambda name: pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} not installed")  # noqa: E731


@pytest.fixture
def queue(tmp_path: Path, images) -> tuple[Path, dict]:
    """The guarded queue and its three profiles, declared (and pinned) with the real CLI."""
    return make_queue(tmp_path, images)


@pytest.fixture(scope="module")
def untouched(tmp_path_factory, images) -> tuple[Path, dict]:
    """The same queue, shared by the tests that must leave it as it is (each checks that they do)."""
    return make_queue(tmp_path_factory.mktemp("untouched"), images)


# --- guards in series ----------------------------------------------------------------------------
def test_guard_writes_mq_syntax_and_keeps_every_other_byte_of_series(queue) -> None:
    q, env = queue
    text = (q / "series").read_text()
    assert text.startswith("# fixes carried for three deployments\n0001-shared.patch\n")
    assert "0002-cuda-timeouts.patch #-rocm\n" in text and "0006-glm-prep.patch #+glm53\n" in text
    (q / "series").write_text(text.replace("0001-shared.patch\n", "0001-shared.patch   # upstream PR 123\n\n"))
    before = (q / "series").read_bytes()
    imgquilt("guard", "0001-shared.patch", "+glm53", "-rocm", cwd=q, env=env, check=0)
    assert (q / "series").read_bytes() == before.replace(b"# upstream PR 123\n", b"# upstream PR 123 #+glm53 #-rocm\n")
    imgquilt("guard", "--none", "0001-shared.patch", cwd=q, env=env, check=0)
    assert (q / "series").read_bytes() == before
    listed = json.loads(imgquilt("--json", "guard", "--list", cwd=q, env=env, check=0).out)["guards"]
    assert listed["0003-rocm-kernel.patch"] == ["+rocm"] and listed["0001-shared.patch"] == []


def test_guards_read_by_quilt_as_comments(queue, tmp_path: Path) -> None:
    """quilt takes `#+G` as a comment: `quilt push -a` of a series without the guarded-out lines gives
    what imgquilt's default selection gives (quilt itself sees every line)."""
    q, env = queue
    if shutil.which("quilt") is None:
        pytest.skip("quilt not installed")
    work = tmp_path / "quilt"
    (work / "app").mkdir(parents=True)
    for f in base_files():
        (work / f["path"]).write_bytes(f["data"])
    shutil.copytree(q / "patches", work / "patches")
    lines = [ln for ln in (q / "series").read_text().splitlines() if "#+" not in ln]  # what the default selects
    (work / "patches" / "series").write_text("\n".join(lines) + "\n")
    r = subprocess.run(["quilt", "push", "-a", "-q"], cwd=work, capture_output=True, text=True,
                       env={**env, "QUILT_PATCHES": "patches"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "app/config.toml").read_bytes() == CONFIG[1] and (work / "app/shared.py").read_bytes() == SHARED[1]


# --- the acceptance: three profiles over two images ------------------------------------------------
@needs("umoci")
@needs("skopeo")
@needs("podman")
def test_apply_profile_all_writes_each_profiles_tree_and_env(queue, images, tmp_path: Path, own_store) -> None:
    q, env = queue
    out = tmp_path / "out"
    (q / "build").mkdir()
    r = imgquilt("--json", "apply", "--profile", "all", "--output-image", f"oci:{out}:{{profile}}",
                 "--layer", "build/{profile}.tar.gz", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    by = {d["profile"]: d for d in doc["profiles"]}
    assert sorted(by) == ["glm53", "qwen", "rocm"]
    for name, want in SELECTS.items():
        assert by[name]["patches"] == want
        assert by[name]["env"] == ENV[name]
        assert by[name]["outputs"]["layer"]["path"] == f"build/{name}.tar.gz"
    assert by["qwen"]["outputs"]["image"]["env"]["replaced"] == {"PATH": "/usr/bin"}
    assert by["glm53"]["outputs"]["image"]["env"]["replaced"] == {}
    for name, image in (("glm53", "a"), ("rocm", "a"), ("qwen", "b")):
        # what GNU patch makes of the profile's selection on the base image ...
        expect = unpack(images[image], "latest", tmp_path / f"expect-{name}")
        for patch in SELECTS[name]:
            p = subprocess.run(["patch", "-p1", "-s", "-d", str(expect), "-i", str(q / "patches" / patch)],
                               capture_output=True, text=True)
            assert p.returncode == 0, p.stdout + p.stderr
        got = unpack(out, name, tmp_path / f"got-{name}")
        # ... is exactly what the image holds (and its record names the profile's selection)
        assert files_of(got) == files_of(expect), name
        record = json.loads((got / RECORD).read_bytes())
        assert [p["name"] for p in record["patches"]] == SELECTS[name] and record["env"] == ENV[name]
        # skopeo reads the image, and its config Env holds the profile's defaults over the base's
        cfg = json.loads(tool("skopeo", "inspect", "--config", f"oci:{out}:{name}"))
        envs = dict(e.split("=", 1) for e in cfg["config"]["Env"])
        assert envs == {"PATH": "/usr/bin", "LANG": "C.UTF-8", **ENV[name]}
        info = json.loads(tool("skopeo", "inspect", f"oci:{out}:{name}"))
        assert info["Digest"] == by[name]["outputs"]["image"]["digest"]
        # podman loads it (as the oci-archive skopeo copies it to) and sees the same Env
        archive = tmp_path / f"{name}.tar"
        tool("skopeo", "--insecure-policy", "copy", "-q", f"oci:{out}:{name}", f"oci-archive:{archive}:{name}")
        loaded = tool("podman", "load", "-q", "-i", archive)
        ids = [ln.split(":", 1)[1].strip() for ln in loaded.splitlines() if ln.startswith("Loaded image")]
        assert ids, loaded
        try:
            seen = json.loads(tool("podman", "image", "inspect", ids[0]))[0]["Config"]["Env"]
            assert {k: v for k, _, v in (e.partition("=") for e in seen)} == envs
        finally:
            for i in ids:
                subprocess.run(["podman", "rmi", "-f", i], capture_output=True)


def test_layers_are_byte_reproducible_per_profile(queue, tmp_path: Path) -> None:
    q, env = queue
    digests = []
    for run in ("one", "two"):
        r = imgquilt("--json", "apply", "--profile", "all", "--layer", f"{tmp_path}/{run}-{{profile}}.tar.gz", cwd=q, env=env, check=0)
        digests.append({d["profile"]: d["outputs"]["layer"]["digest"] for d in json.loads(r.out)["profiles"]})
    assert digests[0] == digests[1] and len(set(digests[0].values())) == 3
    for name in SELECTS:
        assert (tmp_path / f"one-{name}.tar.gz").read_bytes() == (tmp_path / f"two-{name}.tar.gz").read_bytes()


def test_a_queue_without_profiles_gives_the_same_bytes_as_before(tmp_path: Path) -> None:
    """The demo queue (no guard, no profile): the digests main gave before profiles existed."""
    q = copy_demo_queue(tmp_path / "queue")
    env = {k: v for k, v in env_of(tmp_path).items() if k != "SOURCE_DATE_EPOCH"}
    lock = (q / "targets.lock").read_bytes()
    imgquilt("lock", cwd=q, env=env, check=0)
    assert (q / "targets.lock").read_bytes() == lock
    doc = json.loads(imgquilt("--json", "apply", "--layer", "fix.tar.gz", "--output-image", "oci:out:fixed", cwd=q, env=env, check=0).out)
    # as main gave before profiles, with the new layer at gzip level 1 (issue 28) and the base's created date (issue 29);
    # since, the demo's 0004 is in git's form (a new executable file), which changes the patch hashes the apply record holds
    assert doc["outputs"]["layer"]["digest"] == "sha256:66083724e337c24ba87ec3a27a71d830c38cbd608220cf73b276ef8af68f847e"
    assert doc["outputs"]["image"]["digest"] == "sha256:65f77e7b982b06797b58071c4df9ab6fea27c700674db86102288f26c1c8ae7d"
    assert "profile" not in doc and "env" not in doc and "env" not in doc["outputs"]["image"]


# --- check -----------------------------------------------------------------------------------------
def test_check_refuses_a_shared_patch_whose_base_only_one_profile_makes(queue) -> None:
    q, env = queue
    imgquilt("check", cwd=q, env=env, check=0)
    # a shared patch on top of the glm53-only change: only glm53's chain produces its Base
    write_patch(q, "0007-shared-late.patch", [("app/shared.py", SHARED[2], SHARED[2] + b"LATE = 1\n")])
    r = imgquilt("check", cwd=q, env=env, check=3)  # exit 3 though every lock is stale (6) too
    for profile in ("rocm", "qwen"):
        assert (f"profile {profile}: 0007-shared-late.patch: app/shared.py: Base-SHA256 {hashlib.sha256(SHARED[2]).hexdigest()} "
                f"is what 0006-glm-prep.patch leaves, and profile {profile} does not select 0006-glm-prep.patch (#+glm53)") in r.err
    assert "profile glm53: 0007" not in r.err
    assert "targets.lock [profile.rocm] is stale (the selection edited by hand since it was made: 0007-shared-late.patch new)" in r.err
    doc = json.loads(imgquilt("--json", "check", cwd=q, env=env, check=3).out)
    assert doc["error"]["kind"] == "profile-chain-broken" and any("0006-glm-prep.patch" in p for p in doc["problems"])
    # the fix: the patch it depends on becomes shared; every profile re-pinned, check accepts
    r = imgquilt("guard", "--none", "0006-glm-prep.patch", cwd=q, env=env, check=0)
    # series changed: every pin follows in the same transaction (issue 29), verified on the bases the
    # store holds, so check accepts with no `lock` in between; `lock --profile all` writes the same. (The
    # cross-module check reads nothing from the images: the patches only add names to their modules,
    # which nothing imports; docs/boot-checks.md)
    assert "Updated targets.lock (no image read)." in r.out
    assert "sound" in imgquilt("check", cwd=q, env=env, check=0).out
    followed = (q / "targets.lock").read_bytes()
    imgquilt("lock", "--profile", "all", cwd=q, env=env, check=0)
    assert (q / "targets.lock").read_bytes() == followed
    assert "sound" in imgquilt("check", cwd=q, env=env, check=0).out
    imgquilt("check", "--profile", "all", cwd=q, env=env, check=0)  # each verified on its own image


def test_check_names_a_requires_on_a_guarded_out_patch(queue) -> None:
    q, env = queue
    p = q / "patches" / "0004-extra-a.patch"
    p.write_bytes(p.read_bytes().replace(b"Description:", b"Requires: 0003-rocm-kernel.patch\nDescription:", 1))
    r = imgquilt("check", cwd=q, env=env, check=3)
    assert "profile glm53: 0004-extra-a.patch: Requires '0003-rocm-kernel.patch', which profile glm53 does not select (#+rocm)." in r.err
    assert "profile rocm: 0004-extra-a.patch: Requires" not in r.err


# --- audit -----------------------------------------------------------------------------------------
def test_audit_profile_all_names_the_profile_each_output_is(queue, tmp_path: Path) -> None:
    q, env = queue
    out = tmp_path / "out"
    imgquilt("apply", "--profile", "all", "--output-image", f"oci:{out}:{{profile}}", cwd=q, env=env, check=0)
    for name in SELECTS:
        doc = json.loads(imgquilt("--json", "audit", "--profile", "all", "--image", f"oci:{out}:{name}", cwd=q, env=env, check=0).out)
        assert doc["matching"] == [name]
        assert {d["profile"]: d["matches"] for d in doc["profiles"]} == {p: p == name for p in SELECTS}
        # without --profile, the apply record names the selection: the profile is judged, env included
        one = json.loads(imgquilt("--json", "audit", "--image", f"oci:{out}:{name}", cwd=q, env=env, check=0).out)
        assert one["profile"] == name and one["env"]["missing"] == [] and one["summary"]["live"] == len(SELECTS[name])
    # the base images: every profile pending on the image it pins
    doc = json.loads(imgquilt("--json", "audit", "--profile", "all", "--expect", "pending", cwd=q, env=env, check=0).out)
    assert doc["matching"] == ["glm53", "qwen", "rocm"]
    assert all(p["state"] == "pending" for d in doc["profiles"] for p in d["patches"])
    r = imgquilt("audit", "--profile", "all", "--format", "github", cwd=q, env=env, check=5)
    assert "::error file=patches/0001-shared.patch" in r.out and "not live (profile glm53)" in r.out


def test_audit_names_an_env_default_the_image_lacks(queue, tmp_path: Path) -> None:
    q, env = queue
    out = tmp_path / "out"
    imgquilt("apply", "--profile", "glm53", "--output-image", f"oci:{out}:glm53", cwd=q, env=env, check=0)
    imgquilt("lock", "--profile", "glm53", "--env", "VLLM_GLM53_EXTRA=1", cwd=q, env=env, check=0)
    r = imgquilt("audit", "--profile", "glm53", "--image", f"oci:{out}:glm53", cwd=q, env=env, check=5)
    assert "env not set: VLLM_GLM53_EXTRA=1 (the image has no VLLM_GLM53_EXTRA)" in r.out
    assert "lacks 1 of its default(s): VLLM_GLM53_EXTRA=1" in r.err


# --- rebase ----------------------------------------------------------------------------------------
def _newer(images, tmp_path: Path, name: str, change) -> Path:
    layout = tmp_path / name
    shutil.copytree(images["a"] if name != "b2" else images["b"], layout)
    umoci_edit(layout, "latest", change)
    return layout


@needs("umoci")
def test_rebase_profile_repins_that_profile_only(queue, images, tmp_path: Path) -> None:
    q, env = queue
    # upstream changed app/rocm.py far from the rocm patch's hunk: a clean 3-way merge
    newer = _newer(images, tmp_path, "a2", lambda root: (root / "app/rocm.py").write_bytes(ROCM[0] + b"# upstream 2.0\n"))
    from imgquilt.queue.lock import LockFile, parse_lock_file, render_lock_file

    before = parse_lock_file((q / "targets.lock").read_bytes())
    r = imgquilt("--json", "rebase", "--profile", "rocm", "--image", f"oci:{newer}:latest", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["status"] == "done" and doc["profile"] == "rocm"
    assert [p["name"] for p in doc["patches"]] == SELECTS["rocm"]
    after = parse_lock_file((q / "targets.lock").read_bytes())
    for name in ("glm53", "qwen"):  # every key of the other profiles' sections, byte for byte
        assert render_lock_file(LockFile(None, (after.profile(name),))) == render_lock_file(LockFile(None, (before.profile(name),)))
    rocm = after.profile("rocm")
    assert rocm.lock.image.ref == f"oci:{newer}:latest" and rocm.lock.image.digest != before.profile("rocm").lock.image.digest
    assert rocm.env == before.profile("rocm").env and rocm.select == ("rocm",)
    imgquilt("check", cwd=q, env=env, check=0)


@needs("umoci")
def test_rebase_refuses_to_rewrite_a_shared_patch_under_another_profile(queue, images, tmp_path: Path) -> None:
    q, env = queue
    # qwen's new image changed app/shared.py (outside 0001's hunk): 0001 would get a new Base that
    # glm53 and rocm (still on image a) do not have
    newer = _newer(images, tmp_path, "b2", lambda root: (root / "app/shared.py").write_bytes(b"# vendored 2.0\n" + SHARED[0]))
    before = snapshot(q)
    r = imgquilt("rebase", "--profile", "qwen", "--image", f"oci:{newer}:latest", cwd=q, env=env, check=3)
    assert "profile glm53: 0001-shared.patch: app/shared.py" in r.err and "profile rocm: 0001-shared.patch" in r.err
    assert "Refused before any merge" in r.err and not (q / ".imgquilt/rebase").exists()  # not after the conflicts (issue 34)
    assert "imgquilt rebase --profile qwen,glm53,rocm --image qwen=" in r.err and "--image glm53=NEWREF" in r.err
    assert snapshot(q) == before  # nothing written
    imgquilt("check", cwd=q, env=env, check=0)


# --- the work tree ---------------------------------------------------------------------------------
def test_select_makes_push_follow_a_profile(queue, images) -> None:
    q, env = queue
    doc = json.loads(imgquilt("--json", "select", cwd=q, env=env, check=0).out)
    assert doc["profile"] is None and doc["patches"] == ["0001-shared.patch", "0002-cuda-timeouts.patch", "0004-extra-a.patch"]
    imgquilt("select", "rocm", cwd=q, env=env, check=0)
    pushed = json.loads(imgquilt("--json", "push", "-a", cwd=q, env=env, check=0).out)["pushed"]
    assert pushed == SELECTS["rocm"]
    assert (q / ".imgquilt/work/app/rocm.py").read_bytes() == ROCM[1]
    r = imgquilt("select", "qwen", cwd=q, env=env, check=2)  # applied patches: their bases are rocm's image
    assert "pop -a" in r.err
    r = imgquilt("push", "0002-cuda-timeouts.patch", cwd=q, env=env, check=2)
    assert "guarded out of profile rocm" in r.err
    out = imgquilt("select", "qwen", "--pop", cwd=q, env=env, check=0).out
    assert "Removing patch 0004-extra-a.patch" in out and "follows profile qwen" in out
    pushed = json.loads(imgquilt("--json", "push", "-a", cwd=q, env=env, check=0).out)["pushed"]
    assert pushed == SELECTS["qwen"]
    assert (q / ".imgquilt/work/app/extra.txt").read_bytes() == EXTRA_B[1]  # image b's bases
    assert (q / ".imgquilt/state/profile").read_text() == "qwen\n"


# --- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (("apply", "--profile", "nope"), "Unknown profile 'nope': targets.lock declares glm53, qwen, rocm."),
    (("apply",), "targets.lock pins only profiles (glm53, qwen, rocm), no default: name the deployment to apply."),
    (("lock", "--profile", "x", "--image", "oci:nowhere:latest", "--select", "+g"), "starts with '+'"),
    (("lock", "--profile", "glm53", "--select", "a b"), "holds ' '"),
    (("lock", "--profile", "glm53", "--env", "1X=0"), "'1X' is not a valid variable name"),
    (("lock", "--profile", "glm53", "--env", "A-B=0"), "'A-B' is not a valid variable name"),
    (("lock", "--profile", "all", "--image", "oci:x"), "give it no --image"),
    (("lock", "--profile", "bad/name", "--image", "oci:x"), "is not a profile name"),
    (("guard", "0001-shared.patch", "+-x"), "starts with '-'"),
    (("guard", "0001-shared.patch", "+a b"), "holds ' '"),
    (("select", "nope"), "Unknown profile 'nope'"),
    (("apply", "--profile", "all", "--output-image", "oci:OUT:fixed"), "needs the {profile} placeholder"),
    (("apply", "--profile", "all", "--layer", "LAYER.tar.gz"), "needs the {profile} placeholder"),
    (("audit", "--profile", "nope"), "Unknown profile 'nope'"),
    # a command of one profile names `all` as such, and never suggests declaring a name lock refuses
    (("port", "0001-shared.patch", "--profile", "all"), "This command takes one profile, not `all`: targets.lock declares glm53, qwen, rocm."),
    (("port", "0001-shared.patch", "--profile", "a/b"), "'a/b' is not a profile name"),
    (("new", "0009-x.patch", "--field", "Bad Key=1"), "Unusable header field name 'Bad Key'"),
    (("new", "0009-x.patch", "--field", "Index=etc/passwd"), "Unusable header field name 'Index'"),
    (("rebase", "--profile", "nope", "--image", "oci:x"), "Unknown profile 'nope'"),
])
def test_bad_input_is_a_usage_error_and_writes_nothing(untouched, tmp_path: Path, args, says) -> None:
    q, env = untouched
    args = tuple(a.replace("OUT", str(tmp_path / "out")).replace("LAYER", str(tmp_path / "layer")) for a in args)
    before = snapshot(q)
    r = imgquilt(*args, cwd=q, env=env, check=2)
    assert says in r.err
    assert snapshot(q) == before
    assert not (tmp_path / "out").exists() and not (tmp_path / "layer.tar.gz").exists()
    doc = json.loads(imgquilt("--json", *args, cwd=q, env=env, check=2).out)
    assert doc["error"]["code"] == 2


def test_a_hand_written_guard_that_is_no_guard_stays_a_comment(tmp_path: Path) -> None:
    from imgquilt.queue.series import parse_series, pushable

    entries = parse_series(b"a.patch #+x #-y # note #+ z #--w\nb.patch -p0 #+x\n#+c.patch\n")
    assert [(e.name, e.strip, e.guards) for e in entries] == [("a.patch", 1, ("+x", "-y")), ("b.patch", 0, ("+x",))]
    # MQ's pushable: no guard in, negative wins, a positive needs its guard selected
    assert pushable((), ()) == (True, None)
    assert pushable(("+x", "-y"), ("x", "y")) == (False, "-y")
    assert pushable(("+x", "+z"), ("z",)) == (True, "+z")
    assert pushable(("+x",), ()) == (False, "+x")
    assert pushable(("-y",), ()) == (True, "")


def test_profiles_lock_round_trips_and_keeps_other_sections(queue) -> None:
    from imgquilt.queue.lock import parse_lock_file, render_lock_file

    q, env = queue
    data = (q / "targets.lock").read_bytes()
    lf = parse_lock_file(data)
    assert lf.default is None and lf.names == ["glm53", "qwen", "rocm"]
    assert render_lock_file(lf) == data
    assert lf.profile("qwen").env == (("PATH", "/opt/qwen/bin:/usr/bin"), ("QWEN_MODE", "fast"))
    # pinning the default keeps every profile
    imgquilt("lock", "--image", lf.profile("glm53").lock.image.ref, cwd=q, env=env, check=0)
    after = parse_lock_file((q / "targets.lock").read_bytes())
    assert after.profiles == lf.profiles and after.default is not None
    assert [t.path for t in after.default.targets] == ["app/config.toml", "app/extra.txt", "app/shared.py"]
    # each pin's series_sha256 is over its own selection: a guard that changes no selection, a
    # comment, a blank line leave every pin fresh (a series without guards hashes its bytes)
    imgquilt("check", cwd=q, env=env, check=0)
    imgquilt("guard", "0003-rocm-kernel.patch", "+rocm", "-qwen", cwd=q, env=env, check=0)
    with open(q / "series", "a") as f:
        f.write("\n# a note\n")
    imgquilt("check", cwd=q, env=env, check=0)
    # a guard that changes one selection stales that pin alone
    imgquilt("guard", "0003-rocm-kernel.patch", "+rocm", "+qwen", cwd=q, env=env, check=0)
    r = imgquilt("check", cwd=q, env=env, check=6)
    assert "targets.lock [profile.qwen] is stale (the selection edited by hand since it was made: 0003-rocm-kernel.patch new)" in r.err
    assert "[profile.glm53]" not in r.err and "[profile.rocm]" not in r.err and "targets.lock is stale" not in r.err


def test_api_resolves_a_profile_into_a_selection_and_its_pin(queue) -> None:
    from imgquilt import api

    q, env = queue
    names = [p.name for p in api.profiles(q)]
    assert names == ["glm53", "qwen", "rocm"]
    applied = api.apply(q, profile="qwen")
    assert applied.profile == "qwen" and list(applied.result.patches) == SELECTS["qwen"]
    assert dict(applied.result.env) == ENV["qwen"] and applied.result.pinned
    done = api.apply_profiles(q)
    assert [a.profile for a in done] == names
    audits = api.audit_profiles(q, expect="pending")
    assert all(a.matches for a in audits)
    with pytest.raises(api.UsageError):
        api.apply_profiles(q, layer="one.tar.gz")


# --- import ------------------------------------------------------------------------------------------
def _diff(path: str, old: bytes, new: bytes) -> bytes:
    import difflib

    lines = difflib.unified_diff(old.decode().splitlines(True), new.decode().splitlines(True), f"a/{path}", f"b/{path}")
    return "".join(lines).encode()


def test_import_brings_an_mq_series_guards_and_a_vendor_series_as_a_profile(images, tmp_path: Path) -> None:
    env = env_of(tmp_path)
    q = tmp_path / "queue"
    imgquilt("--queue", str(q), "init", cwd=tmp_path, env=env, check=0)
    mq = tmp_path / "mq"
    mq.mkdir()
    (mq / "shared.diff").write_bytes(_diff("app/shared.py", SHARED[0], SHARED[1]))
    (mq / "rocm.diff").write_bytes(_diff("app/rocm.py", ROCM[0], ROCM[1]))
    (mq / "series").write_text("shared.diff\nrocm.diff #+rocm #-cuda  # the HIP fix\n")
    image = f"oci:{images['a']}:latest"
    imgquilt("import", "--series", str(mq / "series"), "--image", image, cwd=q, env=env, check=0)
    assert (q / "series").read_text() == "shared.diff\nrocm.diff #+rocm #-cuda\n"
    (tmp_path / "cfg.diff").write_bytes(_diff("app/config.toml", CONFIG[0], CONFIG[1]))
    doc = json.loads(imgquilt("--json", "import", str(tmp_path / "cfg.diff"), "--guard", "-rocm", "--image", image, cwd=q, env=env,
                              check=0).out)
    assert doc["imported"][0]["guards"] == ["-rocm"]
    # nothing is applied: it goes after the last patch of series (docs/series.md)
    assert (q / "series").read_text() == "shared.diff\nrocm.diff #+rocm #-cuda\ncfg.diff #-rocm\n"
    r = imgquilt("import", str(tmp_path / "cfg.diff"), "-P", "x.diff", "--guard", "rocm", "--image", image, cwd=q, env=env, check=2)
    assert "must be +NAME or -NAME" in r.err
    # a dpkg-source vendor series: what the queue has is shared, the rest +ubuntu, the queue's others -ubuntu
    deb = tmp_path / "debian" / "patches"
    deb.mkdir(parents=True)
    shutil.copy(mq / "shared.diff", deb / "shared.diff")
    (deb / "extra.diff").write_bytes(_diff("app/extra.txt", EXTRA_A[0], EXTRA_A[1]))
    (deb / "ubuntu.series").write_text("shared.diff\nextra.diff\n")
    doc = json.loads(imgquilt("--json", "import", "--series", str(deb / "ubuntu.series"), "--profile", "ubuntu", "--image", image,
                              cwd=q, env=env, check=0).out)
    assert [d["name"] for d in doc["imported"]] == ["extra.diff"] and doc["imported"][0]["guards"] == ["+ubuntu"]
    assert doc["guarded"] == {"cfg.diff": ["-rocm", "-ubuntu"], "rocm.diff": ["+rocm", "-cuda", "-ubuntu"]}
    imgquilt("lock", "--profile", "ubuntu", "--image", image, cwd=q, env=env, check=0)
    sel = json.loads(imgquilt("--json", "select", "ubuntu", cwd=q, env=env, check=0).out)
    assert sel["patches"] == ["shared.diff", "extra.diff"]  # what ubuntu.series lists (the new one after the last patch)
    # ubuntu is the only pin: the mq series' rocm patches are in no deployment until a profile selects rocm
    r = imgquilt("check", cwd=q, env=env, check=3)
    assert "rocm.diff (+rocm -cuda -ubuntu): no pin selects it (pins: ubuntu)" in r.err and "cfg.diff (-rocm -ubuntu)" in r.err
    imgquilt("check", "--allow-unselected", cwd=q, env=env, check=0)


def test_attestation_and_verify_carry_the_profiles_env(queue, tmp_path: Path) -> None:
    q, env = queue
    key = tmp_path / "key.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(tmp_path / "key.pub")], check=True, capture_output=True)
    out = f"oci:{tmp_path / 'out'}:glm53"
    imgquilt("apply", "--profile", "glm53", "--output-image", out, "--attest", str(key), cwd=q, env=env, check=0)
    doc = json.loads(imgquilt("--json", "verify", "--profile", "glm53", "--image", out, "--key", str(tmp_path / "key.pub"),
                              cwd=q, env=env, check=0).out)
    assert doc["attestation"]["predicate"]["record"]["env"] == ENV["glm53"]
    # another profile's defaults are not what was attested (its selection differs too: stale series)
    imgquilt("verify", "--profile", "rocm", "--image", out, "--key", str(tmp_path / "key.pub"), cwd=q, env=env, check=3)
    imgquilt("lock", "--profile", "glm53", "--env", "VLLM_GLM53_PREP_FUSED=1", cwd=q, env=env, check=0)
    r = imgquilt("--json", "verify", "--profile", "glm53", "--image", out, "--key", str(tmp_path / "key.pub"), cwd=q, env=env, check=3)
    assert [c["kind"] for c in json.loads(r.out)["candidates"]] == ["env"]


def test_series_marks_what_the_selection_leaves_out_and_apply_names_a_stale_profile(queue) -> None:
    q, env = queue
    out = imgquilt("series", "-v", cwd=q, env=env, check=0).out
    assert "G 0003-rocm-kernel.patch\n" in out and "  0001-shared.patch\n" in out
    assert json.loads(imgquilt("--json", "series", cwd=q, env=env, check=0).out)["guarded"] == [
        "0003-rocm-kernel.patch", "0005-extra-b.patch", "0006-glm-prep.patch"]
    p = q / "patches" / "0003-rocm-kernel.patch"
    p.write_bytes(p.read_bytes().replace(b"Description:", b"Status: wip\nDescription:", 1))
    r = imgquilt("apply", "--profile", "rocm", cwd=q, env=env, check=6)
    assert r.err.startswith("imgquilt: Profile rocm: targets.lock is stale (0003-rocm-kernel.patch edited by hand since it was made")
    assert "`imgquilt lock --profile rocm`" in r.err
    imgquilt("apply", "--profile", "glm53", cwd=q, env=env, check=0)  # glm53 does not select it: fresh


# --- typos never drop a fix (issue 34, point 6) ----------------------------------------------------
@pytest.mark.parametrize("typo, near", [("+rcom", "rocm"), ("-rocn", "rocm"), ("+glm35", "glm53")])
def test_guard_refuses_a_guard_no_profile_selects_naming_the_nearest(queue, typo, near) -> None:
    q, env = queue
    before = snapshot(q)
    r = imgquilt("guard", "0001-shared.patch", typo, cwd=q, env=env, check=2)
    assert f"No profile selects guard {typo[1:]!r}" in r.err and f"Did you mean {near!r}?" in r.err
    assert "--new-guard" in r.err
    assert snapshot(q) == before  # series and targets.lock untouched
    doc = json.loads(imgquilt("--json", "guard", "0001-shared.patch", typo, cwd=q, env=env, check=2).out)
    assert doc["error"]["code"] == 2
    # meant: --new-guard takes it, and check then names the patch no deployment applies
    imgquilt("guard", "--new-guard", "0001-shared.patch", typo, cwd=q, env=env, check=0)
    assert typo in (q / "series").read_text()


def test_check_exits_3_on_a_hand_written_guard_typo_naming_patch_and_nearest(queue) -> None:
    q, env = queue
    imgquilt("check", cwd=q, env=env, check=0)
    text = (q / "series").read_text()
    (q / "series").write_text(text.replace("0003-rocm-kernel.patch #+rocm", "0003-rocm-kernel.patch #+rcom"))
    r = imgquilt("check", cwd=q, env=env, check=3)
    assert "0003-rocm-kernel.patch (+rcom): no pin selects it" in r.err and "Did you mean 'rocm'?" in r.err
    assert "--allow-unselected" in r.err
    doc = json.loads(imgquilt("--json", "check", cwd=q, env=env, check=3).out)
    assert doc["ok"] is False and any("0003-rocm-kernel.patch (+rcom)" in p for p in doc["problems"])
    assert doc["error"]["code"] == 3
    # a selection problem that is not a typo: accepted when the user says so (the stale rocm lock aside)
    r = imgquilt("check", "--allow-unselected", cwd=q, env=env)
    assert "no pin selects it" not in r.err + r.out


def test_check_counts_only_guards_that_keep_a_patch_out_of_every_pin(queue) -> None:
    """`-G` never makes a patch unselected while some pin does not select G; `+G` needs a selecting pin."""
    from imgquilt.queue.check import unselected_lines
    from imgquilt.queue.series import parse_series

    entries = parse_series(b"a.patch\nb.patch #-rocm\nc.patch #+rocm\nd.patch #+rcom #-cuda\n")
    pins = [("cuda", ("cuda",), None), ("rocm", ("rocm",), None)]
    lines = unselected_lines(entries, pins)
    assert len(lines) == 1 and lines[0].startswith("d.patch (+rcom -cuda): no pin selects it (pins: cuda, rocm)")
    assert "Did you mean 'rocm'?" in lines[0]
    assert unselected_lines(entries, [("rocm", ("rocm",), None), ("x", ("rcom",), None)]) == ()


def test_lock_refuses_a_new_profile_one_typo_from_a_declared_one(queue, images) -> None:
    q, env = queue
    before = snapshot(q)
    r = imgquilt("lock", "--profile", "rcom", "--image", f"oci:{images['a']}:latest", cwd=q, env=env, check=2)
    assert "Profile 'rcom' is not declared" in r.err and "Did you mean 'rocm'?" in r.err and "--new" in r.err
    assert snapshot(q) == before
    imgquilt("lock", "--new", "--profile", "rcom", "--image", f"oci:{images['a']}:latest", cwd=q, env=env, check=0)
    assert "[profile.rcom]" in (q / "targets.lock").read_text()
    # a name far from every declared one needs no --new
    imgquilt("lock", "--profile", "blackwell", "--image", f"oci:{images['a']}:latest", cwd=q, env=env, check=0)


@pytest.mark.parametrize("args", [("select", "rcom"), ("apply", "--profile", "rcom"), ("audit", "--profile", "qwne")])
def test_unknown_profile_errors_name_the_nearest(untouched, args) -> None:
    q, env = untouched
    r = imgquilt(*args, cwd=q, env=env, check=2)
    assert "Unknown profile" in r.err and "Did you mean" in r.err


def test_nearest_is_a_small_edit_distance() -> None:
    from imgquilt.util.names import edits, nearest

    assert edits("rocm", "rcom") == 1 and edits("kitten", "sitting") == 3
    assert nearest("cdua", ["cuda", "rocm"]) == "cuda"
    assert nearest("qwen3", ["qwen", "rocm"]) == "qwen"
    assert nearest("blackwell", ["cuda", "rocm"]) is None
    assert nearest("rocm", ["rocm"]) is None  # the name itself is no suggestion


# --- true messages across profiles (issue 34, point 9) ---------------------------------------------
def test_apply_without_profile_on_a_profiles_only_queue_names_the_profiles(untouched, images, tmp_path: Path) -> None:
    q, env = untouched
    for extra in ((), ("--image", f"oci:{images['a']}:latest"), ("--root", str(tmp_path))):
        r = imgquilt("apply", *extra, "--layer", str(tmp_path / "l.tar.gz"), cwd=q, env=env, check=2)
        assert "targets.lock pins only profiles (glm53, qwen, rocm)" in r.err and "--profile NAME" in r.err
        assert "no targets.lock" not in r.err + r.out
    assert not (tmp_path / "l.tar.gz").exists()


def test_drift_onto_another_profiles_image_names_that_profile(untouched, images, tmp_path: Path) -> None:
    q, env = untouched
    r = imgquilt("apply", "--profile", "qwen", "--image", f"oci:{images['a']}:latest", cwd=q, env=env, check=3)
    assert "This is the image profile glm53 and profile rocm pins, not profile qwen's." in r.err
    assert "`imgquilt apply --profile glm53` or `imgquilt apply --profile rocm`" in r.err
    assert "The image changed under the queue" not in r.err


def test_profile_name_fills_the_placeholder_of_a_single_profile_apply(untouched, tmp_path: Path) -> None:
    q, env = untouched
    imgquilt("apply", "--profile", "rocm", "--layer", str(tmp_path / "{profile}.tar.gz"), cwd=q, env=env, check=0)
    assert (tmp_path / "rocm.tar.gz").is_file() and not (tmp_path / "{profile}.tar.gz").exists()


def test_audit_of_another_profiles_output_names_the_profile_that_wrote_it(untouched, tmp_path: Path) -> None:
    q, env = untouched
    imgquilt("apply", "--profile", "rocm", "--output-image", f"oci:{tmp_path}/out:rocm", cwd=q, env=env, check=0)
    r = imgquilt("audit", "--profile", "glm53", "--image", f"oci:{tmp_path}/out:rocm", cwd=q, env=env)
    assert "written by an apply of profile rocm's selection, not profile glm53's (judge it as that deployment with --profile rocm)" in r.out + r.err
    assert "the queue changed since this apply" not in r.out + r.err


def test_diff_upstream_takes_a_profile_and_never_says_none(untouched, images) -> None:
    q, env = untouched
    r = imgquilt("diff", "--upstream", "0005-extra-b.patch", "--profile", "qwen", "--image", f"oci:{images['a']}:latest",
                 cwd=q, env=env, check=0)
    assert "None" not in r.out and "app/extra.txt" in r.out
    doc = json.loads(imgquilt("--json", "diff", "--upstream", "0005-extra-b.patch", "--profile", "qwen", "--image",
                              f"oci:{images['a']}:latest", cwd=q, env=env, check=0).out)
    assert doc["old"]["ref"] == f"oci:{images['b']}:latest" and doc["old"]["digest"]
    r = imgquilt("diff", "--upstream", "0005-extra-b.patch", "--profile", "rocm", "--image", f"oci:{images['a']}:latest",
                 cwd=q, env=env, check=2)
    assert "Profile rocm does not select 0005-extra-b.patch" in r.err


def test_select_on_a_profiles_only_queue_never_names_a_default_pin(queue, images) -> None:
    """Point 9: with no default pin, the bases of patches pushed without a followed profile are the
    image push was given, and select says so (not "the default pin's")."""
    q, env = queue
    from imgquilt.queue.lock import read_lock_file

    assert read_lock_file(q / "targets.lock").default is None and read_lock_file(q / "targets.lock").profiles
    imgquilt("push", "--image", f"oci:{images['a']}:latest", "0001-shared.patch", cwd=q, env=env, check=0)
    r = imgquilt("select", "rocm", cwd=q, env=env, check=2)
    assert "their bases are the default selection's (targets.lock has no default pin: the image push was given)" in r.err
    assert "default pin's" not in r.err


def test_a_refresh_that_leaves_several_profiles_stale_says_what_to_run_in_one_sentence(queue, images) -> None:
    """A file new to the lock, its absence read from image b only: the profiles on image a must read their
    own image. The
    note names the commands once, in one sentence (it read "... image). run `imgquilt lock --profile
    qwen` (it reads it from the image). run ...")."""
    q, env = queue
    imgquilt("select", "glm53", cwd=q, env=env, check=0)
    imgquilt("push", "-a", cwd=q, env=env, check=0)
    imgquilt("new", "0099-brand-new.patch", cwd=q, env=env, check=0)
    imgquilt("add", "--image", f"oci:{images['b']}:latest", "--new", "app/brand-new.txt", cwd=q, env=env, check=0)
    (q / ".imgquilt/work/app/brand-new.txt").write_text("new\n")
    r = imgquilt("refresh", cwd=q, env=env, check=0)
    assert ("run `imgquilt lock --profile glm53` and `imgquilt lock --profile rocm` (each reads its profile's image)."
            in r.out + r.err), r.out + r.err
    assert ". run" not in r.out + r.err
