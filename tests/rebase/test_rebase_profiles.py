"""A bump of every deployment (issue 34, points 1, 2 and 5): one rebase of several profiles.

Two image lines built with umoci from real files: CUDA v1 -> v2 and ROCm v1r -> v2r. v1r is v1 plus
a vendor file; v2 and v2r both carry upstream's new app/common.py, and they differ from each other in
app/shared.py (CUDA changed `scale`, ROCm changed `prep`). The queue:

    0001-shared.patch                      app/shared.py: prep       every profile  (v2 / v2r differ here)
    0002-timeout.patch                     app/common.py: TIMEOUT    every profile  (upstream changed the line)
    0003-rocm-kernel.patch    #+rocm       app/rocm.py                rocm only
    0004-cuda-workers.patch   #-rocm       app/config.toml            cuda only
    0005-legacy.patch         #+legacy     app/legacy.txt             no profile

and the profiles cuda (v1, CUDA_MODULE_LOADING=LAZY) and rocm (v1r, HIP_FORCE=1). Every expectation is
what real tools say: GNU `patch -p1` gives each profile's tree, `git merge-file` each merged file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, umoci_edit
from support.qtools import imgquilt, write_patch
from support.profiles import files_of, snapshot, unpack

needs = lambda name: pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} not installed")  # noqa: E731
pytestmark = [needs("umoci"), needs("git"), needs("patch")]

SHARED = (b"import os\n\n\ndef prep(x):\n    return x\n\n\ndef scale(x):\n    return x * 2\n\n\n"
          b"FUSED = os.environ.get('FUSED', '1')\n")
SHARED_PATCHED = SHARED.replace(b"    return x\n", b"    return x if x is not None else 0\n")
SHARED_CUDA2 = SHARED.replace(b"x * 2", b"x * 3")  # far from the patch's hunk: a clean merge
SHARED_ROCM2 = SHARED.replace(b"    return x\n", b"    return x or 0\n")  # the patch's line: a conflict
COMMON = b"TIMEOUT = 30\nWORKERS = 2\n"
COMMON_PATCHED = b"TIMEOUT = 90\nWORKERS = 2\n"
COMMON2 = b"TIMEOUT = 60\nWORKERS = 2\n"
ROCM = b"KERNEL = 'hip'\n\n\ndef launch():\n    return KERNEL\n"
CONFIG = b"[server]\nworkers = 2\n"
LEGACY = b"legacy\n"
ENV = {"cuda": {"CUDA_MODULE_LOADING": "LAZY"}, "rocm": {"HIP_FORCE": "1"}}


def _base() -> list[dict]:
    return [file("app/shared.py", SHARED), file("app/common.py", COMMON), file("app/rocm.py", ROCM),
            file("app/config.toml", CONFIG), file("app/legacy.txt", LEGACY), file("app/README", b"not a target\n")]


def _bump(shared: bytes):
    def edit(root: Path) -> None:
        (root / "app/shared.py").write_bytes(shared)
        (root / "app/common.py").write_bytes(COMMON2)
    return edit


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> dict[str, str]:
    """The four images, each an OCI layout tag built by umoci: cuda:v1, cuda:v2, rocm:v1r, rocm:v2r."""
    work = tmp_path_factory.mktemp("lines")
    cuda = build_oci(work / "cuda", [_base()], tag="v1")
    umoci_edit(cuda, "v1", _bump(SHARED_CUDA2), new_tag="v2")
    rocm = build_oci(work / "rocm", [_base() + [file("opt/rocm/VERSION", b"6.1\n")]], tag="v1r")
    umoci_edit(rocm, "v1r", _bump(SHARED_ROCM2), new_tag="v2r")
    return {"v1": f"oci:{cuda}:v1", "v2": f"oci:{cuda}:v2", "v1r": f"oci:{rocm}:v1r", "v2r": f"oci:{rocm}:v2r",
            "cuda": str(cuda), "rocm": str(rocm)}


def _env(tmp: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("IMGQUILT_QUEUE", None)
    e.update(HOME=str(tmp / "home"), SOURCE_DATE_EPOCH="0")
    return e


@pytest.fixture
def queue(tmp_path: Path, lines) -> tuple[Path, dict]:
    env = _env(tmp_path)
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("# two deployments\n")
    write_patch(q, "0001-shared.patch", [("app/shared.py", SHARED, SHARED_PATCHED)])
    write_patch(q, "0002-timeout.patch", [("app/common.py", COMMON, COMMON_PATCHED)])
    write_patch(q, "0003-rocm-kernel.patch", [("app/rocm.py", ROCM, ROCM.replace(b"'hip'", b"'hip-fixed'"))])
    write_patch(q, "0004-cuda-workers.patch", [("app/config.toml", CONFIG, CONFIG.replace(b"2", b"8"))])
    write_patch(q, "0005-legacy.patch", [("app/legacy.txt", LEGACY, b"legacy, patched\n")])
    for name, guards in (("0003-rocm-kernel.patch", ["+rocm"]), ("0004-cuda-workers.patch", ["-rocm"]),
                         ("0005-legacy.patch", ["+legacy"])):
        imgquilt("guard", "--new-guard", name, *guards, cwd=q, env=env, check=0)
    for name, image in (("cuda", "v1"), ("rocm", "v1r")):
        envs = [x for k, v in ENV[name].items() for x in ("--env", f"{k}={v}")]
        imgquilt("lock", "--profile", name, "--image", lines[image], *envs, cwd=q, env=env, check=0)
    return q, env


def _merge_file(tmp: Path, ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str] | None = None) -> tuple[int, bytes]:
    """`git merge-file -p` of the three sides (with `labels`: --diff3 and those marker labels): (conflicts, result)."""
    paths = []
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        paths.append(tmp / f"mf-{name}")
        paths[-1].write_bytes(data)
    extra = ["--diff3", *(x for label in labels for x in ("-L", label))] if labels else []
    p = subprocess.run(["git", "merge-file", "-p", *extra, *map(str, paths)], capture_output=True)
    return p.returncode, p.stdout


def _labels(patch: str, new_ref: str) -> tuple[str, str, str]:
    return f"{patch} (old image + patch)", "old image", f"{new_ref} (new image)"


def _valid(doc: dict) -> dict:
    """The document holds to docs/schemas/rebase.schema.json."""
    from support.schemas import validator

    errors = [e.message for e in validator("rebase").iter_errors(doc)]
    assert not errors, errors
    return doc


def _resolve(q: Path, path: str, data: bytes) -> None:
    (q / ".imgquilt/work" / path).write_bytes(data)


def _selected(q: Path, env: dict, profile: str) -> list[str]:
    return json.loads(imgquilt("--json", "select", profile, cwd=q, env=env, check=0).out)["patches"]


def test_a_bump_of_every_deployment_stops_before_any_merge_then_splits_and_finishes(queue, lines, tmp_path: Path) -> None:
    q, env = queue
    before = snapshot(q)
    bump = ("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}")
    # 1. refused before any merge: the shared 0001 changes a file the two new images hold at different bases
    r = imgquilt(*bump, cwd=q, env=env, check=3)
    assert "0001-shared.patch: app/shared.py" in r.err and "cuda" in r.err and "rocm" in r.err
    assert "--split" in r.err and "0002" not in r.err  # 0002's file is the same in both new images: no split
    assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists() and not (q / ".imgquilt/work/app").exists()

    # 2. --split: 0001 kept for cuda, a copy for rocm; the copy's merge is rocm's conflict
    r = imgquilt("--json", *bump, "--split", cwd=q, env=env, check=4)
    doc = _valid(json.loads(r.out))
    assert doc["status"] == "stopped" and doc["conflict"]["patch"] == "0001-shared-rocm.patch"
    assert doc["conflict"]["profiles"] == ["rocm"]
    assert any("0001-shared.patch split" in n and "0001-shared-rocm.patch" in n for n in doc["notes"])
    assert any("0005-legacy.patch" in n and "left as they are" in n for n in doc["notes"])
    assert {d["profile"]: d["new"]["ref"] for d in doc["profiles"]} == {"cuda": lines["v2"], "rocm": lines["v2r"]}
    first = {p["name"]: p for p in doc["patches"]}
    assert first["0001-shared.patch"]["state"] == "merged" and first["0001-shared.patch"]["profiles"] == ["cuda"]
    # the work file is exactly git merge-file's of the three sides (old base + patch, old base, rocm's new base)
    n, merged = _merge_file(tmp_path, SHARED_PATCHED, SHARED, SHARED_ROCM2, _labels("0001-shared-rocm.patch", lines["v2r"]))
    assert n == 1 and b"<<<<<<<" in merged
    assert (q / ".imgquilt/work/app/shared.py").read_bytes() == merged
    assert snapshot(q) == before  # nothing of the queue is written until the end
    rocm_shared = SHARED_ROCM2.replace(b"return x or 0", b"return x if x is not None else 0")
    _resolve(q, "app/shared.py", rocm_shared)

    # 3. the shared 0002 conflicts once, for both profiles (same old and new base of app/common.py)
    r = imgquilt("--json", "rebase", "--continue", cwd=q, env=env, check=4)
    doc = json.loads(r.out)
    assert doc["conflict"]["patch"] == "0002-timeout.patch" and doc["conflict"]["profiles"] == ["cuda", "rocm"]
    r = imgquilt("rebase", "--status", cwd=q, env=env, check=0)
    assert "one resolution serves them all" in r.err
    n, merged = _merge_file(tmp_path, COMMON_PATCHED, COMMON, COMMON2, _labels("0002-timeout.patch", lines["v2"]))
    assert n == 1 and (q / ".imgquilt/work/app/common.py").read_bytes() == merged  # once, for both profiles
    _resolve(q, "app/common.py", b"TIMEOUT = 120\nWORKERS = 2\n")
    r = imgquilt("--json", "rebase", "--continue", cwd=q, env=env, check=0)
    doc = _valid(json.loads(r.out))
    assert doc["status"] == "done"
    assert [(p["name"], p.get("profiles")) for p in doc["patches"]] == [
        ("0001-shared.patch", ["cuda"]), ("0001-shared-rocm.patch", ["rocm"]), ("0002-timeout.patch", ["cuda", "rocm"]),
        ("0003-rocm-kernel.patch", ["rocm"]), ("0004-cuda-workers.patch", ["cuda"])]
    assert not (q / ".imgquilt/rebase").exists()

    # the series: 0001 guarded -rocm, its copy +rocm right after it; 0005 as it was
    series = (q / "series").read_text()
    assert "0001-shared.patch #-rocm\n0001-shared-rocm.patch #+rocm\n" in series
    assert (q / "patches/0005-legacy.patch").read_bytes() == before["patches/0005-legacy.patch"]
    assert _selected(q, env, "cuda") == ["0001-shared.patch", "0002-timeout.patch", "0004-cuda-workers.patch"]
    assert _selected(q, env, "rocm") == ["0001-shared-rocm.patch", "0002-timeout.patch", "0003-rocm-kernel.patch"]
    imgquilt("check", "--allow-unselected", cwd=q, env=env, check=0)

    # 4. apply --profile all: each profile's tree is GNU patch's of its rebased selection on its new image
    out = tmp_path / "out"
    imgquilt("apply", "--profile", "all", "--output-image", f"oci:{out}:{{profile}}", cwd=q, env=env, check=0)
    for name, image, tag in (("cuda", lines["cuda"], "v2"), ("rocm", lines["rocm"], "v2r")):
        expect = unpack(Path(image), tag, tmp_path / f"expect-{name}")
        for patch in _selected(q, env, name):
            p = subprocess.run(["patch", "-p1", "-s", "-d", str(expect), "-i", str(q / "patches" / patch)],
                               capture_output=True, text=True)
            assert p.returncode == 0, p.stdout + p.stderr
        got = files_of(unpack(out, name, tmp_path / f"got-{name}"))
        assert got == files_of(expect), name
        # each cleanly merged file equals git merge-file of its three sides
        if name == "cuda":
            assert _merge_file(tmp_path, SHARED_PATCHED, SHARED, SHARED_CUDA2) == (0, got["app/shared.py"])
        else:
            assert got["app/shared.py"] == rocm_shared
        assert got["app/common.py"] == b"TIMEOUT = 120\nWORKERS = 2\n"


def test_every_refusal_writes_nothing_and_leaves_no_rebase(queue, lines) -> None:
    q, env = queue
    before = snapshot(q)
    cases = [
        # rocm re-pinned onto the image cuda pins: its lineage (exit 3)
        (("rebase", "--profile", "rocm", "--image", lines["v1"]), 3, "the image profile cuda pins"),
        (("rebase", "--profile", "cuda,rocm", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v1']}"), 3,
         "the image profile cuda pins"),
        # several profiles, one plain image: each needs its own (exit 2)
        (("rebase", "--profile", "all", "--image", lines["v2"]), 2, "each needs its own new image"),
        (("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}"), 2, "No new image for profile rocm"),
        (("rebase", "--profile", "cuda,rcom", "--image", f"cuda={lines['v2']}", "--image", f"rcom={lines['v2r']}"), 2,
         "Did you mean 'rocm'"),
        (("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}",
          "--from", lines["v1"]), 2, "--from names one old image"),
        # one profile alone would rewrite the shared patches under the other: refused before any merge, naming the
        # command that rebases both (the dead end of issue 34: no order of one-profile rebases finishes)
        (("rebase", "--profile", "cuda", "--image", lines["v2"]), 3,
         f"imgquilt rebase --profile cuda,rocm --image cuda={lines['v2']} --image rocm=NEWREF"),
        # the shared file differs between the new images: before any merge (exit 3)
        (("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}"), 3, "--split"),
    ]
    for args, code, says in cases:
        r = imgquilt(*args, cwd=q, env=env, check=code)
        assert says in r.err, (args, r.err)
        assert snapshot(q) == before, args
        assert not (q / ".imgquilt/rebase").exists(), args
    # --force takes the other profile's image, and the report says whose differences these are
    r = imgquilt("--json", "rebase", "--profile", "rocm", "--image", lines["v1"], "--force", cwd=q, env=env)
    doc = _valid(json.loads(r.out))
    assert doc["vendor"] == "cuda" and any("not upstream's" in n for n in doc["notes"])
    assert doc["status"] == "done" and doc["image"]["new"]["ref"] == lines["v1"]
    before = snapshot(q)
    # a refusal while a rebase is stopped leaves its state untouched
    imgquilt("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}", "--split",
             cwd=q, env=env, check=4)
    state = (q / ".imgquilt/rebase/state.json").read_bytes()
    r = imgquilt("rebase", "--profile", "cuda", "--image", lines["v2"], cwd=q, env=env, check=2)
    assert "already in progress" in r.err and (q / ".imgquilt/rebase/state.json").read_bytes() == state
    r = imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    assert snapshot(q) == before and not (q / "patches/0001-shared-rocm.patch").exists()


def test_profiles_that_agree_are_never_split(queue, lines, tmp_path: Path) -> None:
    """Both profiles onto new images that agree on every shared file: no copy, each shared patch merged
    once, re-pinned together."""
    q, env = queue
    same = tmp_path / "same"
    shutil.copytree(lines["rocm"], same)
    umoci_edit(same, "v1r", _bump(SHARED_CUDA2), new_tag="v2s")
    r = imgquilt("--json", "rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm=oci:{same}:v2s",
                 cwd=q, env=env, check=4)
    doc = json.loads(r.out)
    assert doc["conflict"]["patch"] == "0002-timeout.patch" and doc["conflict"]["profiles"] == ["cuda", "rocm"]
    assert doc["patches"][0]["name"] == "0001-shared.patch" and doc["patches"][0]["profiles"] == ["cuda", "rocm"]
    _resolve(q, "app/common.py", COMMON_PATCHED.replace(b"90", b"120"))
    doc = json.loads(imgquilt("--json", "rebase", "--continue", cwd=q, env=env, check=0).out)
    assert doc["status"] == "done"
    assert not (q / "patches/0001-shared-rocm.patch").exists() and "#-rocm" not in (q / "series").read_text().split("\n")[1]
    lock = (q / "targets.lock").read_text()
    assert f"oci:{same}:v2s" in lock and lines["v2"] in lock


def test_a_crash_in_the_finish_of_a_split_rebase_ends_old_or_new(queue, lines, monkeypatch) -> None:
    """The finish writes the patches (the copy too), then series, then targets.lock once: a crash after
    the patches are written is undone by --abort (the copy removed) or completed by --continue."""
    from imgquilt import api

    q, env = queue
    monkeypatch.setenv("HOME", env["HOME"])
    before = snapshot(q)
    images = {"cuda": lines["v2"], "rocm": lines["v2r"]}

    def stopped_at_the_last_conflict() -> None:
        api.rebase_forget(q)  # the abort below keeps the resolutions (point 4): without this the next rebase takes them
        report = api.rebase(q, profile="all", images=images, split=True)
        assert report.status == "stopped"
        _resolve(q, "app/shared.py", SHARED_ROCM2.replace(b"x or 0", b"x if x is not None else 0"))
        assert api.rebase_continue(q).status == "stopped"
        _resolve(q, "app/common.py", COMMON_PATCHED)

    class PowerCut(BaseException):
        pass

    import imgquilt.rebase.finish as finish

    def boom(*args, **kwargs):
        raise PowerCut()

    for end in ("abort", "continue"):
        stopped_at_the_last_conflict()
        with monkeypatch.context() as m:
            m.setattr(finish, "lock_with", boom)
            with pytest.raises(PowerCut):
                api.rebase_continue(q)
        assert (q / "patches/0001-shared-rocm.patch").exists()  # the copy was written when the power went
        if end == "abort":
            api.rebase_abort(q)
            assert snapshot(q) == before
        else:
            assert api.rebase_continue(q).status == "done"
            lock = (q / "targets.lock").read_text()
            assert lines["v2"] in lock and lines["v2r"] in lock and "0001-shared-rocm.patch" in (q / "series").read_text()


def test_kill_9_in_the_finish_of_a_bump_of_every_deployment_ends_old_or_new(queue, lines, tmp_path: Path) -> None:
    """kill -9 at the calls of the finish (the copy, the rewritten patches, series, targets.lock with both
    pins, the state's removal): the next command leaves the queue exactly as before the rebase
    (`rebase --abort`) or exactly rebased (`rebase --continue`), and no rebase behind. A sample of the
    calls (every 4th kill on its own, the last 4); IMGQUILT_CRASH_FULL=1 kills at every one."""
    from support.killpoints import STRACE, driver_env, fresh, kill_points, queue_hash, traced

    assert os.access(STRACE, os.X_OK), f"strace is needed for the crash test (not found at {STRACE})"
    q, env = queue
    old_hash = queue_hash(q)
    imgquilt("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}", "--split",
             cwd=q, env=env, check=4)
    _resolve(q, "app/shared.py", SHARED_ROCM2.replace(b"x or 0", b"x if x is not None else 0"))
    imgquilt("rebase", "--continue", cwd=q, env=env, check=4)
    _resolve(q, "app/common.py", COMMON_PATCHED.replace(b"90", b"120"))
    stopped = tmp_path / "stopped"
    fresh(q, stopped)
    run_env = {**driver_env(), "HOME": env["HOME"], "SOURCE_DATE_EPOCH": "0"}

    def run(where: Path, *args: str, inject: str | None = None, log: Path | None = None) -> subprocess.CompletedProcess:
        cmd = traced(log, inject) if (inject or log) else []
        return subprocess.run(cmd + [sys.executable, "-m", "imgquilt", *args], cwd=where, env=run_env, capture_output=True, text=True)

    done = run(q, "rebase", "--continue", log=tmp_path / "trace.log")
    assert done.returncode == 0, done.stderr
    new_hash = queue_hash(q)
    assert new_hash != old_hash and (q / "patches/0001-shared-rocm.patch").exists()
    points = kill_points(tmp_path / "trace.log")
    start = next(i for i, p in enumerate(points) if "0001-shared-rocm.patch" in p[2])  # the finish's first queue write
    tail = points[start - 2:]
    chosen = tail if os.environ.get("IMGQUILT_CRASH_FULL") == "1" else sorted(
        {*range(0, len(tail), 4), *range(max(len(tail) - 4, 0), len(tail))})
    seen = {"old": 0, "new": 0}
    bad = []
    for k in chosen:
        name, n, _ = tail[k] if isinstance(k, int) else k
        w = tmp_path / "w"
        fresh(stopped, w)
        p = run(w, "rebase", "--continue", inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode == 0:
            got = "new" if queue_hash(w) == new_hash else "finished, but not new"
        else:
            assert p.returncode == -9, p.stderr[-300:]
            if not (w / ".imgquilt/rebase").exists():
                got = "new" if queue_hash(w) == new_hash else "no rebase left, but not new"
            else:
                for dirpath, _dirs, files in os.walk(w):  # the dead command's temp files: older than the sweep's grace
                    for f in files:
                        os.utime(os.path.join(dirpath, f), (time.time() - 60, time.time() - 60), follow_symlinks=False)
                end = "--abort" if k % 2 == 0 else "--continue"
                r = run(w, "rebase", end)
                want = old_hash if end == "--abort" else new_hash
                ok = r.returncode == 0 and queue_hash(w) == want and not (w / ".imgquilt/rebase").exists()
                got = ("old" if end == "--abort" else "new") if ok else (
                    f"{end}: exit {r.returncode}: {r.stderr[-300:]}; left: {sorted(set(_files(w)) ^ set(_files(stopped)))}")
        if got in seen:
            seen[got] += 1
        else:
            bad.append(f"{name}#{n}: {got}")
    print(f"kill points: {len(chosen)} of {len(tail)}; old: {seen['old']}, new: {seen['new']}")
    assert not bad, "\n".join(bad)
    assert seen["old"] > 0 and seen["new"] > 0


def _files(q: Path) -> list[str]:
    return [str(p.relative_to(q)) for p in q.rglob("*") if ".imgquilt" not in p.relative_to(q).parts]


def test_repository_names_a_registry_or_store_repository_without_tag_or_digest() -> None:
    from imgquilt.rebase.lanes import repository

    d = "sha256:" + "a" * 64
    assert repository("docker://docker.io/rocm/vllm:0.10.2") == "docker://docker.io/rocm/vllm"
    assert repository(f"docker://localhost:5000/vllm/vllm-openai@{d}") == "docker://localhost:5000/vllm/vllm-openai"
    assert repository("containers-storage:[overlay@/var/lib/c]quay.io/x/y:1") == "containers-storage:quay.io/x/y"
    assert repository("oci:/images/vllm:0.10.2") is None and repository("rootfs:/srv/root") is None


def test_a_profile_moved_to_another_repository_is_refused_without_force(queue, lines) -> None:
    from imgquilt.errors import LineageBroken
    from imgquilt.queue.lock import parse_lock_file
    from imgquilt.rebase.lanes import lineage

    q, _ = queue
    text = (q / "targets.lock").read_text().replace(lines["v1r"], "docker://registry.example/rocm/vllm:0.10.1")
    lf = parse_lock_file(text.encode())
    new = "sha256:" + "b" * 64
    assert lineage(lf, "rocm", "docker://registry.example/rocm/vllm:0.10.2", new, force=False) is None
    with pytest.raises(LineageBroken, match="from repository docker://registry.example/vllm/vllm-openai"):
        lineage(lf, "rocm", "docker://registry.example/vllm/vllm-openai:0.10.2", new, force=False)
    assert lineage(lf, "rocm", "docker://registry.example/vllm/vllm-openai:0.10.2", new, force=True) is None
    cuda = lf.profile("cuda").lock.image.digest
    with pytest.raises(LineageBroken, match="the image profile cuda pins") as e:
        lineage(lf, "rocm", "docker://registry.example/rocm/vllm:0.10.2", cuda, force=False)
    assert e.value.exit_code == 3
    assert lineage(lf, "rocm", "docker://registry.example/rocm/vllm:0.10.2", cuda, force=True) == "cuda"


def test_a_shared_patch_is_merged_once_for_every_profile_that_agrees(queue, lines, tmp_path: Path, monkeypatch) -> None:
    """In-process, counting git merge-file runs: with new images that agree on every shared file, each
    (patch, file) whose base changed is merged exactly once, whatever the number of profiles."""
    from imgquilt import api
    import imgquilt.rebase.carry as carry

    q, env = queue
    monkeypatch.setenv("HOME", env["HOME"])
    same = tmp_path / "same"
    shutil.copytree(lines["rocm"], same)
    umoci_edit(same, "v1r", _bump(SHARED_CUDA2), new_tag="v2s")
    merges: list[str] = []
    real = carry.merge3

    def counted(base, ours, theirs, **kw):
        merges.append(kw["ours_label"])
        return real(base, ours, theirs, **kw)

    monkeypatch.setattr(carry, "merge3", counted)
    report = api.rebase(q, profile="cuda,rocm", images={"cuda": lines["v2"], "rocm": f"oci:{same}:v2s"})
    assert report.status == "stopped" and report.conflict_profiles == ("cuda", "rocm")
    _resolve(q, "app/common.py", COMMON_PATCHED.replace(b"90", b"120"))
    assert api.rebase_continue(q).status == "done"
    assert merges == ["0001-shared.patch (old image + patch)", "0002-timeout.patch (old image + patch)"]


def test_a_forced_repin_never_calls_the_other_profiles_differences_upstreams() -> None:
    """The report's words, text and JSON, for a profile --force'd onto the image another profile pins."""
    from imgquilt.pycheck.regions import Region, RegionChange
    from imgquilt.cli.documents import rebase_doc
    from imgquilt.rebase.report import FileOutcome, PatchOutcome, RebaseReport

    change = RegionChange("app/rocm.py", Region("function", "launch", 4, 5), "changed", lines_added=1, lines_removed=1)
    f = FileOutcome("app/rocm.py", "merged", "a" * 64, "b" * 64, "c" * 64, "d" * 64, merged=True, upstream=(change,))
    p = PatchOutcome("0003-rocm-kernel.patch", "merged", (f,))
    forced = RebaseReport("done", {"ref": "oci:r:1"}, {"ref": "oci:c:1"}, (p,), (), None, "rocm", vendor="cuda")
    assert p.headline(forced.who) == "merged, profile cuda's image (not upstream) changed 1 function it edits"
    assert rebase_doc(forced)["vendor"] == "cuda"
    plain = RebaseReport("done", {"ref": "oci:r:1"}, {"ref": "oci:r:2"}, (p,), (), None, "rocm")
    assert p.headline(plain.who) == "merged, upstream changed 1 function it edits" and "vendor" not in rebase_doc(plain)


def test_a_journal_whose_other_profile_names_a_path_outside_the_root_is_refused(queue, lines, monkeypatch) -> None:
    """The lanes of a rebase of several profiles are checked like the first: sealed, and every path inside the root."""
    from imgquilt import api
    from imgquilt.errors import BadInput
    from imgquilt.rebase.state import load_state, save_state

    q, env = queue
    monkeypatch.setenv("HOME", env["HOME"])
    assert api.rebase(q, profile="all", images={"cuda": lines["v2"], "rocm": lines["v2r"]}, split=True).status == "stopped"
    st = load_state(q)
    assert [o["profile"] for o in st.others] == ["rocm"] or st.profile == "rocm"
    lane = st.others[0]
    lane["paths"]["../../etc/passwd"] = "../../etc/passwd"
    save_state(q, st)  # sealed with the user's key: only the path check stands in the way
    with pytest.raises(BadInput, match="cannot be read"):
        load_state(q)
    api.rebase_abort(q)


def test_skip_of_a_shared_conflict_drops_it_for_every_profile(queue, lines, monkeypatch) -> None:
    from imgquilt import api

    q, env = queue
    monkeypatch.setenv("HOME", env["HOME"])
    assert api.rebase(q, profile="all", images={"cuda": lines["v2"], "rocm": lines["v2r"]}, split=True).status == "stopped"
    _resolve(q, "app/shared.py", SHARED_ROCM2.replace(b"x or 0", b"x if x is not None else 0"))
    report = api.rebase_continue(q)
    assert report.conflict_patch == "0002-timeout.patch" and report.conflict_profiles == ("cuda", "rocm")
    done = api.rebase_skip(q)
    assert done.status == "done"
    skipped = next(p for p in done.patches if p.name == "0002-timeout.patch")
    assert skipped.dropped and skipped.profiles == ("cuda", "rocm")
    assert "0002-timeout.patch" not in (q / "series").read_text() and not (q / "patches/0002-timeout.patch").exists()
    imgquilt("check", "--allow-unselected", cwd=q, env=env, check=0)


def test_another_profiles_image_from_the_same_repository_is_the_same_line(queue, lines) -> None:
    """Two deployments of one image line (the same registry repository): re-pinning onto the image the
    other already took is no change of lineage; from another repository it is."""
    from imgquilt.errors import LineageBroken
    from imgquilt.queue.lock import parse_lock_file
    from imgquilt.rebase.lanes import lineage

    q, _ = queue
    text = (q / "targets.lock").read_text().replace(lines["v1r"], "docker://registry.example/vllm/vllm-openai:0.10.1")
    text = text.replace(lines["v1"], "docker://registry.example/vllm/vllm-openai:0.10.2")
    lf = parse_lock_file(text.encode())
    cuda = lf.profile("cuda").lock.image.digest
    assert lineage(lf, "rocm", "docker://registry.example/vllm/vllm-openai:0.10.2", cuda, force=False) is None
    other = text.replace("docker://registry.example/vllm/vllm-openai:0.10.2", "docker://registry.example/rocm/vllm:0.10.2")
    with pytest.raises(LineageBroken, match="the image profile cuda pins"):
        lineage(parse_lock_file(other.encode()), "rocm", "docker://registry.example/vllm/vllm-openai:0.10.2", cuda, force=False)


def test_an_image_whose_base_annotations_name_another_profiles_pin_is_another_lineage(queue, lines, tmp_path: Path) -> None:
    """Point 10 feeds point 5: an OCI layout names no repository, so the base annotations imgquilt writes
    are the only lineage it carries. An image built on cuda's pin is cuda's line: re-pinning rocm onto it
    is refused (exit 3, both named, nothing written, no rebase), --force takes it; an image built on
    rocm's own pin is rocm's line."""
    q, env = queue
    out = tmp_path / "out"
    for profile in ("cuda", "rocm"):
        imgquilt("apply", "--profile", profile, "--output-image", f"oci:{out}:{profile}", cwd=q, env=env, check=0)
    from imgquilt.image.base_image import base_of
    from imgquilt.sources import open_image

    assert base_of(open_image(f"oci:{out}:cuda")).name == lines["v1"]
    before = snapshot(q)
    q2 = tmp_path / "q2"
    shutil.copytree(q, q2)
    for args in (("rebase", "--profile", "rocm", "--image", f"oci:{out}:cuda"),
                 ("rebase", "--profile", "cuda,rocm", "--image", f"cuda={lines['v1']}", "--image", f"rocm=oci:{out}:cuda")):
        r = imgquilt(*args, cwd=q, env=env, check=3)
        assert "was built on the image profile cuda pins" in r.err and f"its base annotations name {lines['v1']}" in r.err, r.err
        assert "re-pinning profile rocm" in r.err and lines["v1r"] in r.err
        assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists()
    # each profile's own line: an image imgquilt built on its own pin (both together: the shared patches)
    r = imgquilt("--json", "rebase", "--profile", "all", "--image", f"cuda=oci:{out}:cuda", "--image", f"rocm=oci:{out}:rocm",
                 cwd=q, env=env, check=0)
    doc = _valid(json.loads(r.out))
    assert doc["status"] == "done" and "vendor" not in doc
    # --force takes cuda's line, and the report says whose differences these are
    r = imgquilt("--json", "rebase", "--profile", "all", "--image", f"cuda=oci:{out}:cuda", "--image", f"rocm=oci:{out}:cuda",
                 "--force", cwd=q2, env=env, check=0)
    doc = _valid(json.loads(r.out))
    assert {p["profile"]: p.get("vendor") for p in doc["profiles"]} == {"cuda": None, "rocm": "cuda"}, doc["profiles"]


def test_lineage_reads_a_registry_base_name_as_its_repository(queue, lines) -> None:
    """A layout whose base annotations name a registry image: its repository is the one of that name."""
    from imgquilt.errors import LineageBroken
    from imgquilt.image.base_image import BaseImage
    from imgquilt.queue.lock import parse_lock_file
    from imgquilt.rebase.lanes import base_repository, lineage

    assert base_repository("reg.example/rocm/vllm:0.10.2") == "docker://reg.example/rocm/vllm"
    assert base_repository("oci:examples/demo-image:latest") is None and base_repository(None) is None
    q, _ = queue
    text = (q / "targets.lock").read_text().replace(lines["v1r"], "docker://reg.example/rocm/vllm:0.10.1")
    text = text.replace(lines["v1"], "docker://reg.example/vllm/vllm-openai:0.10.1")
    lf = parse_lock_file(text.encode())
    new = "sha256:" + "b" * 64
    other = "sha256:" + "c" * 64
    own_line = BaseImage("reg.example/rocm/vllm:0.10.2", other)
    assert lineage(lf, "rocm", "oci:/tmp/built:1", new, force=False, base=own_line) is None
    cuda_line = BaseImage("reg.example/vllm/vllm-openai:0.10.2", other)
    with pytest.raises(LineageBroken, match="was built on the image profile cuda pins") as e:
        lineage(lf, "rocm", "oci:/tmp/built:1", new, force=False, base=cuda_line)
    assert e.value.exit_code == 3 and "docker://reg.example/rocm/vllm:0.10.1" in e.value.message
    assert lineage(lf, "rocm", "oci:/tmp/built:1", new, force=True, base=cuda_line) == "cuda"
    elsewhere = BaseImage("quay.io/someone/vllm:0.10.2", None)
    with pytest.raises(LineageBroken, match=r"from repository docker://quay.io/someone/vllm \(its base annotations' name\)"):
        lineage(lf, "rocm", "oci:/tmp/built:1", new, force=False, base=elsewhere)
    # no annotations: a layout says nothing of its line, as before
    assert lineage(lf, "rocm", "oci:/tmp/built:1", new, force=False, base=None) is None


def test_diff_upstream_during_a_stopped_bump_shows_each_profiles_upstream(queue, lines) -> None:
    """Each profile of a stopped rebase has its own old pin and new image: `diff --upstream` shows the
    change under the patch in each profile that carries it, a --split copy in the profiles it is made
    for, and `--profile NAME` that profile's alone."""
    from support.schemas import validator

    q, env = queue
    imgquilt("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}", "--split",
             cwd=q, env=env, check=4)
    state = (q / ".imgquilt/rebase/state.json").read_bytes()
    # the split copy: rocm's line, where upstream changed prep (the function the patch edits)
    r = imgquilt("diff", "--upstream", "0001-shared-rocm.patch", cwd=q, env=env, check=0)
    assert f"profile rocm: Upstream's change, {lines['v1r']} -> {lines['v2r']}, of what 0001-shared-rocm.patch edits:" in r.out
    assert "app/shared.py: function prep" in r.out and "cuda" not in r.out
    # the original, kept for cuda: cuda's line changed scale, not prep
    r = imgquilt("diff", "--upstream", "0001-shared.patch", cwd=q, env=env, check=0)
    assert r.out.strip() == f"profile cuda: Between {lines['v1']} and {lines['v2']}, upstream changed nothing in what 0001-shared.patch edits."
    # a patch both carry: each profile's images in turn, text and JSON
    r = imgquilt("diff", "--upstream", "0002-timeout.patch", cwd=q, env=env, check=0)
    assert f"profile cuda: Upstream's change, {lines['v1']} -> {lines['v2']}" in r.out
    assert f"profile rocm: Upstream's change, {lines['v1r']} -> {lines['v2r']}" in r.out
    doc = json.loads(imgquilt("--json", "diff", "--upstream", "0002-timeout.patch", cwd=q, env=env, check=0).out)
    validator("diff", "upstream").validate(doc)
    assert [(d["profile"], d["old"]["ref"], d["new"]["ref"]) for d in doc["profiles"]] == \
        [("cuda", lines["v1"], lines["v2"]), ("rocm", lines["v1r"], lines["v2r"])]
    assert all(d["upstream"] and d["upstream"][0]["path"] == "app/common.py" for d in doc["profiles"])
    # --profile: that profile's alone
    doc = json.loads(imgquilt("--json", "diff", "--upstream", "0002-timeout.patch", "--profile", "rocm", cwd=q, env=env, check=0).out)
    assert doc["profile"] == "rocm" and doc["old"]["ref"] == lines["v1r"] and "profiles" not in doc
    r = imgquilt("diff", "--upstream", "0001-shared-rocm.patch", "--profile", "cuda", cwd=q, env=env, check=2)
    assert "Profile cuda does not carry 0001-shared-rocm.patch" in r.err
    r = imgquilt("diff", "--upstream", "0002-timeout.patch", "--image", lines["v2"], cwd=q, env=env, check=2)
    assert "--profile NAME --image NEWREF" in r.err
    assert (q / ".imgquilt/rebase/state.json").read_bytes() == state  # a diff changes nothing
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)


def test_a_bump_abandoned_after_resolving_is_finished_by_the_same_bump_without_asking_again(queue, lines) -> None:
    """The acceptance's second item on the bump itself: both conflicts (rocm's split copy, and the one
    0002 stands in for both profiles) resolved, the rebase --abort'ed; the identical bump then takes
    both kept resolutions, says so, stops nowhere, and gives the trees the resolutions said."""
    q, env = queue
    before = snapshot(q)
    bump = ("rebase", "--profile", "all", "--image", f"cuda={lines['v2']}", "--image", f"rocm={lines['v2r']}", "--split")
    imgquilt(*bump, cwd=q, env=env, check=4)
    rocm_shared = SHARED_ROCM2.replace(b"return x or 0", b"return x if x is not None else 0")
    _resolve(q, "app/shared.py", rocm_shared)
    r = imgquilt("--json", "rebase", "--continue", cwd=q, env=env, check=4)
    assert json.loads(r.out)["conflict"]["patch"] == "0002-timeout.patch"
    _resolve(q, "app/common.py", b"TIMEOUT = 120\nWORKERS = 2\n")
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists()
    r = imgquilt("--json", *bump, cwd=q, env=env, check=0)
    doc = _valid(json.loads(r.out))
    assert doc["status"] == "done" and "conflict" not in doc
    reused = {p["name"]: [f["path"] for f in p["files"] if f.get("reused")] for p in doc["patches"]}
    assert reused["0001-shared-rocm.patch"] == ["app/shared.py"] and reused["0002-timeout.patch"] == ["app/common.py"]
    assert sum(1 for n in doc["notes"] if "reused the kept resolution" in n.lower()) == 2, doc["notes"]
    out = q.parent / "out"
    imgquilt("apply", "--profile", "all", "--output-image", f"oci:{out}:{{profile}}", cwd=q, env=env, check=0)
    rocm = files_of(unpack(out, "rocm", q.parent / "got-rocm"))
    cuda = files_of(unpack(out, "cuda", q.parent / "got-cuda"))
    assert rocm["app/shared.py"] == rocm_shared
    assert rocm["app/common.py"] == cuda["app/common.py"] == b"TIMEOUT = 120\nWORKERS = 2\n"
