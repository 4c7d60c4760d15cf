"""A user's rebase sessions, through the real console script, on old/new rootfs trees in tmp."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.qtools import imgquilt, write_patch
from support.rebase_queue import (
    DEBUG_LINE, ENVS, LOADED_LINE, LOADED_VERIFY, SHARD_LOG, SHARD_LOG_PY, SITE311, SITE312, WEIGHTS,
    WEIGHTS_V1, WEIGHTS_V2, make_patches, make_root, patched, snapshot,
)
from support.rebase_cli import W311


@pytest.fixture
def session(tmp_path: Path, cli_env):
    """A queue of three patches locked to the old image, as the user has it before the upgrade."""
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    q = tmp_path / "queue"
    make_patches(q)
    imgquilt("check", cwd=q, env=cli_env, check=0)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    return tmp_path, q, old, cli_env


def finish_checks(q: Path, new: Path, env, expected: dict[str, bytes]) -> None:
    """After a rebase: check passes, apply verifies on the new image and writes the expected files."""
    imgquilt("check", cwd=q, env=env, check=0)
    r = imgquilt("apply", "--image", f"rootfs:{new}", "--locked", cwd=q, env=env, check=0)
    assert "Verified 3 patch(es)" in r.out or "Verified 2 patch(es)" in r.out
    copy = new.parent / "new-applied"
    shutil.copytree(new, copy, symlinks=True)
    imgquilt("apply", "--root", str(copy), cwd=q, env=env, check=0)
    for path, data in expected.items():
        assert (copy / path).read_bytes() == data


def test_upgrade_with_lines_inserted_above(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=0)
    assert "0001-log-shard-tensors.patch" in r.out and "merged" in r.out and "unchanged" in r.out
    assert "Rebased 3 patch(es)" in r.out
    finish_checks(q, new, env, {W311: patched(WEIGHTS_V2, verify=True)})
    # the store now holds the new bases: the next rebase needs no --from
    assert any((q / ".imgquilt/objects").rglob("*"))


def test_conflict_continue_session(session) -> None:
    tmp, q, old, env = session
    upstream_line = b'logger.debug("loading shard %s from %s", shard.name, model_dir)'
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, upstream_line))
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=4)
    assert "0001-log-shard-tensors.patch" in r.err and W311 in r.err
    assert "imgquilt rebase --continue" in r.err and "imgquilt rebase --abort" in r.err
    work = q / ".imgquilt/work" / W311
    assert f"edit .imgquilt/work/{W311}" in r.err
    text = work.read_bytes()
    assert text.count(b"<<<<<<< ") == 1 and text.count(b">>>>>>> ") == 1

    r = imgquilt("rebase", "--continue", cwd=q, env=env, check=4)
    assert "conflict markers remain" in r.err

    # the user's resolution, scripted: keep upstream's argument and the patch's level
    resolved = b'        logger.info("loading shard %s from %s (%d tensors)", shard.name, model_dir, len(shard.tensors))\n'
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            skipping = True
            out.append(resolved)
        elif line.startswith(b">>>>>>> "):
            skipping = False
        elif not skipping:
            out.append(line)
    work.write_bytes(b"".join(out))

    r = imgquilt("rebase", "--continue", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert doc["status"] == "done"
    assert [(p["name"], p["state"]) for p in doc["patches"]] == [
        ("0001-log-shard-tensors.patch", "merged"), ("0002-log-verify.patch", "merged"), ("0003-spawn-workers.patch", "unchanged"),
    ]
    assert doc["patches"][0]["files"][0]["by_hand"] is True
    expected = WEIGHTS_V2.replace(DEBUG_LINE, resolved.strip()).replace(LOADED_LINE, LOADED_VERIFY)
    finish_checks(q, new, env, {W311: expected})
    assert not work.exists()


def test_conflict_abort_session_restores_every_byte(session) -> None:
    tmp, q, old, env = session
    before = snapshot(q)
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, b'logger.warning("shard %s", shard.name)'))
    r = imgquilt("--json", "rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=4)
    doc = json.loads(r.out)
    assert doc["status"] == "stopped" and doc["conflict"]["patch"] == "0001-log-shard-tensors.patch"
    assert doc["conflict"]["files"] == [{"path": W311, "work": f".imgquilt/work/{W311}", "kind": "markers", "detail": "1 conflict(s) marked in the file"}]
    assert doc["patches"][0]["state"] == "conflict"
    assert doc["error"]["code"] == 4 and doc["error"]["kind"] == "rebase-conflict" and W311 in doc["error"]["message"]

    # --status re-lists the stopped rebase (top would say "No patches applied" now)
    r = imgquilt("rebase", "--status", cwd=q, env=env, check=0)
    assert "0001-log-shard-tensors.patch\tconflict" in r.out
    assert f"edit .imgquilt/work/{W311}" in r.err and "imgquilt rebase --continue" in r.err
    status = json.loads(imgquilt("rebase", "--status", "--json", cwd=q, env=env, check=0).out)
    assert status["conflict"] == doc["conflict"] and status["status"] == "stopped"
    imgquilt("rebase", "--status", "--image", f"rootfs:{new}", cwd=q, env=env, check=2)

    r = imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=2)
    assert "already in progress" in r.err
    # while the rebase is stopped, commands that would change the queue wait for it
    for cmd in (["lock", "--image", f"rootfs:{new}"], ["push"], ["new", "0009-x.patch"], ["refresh"]):
        r = imgquilt(*cmd, cwd=q, env=env, check=2)
        assert "rebase --continue" in r.err and "--abort" in r.err, cmd
    imgquilt("series", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    assert "aborted" in r.out
    assert snapshot(q) == before
    assert not (q / ".imgquilt/rebase").exists() and not (q / ".imgquilt/work" / W311).exists()
    r = imgquilt("rebase", "--abort", cwd=q, env=env, check=2)
    assert "No rebase in progress" in r.err
    imgquilt("check", cwd=q, env=env, check=0)


def test_change_went_upstream_json_report(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", patched(WEIGHTS_V2))
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    p1 = doc["patches"][0]
    assert (p1["name"], p1["state"], p1["dropped"]) == ("0001-log-shard-tensors.patch", "merged-upstream", True)
    assert p1["files"][0]["state"] == "merged-upstream"
    assert doc["summary"]["merged-upstream"] == 1 and doc["summary"]["dropped"] == 1
    assert (q / "series").read_text() == "0002-log-verify.patch\n0003-spawn-workers.patch\n"
    finish_checks(q, new, env, {W311: patched(WEIGHTS_V2, verify=True)})


def test_moved_to_python3_12(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2, site=SITE312)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    files = {f["from"]: f["path"] for p in doc["patches"] for f in p["files"]}
    assert files == {
        W311: f"{SITE312}/{WEIGHTS}",
        f"{SITE311}/{ENVS}": f"{SITE312}/{ENVS}",
        f"{SITE311}/{SHARD_LOG}": f"{SITE312}/{SHARD_LOG}",
    }
    assert {p["state"] for p in doc["patches"]} == {"moved"}
    finish_checks(q, new, env, {f"{SITE312}/{WEIGHTS}": patched(WEIGHTS_V2, verify=True), f"{SITE312}/{SHARD_LOG}": SHARD_LOG_PY})


def test_map_option_and_table(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2, site="opt/venv/lib/python3.12/site-packages/vllm")
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}",
                 "--map", f"{SITE311}=opt/venv/lib/python3.12/site-packages/vllm", cwd=q, env=env, check=0)
    assert "moved" in r.out and "(from usr/local/lib/python3.11" in r.out
    imgquilt("check", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--map", "nowhere=x", cwd=q, env=env, check=2)
    assert "no target" in r.err


def test_without_old_bases_the_user_is_told_to_pass_from(session) -> None:
    tmp, q, old, env = session
    shutil.rmtree(q / ".imgquilt/objects", ignore_errors=True)  # e.g. a fresh clone of the queue
    old.rename(tmp / "old-elsewhere")  # and the image targets.lock pins is not there either
    new = make_root(tmp / "new", WEIGHTS_V2)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=6)
    assert "--from OLDREF" in r.err and f"rootfs:{old}" in r.err
    assert not (q / ".imgquilt/rebase").exists()


# --- repeated context: where quilt's `patch` goes wrong and a 3-way merge does not --------------------
BLOCK = b'''        path = os.path.join(self.root, path)
        logger.debug("reading %s", path)
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            raise ValueError(f"empty file: {path}")
        self.bytes_read += len(data)
        return data

'''
HEAD = b'''"""Read the files a model directory holds."""
import logging
import os

logger = logging.getLogger(__name__)
MAX_CONFIG_BYTES = 1 << 20


class ModelFiles:
    """Reads weights, config and tokenizer files, counting the bytes read."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.bytes_read = 0

'''
TAIL = b'''    def close(self) -> None:
        logger.info("read %d bytes", self.bytes_read)
'''


def method(name: str, doc: str) -> bytes:
    return f'    def {name}(self, path: str) -> bytes:\n        """{doc}"""\n'.encode() + BLOCK


FILES_V1 = HEAD + method("load_weights", "Read a weights shard.") + method("load_config", "Read config.json.") + TAIL
# the new version adds load_tokenizer, the same block again, right where load_config was
FILES_V2 = HEAD + method("load_weights", "Read a weights shard.") + method("load_tokenizer", "Read tokenizer.json.") + method("load_config", "Read config.json.") + TAIL
FILES = "usr/lib/python3/dist-packages/modelfiles/files.py"
BOUNDED = b"data = f.read(MAX_CONFIG_BYTES)"


def bound_nth_read(data: bytes, n: int) -> bytes:
    """Replace the n-th (0-based) `data = f.read()` line."""
    parts = data.split(b"data = f.read()")
    return b"data = f.read()".join(parts[: n + 1]) + BOUNDED + b"data = f.read()".join(parts[n + 1:])


def test_repeated_context_patch_lands_wrong_imgquilt_lands_right(tmp_path: Path, cli_env) -> None:
    env = cli_env
    old, new = tmp_path / "old", tmp_path / "new"
    for root, data in ((old, FILES_V1), (new, FILES_V2)):
        (root / FILES).parent.mkdir(parents=True)
        (root / FILES).write_bytes(data)
    q = tmp_path / "queue"
    q.mkdir()
    # bound the read of load_config (the second block of the old file)
    write_patch(q, "0001-bound-config-read.patch", [(FILES, FILES_V1, bound_nth_read(FILES_V1, 1))],
                fields={"Description": "Bound the config.json read"})
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=env, check=0)
    right = bound_nth_read(FILES_V2, 2)  # load_config is the third block of the new file
    wrong = bound_nth_read(FILES_V2, 1)  # load_tokenizer

    # GNU patch with quilt's default fuzz (2): "succeeds", in load_tokenizer
    by_patch = tmp_path / "by-patch"
    shutil.copytree(new, by_patch)
    p = subprocess.run(["patch", "-p1", "-F2", "-i", str(q / "patches/0001-bound-config-read.patch")],
                       cwd=by_patch, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (by_patch / FILES).read_bytes() == wrong

    # quilt itself, default settings (no ~/.quiltrc): the same silent misplacement
    by_quilt = tmp_path / "by-quilt"
    shutil.copytree(new, by_quilt)
    (by_quilt / "patches").mkdir()
    shutil.copy(q / "patches/0001-bound-config-read.patch", by_quilt / "patches")
    (by_quilt / "patches/series").write_text("0001-bound-config-read.patch\n")
    p = subprocess.run(["quilt", "--quiltrc=-", "push", "-a"], cwd=by_quilt, capture_output=True, text=True,
                       env={**os.environ, "HOME": str(tmp_path), "QUILT_PATCHES": "patches"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert (by_quilt / FILES).read_bytes() == wrong

    # imgquilt: a 3-way merge against the old base puts the change in load_config
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=0)
    assert "merged" in r.out
    imgquilt("check", cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"rootfs:{new}", cwd=q, env=env, check=0)
    by_imgquilt = tmp_path / "by-imgquilt"
    shutil.copytree(new, by_imgquilt)
    imgquilt("apply", "--root", str(by_imgquilt), cwd=q, env=env, check=0)
    assert (by_imgquilt / FILES).read_bytes() == right
    assert right != wrong


def test_rebase_waits_until_the_work_tree_has_no_applied_patches(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2)
    imgquilt("push", "--image", f"rootfs:{old}", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=2)
    assert "applied in the work tree" in r.err and "imgquilt pop -a" in r.err
    imgquilt("pop", "-a", cwd=q, env=env, check=0)
    imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=0)


def test_rebase_between_two_real_oci_images(session) -> None:
    """vLLM-style upgrade on real OCI layouts (umoci): the new tag adds a layer that changes weights.py."""
    from support.imagetools import build_oci, umoci_edit

    tmp, q, old, env = session
    layout = tmp / "images/vllm"
    layout.parent.mkdir()
    build_oci(layout, [old], tag="0.10.1")

    def upgrade(rootfs: Path) -> None:
        (rootfs / W311).write_bytes(WEIGHTS_V2)

    umoci_edit(layout, "0.10.1", upgrade, new_tag="0.10.2")
    imgquilt("lock", "--image", f"oci:{layout}:0.10.1", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"oci:{layout}:0.10.2", "--from", f"oci:{layout}:0.10.1", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert [p["state"] for p in doc["patches"]] == ["merged", "merged", "unchanged"]
    assert doc["image"]["new"]["digest"].startswith("sha256:")
    imgquilt("check", cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"oci:{layout}:0.10.2", "--locked", cwd=q, env=env, check=0)
    lock = (q / "targets.lock").read_text()
    assert f'ref = "oci:{layout}:0.10.2"' in lock


def py311_and_py312_images(tmp: Path, old: Path) -> Path:
    """An OCI layout with `py311` (the old rootfs) and `py312` (site-packages moved, by umoci)."""
    from support.imagetools import build_oci, umoci_edit

    layout = tmp / "images/vllm"
    layout.parent.mkdir()
    build_oci(layout, [old], tag="py311")

    def to_py312(rootfs: Path) -> None:
        (rootfs / SITE312).parent.mkdir(parents=True)
        os.rename(rootfs / SITE311, rootfs / SITE312)  # umoci writes whiteouts for the old paths
        (rootfs / SITE312 / WEIGHTS).write_bytes(WEIGHTS_V2)

    umoci_edit(layout, "py311", to_py312, new_tag="py312")
    return layout


def test_moved_site_packages_in_a_real_oci_image_with_map(session) -> None:
    tmp, q, old, env = session
    layout = py311_and_py312_images(tmp, old)
    imgquilt("lock", "--image", f"oci:{layout}:py311", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"oci:{layout}:py312", "--from", f"oci:{layout}:py311",
                 "--map", "usr/local/lib/python3.11=usr/local/lib/python3.12", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert {p["state"] for p in doc["patches"]} == {"moved"}
    imgquilt("check", cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"oci:{layout}:py312", "--locked", cwd=q, env=env, check=0)
    assert "python3.11" not in (q / "patches/0001-log-shard-tensors.patch").read_text()


def test_moved_site_packages_found_in_a_real_oci_image_without_map(session) -> None:
    """The image lists its own paths (tar headers only), so a move needs no --map."""
    tmp, q, old, env = session
    layout = py311_and_py312_images(tmp, old)
    imgquilt("lock", "--image", f"oci:{layout}:py311", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"oci:{layout}:py312", "--json", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert {p["state"] for p in doc["patches"]} == {"moved"}
    moved = doc["patches"][0]["files"][0]
    assert moved["from"] == W311 and moved["path"] == f"{SITE312}/{WEIGHTS}"
    imgquilt("apply", "--image", f"oci:{layout}:py312", "--locked", cwd=q, env=env, check=0)


def test_without_git_on_path_rebase_exits_6_and_leaves_no_state(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2)
    (tmp / "no-git").mkdir()
    before = snapshot(q)
    nogit = {**env, "PATH": str(tmp / "no-git")}
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=nogit, check=6)
    assert "needs git" in r.err and "PATH" in r.err and "internal error" not in r.err
    assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists()
    doc = json.loads(imgquilt("--json", "rebase", "--image", f"rootfs:{new}", cwd=q, env=nogit, check=6).out)
    assert doc["error"]["kind"] == "git-missing" and doc["error"]["hint"]
    r = imgquilt("audit", "--history", cwd=q, env=nogit, check=6)
    assert "audit --history needs git" in r.err
    assert snapshot(q) == before and not (q / ".imgquilt/rebase").exists()


def test_skip_drops_the_conflicted_patch_and_goes_on(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, b'logger.warning("shard %s", shard.name)'))
    imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=4)
    imgquilt("rebase", "--skip", "--image", f"rootfs:{new}", cwd=q, env=env, check=2)  # it remembers its options
    # 0002 changes other lines of the same file: without 0001 it still merges, so the rebase ends
    doc = json.loads(imgquilt("rebase", "--skip", "--json", cwd=q, env=env, check=0).out)
    assert doc["status"] == "done"
    skipped = [p for p in doc["patches"] if p["dropped"]]
    assert skipped[0]["name"] == "0001-log-shard-tensors.patch" and "Skipped" in skipped[0]["notes"][0]
    kept = [p["name"] for p in doc["patches"] if not p["dropped"]]
    assert kept == ["0002-log-verify.patch", "0003-spawn-workers.patch"]
    assert (q / "series").read_text() == "".join(n + "\n" for n in kept)
    assert not (q / "patches/0001-log-shard-tensors.patch").exists()
    assert not (q / ".imgquilt/rebase").exists() and not (q / ".imgquilt/work" / W311).exists()
    imgquilt("check", cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"rootfs:{new}", "--locked", cwd=q, env=env, check=0)
    imgquilt("rebase", "--skip", cwd=q, env=env, check=2)  # no rebase in progress
