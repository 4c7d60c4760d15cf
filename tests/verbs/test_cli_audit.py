"""`imgquilt audit` as a user runs it: on a rootfs, an OCI image with a whiteout, after apply, with --history."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest

from imgquilt.engine.result import RECORD_PATH
from support.qtools import imgquilt
from support.audit_scenario import SCENARIO_BASE, SCENARIO_NOW, SCENARIO_PATCHES, check_scenario, write_queue, write_tree
from support.audit_image import applied_patches, build_scenario_image, umoci


@pytest.fixture
def queue(tmp_path: Path) -> Path:
    return write_queue(tmp_path / "q", SCENARIO_PATCHES)


# --- a rootfs ---------------------------------------------------------------------------------------
def test_json_reports_every_state_of_a_rootfs(tmp_path: Path, queue: Path, cli_env) -> None:
    root = write_tree(tmp_path / "root", SCENARIO_NOW)
    r = imgquilt("audit", "--root", str(root), "--json", cwd=queue, env=cli_env, check=5)
    doc = json.loads(r.out)
    check_scenario(doc)
    assert doc["image"]["ref"] == f"rootfs:{root}" and doc["image"]["kind"] == "rootfs"
    assert doc["record"] is None


def test_human_table_names_each_patch_state_and_first_divergent_file(tmp_path: Path, queue: Path, cli_env) -> None:
    root = write_tree(tmp_path / "root", SCENARIO_NOW)
    r = imgquilt("audit", "--root", str(root), cwd=queue, env=cli_env, check=5)
    # in a pipe the table is plain tab-separated rows under a header row: names whole, nothing wrapped
    lines = r.out.splitlines()
    assert lines[0] == f"Audit of rootfs:{root}" and lines[1] == "patch\tstate\tfiles\tfirst divergent file"
    rows = {cells[0]: cells[1:] for cells in (line.split("\t") for line in lines[2:]) if len(cells) == 4}
    assert rows["0001-live-a.patch"][:3] == ["live", "1", ""]
    assert rows["0003-pending-c.patch"][:3] == ["pending", "1", "etc/c.conf (pending)"]
    assert rows["0006-missing-f.patch"][0] == "missing"
    assert rows["0007-partial-g.patch"][:3] == ["partial", "1/2 live", "etc/g2.conf (pending)"]
    assert "2 live, 1 pending, 1 drifted-live, 1 drifted, 1 missing, 1 partial" in r.out
    assert "5 of 7 patch(es) are not live" in r.err
    assert "Traceback" not in r.err


def test_expect_pending_on_a_clean_base_and_live_after_apply_in_place(tmp_path: Path, cli_env) -> None:
    q = write_queue(tmp_path / "q", applied_patches())
    base = write_tree(tmp_path / "base", SCENARIO_BASE)
    imgquilt("audit", "--root", str(base), "--expect", "pending", cwd=q, env=cli_env, check=0)
    r = imgquilt("audit", "--root", str(base), cwd=q, env=cli_env, check=5)
    assert "are not live" in r.err

    copy = tmp_path / "copy"
    shutil.copytree(base, copy, symlinks=True)
    imgquilt("apply", "--root", str(copy), cwd=q, env=cli_env, check=0)
    r = imgquilt("audit", "--root", str(copy), "--json", cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert {p["state"] for p in doc["patches"]} == {"live"}
    assert doc["summary"]["live"] == len(applied_patches())
    assert doc["record"]["agrees"] and doc["record"]["series_matches"] and doc["record_problems"] == []
    assert {p["record"] for p in doc["patches"]} == {"applied"}
    imgquilt("audit", "--root", str(copy), "--expect", "pending", cwd=q, env=cli_env, check=5)
    r = imgquilt("audit", "--root", str(copy), cwd=q, env=cli_env, check=0)
    assert "The record agrees with the bytes." in r.out

    # someone edits a patched file in a copy of the applied rootfs
    tampered = tmp_path / "tampered"
    shutil.copytree(copy, tampered, symlinks=True)
    f = tampered / "etc/b.conf"
    f.write_bytes(f.read_bytes().replace(b"patched", b"hotfixed"))
    r = imgquilt("audit", "--root", str(tampered), "--json", cwd=q, env=cli_env, check=5)
    doc = json.loads(r.out)
    states = {p["name"]: p["state"] for p in doc["patches"]}
    assert states.pop("0002-live-b.patch") == "drifted" and set(states.values()) == {"live"}
    (problem,) = doc["record_problems"]
    assert problem["patch"] == "0002-live-b.patch" and problem["path"] == "etc/b.conf"
    assert "recorded as applied, but the file drifted" in problem["message"]
    assert doc["record"]["agrees"] is False
    r = imgquilt("audit", "--root", str(tampered), cwd=q, env=cli_env, check=5)
    assert "recorded as applied, but the file drifted" in r.out
    assert "0002-live-b.patch (drifted)" in r.err


def test_without_image_the_lock_ref_is_used_and_globals_stand_anywhere(tmp_path: Path, cli_env) -> None:
    q = write_queue(tmp_path / "q", applied_patches())
    base = write_tree(tmp_path / "base", SCENARIO_BASE)
    imgquilt("lock", "--image", f"rootfs:{base}", cwd=q, env=cli_env, check=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = imgquilt("--queue", str(q), "audit", "--expect", "pending", "--json", cwd=elsewhere, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert doc["image"]["ref"] == f"rootfs:{base}" and doc["expect"] == "pending"
    assert doc["summary"]["pending"] == len(applied_patches())


def test_usage_errors(tmp_path: Path, queue: Path, cli_env) -> None:
    root = write_tree(tmp_path / "root", SCENARIO_NOW)
    r = imgquilt("audit", "--root", str(root), "--image", f"rootfs:{root}", cwd=queue, env=cli_env, check=2)
    assert "not both" in r.err
    r = imgquilt("audit", cwd=queue, env=cli_env, check=2)
    assert "--image" in r.err
    imgquilt("audit", "--root", str(root), "--expect", "sideways", cwd=queue, env=cli_env, check=2)


# --- --history ----------------------------------------------------------------------------------------
def test_history_flags_the_silent_removal(tmp_path: Path, cli_env) -> None:
    top = tmp_path / "repo"
    repo = git.Repo.init(top)
    with repo.config_writer() as c:
        c.set_value("user", "name", "Test")
        c.set_value("user", "email", "test@example.org")
    q = write_queue(top / "queue", applied_patches())
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "Add the vllm queue")
    series = q / "series"
    series.write_text("".join(l for l in series.read_text().splitlines(keepends=True) if not l.startswith("0004")))
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "Bump base image to 0.10.2")
    silent = repo.head.commit.hexsha
    root = write_tree(tmp_path / "root", SCENARIO_NOW)

    r = imgquilt("audit", "--history", "--root", str(root), "--json", cwd=q, env=cli_env, check=5)
    doc = json.loads(r.out)
    assert "0004-drifted-live-d.patch" not in {p["name"] for p in doc["patches"]}
    h = doc["history"]
    assert h["queue_path"] == "queue" and h["commits"] == 2
    (flag,) = h["flags"]
    assert flag == {**flag, "kind": "silent-removal", "patch": "0004-drifted-live-d.patch", "commit": silent, "subject": "Bump base image to 0.10.2"}
    gone = next(p for p in h["patches"] if p["name"] == "0004-drifted-live-d.patch")
    assert [e["kind"] for e in gone["events"]] == ["added", "removed"] and gone["in_series"] is False

    r = imgquilt("audit", "--history", "--root", str(root), cwd=q, env=cli_env, check=5)
    assert "silent-removal:" in r.out and silent[:12] in r.out and "Bump base image to 0.10.2" in r.out
    # history alone, with no image to audit
    r = imgquilt("audit", "--history", "--json", cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert doc["image"] is None and doc["history"]["flags"][0]["commit"] == silent


def test_history_outside_git_is_a_usage_error(tmp_path: Path, queue: Path, cli_env) -> None:
    root = write_tree(tmp_path / "root", SCENARIO_NOW)
    r = imgquilt("audit", "--history", "--root", str(root), cwd=queue, env=cli_env, check=2)
    assert "not inside a git repository" in r.err


def test_json_reports_every_state_of_an_oci_image_with_a_whiteout(tmp_path: Path, queue: Path, cli_env) -> None:
    img = build_scenario_image(tmp_path)
    r = imgquilt("audit", "--image", f"oci:{img}:now", "--json", cwd=queue, env=cli_env, check=5)
    doc = json.loads(r.out)
    check_scenario(doc)
    assert doc["image"]["digest"].startswith("sha256:")
    imgquilt("audit", "--image", f"oci:{img}:base", "--expect", "pending", cwd=queue, env=cli_env, check=0)


def test_json_of_a_three_layer_image_with_an_explicit_whiteout(tmp_path: Path, queue: Path, cli_env) -> None:
    """Bases in a zstd layer, the changes in an uncompressed one, the whiteout alone on top."""
    from support import imagetools as it
    changes = [it.file(p, d) for p, d in SCENARIO_NOW.items() if d is not None and d != SCENARIO_BASE[p]]
    img = it.build_oci(tmp_path / "img3", [
        [it.file(p, d) for p, d in SCENARIO_BASE.items()],
        changes,
        [it.whiteout("etc/f.conf")],
    ], tag="now", compression=["zstd", None, "gzip"])
    doc = json.loads(imgquilt("audit", "--image", f"oci:{img}:now", "--json", cwd=queue, env=cli_env, check=5).out)
    check_scenario(doc)
    (f,) = next(p for p in doc["patches"] if p["name"] == "0006-missing-f.patch")["files"]
    top = it.layer_digests(img, "now")[-1]
    assert "whited out" in f["detail"] and top in f["detail"]


def test_the_image_apply_wrote_is_live_and_its_record_agrees(tmp_path: Path, cli_env) -> None:
    q = write_queue(tmp_path / "q", applied_patches())
    img = build_scenario_image(tmp_path)
    out = tmp_path / "out"
    imgquilt("apply", "--image", f"oci:{img}:base", "--output-image", f"oci:{out}:fixed", cwd=q, env=cli_env, check=0)
    r = imgquilt("audit", "--image", f"oci:{out}:fixed", "--json", cwd=q, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert {p["state"] for p in doc["patches"]} == {"live"} and doc["record"]["agrees"]

    # the same image unpacked by umoci, then a patched file tampered with in a copy
    umoci("unpack", "--image", f"{out}:fixed", str(tmp_path / "unpacked"))
    rootfs = tmp_path / "unpacked/rootfs"
    assert (rootfs / RECORD_PATH).is_file()
    imgquilt("audit", "--root", str(rootfs), cwd=q, env=cli_env, check=0)
    copy = tmp_path / "copy"
    shutil.copytree(rootfs, copy, symlinks=True)
    (copy / "etc/a.conf").write_bytes(b"replaced wholesale\n")
    doc = json.loads(imgquilt("audit", "--root", str(copy), "--json", cwd=q, env=cli_env, check=5).out)
    assert {p["name"]: p["state"] for p in doc["patches"]}["0001-live-a.patch"] == "drifted"
    assert [x["patch"] for x in doc["record_problems"]] == ["0001-live-a.patch"]


def test_audit_reads_only_the_layers_its_targets_need(tmp_path: Path, cli_env) -> None:
    """Audit uses apply's reader: lower layers, here made unreadable, are never opened."""
    from support.imagetools import blob_path, flip_byte, layer_digests, service_on_top

    layout, q = service_on_top(tmp_path)
    for d in layer_digests(layout, "v1")[:2]:
        flip_byte(blob_path(layout, d), blob_path(layout, d).stat().st_size // 2)
    r = imgquilt("audit", "--image", f"oci:{layout}:v1", "--json", cwd=q, env=cli_env, check=5)
    doc = json.loads(r.out)
    assert [(p["name"], p["state"]) for p in doc["patches"]] == [("0001-port.patch", "pending")]
    imgquilt("audit", "--image", f"oci:{layout}:v1", "--expect", "pending", cwd=q, env=cli_env, check=0)
    # apply reads the same way: its layer and record come from the top layer alone
    imgquilt("apply", "--image", f"oci:{layout}:v1", "--layer", str(tmp_path / "fix.tar"), cwd=q, env=cli_env, check=0)
    # a new image copies every base blob, so there the corrupt lower blobs are found and refused
    out = tmp_path / "out"
    r = imgquilt("apply", "--image", f"oci:{layout}:v1", "--output-image", f"oci:{out}:fixed", cwd=q, env=cli_env, check=6)
    assert "corrupt" in r.err and "nothing was written" in r.err and not out.exists()
