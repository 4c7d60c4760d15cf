"""Issue 36: `imgquilt boot` imports the patched modules with the root's own CPython (this machine's
Debian python3.11, copied into a root: tests/support/pyroot.py) in a sandbox, on the base and on the patched
tree. The queue holds the issue's five shapes, one patch each:

  (a) 0001-cycle      a new top-level import closes an import cycle          -> fails (a.py:1)
  (b) 0002-env        settings read os.environ["SVC_MODE"] at import          -> fails without it, boots when the profile sets it
  (c) 0003-cext       imports a name the C extension _json does not have      -> fails (fastjson/__init__.py:1)
  (d) 0004-fine       adds a function                                         -> boots
  (e) 0005-gpu        edits a module that fails on the base too (no libcuda)  -> cannot tell, with the base's error

The static check passes all of them (apply verifies the queue on the root without a finding).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from support import pyroot
from support.qtools import imgquilt, tree_hash, write_patch
from support.schemas import validator

pytestmark = pytest.mark.skipif(not pyroot.available(), reason="needs Debian's /usr/bin/python3.11")  # the suite's machine has it

DIST = pyroot.DIST
BASE = {
    f"{DIST}/cyc/__init__.py": b"",
    f"{DIST}/cyc/a.py": b"A = 1\n",
    f"{DIST}/cyc/b.py": b"from cyc.a import A\n\nB = A + 1\n",
    f"{DIST}/svc/__init__.py": b"",
    f"{DIST}/svc/settings.py": b'import os\n\nMODE = os.environ.get("SVC_MODE", "serve")\n',
    f"{DIST}/svc/util.py": b"def one():\n    return 1\n",
    f"{DIST}/fastjson/__init__.py": b'"""JSON helpers over the C scanner."""\nfrom _json import scanstring\n',
    f"{DIST}/gpu/__init__.py": b"",
    f"{DIST}/gpu/kernels.py": b'import ctypes\n\nCUDA = ctypes.CDLL("libcuda.so.1")\n',
}
PATCHED = {
    f"{DIST}/cyc/a.py": b"from cyc.b import B\n\nA = 1\nC = B * 2\n",
    f"{DIST}/svc/settings.py": b'import os\n\nMODE = os.environ["SVC_MODE"]\n',
    f"{DIST}/fastjson/__init__.py": b'"""JSON helpers over the C scanner."""\nfrom _json import scanstring, no_such_name\n',
    f"{DIST}/svc/util.py": b"def one():\n    return 1\n\n\ndef two():\n    return one() + 1\n",
    f"{DIST}/gpu/kernels.py": b'import ctypes\n\nCUDA = ctypes.CDLL("libcuda.so.1")\nBLOCK = 128\n',
}
SHAPES = [("0001-cycle.patch", f"{DIST}/cyc/a.py"), ("0002-env.patch", f"{DIST}/svc/settings.py"),
          ("0003-cext.patch", f"{DIST}/fastjson/__init__.py"), ("0004-fine.patch", f"{DIST}/svc/util.py"),
          ("0005-gpu.patch", f"{DIST}/gpu/kernels.py")]


@pytest.fixture(scope="module")
def base_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = pyroot.debian_root(tmp_path_factory.mktemp("debian") / "root")
    for path, data in BASE.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


@pytest.fixture
def root(base_root: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "root"
    shutil.copytree(base_root, dest, symlinks=True)
    return dest


def _queue(q: Path, shapes=SHAPES) -> Path:
    q.mkdir()
    (q / "series").write_text("")
    for name, path in shapes:
        write_patch(q, name, [(path, BASE.get(path), PATCHED[path])])
    return q


def _verdicts(doc: dict) -> dict[str, str]:
    return {p["name"]: p["verdict"] for p in doc["patches"]}


def test_the_five_shapes_with_the_roots_own_python(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q")
    before = tree_hash(root)
    # the static check passes all five: nothing it can see is wrong
    imgquilt("apply", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    r = imgquilt("boot", "--root", str(root), cwd=q, env=cli_env, check=3)
    assert "fails        0001-cycle.patch" in r.out
    assert (f"{DIST}/cyc/a.py:1: ImportError: cannot import name 'A' from partially initialized module 'cyc.a' "
            "(most likely due to a circular import)") in r.out
    assert f"{DIST}/svc/settings.py:3: KeyError: 'SVC_MODE'" in r.out
    assert (f"{DIST}/fastjson/__init__.py:2: ImportError: cannot import name 'no_such_name' from '_json' "
            "(/usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so)") in r.out
    assert "boots        0004-fine.patch" in r.out
    assert "cannot tell  0005-gpu.patch" in r.out
    assert "it fails on the base too: " in r.out and "OSError: libcuda.so.1: cannot open shared object file" in r.out
    assert "3 patch(es) fail to boot" in r.err and "0001-cycle.patch, 0002-env.patch, 0003-cext.patch" in r.err
    doc = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", cwd=q, env=cli_env, check=3).out)
    validator("boot", "result").validate(doc)
    assert _verdicts(doc) == {"0001-cycle.patch": "fails", "0002-env.patch": "fails", "0003-cext.patch": "fails",
                              "0004-fine.patch": "boots", "0005-gpu.patch": "cannot tell"}
    env_fail = next(p for p in doc["patches"] if p["name"] == "0002-env.patch")["failures"][0]
    assert (env_fail["type"], env_fail["path"], env_fail["line"]) == ("KeyError", f"{DIST}/svc/settings.py", 3)
    gpu = next(p for p in doc["probes"] if p["module"] == "gpu.kernels")
    assert gpu["base"]["state"] == "error" and gpu["base"]["failure"]["type"] == "OSError"
    assert (gpu["base"]["failure"]["path"], gpu["base"]["failure"]["line"]) == (f"{DIST}/gpu/kernels.py", 3)
    assert doc["error"]["code"] == 3
    # cyc.b imports the patched cyc.a (--importers): on the patched tree it fails in the cycle 0001 closes
    b = next(p for p in doc["probes"] if p["module"] == "cyc.b")
    assert (b["importer_of"], b["verdict"], b["attributed_to"], b["base"]["state"]) == ("cyc.a", "fails", "0001-cycle.patch", "ok")
    assert "cannot import name 'B' from partially initialized module 'cyc.b'" in b["patched"]["failure"]["message"]
    assert (b["patched"]["failure"]["path"], b["patched"]["failure"]["line"]) == (f"{DIST}/cyc/a.py", 1)
    cycle = next(p for p in doc["patches"] if p["name"] == "0001-cycle.patch")
    assert {f["module"] for f in cycle["failures"]} == {"cyc.a", "cyc.b"}
    off = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", "--importers", "0", cwd=q, env=cli_env, check=3).out)
    assert all(p["importer_of"] is None for p in off["probes"])
    # the patched tree was only ever a mount: the root is as it was
    assert tree_hash(root) == before


def test_the_profile_env_makes_the_env_shape_boot(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[1], SHAPES[3]])
    imgquilt("lock", "--profile", "batch", "--image", f"rootfs:{root}", "--env", "SVC_MODE=batch", cwd=q, env=cli_env, check=0)
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    r = imgquilt("boot", "--root", str(root), "--profile", "batch", cwd=q, env=cli_env, check=0)
    assert "boots        0002-env.patch" in r.out and "boots        0004-fine.patch" in r.out
    r = imgquilt("boot", "--root", str(root), cwd=q, env=cli_env, check=3)
    assert "fails        0002-env.patch" in r.out and "KeyError: 'SVC_MODE'" in r.out
    # --format github: an annotation on the patched file's line
    r = imgquilt("boot", "--root", str(root), "--format", "github", cwd=q, env=cli_env, check=3)
    assert f"::error file={DIST}/svc/settings.py,line=3,title=imgquilt boot%3A svc.settings::0002-env.patch: KeyError: 'SVC_MODE'" in r.out


def test_a_failure_is_attributed_to_the_patch_whose_file_it_ends_in(root: Path, tmp_path: Path, cli_env) -> None:
    """0002 imports a module 0001 broke: the probe of 0002's module fails in 0001's file."""
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    path = f"{DIST}/svc/settings.py"
    user = f"{DIST}/svc/runner.py"
    write_patch(q, "0001-env.patch", [(path, BASE[path], PATCHED[path])])
    write_patch(q, "0002-runner.patch", [(user, None, b"from svc.settings import MODE\n\nRUN = MODE\n")])
    doc = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", cwd=q, env=cli_env, check=3).out)
    first, second = doc["patches"]
    assert first["verdict"] == "fails" and {f["module"] for f in first["failures"]} == {"svc.settings", "svc.runner"}
    assert all(f["path"] == path and f["line"] == 3 for f in first["failures"])
    assert second["verdict"] == "cannot tell" and "0001-env.patch" in second["why"]


def test_a_probe_cannot_reach_the_network(root: Path, tmp_path: Path, cli_env) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def serve() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    t = threading.Thread(target=serve)
    t.start()
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    mod = f"{DIST}/phone.py"
    write_patch(q, "0001-phone.patch", [(mod, None, f"import socket\n\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n".encode())])
    try:
        r = imgquilt("boot", "--root", str(root), cwd=q, env=cli_env, check=3)
    finally:
        t.join()
        server.close()
    assert f"{mod}:3: OSError: [Errno 101] Network is unreachable" in r.out
    assert accepted == []  # the host's loopback was never reached


def test_a_probe_past_the_timeout_is_killed_and_reported(root: Path, tmp_path: Path, cli_env) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    mod = f"{DIST}/sleepy_a9f3.py"
    write_patch(q, "0001-sleepy.patch", [(mod, None, b"import time\n\ntime.sleep(600)\n")])
    r = imgquilt("boot", "--root", str(root), "--timeout", "2", cwd=q, env=cli_env, check=3)
    assert "fails        0001-sleepy.patch" in r.out and "Timeout: killed after 2 s (--timeout)" in r.out
    left = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and b"sleepy_a9f3" in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:
            pass
    assert left == []  # never left running


def test_what_cannot_be_probed_is_cannot_tell_never_an_error(root: Path, tmp_path: Path, cli_env) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-outside.patch", [("srv/app/tool.py", None, b"X = 1\n")])
    write_patch(q, "0002-conf.patch", [("etc/svc.conf", None, b"a=1\n")])
    r = imgquilt("boot", "--root", str(root), cwd=q, env=cli_env, check=0)
    assert "cannot tell  0001-outside.patch" in r.out and "not under a directory an image's Python imports from" in r.out
    assert "cannot tell  0002-conf.patch  (it changes no Python module)" in r.out
    # a root with no Python at all
    (root / "usr/bin/python3.11").unlink()
    (root / "usr/bin/python3").unlink()
    write_patch(q, "0003-mod.patch", [(f"{DIST}/m.py", None, b"X = 1\n")])
    r = imgquilt("boot", "--root", str(root), cwd=q, env=cli_env, check=0)
    assert "the image has no python3.11 (nor python3) on its PATH" in r.out


def test_a_command_runs_on_both_trees_with_the_queue_mounted(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[3]])
    (q / "tests").mkdir()
    (q / "tests/smoke.py").write_text("import svc.util\nassert svc.util.two() == 2\nprint('smoke ok')\n")
    r = imgquilt("boot", "--root", str(root), "--mount-queue", "/queue", "--", "python3", "/queue/tests/smoke.py",
                 cwd=q, env=cli_env, check=0)
    # the base has no two(): the command fails on the base only, so it boots
    assert "boots        command `python3 /queue/tests/smoke.py`: exit 0 patched, 1 on the base" in r.out
    assert "smoke ok" in r.out
    # one that passes on the base only fails: exit 3, its output's tail in the report
    (q / "tests/old.py").write_text("import svc.util\nassert not hasattr(svc.util, 'two'), 'two() is new'\n")
    doc = json.loads(imgquilt("boot", "--root", str(root), "--mount-queue", "/queue", "--format", "json", "--",
                              "python3", "/queue/tests/old.py", cwd=q, env=cli_env, check=3).out)
    validator("boot", "result").validate(doc)
    assert doc["command"]["verdict"] == "fails" and doc["command"]["base"]["exit_code"] == 0
    assert doc["command"]["patched"]["exit_code"] == 1 and "AssertionError: two() is new" in doc["command"]["patched"]["stderr_tail"]
    assert not (root / "queue").exists()  # the mount point was an overlay's, never made in the root


def test_no_command_on_the_path_is_bad_input(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[3]])
    r = imgquilt("boot", "--root", str(root), "--", "no-such-tool", cwd=q, env=cli_env, check=6)
    assert "'no-such-tool' is not on the image's PATH" in r.err


@pytest.fixture(scope="module")
def layout(base_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OCI image of the root: the Debian Python in one layer, the packages in another; its config's
    Env names the PATH (umoci's default config has one)."""
    from support.imagetools import build_oci

    tmp = tmp_path_factory.mktemp("image")
    os_layer = tmp / "os"
    shutil.copytree(base_root, os_layer, symlinks=True, ignore=shutil.ignore_patterns("dist-packages"))
    pkgs = tmp / "pkgs"
    shutil.copytree(base_root / DIST, pkgs / DIST)
    return build_oci(tmp / "layout", [os_layer, pkgs])


def test_the_same_verdicts_on_the_image_unpacked_once_in_the_cache(layout: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q")
    before = tree_hash(layout)
    ref = f"oci:{layout}:latest"
    doc = json.loads(imgquilt("boot", "--image", ref, "--format", "json", cwd=q, env=cli_env, check=3).out)
    validator("boot", "result").validate(doc)
    assert _verdicts(doc) == {"0001-cycle.patch": "fails", "0002-env.patch": "fails", "0003-cext.patch": "fails",
                              "0004-fine.patch": "boots", "0005-gpu.patch": "cannot tell"}
    assert doc["image"]["digest"].startswith("sha256:")
    cycle = next(p for p in doc["patches"] if p["name"] == "0001-cycle.patch")["failures"][0]
    assert (cycle["path"], cycle["line"]) == (f"{DIST}/cyc/a.py", 1)
    # unpacked once, sealed: the next run reuses the tree as it is
    hexd = doc["image"]["digest"].split(":")[1]
    tree = Path(cli_env["IMGQUILT_CACHE_DIR"]) / "rootfs" / f"{hexd}.tree"
    marker = tree.with_name(hexd)
    assert (tree / "usr/bin/python3.11").is_file() and marker.is_file()
    stamp = tree.stat().st_ctime_ns
    again = json.loads(imgquilt("boot", "--image", ref, "--format", "json", cwd=q, env=cli_env, check=3).out)
    assert _verdicts(again) == _verdicts(doc) and tree.stat().st_ctime_ns == stamp
    # a marker imgquilt did not seal is not believed: the tree is unpacked anew
    (tree / "usr/planted").write_text("not the image's")
    marker.chmod(0o600)
    marker.write_text("0" * 64 + "\n")
    imgquilt("boot", "--image", ref, cwd=q, env=cli_env, check=3)
    assert not (tree / "usr/planted").exists() and (tree / "usr/bin/python3.11").is_file()
    # the image's layout is as it was
    assert tree_hash(layout) == before
    # cache prune takes the trees too
    imgquilt("cache", "prune", cwd=q, env=cli_env, check=0)
    assert not tree.exists()


def test_the_same_verdicts_for_the_overlay_apply_wrote(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q")
    out = tmp_path / "overlay"
    imgquilt("apply", "--image", f"rootfs:{root}", "--overlay", str(out), cwd=q, env=cli_env, check=0)
    before = tree_hash(out), tree_hash(root)
    doc = json.loads(imgquilt("boot", "--root", str(root), "--overlay", str(out), "--format", "json", cwd=q, env=cli_env,
                              check=3).out)
    assert _verdicts(doc) == {"0001-cycle.patch": "fails", "0002-env.patch": "fails", "0003-cext.patch": "fails",
                              "0004-fine.patch": "boots", "0005-gpu.patch": "cannot tell"}
    assert (tree_hash(out), tree_hash(root)) == before
    # an overlay that is not this series' result on this base is refused, not booted
    (out / f"{DIST}/svc/util.py").write_bytes(b"def one():\n    return 1\n")
    r = imgquilt("boot", "--root", str(root), "--overlay", str(out), cwd=q, env=cli_env, check=6)
    assert f"does not hold the series' result on this base for 1 file(s): {DIST}/svc/util.py" in r.err


def _failing_unshare(tmp_path: Path) -> Path:
    """Where user namespaces are turned off, unshare fails as this stand-in does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    return bin_dir


def _tools_but(tmp_path: Path, *without: str) -> Path:
    """A PATH directory with this machine's tools (python3 for imgquilt's own children, skopeo, ...),
    `without` those named."""
    d = tmp_path / "tools"
    d.mkdir()
    for name in ("unshare", "bwrap", "podman", "git", "skopeo", "umoci", "sh", "true"):
        found = shutil.which(name)
        if found and name not in without:
            os.symlink(found, d / name)
    return d


def test_no_sandbox_is_exit_6_naming_each_way_tried(root: Path, tmp_path: Path, cli_env) -> None:
    """Nothing is run on the host when no way works: unshare (namespaces off), bwrap (not installed)
    and podman (this machine's crun cannot set its rlimits: detected, reported, never a crash)."""
    q = _queue(tmp_path / "q", [SHAPES[3]])
    env = {**cli_env, "PATH": f"{_failing_unshare(tmp_path)}:{_tools_but(tmp_path, 'unshare', 'bwrap')}"}
    r = imgquilt("boot", "--root", str(root), cwd=q, env=env, check=6)
    assert ("No sandbox to run the image's Python in: tried unshare(1) with user, mount, pid and network namespaces: "
            "unshare: unshare failed: Operation not permitted; bubblewrap (bwrap): bwrap is not on PATH (Debian package "
            "bubblewrap); podman run --network none --read-only --rootfs: ") in r.err
    assert "Nothing was run." in r.err and "Booted" not in r.out
    if shutil.which("podman"):  # the suite's machine: podman is there but cannot run a container
        assert "podman is not on PATH" not in r.err
    r = imgquilt("boot", "--root", str(root), cwd=q, env={**cli_env, "PATH": str(tmp_path / "empty")}, check=6)
    assert ("unshare is not on PATH (util-linux); bubblewrap (bwrap): bwrap is not on PATH (Debian package bubblewrap); "
            "podman run --network none --read-only --rootfs: podman is not on PATH") in r.err
    doc = json.loads(imgquilt("--json", "boot", "--root", str(root), cwd=q, env=env, check=6).out)
    assert doc["error"]["kind"] == "sandbox-unavailable"
    # one way named by the setting: only that one is tried
    r = imgquilt("boot", "--root", str(root), cwd=q, env={**env, "IMGQUILT_SANDBOX": "unshare"}, check=6)
    assert "tried unshare(1) with user, mount, pid and network namespaces: unshare: unshare failed" in r.err
    assert "bwrap" not in r.err
    r = imgquilt("boot", "--root", str(root), cwd=q, env={**cli_env, "IMGQUILT_SANDBOX": "chroot"}, check=2)
    assert "IMGQUILT_SANDBOX='chroot': expected auto, or one or more of unshare, bwrap, podman" in r.err


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is installed on the suite's machine")
def test_podman_that_cannot_run_a_container_is_reported_not_used(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[3]])
    probe = __import__("subprocess").run(["podman", "run", "--rm", "--network", "none", "--read-only", "--rootfs",
                                          f"{root}:O", "/usr/bin/python3", "-c", "print(1)"], capture_output=True, text=True)
    r = imgquilt("boot", "--root", str(root), cwd=q, env={**cli_env, "IMGQUILT_SANDBOX": "podman"},
                 check=0 if probe.returncode == 0 else 6)
    if probe.returncode != 0:  # this machine: crun's setrlimit is refused
        assert "tried podman run --network none --read-only --rootfs: Error: " in r.err
        assert probe.stderr.strip().splitlines()[-1].strip() in r.err
    else:
        assert "boots        0004-fine.patch" in r.out


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is installed by .ci/install-tools")
def test_bwrap_gives_the_same_verdicts_as_unshare(root: Path, tmp_path: Path, cli_env) -> None:
    """Forced (the setting), and as the fallback where unshare fails: the five shapes' verdicts, lines
    and the base's error are those unshare gives; the root is as it was."""
    q = _queue(tmp_path / "q")
    before = tree_hash(root)
    ref = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", cwd=q,
                              env={**cli_env, "IMGQUILT_SANDBOX": "unshare"}, check=3).out)
    forced = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", cwd=q,
                                 env={**cli_env, "IMGQUILT_SANDBOX": "bwrap"}, check=3).out)
    fallback_env = {**cli_env, "PATH": f"{_failing_unshare(tmp_path)}:{os.environ['PATH']}"}
    fallback = json.loads(imgquilt("boot", "--root", str(root), "--format", "json", cwd=q, env=fallback_env, check=3).out)

    def said(doc: dict) -> list:
        return [(p["name"], p["verdict"], [(f["module"], f["type"], f["path"], f["line"]) for f in p["failures"]])
                for p in doc["patches"]] + [(p["module"], p["verdict"], p["why"]) for p in doc["probes"]]

    assert _verdicts(ref) == {"0001-cycle.patch": "fails", "0002-env.patch": "fails", "0003-cext.patch": "fails",
                              "0004-fine.patch": "boots", "0005-gpu.patch": "cannot tell"}
    assert said(forced) == said(ref) and said(fallback) == said(ref)
    assert tree_hash(root) == before
    # the network is out of reach there too
    q2 = tmp_path / "q2"
    q2.mkdir()
    (q2 / "series").write_text("")
    util = f"{DIST}/svc/util.py"
    write_patch(q2, "0001-net.patch", [(util, BASE[util], BASE[util] + b"import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)\n")])
    r = imgquilt("boot", "--root", str(root), cwd=q2, env={**cli_env, "IMGQUILT_SANDBOX": "bwrap"}, check=3)
    assert "OSError: [Errno 101] Network is unreachable" in r.out
    # a new module needs an overlay, which bubblewrap 0.8 (Debian 12) cannot make: said, exit 6, never a probe without it
    q3 = _queue(tmp_path / "q3", [SHAPES[3]])
    write_patch(q3, "0002-new.patch", [(f"{DIST}/brandnew.py", None, b"X = 1\n")])
    from imgquilt.rootfs.sandbox_ways import bwrap_has_overlay

    if not bwrap_has_overlay():
        r = imgquilt("boot", "--root", str(root), cwd=q3, env={**cli_env, "IMGQUILT_SANDBOX": "bwrap"}, check=6)
        assert f"bubblewrap cannot show the new files under /{DIST} over the root: it has no --overlay-src" in r.err


def test_apply_boot_writes_nothing_when_a_patch_fails(layout: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[0], SHAPES[3]])
    ref = f"oci:{layout}:latest"
    out, layer = tmp_path / "out", tmp_path / "fix.tar"
    r = imgquilt("apply", "--image", ref, "--boot", "--output-image", f"oci:{out}:fixed", "--layer", str(layer), cwd=q,
                 env=cli_env, check=3)
    assert "1 patch(es) fail to boot" in r.err and "Nothing was written (apply --boot)." in r.err
    assert not out.exists() and not layer.exists()
    # the fine patch alone boots: written, with the boot report in the JSON
    q2 = _queue(tmp_path / "q2", [SHAPES[3]])
    doc = json.loads(imgquilt("--json", "apply", "--image", ref, "--boot", "--output-image", f"oci:{out}:fixed", cwd=q2,
                              env=cli_env, check=0).out)
    validator("apply", "result").validate(doc)
    assert doc["boot"]["ok"] is True and doc["boot"]["patches"][0]["verdict"] == "boots"
    assert doc["outputs"]["image"]["digest"].startswith("sha256:")
    # signed: the attestation holds the boot result as an in-toto test-result predicate, and verify accepts it
    import subprocess

    key, pub = tmp_path / "key.pem", tmp_path / "key.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(key)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    imgquilt("apply", "--image", ref, "--boot", "--output-image", f"oci:{out}:signed", "--attest", str(key), cwd=q2,
             env=cli_env, check=0)
    v = json.loads(imgquilt("--json", "verify", "--image", f"oci:{out}:signed", "--key", str(pub), cwd=q2, env=cli_env,
                            check=0).out)
    assert v["verified"] is True
    booted = v["attestation"]["predicate"]["boot"]
    assert booted["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert booted["predicate"]["result"] == "PASSED" and booted["predicate"]["passedTests"] == ["svc.util"]
    names = {c["name"]: c["digest"]["sha256"] for c in booted["predicate"]["configuration"]}
    assert "sha256:" + names["patched"] == v["image"]["digest"] and names["base"] == doc["boot"]["image"]["digest"].split(":")[1]
    # the apply record holds the boot result: verdicts, probes and both digests, and no times, so it stays reproducible
    record = v["attestation"]["predicate"]["record"]["boot"]
    assert record["patches"] == [{"name": "0004-fine.patch", "verdict": "boots", "why": ""}]
    assert record["base_digest"] == doc["boot"]["image"]["digest"] and record["patched_digest"] == doc["boot"]["patched_digest"]
    assert record["probes"][0]["module"] == "svc.util" and record["probes"][0]["patched"] == {"state": "ok", "failure": None}
    layers = [tmp_path / "a.tar", tmp_path / "b.tar", tmp_path / "plain.tar"]
    for layer, extra in zip(layers, (["--boot"], ["--boot"], [])):
        imgquilt("apply", "--image", ref, *extra, "--layer", str(layer), cwd=q2, env=cli_env, check=0)
    assert layers[0].read_bytes() == layers[1].read_bytes()
    import tarfile

    def applied(layer: Path) -> dict:
        with tarfile.open(layer) as tf:
            member = next(m for m in tf.getmembers() if m.name.lstrip("./") == "var/lib/imgquilt/applied.json")
            return json.loads(tf.extractfile(member).read())  # type: ignore[union-attr]

    assert applied(layers[0])["boot"] == record and "boot" not in applied(layers[2])


def test_a_probe_past_the_memory_limit_fails_with_memory_error(root: Path, tmp_path: Path, cli_env) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    mod = f"{DIST}/hungry.py"
    write_patch(q, "0001-hungry.patch", [(mod, None, b"BUF = bytearray(4 << 30)\n")])
    r = imgquilt("boot", "--root", str(root), "--memory", "1G", cwd=q, env=cli_env, check=3)
    assert f"{mod}:1: MemoryError" in r.out


def test_profile_all_boots_each_profile_on_its_own_pin(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[1]])
    imgquilt("lock", "--profile", "batch", "--image", f"rootfs:{root}", "--env", "SVC_MODE=batch", cwd=q, env=cli_env, check=0)
    imgquilt("lock", "--profile", "plain", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    doc = json.loads(imgquilt("boot", "--profile", "all", "--format", "json", cwd=q, env=cli_env, check=3).out)
    validator("boot", "result").validate(doc)
    assert {p["profile"]: _verdicts(p)["0002-env.patch"] for p in doc["profiles"]} == {"batch": "boots", "plain": "fails"}
    assert doc["ok"] is False and "Profile plain: 1 patch(es) fail to boot" in doc["error"]["message"]


def test_check_boot_lints_then_boots(root: Path, tmp_path: Path, cli_env) -> None:
    q = _queue(tmp_path / "q", [SHAPES[2], SHAPES[3]])
    r = imgquilt("check", "--boot", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=3)
    assert "fails        0003-cext.patch" in r.out and "boots        0004-fine.patch" in r.out
    assert "cannot import name 'no_such_name' from '_json'" in r.out
    doc = json.loads(imgquilt("--json", "check", "--boot", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=3).out)
    validator("check").validate(doc)
    assert doc["ok"] is False and doc["boot"]["ok"] is False and doc["error"]["code"] == 3
    assert any("0003-cext.patch: fastjson: " in p for p in doc["problems"])


@pytest.mark.parametrize("way", ["unshare", "bwrap"])
def test_the_probe_runs_as_the_images_user_in_its_working_directory(way: str, layout: Path, tmp_path: Path, cli_env) -> None:
    """An image whose config sets User 1234:1234 and WorkingDir /usr: the command and the probes run as
    that uid and gid, there (a root has no config: root, /)."""
    if way == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is installed by .ci/install-tools")
    import subprocess

    img = tmp_path / "img"
    shutil.copytree(layout, img)
    subprocess.run(["umoci", "config", "--image", f"{img}:latest", "--tag", "user", "--config.user", "1234:1234",
                    "--config.workingdir", "/usr"], check=True, capture_output=True)
    q = _queue(tmp_path / "q", [SHAPES[3]])
    util = f"{DIST}/svc/util.py"
    write_patch(q, "0002-whoami.patch", [(util, PATCHED[util], PATCHED[util] + b"import os\nWHO = (os.getuid(), os.getgid())\n"
                                                                              b"assert WHO == (1234, 1234), WHO\n")])
    env = {**cli_env, "IMGQUILT_SANDBOX": way}
    doc = json.loads(imgquilt("boot", "--image", f"oci:{img}:user", "--format", "json", "--", "python3", "-c",
                              "import os; print(os.getuid(), os.getgid(), os.getcwd())", cwd=q, env=env, check=0).out)
    assert doc["command"]["patched"]["stdout_tail"] == "1234 1234 /usr\n"
    assert doc["command"]["base"]["stdout_tail"] == "1234 1234 /usr\n"
    assert _verdicts(doc)["0002-whoami.patch"] == "boots"
    # the same image with no User: uid 0 of the sandbox, and the probe that asserts the uid fails
    doc = json.loads(imgquilt("boot", "--image", f"oci:{img}:latest", "--format", "json", "--", "python3", "-c",
                              "import os; print(os.getuid(), os.getcwd())", cwd=q, env=env, check=3).out)
    assert doc["command"]["patched"]["stdout_tail"] == "0 /\n"
    who = next(p for p in doc["patches"] if p["name"] == "0002-whoami.patch")
    assert who["verdict"] == "fails" and (who["failures"][0]["type"], who["failures"][0]["message"]) == ("AssertionError", "(0, 0)")


def test_a_named_user_is_looked_up_in_the_images_passwd(tmp_path: Path) -> None:
    from imgquilt.errors import BadInput
    from imgquilt.verbs.boot import user_of

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\napp:x:1001:1002::/home/app:/bin/sh\n")
    (tmp_path / "etc/group").write_text("root:x:0:\nstaff:x:50:\n")
    assert user_of("app", tmp_path) == (1001, 1002)
    assert user_of("app:staff", tmp_path) == (1001, 50)
    assert user_of("77", tmp_path) == (77, 0) and user_of("77:88", tmp_path) == (77, 88)
    assert user_of("root", tmp_path) is None and user_of("", tmp_path) is None
    with pytest.raises(BadInput, match="no 'nobody' in the image's /etc/passwd"):
        user_of("nobody", tmp_path)
