"""Runtime truth: after apply, real CPython runs the patched bytes, and audit says so only then.

The image ships bytecode as pip-built images do, in each of CPython's three invalidation modes:
a timestamp pyc over an mtime-0 source (SOURCE_DATE_EPOCH builds), unchecked-hash pycs at -O
levels 0, 1 and 2, a checked-hash pyc, and a sourceless pyc beside a module the patch deletes.
Every check imports the module with real CPython (`python3`, `-O`, `-OO`) from the files written.
"""
from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.imagetools import build_oci, run
from support.qtools import empty_queue, imgquilt, write_patch

PKG = "opt/app/pkg"
OLD = {
    "ts.py": b'VALUE = "old"\n',  # timestamp pyc; the edit keeps the size and the layer keeps mtime 0
    "uh.py": b'def value():\n    """docstring"""\n    assert True\n    return "old"\n',  # unchecked-hash, -O 0/1/2
    "ch.py": b'VALUE = "old-checked"\n',  # checked-hash
    "gone.py": b'VALUE = "still here"\n',  # deleted by the patch; a sourceless gone.pyc lies beside it
}
NEW = {"ts.py": b'VALUE = "new"\n', "uh.py": OLD["uh.py"].replace(b'"old"', b'"new"'),
       "ch.py": b'VALUE = "new-checked"\n', "gone.py": None}
PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import pkg.ts, pkg.uh, pkg.ch
try:
    import pkg.gone
    gone = pkg.gone.VALUE
except ImportError:
    gone = "gone"
print(pkg.ts.VALUE, pkg.uh.value(), pkg.ch.VALUE, gone)
"""
PATCHED = "new new new-checked gone"


def python_sees(root: Path) -> dict[str, str]:
    """What python3, python3 -O and python3 -OO import from `root` (never writing bytecode)."""
    out = {}
    for flags in ((), ("-O",), ("-OO",)):
        p = subprocess.run([sys.executable, "-B", *flags, "-c", PROBE, str(root / "opt/app")],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
        assert p.returncode == 0, p.stderr
        out[" ".join(flags) or "plain"] = p.stdout.strip()
    return out


def make_base_root(root: Path) -> Path:
    pkg = root / PKG
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_bytes(b"")
    for name, data in OLD.items():
        (pkg / name).write_bytes(data)
    os.utime(pkg / "ts.py", (0, 0))
    tag = sys.implementation.cache_tag
    mode = py_compile.PycInvalidationMode
    py_compile.compile(str(pkg / "ts.py"), str(pkg / "__pycache__" / f"ts.{tag}.pyc"), doraise=True,
                       invalidation_mode=mode.TIMESTAMP)
    for opt, suffix in ((0, ""), (1, ".opt-1"), (2, ".opt-2")):
        py_compile.compile(str(pkg / "uh.py"), str(pkg / "__pycache__" / f"uh.{tag}{suffix}.pyc"), doraise=True,
                           optimize=opt, invalidation_mode=mode.UNCHECKED_HASH)
    py_compile.compile(str(pkg / "ch.py"), str(pkg / "__pycache__" / f"ch.{tag}.pyc"), doraise=True,
                       invalidation_mode=mode.CHECKED_HASH)
    py_compile.compile(str(pkg / "gone.py"), str(pkg / "gone.pyc"), doraise=True, invalidation_mode=mode.TIMESTAMP)
    return root


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """An OCI image (umoci) holding the package and its bytecode, and a queue patching all four modules."""
    base = make_base_root(tmp_path / "base-root")
    assert python_sees(base)["plain"] == "old old old-checked still here"
    layout = build_oci(tmp_path / "img", [base], tag="base")
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-values.patch", [(f"{PKG}/{n}", OLD[n], NEW[n]) for n in sorted(OLD)])
    return {"layout": layout, "queue": q, "base": base}


def unpack(layout: Path, tag: str, dest: Path) -> Path:
    run("umoci", "unpack", "--image", f"{layout}:{tag}", dest)
    return dest / "rootfs"


def stale_paths() -> list[str]:
    tag = sys.implementation.cache_tag
    return sorted([f"{PKG}/__pycache__/ts.{tag}.pyc", f"{PKG}/__pycache__/uh.{tag}.pyc",
                   f"{PKG}/__pycache__/uh.{tag}.opt-1.pyc", f"{PKG}/__pycache__/uh.{tag}.opt-2.pyc",
                   f"{PKG}/__pycache__/ch.{tag}.pyc", f"{PKG}/gone.pyc"])


def copy_sources_by_hand(root: Path) -> None:
    """What an overlay script does: the new sources over the old ones (mtime 0 kept), bytecode untouched."""
    for name, data in NEW.items():
        path = root / PKG / name
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
            os.utime(path, (0, 0))


# --- the problem this solves ------------------------------------------------------------------
def test_sources_copied_over_stale_bytecode_do_not_run(world, tmp_path: Path) -> None:
    """Without imgquilt: new sources copied in by hand, mtime kept, still run the old code."""
    root = unpack(world["layout"], "base", tmp_path / "bundle")
    copy_sources_by_hand(root)
    seen = python_sees(root)
    assert seen["plain"] == "old old new-checked still here"  # ts and uh shadowed; gone.pyc still imports
    assert seen["-O"].split()[1] == "old" and seen["-OO"].split()[1] == "old"


# --- apply: every output leaves no shadowing bytecode ------------------------------------------
def test_output_image_runs_the_patched_code(world, tmp_path: Path, cli_env) -> None:
    q, layout = world["queue"], world["layout"]
    r = imgquilt("apply", "--image", f"oci:{layout}:base", "--output-image", f"oci:{layout}:fixed", "--json",
                 cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert [b["path"] for b in doc["bytecode"]] == stale_paths()
    assert {b["action"] for b in doc["bytecode"]} == {"removed"}
    root = unpack(layout, "fixed", tmp_path / "bundle")
    assert set(python_sees(root).values()) == {PATCHED}
    for p in stale_paths():
        assert not (root / p).exists()
    record = json.loads((root / "var/lib/imgquilt/applied.json").read_bytes())
    assert [b["path"] for b in record["bytecode"]] == stale_paths()
    # audit of what was written: live, exit 0
    imgquilt("audit", "--image", f"oci:{layout}:fixed", cwd=q, env=cli_env, check=0)
    imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)


def test_layer_extracted_over_the_base_runs_the_patched_code(world, tmp_path: Path, cli_env) -> None:
    """The layer on its own, added to the base by umoci, which honours its whiteouts."""
    q, layout = world["queue"], world["layout"]
    layer = tmp_path / "fix.tar"
    r = imgquilt("apply", "--image", f"oci:{layout}:base", "--layer", str(layer), "-v", cwd=q, env=cli_env, check=0)
    assert "Removed 6 stale bytecode file(s)" in r.out and stale_paths()[0] in r.out
    run("umoci", "tag", "--image", f"{layout}:base", "layered")
    run("umoci", "raw", "add-layer", "--image", f"{layout}:layered", layer)
    root = unpack(layout, "layered", tmp_path / "bundle")
    assert set(python_sees(root).values()) == {PATCHED}
    imgquilt("audit", "--image", f"oci:{layout}:layered", cwd=q, env=cli_env, check=0)


def test_in_place_runs_the_patched_code(world, tmp_path: Path, cli_env) -> None:
    q = world["queue"]
    root = unpack(world["layout"], "base", tmp_path / "bundle")
    r = imgquilt("apply", "--root", str(root), "--json", cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert doc["outputs"]["root"]["bytecode_removed"] == stale_paths()
    assert set(python_sees(root).values()) == {PATCHED}
    assert not (root / ".imgquilt-journal.json").exists()
    imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)


def test_overlay_hides_the_bytecode(world, tmp_path: Path, cli_env) -> None:
    """An overlay cannot delete (so the deletion is left out here): stale bytecode is covered by an
    empty file, which CPython ignores, recompiling the bind-mounted source."""
    q = empty_queue(tmp_path / "q2")
    write_patch(q, "0001-values.patch", [(f"{PKG}/{n}", OLD[n], NEW[n]) for n in ("ch.py", "ts.py", "uh.py")])
    out = tmp_path / "ov"
    imgquilt("apply", "--image", f"oci:{world['layout']}:base", "--overlay", str(out), cwd=q, env=cli_env, check=0)
    root = unpack(world["layout"], "base", tmp_path / "bundle")
    mounts = [line.split("\t") for line in (out / "mounts.tsv").read_text().splitlines()]
    hidden = [c for h, c, _ in mounts if c.endswith(".pyc")]
    assert hidden == ["/" + p for p in stale_paths() if "gone" not in p]
    for host, container, _ in mounts:  # what the bind mounts do, without a container runtime
        (root / container.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(host, root / container.lstrip("/"))
    assert python_sees(root)["plain"] == "new new new-checked still here"
    assert set(python_sees(root).values()) == {"new new new-checked still here"}


def test_layers_stay_reproducible(world, tmp_path: Path, cli_env) -> None:
    """Two checkouts of the queue on the same image digest write byte-identical layers."""
    q2 = tmp_path / "other-checkout"
    shutil.copytree(world["queue"], q2)
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    ref = f"oci:{world['layout']}:base"
    imgquilt("apply", "--image", ref, "--layer", str(a), cwd=world["queue"], env=cli_env, check=0)
    env2 = dict(cli_env, IMGQUILT_CACHE_DIR=str(tmp_path / "cache2"))
    imgquilt("apply", "--image", ref, "--layer", str(b), cwd=q2, env=env2, check=0)
    assert a.read_bytes() == b.read_bytes()


# --- audit judges bytecode -----------------------------------------------------------------------
def test_audit_names_the_stale_bytecode_then_clears(world, tmp_path: Path, cli_env) -> None:
    q = world["queue"]
    root = unpack(world["layout"], "base", tmp_path / "bundle")
    copy_sources_by_hand(root)
    r = imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=5)
    doc = json.loads(r.out)
    (patch,) = doc["patches"]
    states = {f["path"].rpartition("/")[2]: f["state"] for f in patch["files"]}
    assert states == {"ts.py": "shadowed", "uh.py": "shadowed", "ch.py": "live", "gone.py": "shadowed"}
    assert patch["state"] == "partial" and doc["summary"]["partial"] == 1
    files = {f["path"].rpartition("/")[2]: f for f in patch["files"]}
    tag = sys.implementation.cache_tag
    ts = files["ts.py"]
    assert f"__pycache__/ts.{tag}.pyc" in ts["detail"] and "mtime (0)" in ts["detail"]
    uh_verdicts = {b["path"].rpartition("/")[2]: b["verdict"] for b in files["uh.py"]["bytecode"]}
    assert uh_verdicts == {f"uh.{tag}.pyc": "stale", f"uh.{tag}.opt-1.pyc": "stale", f"uh.{tag}.opt-2.pyc": "stale"}
    assert "unchecked-hash" in files["uh.py"]["detail"]
    assert [b["verdict"] for b in files["ch.py"]["bytecode"]] == ["ignored"]
    assert "sourceless" in files["gone.py"]["detail"]
    text = imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=5)
    assert "shadowed" in text.out and f"ts.{tag}.pyc" in text.out
    gh = imgquilt("audit", "--root", str(root), "--format", "github", cwd=q, env=cli_env, check=5)
    assert gh.out.startswith("::error") and "shadowed" in gh.out
    # the old bytecode gone: what runs is the file's bytes
    for p in stale_paths():
        (root / p).unlink()
    assert set(python_sees(root).values()) == {PATCHED}
    imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)
    # bytecode CPython writes for the new bytes is judged current: still live
    clean_env = {"PATH": os.environ["PATH"]}  # no PYTHONDONTWRITEBYTECODE
    subprocess.run([sys.executable, "-c", PROBE, str(root / "opt/app")], check=True, capture_output=True, env=clean_env)
    subprocess.run([sys.executable, "-O", "-c", PROBE, str(root / "opt/app")], check=True, capture_output=True, env=clean_env)
    assert len(os.listdir(root / PKG / "__pycache__")) == 8  # __init__, ts, uh and ch, at -O 0 and 1
    doc = json.loads(imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=0).out)
    verdicts = {b["verdict"] for f in doc["patches"][0]["files"] for b in f["bytecode"]}
    assert verdicts == {"current"}


def test_audit_of_an_image_with_stale_bytecode(world, tmp_path: Path, cli_env) -> None:
    """The same judgement from an image's layers: the sources replaced in a layer of their own
    (mtime 0, the bytecode below left in place) are shadowed; exit 5."""
    from support.imagetools import umoci_edit

    layout = world["layout"]

    def copy_in(rootfs: Path) -> None:
        for name, data in NEW.items():
            if data is not None:
                (rootfs / PKG / name).write_bytes(data)
                os.utime(rootfs / PKG / name, (0, 0))

    umoci_edit(layout, "base", copy_in, new_tag="copied")
    q = empty_queue(tmp_path / "q2")
    write_patch(q, "0001-values.patch", [(f"{PKG}/{n}", OLD[n], NEW[n]) for n in ("ch.py", "ts.py", "uh.py")])
    doc = json.loads(imgquilt("audit", "--image", f"oci:{layout}:copied", "--json", cwd=q, env=cli_env, check=5).out)
    states = {f["path"].rpartition("/")[2]: f["state"] for f in doc["patches"][0]["files"]}
    assert states == {"ts.py": "shadowed", "uh.py": "shadowed", "ch.py": "live"}


# --- audit --pid: a process runs what it loaded when it started --------------------------------------
SERVICE = """
import sys
sys.path.insert(0, "/opt/app")
import pkg.ts
print(pkg.ts.VALUE, flush=True)
sys.stdin.read()
"""


def start_in_root(root: Path) -> subprocess.Popen:
    """python3 in a private mount namespace, chrooted into `root` (the host's /usr bound into it),
    importing the package and then waiting: a container, as far as /proc can tell."""
    binds = []
    for d in ("usr", "bin", "lib", "lib64", "sbin"):
        host = Path("/") / d
        if host.is_symlink():
            if not (root / d).is_symlink():
                (root / d).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / d).mkdir(exist_ok=True)
            binds.append(f"mount --rbind /{d} {root}/{d}")
    script = " && ".join([*binds, f"exec chroot {root} /usr/bin/python3 -B -c '{SERVICE}'"])
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.value = p.stdout.readline().strip()  # type: ignore[attr-defined]  # it imported, so it is running
    return p


def test_audit_pid_restart_pending_then_live(tmp_path: Path, cli_env) -> None:
    import time

    root = make_base_root(tmp_path / "root")
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-ts.patch", [(f"{PKG}/ts.py", OLD["ts.py"], NEW["ts.py"])])
    before = start_in_root(root)
    try:
        assert before.value == "old"  # type: ignore[attr-defined]
        assert os.readlink(f"/proc/{before.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        time.sleep(0.05)
        imgquilt("apply", "--root", f"/proc/{before.pid}/root", cwd=q, env=cli_env, check=0)
        r = imgquilt("audit", "--pid", str(before.pid), "--json", cwd=q, env=cli_env, check=5)
        doc = json.loads(r.out)
        assert doc["process"]["pid"] == before.pid and doc["process"]["root"] == f"/proc/{before.pid}/root"
        (f,) = doc["patches"][0]["files"]
        assert f["state"] == "restart-pending" and f"restart {before.pid}" in f["detail"]
        assert doc["summary"]["restart-pending"] == 1
        text = imgquilt("audit", "--pid", str(before.pid), cwd=q, env=cli_env, check=5)
        assert f"Restart process {before.pid}" in text.err and "restart-pending" in text.out
        time.sleep(0.05)
        after = start_in_root(root)
        try:
            assert after.value == "new"  # type: ignore[attr-defined]
            imgquilt("audit", "--pid", str(after.pid), cwd=q, env=cli_env, check=0)
        finally:
            after.kill()
            after.wait()
        # the bytes are live: audit of the root itself says so
        imgquilt("audit", "--root", str(root), cwd=q, env=cli_env, check=0)
    finally:
        before.kill()
        before.wait()


def test_audit_pid_that_does_not_exist(tmp_path: Path, cli_env) -> None:
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-ts.patch", [(f"{PKG}/ts.py", OLD["ts.py"], NEW["ts.py"])])
    r = imgquilt("audit", "--pid", "2147483646", cwd=q, env=cli_env, check=6)
    assert "no process 2147483646" in r.err
    r = imgquilt("audit", "--pid", "1", "--root", str(tmp_path), cwd=q, env=cli_env, check=2)


# --- every output: a registry push, an index of platforms ----------------------------------------------
def test_registry_push_and_platform_all_run_the_patched_code(world, tmp_path: Path, cli_env) -> None:
    """Pushed to a real registry (docker-registry), and written per platform of an index: each image
    read back by skopeo and unpacked by umoci runs the patched code."""
    from support.imagetools import make_index, skopeo_copy
    from support.registry_server import seed, start_registry

    q, layout = world["queue"], world["layout"]
    server = start_registry(tmp_path / "registry")
    try:
        seed(server, f"oci:{layout}:base", "pkg:base")
        r = imgquilt("apply", "--image", server.ref("pkg:base"), "--output-image", server.ref("pkg:fixed"), "--json",
                     cwd=q, env=cli_env, check=0)  # a loopback registry is spoken to over plain HTTP
        assert [b["path"] for b in json.loads(r.out)["bytecode"]] == stale_paths()
        skopeo_copy(server.ref("pkg:fixed"), f"oci:{tmp_path / 'pulled'}:fixed", "--src-tls-verify=false")
        root = unpack(tmp_path / "pulled", "fixed", tmp_path / "bundle-pushed")
        assert set(python_sees(root).values()) == {PATCHED}
    finally:
        server.stop()
    run("umoci", "tag", "--image", f"{layout}:base", "arm")
    run("umoci", "config", "--image", f"{layout}:arm", "--architecture", "arm64")
    make_index(layout, {"linux/amd64": "base", "linux/arm64": "arm"}, "multi", keep_members=True)
    r = imgquilt("apply", "--image", f"oci:{layout}:multi", "--platform", "all", "--output-image", f"oci:{layout}:multi-fixed",
                 "--json", cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert sorted({b["platform"] for b in doc["bytecode"]}) == ["linux/amd64", "linux/arm64"]
    for arch in ("amd64", "arm64"):
        one = tmp_path / f"one-{arch}"
        skopeo_copy(f"oci:{layout}:multi-fixed", f"oci:{one}:x", "--override-arch", arch)
        root = unpack(one, "x", tmp_path / f"bundle-{arch}")
        assert set(python_sees(root).values()) == {PATCHED}, arch


def test_documents_match_their_schemas(world, tmp_path: Path, cli_env) -> None:
    from jsonschema import Draft202012Validator

    schemas = Path(__file__).resolve().parents[2] / "docs" / "schemas"

    def check(command: str, out: str) -> None:
        doc = json.loads(out)
        schema = json.loads((schemas / f"{command}.schema.json").read_text())
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(doc)]
        assert not errors, errors

    q, layout = world["queue"], world["layout"]
    root = unpack(layout, "base", tmp_path / "bundle")
    check("audit", imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=5).out)  # pending
    check("apply", imgquilt("apply", "--root", str(root), "--json", cwd=q, env=cli_env, check=0).out)
    for name, data in OLD.items():  # the old sources back, over no bytecode: pending again; then
        (root / PKG / name).write_bytes(data)  # the new ones, over stale bytecode: shadowed
    make_base_root(tmp_path / "again")
    shutil.copytree(tmp_path / "again" / PKG / "__pycache__", root / PKG / "__pycache__", dirs_exist_ok=True)
    copy_sources_by_hand(root)
    out = imgquilt("audit", "--root", str(root), "--json", cwd=q, env=cli_env, check=5).out
    assert '"shadowed"' in out
    check("audit", out)
