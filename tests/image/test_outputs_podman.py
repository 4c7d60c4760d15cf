"""Images people can read, where podman users keep them (issue 29, points 3 and 5):

- `--output-image` keeps the base's `created` (or SOURCE_DATE_EPOCH) in the config and in a history
  entry, and the layer stays byte-reproducible;
- `--output-image containers-storage:NAME` (podman images shows it) and `dir:DIR` (skopeo reads it),
  and a destination imgquilt cannot write names every one it can;
- `imgquilt overlay-args` renders mounts.tsv into arguments a real `podman create` takes (podman's -v
  and docker's --mount), and into a Kubernetes pod that `podman kube play` creates.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, layer_digests, set_config
from support.qtools import imgquilt, write_patch

BASE_DATE = "2026-12-01T00:00:00Z"
SVC = b"def port():\n    return 8000\n"

needs_podman = pytest.mark.skipif(shutil.which("podman") is None or shutil.which("skopeo") is None, reason="podman and skopeo")


@pytest.fixture
def setup(tmp_path: Path, cli_env: dict[str, str]):
    layout = tmp_path / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode()), file("etc/motd", "hi\n")]], tag="v1")
    set_config(layout, "v1", lambda c: c.update(created=BASE_DATE))
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    env = {k: v for k, v in cli_env.items() if k != "SOURCE_DATE_EPOCH"}
    imgquilt("lock", "--image", f"oci:{layout}:v1", cwd=q, env=env, check=0)
    return q, layout, env


def skopeo_json(*args: str) -> dict:
    return json.loads(subprocess.run(["skopeo", *args], check=True, capture_output=True, text=True).stdout)


def test_the_patched_image_keeps_the_base_created_date_and_says_so_in_its_history(setup, tmp_path: Path) -> None:
    q, layout, env = setup
    imgquilt("apply", "--output-image", f"oci:{tmp_path}/out:fixed", cwd=q, env=env, check=0)
    shown = skopeo_json("inspect", f"oci:{tmp_path}/out:fixed")
    assert shown["Created"] == BASE_DATE  # not 1970, not the moment it was written
    config = skopeo_json("inspect", "--config", f"oci:{tmp_path}/out:fixed")
    assert config["created"] == BASE_DATE
    assert config["history"][-1]["created"] == BASE_DATE and config["history"][-1]["created_by"].startswith("imgquilt apply ")
    first = layer_digests(tmp_path / "out", "fixed")[-1]
    # the same queue on the same base: the same layer and the same image, run after run
    imgquilt("apply", "--output-image", f"oci:{tmp_path}/again:fixed", cwd=q, env=env, check=0)
    assert layer_digests(tmp_path / "again", "fixed")[-1] == first
    assert skopeo_json("inspect", f"oci:{tmp_path}/again:fixed")["Digest"] == shown["Digest"]
    # SOURCE_DATE_EPOCH wins when set (a build that pins its dates); the layer's bytes are the same
    imgquilt("apply", "--output-image", f"oci:{tmp_path}/sde:fixed", cwd=q, env={**env, "SOURCE_DATE_EPOCH": "1767225600"}, check=0)
    config = skopeo_json("inspect", "--config", f"oci:{tmp_path}/sde:fixed")
    assert config["created"] == config["history"][-1]["created"] == "2026-01-01T00:00:00Z"
    # (the file mtimes in the layer are SOURCE_DATE_EPOCH's: another layer, the same under that epoch)
    imgquilt("apply", "--output-image", f"oci:{tmp_path}/sde2:fixed", cwd=q, env={**env, "SOURCE_DATE_EPOCH": "1767225600"}, check=0)
    assert layer_digests(tmp_path / "sde", "fixed")[-1] == layer_digests(tmp_path / "sde2", "fixed")[-1]


def test_an_unknown_destination_names_every_one_imgquilt_writes(setup, tmp_path: Path) -> None:
    q, _, env = setup
    r = imgquilt("apply", "--output-image", f"ostree:{tmp_path}/x", cwd=q, env=env, check=2)
    for spelled in ("oci:", "oci-archive:", "docker-archive:", "docker://", "containers-storage:", "dir:"):
        assert spelled in r.err, spelled
    r = imgquilt("apply", "--output-image", "containers-storage:Not A Name", cwd=q, env=env, check=2)
    assert "containers-storage:Not A Name names no image" in r.err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine\n")
    r = imgquilt("apply", "--output-image", f"dir:{tmp_path}/full", cwd=q, env=env, check=2)
    assert "not an image skopeo wrote" in r.err and (tmp_path / "full" / "keep.txt").read_text() == "mine\n"


@pytest.mark.parametrize("dest, said", [
    ("containers-storage:localhost/app:1\nimgquilt: wrote it", "control character '\\n'"),
    ("containers-storage:localhost/app:1\x1b[2J", "control character '\\x1b'"),
    ("containers-storage:localhost/a,b:1", "holds `,`"),
    ("containers-storage:localhost/../app:1", "names no image as podman spells one"),
    ("containers-storage:localhost/app:1:2", "names no image as podman spells one"),
    ("containers-storage:[vfs@/tmp/x/../etc+/run/x]app:1", "holds a `..` component"),
    ("containers-storage:[vfs@/tmp/g:overlay.mount_program=/bin/sh]app:1", "which skopeo's store specifier cannot carry"),
    ("containers-storage:[vfs@tmp/g]app:1", "is not an absolute path"),
    ("containers-storage:[Bad Driver@/tmp/g]app:1", "is no storage driver name"),
    ("dir:{tmp}/a\nb", "control character '\\n'"),
    ("dir:{tmp}/a,b", "holds `,`"),
    ("dir:{tmp}/sub/../d", "holds a `..` component"),
])
def test_a_hostile_containers_storage_or_dir_name_is_refused_before_any_work(setup, tmp_path: Path, dest: str, said: str) -> None:
    q, _, env = setup
    (tmp_path / "sub").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    r = imgquilt("apply", "--output-image", dest.format(tmp=tmp_path), "--overlay", str(tmp_path / "ov"), cwd=q, env=env, check=2)
    assert said in r.err and r.out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # not the overlay either: refused before any output


@needs_podman
def test_dir_output_is_an_image_skopeo_reads_with_the_digest_imgquilt_reports(setup, tmp_path: Path) -> None:
    q, _, env = setup
    doc = json.loads(imgquilt("--json", "apply", "--output-image", f"dir:{tmp_path}/d", cwd=q, env=env, check=0).out)
    written = doc["outputs"]["image"]
    assert skopeo_json("inspect", f"dir:{tmp_path}/d")["Digest"] == written["digest"]
    assert (tmp_path / "d" / "version").read_text().startswith("Directory Transport Version")
    # again over the earlier dir: image: replaced whole
    imgquilt("apply", "--output-image", f"dir:{tmp_path}/d", cwd=q, env=env, check=0)
    assert skopeo_json("inspect", f"dir:{tmp_path}/d")["Digest"] == written["digest"]


@needs_podman
def test_containers_storage_output_podman_images_shows_it_and_overlay_args_feed_podman_create(setup, tmp_path: Path, own_store) -> None:
    q, _, env = setup
    env = {**env, **own_store}  # a private store: what the machine's own holds (and its driver) plays no part
    name = f"localhost/imgquilt-test-{uuid.uuid4().hex[:10]}"
    made: list[str] = []
    try:
        doc = json.loads(imgquilt("--json", "apply", "--output-image", f"containers-storage:{name}:fixed", "--overlay", str(tmp_path / "ov"),
                                  cwd=q, env=env, check=0).out)
        image = doc["outputs"]["image"]
        listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}", name], check=True,
                                capture_output=True, text=True).stdout.split()
        assert listed == [f"{name}:fixed", image["config_digest"].removeprefix("sha256:")[:12]]
        inspected = json.loads(subprocess.run(["podman", "image", "inspect", f"{name}:fixed"], check=True,
                                              capture_output=True, text=True).stdout)[0]
        assert inspected["Digest"] == image["digest"] and inspected["Created"].startswith("2026-12-01T00:00:00")

        ov = tmp_path / "ov"
        want = {(str(ov / "srv/app/svc.py"), "/srv/app/svc.py"), (str(ov / "var/lib/imgquilt/applied.json"), "/var/lib/imgquilt/applied.json")}
        for fmt in ("podman", "docker"):
            line = imgquilt("overlay-args", str(ov), "--format", fmt, cwd=q, env=env, check=0).out.strip()
            args = json.loads(imgquilt("--json", "overlay-args", str(ov), "--format", fmt, cwd=q, env=env, check=0).out)["args"]
            assert line.split() == args  # plain paths: one line the shell splits as it is
            cid = subprocess.run(["podman", "create", *args, f"{name}:fixed", "/bin/true"], check=True, capture_output=True, text=True).stdout.strip()
            made.append(cid)
            mounts = json.loads(subprocess.run(["podman", "inspect", cid, "--format", "{{json .Mounts}}"], check=True,
                                               capture_output=True, text=True).stdout)
            assert {(m["Source"], m["Destination"]) for m in mounts} == want, fmt
            assert all(m["Type"] == "bind" and m["RW"] is False for m in mounts), fmt

        k8s = json.loads(imgquilt("--json", "overlay-args", str(ov), "--format", "k8s", cwd=q, env=env, check=0).out)
        yaml = imgquilt("overlay-args", str(ov), "--format", "k8s", cwd=q, env=env, check=0).out
        assert yaml.startswith("volumeMounts:\n- name: \"imgquilt-0\"\n") and "\nvolumes:\n" in yaml
        pod = f"imgquilt-test-{uuid.uuid4().hex[:8]}"
        spec = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                "spec": {"containers": [{"name": "app", "image": f"{name}:fixed", "command": ["/bin/true"],
                                         "volumeMounts": k8s["volumeMounts"]}],
                         "volumes": k8s["volumes"]}}
        (tmp_path / "pod.yaml").write_text(json.dumps(spec))  # YAML 1.2 reads JSON
        try:
            subprocess.run(["podman", "kube", "play", "--start=false", str(tmp_path / "pod.yaml")], check=True, capture_output=True, text=True)
            mounts = json.loads(subprocess.run(["podman", "inspect", f"{pod}-app", "--format", "{{json .Mounts}}"], check=True,
                                               capture_output=True, text=True).stdout)
            assert {(m["Source"], m["Destination"]) for m in mounts} == want
            assert all(m["RW"] is False for m in mounts)
        finally:
            subprocess.run(["podman", "pod", "rm", "-f", pod], capture_output=True)
    finally:
        for cid in made:
            subprocess.run(["podman", "rm", "-f", cid], capture_output=True)
        subprocess.run(["podman", "rmi", "-f", f"{name}:fixed"], capture_output=True)


def test_overlay_args_refuse_a_list_that_is_not_the_overlay_s(setup, tmp_path: Path) -> None:
    q, _, env = setup
    imgquilt("apply", "--overlay", str(tmp_path / "ov"), cwd=q, env=env, check=0)
    tsv = tmp_path / "ov" / "mounts.tsv"
    tsv.write_text(tsv.read_text() + f"{tmp_path}/x\t/../etc/shadow\t0644\n")
    r = imgquilt("overlay-args", str(tmp_path / "ov"), cwd=q, env=env, check=6)
    assert "is not a mount of this overlay" in r.err
    imgquilt("overlay-args", str(tmp_path), cwd=q, env=env, check=6)  # no mounts.tsv at all
