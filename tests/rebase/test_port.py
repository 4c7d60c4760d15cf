"""`imgquilt port PATCH --profile NAME` (issue 34, point 3), and `new --guard`: a user's sessions through
the real console script, on two OCI images built by umoci (a CUDA one and a ROCm variant that differs
in two files), checked against GNU `patch -p1` and `git merge-file`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, run as tool
from support.qtools import imgquilt, write_patch

KERN = b"".join(b"def k%d(x):\n    return x + %d\n\n\n" % (i, i) for i in range(12))
KERN_PATCHED = KERN.replace(b"return x + 2\n", b"return (x + 2) * 2\n")
KERN_ROCM = KERN.replace(b"return x + 10\n", b"return x + 10  # hip\n")  # far from the patch's hunk
CONF = b"[server]\ntimeout = 30\nworkers = 2\nlog = info\n"
CONF_PATCHED = CONF.replace(b"timeout = 30", b"timeout = 90")
CONF_ROCM = CONF.replace(b"timeout = 30", b"timeout = 45")  # the same line: a conflict
SHARED = b"import os\n\n\ndef prep(x):\n    return x\n"
SHARED_PATCHED = SHARED.replace(b"return x\n", b"return x if x is not None else 0\n")
SHARED_ROCM = b"# vendored for ROCm\n" + SHARED


def image(layout: Path, kern: bytes, conf: bytes, shared: bytes = SHARED) -> Path:
    return build_oci(
        layout,
        [
            [
                file("app/kern.py", kern),
                file("app/conf.toml", conf),
                file("app/shared.py", shared),
                file("app/README", b"not a target\n"),
            ]
        ],
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("port-images")
    return {
        "cuda": image(work / "cuda", KERN, CONF),
        "rocm": image(work / "rocm", KERN_ROCM, CONF_ROCM),
        "rocm-shared": image(work / "rocm-shared", KERN_ROCM, CONF_ROCM, SHARED_ROCM),
    }


def env_of(tmp: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("IMGQUILT_QUEUE", None)
    e.update(HOME=str(tmp / "home"), SOURCE_DATE_EPOCH="0", IMGQUILT_CACHE_DIR=str(tmp / "cache"))
    return e


def make_queue(tmp: Path, images, rocm: str = "rocm") -> tuple[Path, dict]:
    env = env_of(tmp)
    q = tmp / "queue"
    q.mkdir()
    (q / "series").write_text("# fixes for two deployments\n")
    write_patch(q, "0001-shared.patch", [("app/shared.py", SHARED, SHARED_PATCHED)])
    write_patch(q, "0002-kern.patch", [("app/kern.py", KERN, KERN_PATCHED)], fields={"Description": "Scale k2 by 2"})
    write_patch(q, "0003-conf.patch", [("app/conf.toml", CONF, CONF_PATCHED)])
    for name in ("0002-kern.patch", "0003-conf.patch"):
        imgquilt("guard", "--new-guard", name, "+cuda", cwd=q, env=env, check=0)
    if rocm == "rocm-shared":  # ROCm vendors shared.py: 0001 is CUDA's for now
        imgquilt("guard", "--new-guard", "0001-shared.patch", "+cuda", cwd=q, env=env, check=0)
    imgquilt(
        "lock",
        "--profile",
        "cuda",
        "--image",
        f"oci:{images['cuda']}:latest",
        "--env",
        "CUDA_ON=1",
        cwd=q,
        env=env,
        check=0,
    )
    imgquilt(
        "lock",
        "--profile",
        "rocm",
        "--image",
        f"oci:{images[rocm]}:latest",
        "--env",
        "HIP_FORCE=1",
        cwd=q,
        env=env,
        check=0,
    )
    return q, env


def snapshot(q: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(q)): p.read_bytes()
        for p in sorted(q.rglob("*"))
        if p.is_file() and ".imgquilt" not in p.relative_to(q).parts
    }


def restore(q: Path, snap: dict[str, bytes]) -> None:
    """The user's `git checkout .` (and removal of the new files)."""
    for p in list((q / "patches").iterdir()):
        if f"patches/{p.name}" not in snap:
            p.unlink()
    for rel, data in snap.items():
        (q / rel).write_bytes(data)


def rootfs(layout: Path, dest: Path) -> Path:
    tool("umoci", "raw", "unpack", "--rootless", "--image", f"{layout}:latest", dest)
    return dest


def merge_file(ours: bytes, base: bytes, theirs: bytes, tmp: Path) -> bytes:
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
    p = subprocess.run(["git", "merge-file", "-p", "ours", "base", "theirs"], cwd=tmp, capture_output=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def applied_as_gnu_patch_and_imgquilt(q: Path, env, images, tmp: Path, copy: str) -> dict[str, bytes]:
    """`apply --profile rocm --root` on rocm's image, and GNU `patch -p1` of rocm's selection there: the same trees."""
    mine = rootfs(images["rocm"], tmp / "mine")
    imgquilt("apply", "--profile", "rocm", "--root", str(mine), cwd=q, env=env, check=0)
    gnu = rootfs(images["rocm"], tmp / "gnu")
    chosen = json.loads(imgquilt("--json", "select", "rocm", cwd=q, env=env, check=0).out)["patches"]
    imgquilt("select", "--none", cwd=q, env=env, check=0)
    assert copy in chosen
    for name in chosen:
        p = subprocess.run(
            ["patch", "-p1", "--batch", "--no-backup-if-mismatch", "-d", str(gnu), "-i", str(q / "patches" / name)],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stdout + p.stderr
    out = {}
    for rel in ("app/kern.py", "app/conf.toml", "app/shared.py"):
        assert (mine / rel).read_bytes() == (gnu / rel).read_bytes(), rel
        out[rel] = (mine / rel).read_bytes()
    return out


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_port_merges_cleanly_onto_the_profiles_image_and_keeps_the_lock_fresh(images, tmp_path: Path) -> None:
    q, env = make_queue(tmp_path, images)
    r = imgquilt("--json", "port", "0002-kern.patch", "--profile", "rocm", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["status"] == "done" and doc["copy"] == "0002-kern-rocm.patch"
    assert doc["guards"] == ["+cuda"]  # already not in rocm: no -rocm
    assert [(f["path"], f["state"]) for f in doc["files"]] == [("app/kern.py", "merged")]
    assert doc["targets_lock"]["updated"] is True and doc["targets_lock"]["stale"] is None
    lines = (q / "series").read_text().splitlines()
    assert lines[lines.index("0002-kern.patch #+cuda") + 1] == "0002-kern-rocm.patch #+rocm"
    assert b"Ported-From: 0002-kern.patch" in (q / "patches/0002-kern-rocm.patch").read_bytes()
    imgquilt("check", cwd=q, env=env, check=0)  # every pin chains, the lock is fresh
    imgquilt(
        "apply", "--profile", "all", "--locked", "--layer", str(tmp_path / "{profile}.tar"), cwd=q, env=env, check=0
    )
    got = applied_as_gnu_patch_and_imgquilt(q, env, images, tmp_path, "0002-kern-rocm.patch")
    (tmp_path / "m").mkdir()
    assert got["app/kern.py"] == merge_file(KERN_PATCHED, KERN, KERN_ROCM, tmp_path / "m")
    assert got["app/conf.toml"] == CONF_ROCM  # 0003 stays CUDA's


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_a_conflicting_port_stops_finishes_after_resolution_and_the_resolution_is_kept(images, tmp_path: Path) -> None:
    q, env = make_queue(tmp_path, images)
    before = snapshot(q)
    r = imgquilt("--json", "port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=4)
    doc = json.loads(r.out)
    assert doc["status"] == "stopped" and doc["conflict"]["files"][0]["work"] == ".imgquilt/work/app/conf.toml"
    assert doc["error"]["kind"] == "rebase-conflict"
    work = q / ".imgquilt/work/app/conf.toml"
    assert work.read_bytes().count(b"<<<<<<< ") == 1
    assert snapshot(q) == before  # nothing written until --continue
    imgquilt("port", "0002-kern.patch", "--profile", "rocm", cwd=q, env=env, check=2)  # one port at a time
    r = imgquilt("port", "--continue", cwd=q, env=env, check=4)
    assert "conflict markers remain" in r.err
    resolved = CONF.replace(b"timeout = 30", b"timeout = 90  # hip needs longer")
    work.write_bytes(resolved)

    # abandoned: the resolution is kept, and the same port again takes it without stopping
    r = imgquilt("--json", "port", "--abort", cwd=q, env=env, check=0)
    assert json.loads(r.out)["kept"] == ["app/conf.toml"] and not work.exists()
    assert snapshot(q) == before and not (q / ".imgquilt/port").exists()
    r = imgquilt("port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=0)
    assert "reused" in r.out and "reused the kept resolution of app/conf.toml" in r.out.replace("Reused", "reused")
    imgquilt("check", cwd=q, env=env, check=0)
    got = applied_as_gnu_patch_and_imgquilt(q, env, images, tmp_path, "0003-conf-rocm.patch")
    assert got["app/conf.toml"] == resolved

    # finished by --continue: the same, and `rebase --forget` makes the next port ask again
    restore(q, before)
    imgquilt("rebase", "--forget", cwd=q, env=env, check=0)
    imgquilt("port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=4)
    work.write_bytes(resolved)
    r = imgquilt("--json", "port", "--continue", cwd=q, env=env, check=0)
    assert json.loads(r.out)["files"][0]["state"] == "resolved"
    imgquilt("check", cwd=q, env=env, check=0)
    assert not work.exists() and not (q / ".imgquilt/port").exists()
    restore(q, before)
    r = imgquilt("--json", "port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=0)
    assert json.loads(r.out)["files"][0]["state"] == "reused"


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_a_shared_patch_that_no_longer_chains_on_the_profile_gets_minus_guard_and_a_copy(
    images, tmp_path: Path
) -> None:
    q, env = make_queue(tmp_path, images, rocm="rocm-shared")
    # the guard taken off by hand: rocm now selects 0001, which does not chain on its image
    (q / "series").write_text((q / "series").read_text().replace("0001-shared.patch #+cuda", "0001-shared.patch"))
    assert imgquilt("check", cwd=q, env=env).code != 0  # the lock is stale, and 0001 does not chain on rocm's image
    r = imgquilt("--json", "port", "0001-shared.patch", "--profile", "rocm", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["guards"] == ["-rocm"] and doc["files"][0]["state"] == "merged"
    assert (q / "series").read_text().splitlines()[1:3] == ["0001-shared.patch #-rocm", "0001-shared-rocm.patch #+rocm"]
    imgquilt("check", cwd=q, env=env, check=0)
    mine = rootfs(images["rocm-shared"], tmp_path / "mine")
    imgquilt("apply", "--profile", "rocm", "--root", str(mine), cwd=q, env=env, check=0)
    (tmp_path / "m").mkdir()
    assert (mine / "app/shared.py").read_bytes() == merge_file(SHARED_PATCHED, SHARED, SHARED_ROCM, tmp_path / "m")


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
@pytest.mark.parametrize(
    "args, says",
    [
        (["0002-kern.patch", "--profile", "rcom"], "Did you mean 'rocm'?"),
        (["0001-shared.patch", "--profile", "rocm"], "already selects 0001-shared.patch"),
        (["0002-kern.patch", "--profile", "rocm", "--copy-exists"], "0002-kern-rocm.patch is taken"),
        (["0009-none.patch", "--profile", "rocm"], "not in series"),
        (["--continue"], "No port in progress"),
    ],
)
def test_refusals_come_first_and_write_nothing(images, tmp_path: Path, args, says) -> None:
    q, env = make_queue(tmp_path, images)
    if "--copy-exists" in args:
        args = [a for a in args if a != "--copy-exists"]
        (q / "patches/0002-kern-rocm.patch").write_text("Description: mine\n")
    before = snapshot(q)
    r = imgquilt("port", *args, cwd=q, env=env, check=2)
    assert says in r.err
    assert snapshot(q) == before and not (q / ".imgquilt/port").exists() and not (q / ".imgquilt/work/app").exists()


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_new_with_a_guard_makes_a_guarded_patch_and_refuses_a_typo(images, tmp_path: Path) -> None:
    q, env = make_queue(tmp_path, images)
    r = imgquilt("new", "--guard", "+rcom", "0004-hip.patch", cwd=q, env=env, check=2)
    assert "Did you mean 'rocm'?" in r.err and "0004-hip.patch" not in (q / "series").read_text()
    assert not (q / "patches/0004-hip.patch").exists()
    imgquilt("new", "--guard", "+rocm", "--guard", "-cuda", "0004-hip.patch", cwd=q, env=env, check=0)
    assert "0004-hip.patch #+rocm #-cuda" in (q / "series").read_text()
    imgquilt("new", "--guard", "+later", "--new-guard", "0005-later.patch", cwd=q, env=env, check=0)
    assert "0005-later.patch #+later" in (q / "series").read_text()


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_a_resolution_followed_by_a_refusal_is_kept_for_the_next_rebase(images, tmp_path: Path) -> None:
    """rebase --profile cuda: 0001 (shared with rocm) conflicts; after it is resolved the finish is refused
    (exit 3: the rebased 0001 no longer chains on rocm's image). --abort, then the same rebase: it reaches
    that refusal again without asking for the resolution (exit 3, not 4).

    The refusal can only come at the finish where the start cannot foresee it (a pin left out that would
    surely break is refused before any merge): each profile reaches app/shared.py's base for 0001 through
    a patch of its own (0000-cuda-pre +cuda, 0000-rocm-pre +rocm, the same bytes), so only the rebased
    0001's new base tells that rocm's chain breaks."""
    env = env_of(tmp_path)
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("")
    pre = b"# pre\n" + SHARED
    write_patch(q, "0000-cuda-pre.patch", [("app/shared.py", SHARED, pre)])
    write_patch(q, "0000-rocm-pre.patch", [("app/shared.py", SHARED, pre)])
    write_patch(
        q,
        "0001-shared.patch",
        [("app/shared.py", pre, pre.replace(b"return x\n", b"return x if x is not None else 0\n"))],
    )
    imgquilt("guard", "--new-guard", "0000-cuda-pre.patch", "+cuda", cwd=q, env=env, check=0)
    imgquilt("guard", "--new-guard", "0000-rocm-pre.patch", "+rocm", cwd=q, env=env, check=0)
    for name in ("cuda", "rocm"):
        imgquilt("lock", "--profile", name, "--image", f"oci:{images[name]}:latest", cwd=q, env=env, check=0)
    imgquilt("check", cwd=q, env=env, check=0)
    newer = image(tmp_path / "cuda2", KERN, CONF, SHARED.replace(b"return x\n", b"return x or 0\n"))
    r = imgquilt("rebase", "--profile", "cuda", "--image", f"oci:{newer}:latest", cwd=q, env=env, check=4)
    assert "app/shared.py" in r.err
    work = q / ".imgquilt/work/app/shared.py"
    work.write_bytes(pre.replace(b"return x\n", b"return (x or 0) if x is not None else 0\n"))
    r = imgquilt("rebase", "--continue", cwd=q, env=env, check=3)
    assert "profile rocm" in r.err
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    before = snapshot(q)
    # without the kept resolution this would stop on the conflict again (exit 4)
    r = imgquilt("rebase", "--profile", "cuda", "--image", f"oci:{newer}:latest", cwd=q, env=env, check=3)
    assert "profile rocm" in r.err and "No rebase was started" in r.err
    assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists()
    imgquilt("rebase", "--forget", cwd=q, env=env, check=0)
    imgquilt("rebase", "--profile", "cuda", "--image", f"oci:{newer}:latest", cwd=q, env=env, check=4)


@pytest.mark.skipif(shutil.which("umoci") is None or shutil.which("strace") is None, reason="needs umoci and strace")
def test_kill_9_of_port_continue_ends_exactly_old_or_new(images, tmp_path: Path) -> None:
    """`port --continue` killed at sampled calls that change files: the next `port --continue` (when a port
    is still there) finishes it; the queue then holds the copy once, checks clean and applies as it should."""
    import sys

    from support.killpoints import driver_env, fresh, kill_points, sample, traced

    q, env = make_queue(tmp_path, images)
    imgquilt("port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=4)
    resolved = CONF.replace(b"timeout = 30", b"timeout = 90  # hip")
    (q / ".imgquilt/work/app/conf.toml").write_bytes(resolved)
    start = tmp_path / "start"
    shutil.copytree(q, start, symlinks=True)
    run_env = {
        **driver_env(),
        "HOME": env["HOME"],
        "IMGQUILT_CACHE_DIR": env["IMGQUILT_CACHE_DIR"],
        "SOURCE_DATE_EPOCH": "0",
    }
    cmd = [sys.executable, "-m", "imgquilt", "port", "--continue"]
    log = tmp_path / "trace.log"
    subprocess.run(traced(log) + cmd, cwd=q, env=run_env, capture_output=True, check=True)
    done = snapshot(q)
    killed = 0
    for name, n, _ in sample(kill_points(log), 8, sampled=True):
        fresh(start, q)
        p = subprocess.run(
            traced(inject=f"{name}:signal=SIGKILL:when={n}") + cmd, cwd=q, env=run_env, capture_output=True
        )
        if p.returncode == 0:
            continue
        killed += 1
        if (q / ".imgquilt/port/state.json").exists():
            imgquilt("port", "--continue", cwd=q, env=env, check=0)
        assert snapshot(q) == done, (name, n)
        assert not (q / ".imgquilt/port").exists() and not (q / ".imgquilt/work/app/conf.toml").exists()
    assert killed >= 3


@pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci not installed")
def test_a_port_journal_imgquilt_did_not_seal_is_never_acted_on(images, tmp_path: Path) -> None:
    q, env = make_queue(tmp_path, images)
    imgquilt("port", "0003-conf.patch", "--profile", "rocm", cwd=q, env=env, check=4)
    journal = q / ".imgquilt/port/state.json"
    doc = json.loads(journal.read_text())
    doc["files"][0]["path"] = "../../etc/passwd"  # what a cloned queue could plant
    journal.write_text(json.dumps(doc))
    before = snapshot(q)
    for args in (["--continue"], ["--abort"]):
        r = imgquilt("port", *args, cwd=q, env=env, check=6)
        assert "not a port journal sealed with your imgquilt journal key" in r.err
    assert snapshot(q) == before and (q / ".imgquilt/work/app/conf.toml").exists()
