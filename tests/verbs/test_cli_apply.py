"""A user's session with lock, apply and check on an extracted rootfs, run through the real console script."""
from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from support.qtools import CONF, SERVER, copy_demo_queue, imgquilt, tree_hash, write_patch



@pytest.fixture
def session(tmp_path: Path, svc: Path):
    root = svc
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"'8000'", b"'9000'"))],
                fields={"Description": "Serve on 9000", "Author": "Ops <ops@example.org>"})
    write_patch(q, "0002-workers.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"8"))],
                fields={"Description": "More workers", "Requires": "0001-port.patch"})
    return q, root


def test_session_check_lock_apply(session) -> None:
    q, root = session
    r = imgquilt("check", cwd=q, check=0)
    assert "sound" in r.out

    r = imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, check=0)
    lock = (q / "targets.lock").read_text()
    assert 'path = "lib/svc/server.py"' in lock and 'resolved = "usr/lib/svc/server.py"' in lock
    assert lock.startswith("version = 1\n")
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, check=0)
    assert (q / "targets.lock").read_text() == lock  # stable

    copy = q.parent / "copy"
    shutil.copytree(root, copy, symlinks=True)
    r = imgquilt("apply", "--root", str(copy), cwd=q, check=0)
    # concise by default: one line per patch, then the summary
    assert r.out.splitlines()[:3] == ["ok  0001-port.patch  (1 file)", "ok  0002-workers.patch  (1 file)", "Verified 2 patch(es) on rootfs:" + str(copy) + " (pinned by targets.lock)."]
    assert "Wrote root" in r.out
    assert (copy / "usr/lib/svc/server.py").read_bytes() == SERVER.replace(b"'8000'", b"'9000'")
    assert (copy / "etc/svc.conf").read_bytes() == b"[server]\r\nworkers = 8\r\n"
    record = json.loads((copy / "var/lib/imgquilt/applied.json").read_text())
    assert [p["name"] for p in record["patches"]] == ["0001-port.patch", "0002-workers.patch"]

    # running it again is a no-op, not a refusal, and prints no per-patch lines or empty table
    r = imgquilt("apply", "--root", str(copy), cwd=q, check=0)
    assert "already" in r.err
    r = imgquilt("apply", "-v", "--root", str(copy), cwd=q, check=0)
    assert "already" in r.err and r.out.splitlines()[0].startswith("Verified 2 patch(es)")
    assert "patch\t" not in r.out and "ok  " not in r.out


def test_drift_is_refused_with_every_fact_and_nothing_written(session) -> None:
    q, root = session
    imgquilt("lock", "--image", str(root), cwd=q, check=0)
    (root / "usr/lib/svc/server.py").write_bytes(SERVER + b"# local change\n")
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, check=3)
    for fact in ("0001-port.patch", "lib/svc/server.py", "usr/lib/svc/server.py", "expected sha256", "found", "edited by hand", "imgquilt restore lib/svc/server.py --root", "nothing was written"):
        assert fact in r.err, fact
    assert tree_hash(root) == before


def test_stale_and_missing_lock(session) -> None:
    q, root = session
    r = imgquilt("apply", "--root", str(root), "--locked", cwd=q, check=6)
    assert "targets.lock" in r.err
    imgquilt("lock", "--image", str(root), cwd=q, check=0)
    with open(q / "series", "a") as f:
        f.write("# a comment changes the series bytes\n")
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, check=6)
    assert "stale" in r.err and "imgquilt lock" in r.err
    assert tree_hash(root) == before


def test_unpinned_apply_says_so(session) -> None:
    q, root = session
    r = imgquilt("apply", "--image", str(root), cwd=q, check=0)
    assert "not pinned" in r.err + r.out
    assert "Nothing written" in r.out


def test_global_options_before_and_after_the_command(session, tmp_path: Path) -> None:
    q, root = session
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    a = imgquilt("--queue", str(q), "apply", "--image", str(root), "--json", cwd=elsewhere, check=0)
    b = imgquilt("apply", "--image", str(root), "--queue", str(q), "--json", cwd=elsewhere, check=0)
    assert json.loads(a.out) == json.loads(b.out)
    doc = json.loads(a.out)
    assert doc["pinned"] is False and doc["patches"] == ["0001-port.patch", "0002-workers.patch"]
    env = dict(os.environ, IMGQUILT_QUEUE=str(q))
    imgquilt("check", cwd=elsewhere, env=env, check=0)


def test_check_lists_every_problem(session) -> None:
    q, root = session
    (q / "patches" / "0003-unlisted.patch").write_bytes(b"Description: x\n")
    with open(q / "series", "a") as f:
        f.write("0009-missing.patch\n0001-port.patch\n")
    # break 0002's Requires order: it now requires a patch listed after it
    p2 = q / "patches" / "0002-workers.patch"
    p2.write_bytes(p2.read_bytes().replace(b"Requires: 0001-port.patch", b"Requires: 0009-missing.patch"))
    r = imgquilt("check", cwd=q, check=6)
    for problem in ("0003-unlisted.patch is not listed", "0009-missing.patch", "2 times", "comes after it"):
        assert problem in r.err, problem
    doc = json.loads(imgquilt("check", "--json", cwd=q, check=6).out)
    assert doc["ok"] is False and len(doc["problems"]) >= 4


def test_check_finds_broken_hash_chain(session) -> None:
    q, root = session
    write_patch(q, "0003-port-again.patch", [("lib/svc/server.py", SERVER, SERVER.replace(b"8000", b"7000"))])
    r = imgquilt("check", cwd=q, check=6)
    assert "does not continue the chain" in r.err


def test_bad_input_exit_codes(session, tmp_path: Path) -> None:
    q, root = session
    (q / "series").write_text("0001-port.patch -R\n")
    r = imgquilt("check", cwd=q, check=6)
    assert "line 1" in r.err and "-R" in r.err
    r = imgquilt("apply", "--root", str(root), cwd=q, check=6)
    r = imgquilt("apply", "--no-such-option", cwd=q, check=2)
    r = imgquilt("check", cwd=tmp_path, check=2)
    assert "No queue found" in r.err
    assert "Traceback" not in r.err
    r = imgquilt("--queue", "series", "check", cwd=q, check=2)  # the file, not its directory
    assert "'series' is not a directory" in r.err and "--queue '.'" in r.err
    r = imgquilt("--queue", "nowhere", "check", cwd=q, check=2)
    assert "'nowhere' does not exist" in r.err


def test_version_and_help() -> None:
    r = imgquilt("--version", cwd=Path("."), check=0)
    assert r.out.startswith("imgquilt ")
    r = imgquilt("--help", cwd=Path("."), check=0)
    for cmd in ("lock", "apply", "audit", "rebase", "check", "refresh", "push", "pop", "import"):
        assert cmd in r.out, cmd


def test_bad_destinations_are_refused_before_anything_is_written(session, tmp_path: Path) -> None:
    q, root = session
    overlay = tmp_path / "overlay"
    r = imgquilt("apply", "--image", str(root), "--overlay", str(overlay), "--layer", str(tmp_path / "no/such/dir/x.tar"), cwd=q, check=2)
    assert "does not exist" in r.err
    assert not overlay.exists()
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--output-image", f"oci:{tmp_path / 'img'}:x", cwd=q, check=2)
    assert "needs a container image" in r.err
    assert not (tmp_path / "img").exists()


def test_overlay_session(session, tmp_path: Path) -> None:
    q, root = session
    overlay = tmp_path / "overlay"
    imgquilt("apply", "--image", str(root), "--overlay", str(overlay), cwd=q, check=0)
    mounts = (overlay / "mounts.tsv").read_text().splitlines()
    assert any(line.split("\t")[1] == "/usr/lib/svc/server.py" for line in mounts)
    host = next(line.split("\t")[0] for line in mounts if "/usr/lib/svc/server.py" in line)
    assert Path(host).read_bytes() == SERVER.replace(b"'8000'", b"'9000'")


def test_another_image_with_the_same_files_is_reported_not_refused(tmp_path: Path) -> None:
    """The lock pins the demo image; a docker-archive copy has another manifest digest but the same bytes."""
    from support.imagetools import skopeo_copy

    q = copy_demo_queue(tmp_path / "queue")
    archive = tmp_path / "demo.tar"
    skopeo_copy(f"oci:{q / 'examples/demo-image'}:latest", f"docker-archive:{archive}:demo:latest")
    r = imgquilt("apply", "--image", f"docker-archive:{archive}", "--locked", cwd=q, check=0)
    assert "differs from the lock's" in r.err and "the file hashes decide" in r.err
    r = imgquilt("apply", "--locked", cwd=q, check=0)  # the pinned image itself: nothing to say
    assert "differs" not in r.err


@pytest.mark.parametrize("damage", ["truncated-archive", "wrong-digest", "unknown-media-type", "missing-tag"])
def test_bad_images_exit_6_and_leave_no_output(tmp_path: Path, damage: str) -> None:
    import json as _json
    import tarfile

    from support.imagetools import blob_path, flip_byte, layer_digests

    q = copy_demo_queue(tmp_path / "queue")
    layout = q / "examples/demo-image"
    ref = f"oci:{layout}:latest"
    if damage == "truncated-archive":
        archive = tmp_path / "demo.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(layout, arcname=".")
        archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
        ref = f"oci-archive:{archive}"
    elif damage == "wrong-digest":
        top = layer_digests(layout, "latest")[-1]
        flip_byte(blob_path(layout, top), 100)
    elif damage == "unknown-media-type":
        index = _json.loads((layout / "index.json").read_text())
        mdigest = index["manifests"][0]["digest"]
        mpath = layout / "blobs/sha256" / mdigest.split(":")[1]
        m = _json.loads(mpath.read_text())
        m["layers"][-1]["mediaType"] = "application/x-unknown-layer"
        data = _json.dumps(m).encode()
        import hashlib

        new = hashlib.sha256(data).hexdigest()
        (layout / "blobs/sha256" / new).write_bytes(data)
        index["manifests"][0].update(digest=f"sha256:{new}", size=len(data))
        (layout / "index.json").write_text(_json.dumps(index))
    else:
        ref = f"oci:{layout}:no-such-tag"
    out_layer, out_image = tmp_path / "fix.tar.gz", tmp_path / "out-image"
    r = imgquilt("apply", "--image", ref, "--layer", str(out_layer), "--output-image", f"oci:{out_image}:x", cwd=q, check=6)
    assert "Traceback" not in r.err and r.err.startswith("imgquilt: ")
    assert not out_layer.exists() and not out_image.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_check_with_an_image_verifies_the_series_on_it(session) -> None:
    q, root = session
    imgquilt("check", "--image", f"rootfs:{root}", cwd=q, check=0)
    (root / "etc/svc.conf").write_bytes(b"[server]\r\nworkers = 4\r\n")
    # drift is exit 3 in every command: check --image says what apply would
    r = imgquilt("check", "--image", f"rootfs:{root}", cwd=q, check=3)
    assert "0002-workers.patch" in r.err and "base drifted" in r.err
    imgquilt("apply", "--image", f"rootfs:{root}", cwd=q, check=3)
    doc = json.loads(imgquilt("check", "--image", f"rootfs:{root}", "--json", cwd=q, check=3).out)
    assert doc["ok"] is False and doc["error"]["code"] == 3 and doc["error"]["kind"] == "base-drift"
    assert len(doc["problems"]) == 1 and "0002-workers.patch: etc/svc.conf: base drifted" in doc["problems"][0]


def _demo_rootfs(q: Path, dest: Path) -> Path:
    import subprocess
    import sys

    subprocess.run([sys.executable, "examples/build_demo.py", "--rootfs", str(dest)], cwd=q, check=True, capture_output=True)
    return dest


@pytest.mark.parametrize("second_with_image", [True, False])
def test_apply_root_twice_with_and_without_image_is_a_noop(tmp_path: Path, cli_env, second_with_image: bool) -> None:
    """The apply record is imgquilt's own: never a target the series verifies (both orders)."""
    q = copy_demo_queue(tmp_path / "q")
    root = _demo_rootfs(q, tmp_path / "root")
    image = ["--image", "oci:examples/demo-image:latest"]
    first, second = ([], image) if second_with_image else (image, [])
    imgquilt("apply", "--root", str(root), *first, cwd=q, env=cli_env, check=0)
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), *second, cwd=q, env=cli_env, check=0)
    assert f"Nothing to change in root {root}: it already holds the series' result." in r.out and "Wrote root" not in r.out
    assert tree_hash(root) == before


def test_same_queue_same_image_in_two_directories_gives_identical_layers(tmp_path: Path, cli_env) -> None:
    """Layer bytes depend on the queue and the image digest only: the record keeps no local path."""
    layers = []
    for where in ("runner-a/checkout", "elsewhere/b"):
        q = copy_demo_queue(tmp_path / where)
        imgquilt("apply", "--image", f"oci:{q}/examples/demo-image:latest", "--layer", "fix.tar.gz", cwd=q, env=cli_env, check=0)
        layers.append((q / "fix.tar.gz").read_bytes())
        with tarfile.open(q / "fix.tar.gz") as tar:
            record = json.loads(tar.extractfile("var/lib/imgquilt/applied.json").read())
        assert record["image"] == {"ref": None, "digest": record["image"]["digest"]} and record["image"]["digest"].startswith("sha256:")
    assert layers[0] == layers[1]


def test_an_output_over_the_queue_s_own_files_is_refused_before_anything_is_written(tmp_path: Path, cli_env) -> None:
    """`--output-image oci-archive:series` wrote the archive over the series and exited 0; an output on
    the queue's own files (series, targets.lock, patches/, .imgquilt/), or an overlay holding the queue,
    is a usage error now, and every queue file stays as it was. out/ beside them is fine."""
    q = copy_demo_queue(tmp_path / "q")
    (q / "elsewhere").symlink_to(q / "patches")  # a link on the way is followed, as the kernel would
    before = tree_hash(q)
    image = ["--image", "oci:examples/demo-image:latest"]
    for output in (["--output-image", "oci-archive:series"], ["--output-image", "docker-archive:targets.lock"],
                   ["--layer", "patches/x.tar.gz"], ["--layer", "elsewhere/x.tar.gz"],
                   ["--output-image", "oci:.imgquilt/img:t"], ["--overlay", "."], ["--overlay", str(q.parent)]):
        r = imgquilt("apply", *image, *output, cwd=q, env=cli_env, check=2)
        assert "would write over the queue's" in r.err and "nothing was written" in r.err, r.err
        assert tree_hash(q) == before
    (q / "out").mkdir()
    imgquilt("apply", *image, "--layer", "out/fix.tar.gz", cwd=q, env=cli_env, check=0)
    assert (q / "out/fix.tar.gz").is_file()


def test_an_output_naming_profile_without_a_profile_is_refused_before_anything_is_read(tmp_path: Path, cli_env) -> None:
    """`apply --layer out/{profile}.tar.gz` with no --profile wrote a file named `{profile}.tar.gz`; with
    no profile selected there is no name for the placeholder: a usage error, nothing read or written."""
    q = copy_demo_queue(tmp_path / "q")
    (q / "out").mkdir()
    before = tree_hash(q)
    for output in (["--layer", "out/{profile}.tar.gz"], ["--output-image", "oci:out/img:{profile}"], ["--overlay", "out/{profile}"]):
        r = imgquilt("apply", *output, cwd=q, env=cli_env, check=2)
        assert f"{output[0]} {output[1]} holds {{profile}}, but no profile is selected" in r.err, r.err
        assert tree_hash(q) == before


def test_apply_reverse_puts_back_the_modes_the_series_changed(tmp_path: Path) -> None:
    """`apply --reverse` leaves the root as the image has it, modes included: a chmod +x alone, a chmod
    with an edit (no lock: the section's old mode says it), and a deleted executable (the lock pins it)."""
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    for name, data, mode in (("only-mode", b"#!/bin/sh\n", 0o644), ("mode-and-edit", b"#!/bin/sh\n", 0o644),
                             ("drop-x", b"#!/bin/sh\n", 0o755), ("gone", b"#!/bin/sh\nexit 0\n", 0o755)):
        (root / "usr/bin" / name).write_bytes(data)
        os.chmod(root / "usr/bin" / name, mode)
    q = tmp_path / "q"
    q.mkdir()
    imgquilt("init", cwd=q, check=0)
    imgquilt("new", "0001-modes.patch", cwd=q, check=0)
    imgquilt("add", "usr/bin/only-mode", "usr/bin/mode-and-edit", "usr/bin/drop-x", "usr/bin/gone", "--image", f"rootfs:{root}", cwd=q, check=0)
    work = q / ".imgquilt/work/usr/bin"
    os.chmod(work / "only-mode", 0o755)
    (work / "mode-and-edit").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(work / "mode-and-edit", 0o755)
    os.chmod(work / "drop-x", 0o644)
    (work / "gone").unlink()
    imgquilt("refresh", cwd=q, check=0)
    before = tree_hash(root)
    out = shutil.copytree(root, tmp_path / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert [os.stat(out / "usr/bin" / n).st_mode & 0o777 for n in ("only-mode", "mode-and-edit", "drop-x")] == [0o755, 0o755, 0o644]
    assert not (out / "usr/bin/gone").exists()
    imgquilt("apply", "--reverse", "--root", str(out), cwd=q, check=0)
    got = {n: os.stat(out / "usr/bin" / n).st_mode & 0o777 for n in ("only-mode", "mode-and-edit", "drop-x")}
    assert got == {"only-mode": 0o644, "mode-and-edit": 0o644, "drop-x": 0o755}
    assert (out / "usr/bin/gone").read_bytes() == b"#!/bin/sh\nexit 0\n"  # its mode: only a pin knows it (below)
    imgquilt("pop", "-a", cwd=q, check=0)
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, check=0)
    out = shutil.copytree(root, tmp_path / "out2", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    imgquilt("apply", "--reverse", "--root", str(out), cwd=q, check=0)
    assert tree_hash(out) == before
