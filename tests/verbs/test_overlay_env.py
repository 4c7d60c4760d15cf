"""A profile's env defaults reach every way of deploying (issue 34, point 8): `apply --overlay` writes
them beside mounts.tsv (env.list), `overlay-args` renders them for podman, docker and k8s, and a real
`podman create` with those arguments holds them in its Env; `apply --root` records them and says the
runtime must set them."""
from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support.qtools import copy_demo_queue, imgquilt

DEMO = "oci:examples/demo-image:latest"


@pytest.fixture
def queue(tmp_path: Path) -> tuple[Path, dict]:
    import os

    q = copy_demo_queue(tmp_path / "queue")
    env = {k: v for k, v in os.environ.items() if k != "IMGQUILT_QUEUE"}
    env.update(HOME=str(tmp_path / "home"), SOURCE_DATE_EPOCH="0")
    imgquilt("lock", "--profile", "edge", "--image", DEMO, "--env", "DEMO_KILL=0", "--env", "DEMO_NAME=a b'c", cwd=q, env=env, check=0)
    return q, env


def test_overlay_carries_the_profiles_env_and_overlay_args_render_it(queue, tmp_path: Path) -> None:
    q, env = queue
    ov = tmp_path / "ov"
    r = imgquilt("apply", "--profile", "edge", "--overlay", str(ov), cwd=q, env=env, check=0)
    assert "Env: DEMO_KILL=0, DEMO_NAME=a b'c (in " in r.out and "overlay-args" in r.out
    assert (ov / "env.list").read_bytes() == b"DEMO_KILL=0\nDEMO_NAME=a b'c\n"  # docker's --env-file format
    doc = json.loads(imgquilt("--json", "apply", "--profile", "edge", "--overlay", str(ov), cwd=q, env=env, check=0).out)
    assert doc["outputs"]["overlay"]["env"] == {"set": {"DEMO_KILL": "0", "DEMO_NAME": "a b'c"}, "file": str(ov / "env.list")}
    for fmt in ("podman", "docker"):
        args = json.loads(imgquilt("--json", "overlay-args", str(ov), "--format", fmt, cwd=q, env=env, check=0).out)["args"]
        assert args[:4] == ["-e", "DEMO_KILL=0", "-e", "DEMO_NAME=a b'c"]
        line = imgquilt("overlay-args", str(ov), "--format", fmt, cwd=q, env=env, check=0).out.strip()
        assert shlex.split(line) == args  # quoted as the mounts are: eval gives the same words back
    k8s = json.loads(imgquilt("--json", "overlay-args", str(ov), "--format", "k8s", cwd=q, env=env, check=0).out)
    assert k8s["env"] == [{"name": "DEMO_KILL", "value": "0"}, {"name": "DEMO_NAME", "value": "a b'c"}]
    yaml = imgquilt("overlay-args", str(ov), "--format", "k8s", cwd=q, env=env, check=0).out
    assert yaml.startswith('env:\n- name: "DEMO_KILL"\n  value: "0"\n')


def test_an_overlay_without_env_has_no_env_list_and_the_same_args(queue, tmp_path: Path) -> None:
    q, env = queue
    imgquilt("apply", "--overlay", str(tmp_path / "ov"), cwd=q, env=env, check=0)
    assert not (tmp_path / "ov" / "env.list").exists()
    args = json.loads(imgquilt("--json", "overlay-args", str(tmp_path / "ov"), cwd=q, env=env, check=0).out)["args"]
    assert "-e" not in args and args[0] == "-v"


def test_a_hand_edited_env_list_is_refused(queue, tmp_path: Path) -> None:
    q, env = queue
    ov = tmp_path / "ov"
    imgquilt("apply", "--profile", "edge", "--overlay", str(ov), cwd=q, env=env, check=0)
    (ov / "env.list").write_bytes(b"DEMO_KILL=0\n--privileged\n")
    r = imgquilt("overlay-args", str(ov), cwd=q, env=env, check=6)
    assert "env.list line 2 is not KEY=VALUE" in r.err


def test_apply_root_records_the_env_and_says_the_runtime_must_set_it(queue, tmp_path: Path) -> None:
    q, env = queue
    root = tmp_path / "root"
    subprocess.run(["umoci", "raw", "unpack", "--rootless", "--image", str(q / "examples/demo-image") + ":latest", str(root)],
                   check=True, capture_output=True) if shutil.which("umoci") else pytest.skip("umoci not installed")
    r = imgquilt("apply", "--profile", "edge", "--root", str(root), cwd=q, env=env, check=0)
    assert "Env: DEMO_KILL=0, DEMO_NAME=a b'c (recorded in the root's applied.json" in r.out and "runtime" in r.out
    record = json.loads((root / "var/lib/imgquilt/applied.json").read_text())
    assert record["env"] == {"DEMO_KILL": "0", "DEMO_NAME": "a b'c"}


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman not installed")
def test_podman_create_with_overlay_args_holds_the_env_defaults(queue, tmp_path: Path) -> None:
    q, env = queue
    ov = tmp_path / "ov"
    imgquilt("apply", "--profile", "edge", "--overlay", str(ov), cwd=q, env=env, check=0)
    args = json.loads(imgquilt("--json", "overlay-args", str(ov), cwd=q, env=env, check=0).out)["args"]
    # a private store: nothing of this test is left in (or depends on) the machine's podman store
    import tempfile

    run = Path(tempfile.mkdtemp(prefix="iq-run-", dir="/tmp"))  # podman wants a runroot under 50 characters
    store = ["--root", str(tmp_path / "store"), "--runroot", str(run), "--storage-driver", "vfs"]
    name = f"localhost/imgquilt-test-{uuid.uuid4().hex[:10]}:edge"
    subprocess.run(["skopeo", "copy", "--quiet", f"oci:{q}/examples/demo-image:latest",
                    f"containers-storage:[vfs@{tmp_path / 'store'}+{run}]{name}"], check=True, capture_output=True)
    made = subprocess.run(["podman", *store, "create", *args, name, "/bin/true"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    cid = made.stdout.strip()
    try:
        inspected = json.loads(subprocess.run(["podman", *store, "inspect", cid], check=True, capture_output=True, text=True).stdout)[0]
        assert {"DEMO_KILL=0", "DEMO_NAME=a b'c"} <= set(inspected["Config"]["Env"])
    finally:
        subprocess.run(["podman", *store, "rm", "-f", cid], capture_output=True)
        subprocess.run(["podman", *store, "rmi", "-af"], capture_output=True)
        shutil.rmtree(run, ignore_errors=True)
