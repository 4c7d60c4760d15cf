"""Rebase engine on real-world-shaped data: a ~100-line Python module of a vLLM-like package in two
versions, laid out as old and new rootfs trees; real `git merge-file` does every merge."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imgquilt.engine.plan import plan_apply
from imgquilt.errors import BadInput, BaseDrift, MissingTarget, RebaseConflict, UsageError
from imgquilt.sources import open_source
from imgquilt.queue.check import check_queue
from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.lock import render_lock
from imgquilt.queue.patchfile import parse_patch
from imgquilt.queue.queue import load_queue
from imgquilt.rebase import RebaseOptions, abort_rebase, continue_rebase, rebase_in_progress, start_rebase
from imgquilt.store import ObjectStore, remember
from imgquilt.verbs.lock import lock_queue
from support.qtools import write_patch
from support.rebase_queue import DEBUG_LINE, ENVS, ENVS_V1, INFO_LINE, LOADED_LINE, LOADED_VERIFY, SHARD_LOG, SHARD_LOG_PY, SITE311, SITE312, WEIGHTS, WEIGHTS_V1, WEIGHTS_V2, make_patches, make_root, patched, snapshot


INSERTED = 11  # lines WEIGHTS_V2 adds above the patched region


def make_queue(q: Path, old_root: Path) -> None:
    make_patches(q)
    queue = load_queue(q)
    (q / "targets.lock").write_bytes(render_lock(lock_queue(queue, open_source(f"rootfs:{old_root}"), f"rootfs:{old_root}")))


def opener(ref: str, platform: str | None):
    return open_source(ref, platform=platform)


@pytest.fixture
def world(tmp_path: Path):
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    q = tmp_path / "queue"
    make_queue(q, old)
    return tmp_path, q, old


def rebase(q: Path, new: Path, old: Path | None = None, **kw):
    opts = RebaseOptions(f"rootfs:{new}", from_ref=f"rootfs:{old}" if old else None, **kw)
    return start_rebase(q, opts, opener)


def verify_on(q: Path, root: Path) -> dict[str, bytes | None]:
    """The rebased queue passes check and applies onto `root`; returns the results by resolved path."""
    problems, _ = check_queue(q)
    assert problems == []
    queue = load_queue(q)
    result = plan_apply(queue, open_source(f"rootfs:{root}"), queue.lock(), locked=True)
    return {f.resolved: f.final for f in result.files}


def test_lines_inserted_above_merge_cleanly_and_the_hunk_moves_with_them(world) -> None:
    tmp, q, old = world
    before = snapshot(q)
    new = make_root(tmp / "new", WEIGHTS_V2)
    report = rebase(q, new, old)
    assert report.status == "done"
    assert [(p.name, p.state) for p in report.patches] == [
        ("0001-log-shard-tensors.patch", "merged"),
        ("0002-log-verify.patch", "merged"),
        ("0003-spawn-workers.patch", "unchanged"),
    ]
    # the chain: 0002 rebased on 0001's new result
    p1, p2 = report.patches[0].files[0], report.patches[1].files[0]
    assert p1.new_base == sha256_hex(WEIGHTS_V2) and p2.new_base == p1.new_patched
    assert p2.new_patched == sha256_hex(patched(WEIGHTS_V2, verify=True))

    old_hunk = parse_patch(before["patches/0001-log-shard-tensors.patch"]).sections[0].hunks[0]
    new_patch = parse_patch((q / "patches/0001-log-shard-tensors.patch").read_bytes())
    hunk = new_patch.sections[0].hunks[0]
    assert hunk.old_start == old_hunk.old_start + INSERTED and hunk.lines == old_hunk.lines
    assert new_patch.header.raw == parse_patch(before["patches/0001-log-shard-tensors.patch"]).header.raw
    # an untouched patch stays byte for byte
    assert (q / "patches/0003-spawn-workers.patch").read_bytes() == before["patches/0003-spawn-workers.patch"]
    assert (q / "series").read_bytes() == before["series"]
    lock = load_queue(q).lock()
    assert lock.image.ref == f"rootfs:{new}"
    results = verify_on(q, new)
    assert results[f"{SITE311}/{WEIGHTS}"] == patched(WEIGHTS_V2, verify=True)
    assert not rebase_in_progress(q) and not (q / ".imgquilt/rebase").exists()


def test_changed_patched_lines_conflict_then_continue_finishes(world) -> None:
    tmp, q, old = world
    before = snapshot(q)
    upstream_line = b'logger.debug("loading shard %s from %s", shard.name, model_dir)'
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, upstream_line))
    report = rebase(q, new, old)
    assert report.status == "stopped" and report.conflict_patch == "0001-log-shard-tensors.patch"
    [c] = report.conflicts
    assert c.conflict == "markers" and c.work == f".imgquilt/work/{SITE311}/{WEIGHTS}"
    work = q / c.work
    text = work.read_bytes()
    # diff3 markers (the default): the patch's side, the old image's, upstream's
    assert (b"<<<<<<< 0001-log-shard-tensors.patch (old image + patch)\n        " + INFO_LINE + b"\n||||||| old image\n        "
            + DEBUG_LINE + b"\n=======\n") in text
    assert b"        " + upstream_line + b"\n>>>>>>> rootfs:" in text
    assert snapshot(q) == before  # nothing in the queue changed yet

    with pytest.raises(RebaseConflict, match="markers remain"):
        continue_rebase(q, opener)

    # the user keeps both: upstream's extra argument and the patch's level and count
    resolved_line = b'logger.info("loading shard %s from %s (%d tensors)", shard.name, model_dir, len(shard.tensors))'
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith(b"<<<<<<< "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(b">>>>>>> "))
    lines[start:end + 1] = [b"        " + resolved_line + b"\n"]
    work.write_bytes(b"".join(lines))

    report = continue_rebase(q, opener)
    assert report.status == "done"
    states = {p.name: p.state for p in report.patches}
    assert states == {"0001-log-shard-tensors.patch": "merged", "0002-log-verify.patch": "merged", "0003-spawn-workers.patch": "unchanged"}
    assert report.patches[0].files[0].by_hand
    expected = WEIGHTS_V2.replace(DEBUG_LINE, resolved_line).replace(LOADED_LINE, LOADED_VERIFY)
    assert verify_on(q, new)[f"{SITE311}/{WEIGHTS}"] == expected
    assert not work.exists()  # the conflict file left the work tree


def test_abort_restores_the_queue_byte_for_byte(world) -> None:
    tmp, q, old = world
    before = snapshot(q)
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, b'logger.warning("shard %s", shard.name)'))
    assert rebase(q, new, old).status == "stopped"
    with pytest.raises(UsageError, match="already in progress"):
        rebase(q, new, old)
    report, restored = abort_rebase(q)
    assert report.status == "aborted"
    assert "targets.lock" in restored and "series" in restored
    assert snapshot(q) == before
    assert not (q / ".imgquilt/rebase").exists()
    assert not (q / ".imgquilt/work" / SITE311 / WEIGHTS).exists()
    with pytest.raises(UsageError, match="No rebase in progress"):
        abort_rebase(q)


class PowerCut(BaseException):
    pass


def _cut_power_while_writing_the_lock(monkeypatch) -> None:
    import imgquilt.rebase.finish as engine

    def boom(*args, **kwargs):
        raise PowerCut()

    monkeypatch.setattr(engine, "lock_with", boom)  # what the finish renders targets.lock with


def test_abort_after_a_crash_in_the_middle_of_the_finish(world, monkeypatch) -> None:
    tmp, q, old = world
    before = snapshot(q)
    new = make_root(tmp / "new", WEIGHTS_V2)
    with monkeypatch.context() as m:
        _cut_power_while_writing_the_lock(m)
        with pytest.raises(PowerCut):
            rebase(q, new, old)
    # the patches were already rewritten when the power went
    assert (q / "patches/0001-log-shard-tensors.patch").read_bytes() != before["patches/0001-log-shard-tensors.patch"]
    assert rebase_in_progress(q)
    abort_rebase(q)
    assert snapshot(q) == before


def test_continue_after_a_crash_in_the_finish_completes_it(world, monkeypatch) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", WEIGHTS_V2)
    with monkeypatch.context() as m:
        _cut_power_while_writing_the_lock(m)
        with pytest.raises(PowerCut):
            rebase(q, new, old)
    report = continue_rebase(q, opener)
    assert report.status == "done"
    assert verify_on(q, new)[f"{SITE311}/{WEIGHTS}"] == patched(WEIGHTS_V2, verify=True)


def test_a_change_that_went_upstream_is_dropped(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", patched(WEIGHTS_V2))
    report = rebase(q, new, old)
    assert report.status == "done"
    p1, p2, p3 = report.patches
    assert (p1.state, p1.dropped) == ("merged-upstream", True)
    assert any("dropped from series" in n for n in p1.notes)
    assert p2.state == "merged" and any("Requires no longer names 0001" in n for n in p2.notes)
    assert (q / "series").read_bytes() == b"0002-log-verify.patch\n0003-spawn-workers.patch\n"
    assert not (q / "patches/0001-log-shard-tensors.patch").exists()
    header = parse_patch((q / "patches/0002-log-verify.patch").read_bytes()).header
    assert header.get("Requires") is None and header.get("Description") == "Say whether shards were verified"
    assert verify_on(q, new)[f"{SITE311}/{WEIGHTS}"] == patched(WEIGHTS_V2, verify=True)


def test_keep_empty_keeps_an_upstreamed_patch_as_a_no_op(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", patched(WEIGHTS_V2))
    report = rebase(q, new, old, keep_empty=True)
    p1 = report.patches[0]
    assert (p1.state, p1.dropped) == ("merged-upstream", False)
    patch = parse_patch((q / "patches/0001-log-shard-tensors.patch").read_bytes())
    assert patch.header.get("Applied-Upstream") == f"rootfs:{new}"
    [s] = patch.sections
    assert s.base_sha256 == s.patched_sha256 == sha256_hex(patched(WEIGHTS_V2)) and s.hunks == ()
    assert parse_patch((q / "patches/0002-log-verify.patch").read_bytes()).header.get("Requires") == "0001-log-shard-tensors.patch"
    verify_on(q, new)


def test_a_target_moved_to_python3_12_is_found_and_remapped(world) -> None:
    tmp, q, old = world
    before = snapshot(q)
    new = make_root(tmp / "new", WEIGHTS_V2, site=SITE312)
    report = rebase(q, new, old)
    assert report.status == "done"
    assert [p.state for p in report.patches] == ["moved", "moved", "moved"]
    f1 = report.patches[0].files[0]
    assert (f1.moved_from, f1.path, f1.merged) == (f"{SITE311}/{WEIGHTS}", f"{SITE312}/{WEIGHTS}", True)
    envs, shard_log = report.patches[2].files
    assert envs.path == f"{SITE312}/{ENVS}" and not envs.merged
    assert shard_log.path == f"{SITE312}/{SHARD_LOG}"  # a new file follows its moved neighbours
    assert any("moved to" in n for n in report.notes)
    # an unchanged, moved section keeps its diff; only its path lines change
    p3 = (q / "patches/0003-spawn-workers.patch").read_bytes()
    assert p3 == before["patches/0003-spawn-workers.patch"].replace(SITE311.encode(), SITE312.encode())
    assert SITE311.encode() not in (q / "targets.lock").read_bytes()
    results = verify_on(q, new)
    assert results[f"{SITE312}/{WEIGHTS}"] == patched(WEIGHTS_V2, verify=True)
    assert results[f"{SITE312}/{SHARD_LOG}"] == SHARD_LOG_PY


def test_ambiguous_moves_need_map_and_map_overrides(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", WEIGHTS_V2, site=SITE312)
    # a second copy of the package makes the tail ambiguous
    make_root(tmp / "new", WEIGHTS_V2, site="opt/venv/lib/python3.12/site-packages/vllm")
    with pytest.raises(BadInput, match="could be it") as exc:
        rebase(q, new, old)
    assert "--map" in exc.value.hint
    assert not (q / ".imgquilt/rebase").exists()
    report = rebase(q, new, old, maps=((f"{SITE311}", "opt/venv/lib/python3.12/site-packages/vllm"),))
    assert report.status == "done"
    assert report.patches[0].files[0].path == f"opt/venv/lib/python3.12/site-packages/vllm/{WEIGHTS}"
    verify_on(q, new)


def test_a_target_gone_for_good_is_refused_before_anything_changes(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", WEIGHTS_V2)
    (new / SITE311 / ENVS).unlink()
    with pytest.raises(MissingTarget, match="envs.py"):
        rebase(q, new, old)
    assert not (q / ".imgquilt/rebase").exists()


def test_missing_old_bases_need_from_and_a_filled_store_does_not(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", WEIGHTS_V2)
    # `lock` already stored every base and result it read
    assert ObjectStore(q).has(sha256_hex(WEIGHTS_V1))
    shutil.rmtree(q / ".imgquilt" / "objects")
    # the object store is a cache, the image targets.lock pins the source (test_rebase_upstream.py): gone too,
    # the rebase asks for --from
    old.rename(tmp / "old-elsewhere")
    with pytest.raises(BadInput, match="no copy of the old base") as exc:
        rebase(q, new)
    assert "--from OLDREF" in exc.value.hint and f"rootfs:{old}" in exc.value.hint
    assert "could not be read from" in exc.value.message
    assert not (q / ".imgquilt/rebase").exists()
    # what lock/apply/audit remember is enough
    remember(q, [WEIGHTS_V1, ENVS_V1])
    assert rebase(q, new).status == "done"


def test_from_the_wrong_old_image_is_refused(world) -> None:
    tmp, q, old = world
    new = make_root(tmp / "new", WEIGHTS_V2)
    shutil.rmtree(q / ".imgquilt" / "objects")  # --from is read only when the store lacks bytes
    with pytest.raises(BaseDrift, match="not the image this queue was made for"):
        rebase(q, new, new)


def test_a_clean_merge_that_breaks_python_stops_as_a_conflict(world) -> None:
    tmp, q, old = world
    # upstream renamed load_checkpoint's `verify` to `check`; 0002's new line still says `verify`
    renamed = WEIGHTS_V2.replace(b"*, verify: bool = False) -> list[ShardSpec]", b"*, check: bool = False) -> list[ShardSpec]")
    renamed = renamed.replace(b"iter_shards(root, verify=verify)", b"iter_shards(root, verify=check)")
    new = make_root(tmp / "new", renamed)
    report = rebase(q, new, old)
    assert report.status == "stopped" and report.conflict_patch == "0002-log-verify.patch"
    assert report.patches[0].state == "merged"
    [c] = report.conflicts
    assert c.conflict == "python" and "verify" in c.detail
    work = q / c.work
    assert b"<<<<<<<" not in work.read_bytes()  # a clean text merge, wrong code
    work.write_bytes(work.read_bytes().replace(b"len(loaded), root, verify)", b"len(loaded), root, check)"))
    report = continue_rebase(q, opener)
    assert report.status == "done"
    verify_on(q, new)


def test_same_image_again_carries_everything_unchanged(world) -> None:
    tmp, q, old = world
    before = snapshot(q)
    report = rebase(q, old)
    assert {p.state for p in report.patches} == {"unchanged"}
    after = snapshot(q)
    assert {k: v for k, v in after.items() if k != "targets.lock"} == {k: v for k, v in before.items() if k != "targets.lock"}
    verify_on(q, old)


def test_p0_entries_and_unknown_section_fields_survive_a_merge(world) -> None:
    tmp, q, old = world
    name = "0001-log-shard-tensors.patch"
    raw = (q / "patches" / name).read_bytes()
    w = f"{SITE311}/{WEIGHTS}".encode()
    # as an imported quilt patch might be: -p0 paths and a field imgquilt does not know
    raw = raw.replace(b"--- a/" + w, b"--- " + w).replace(b"+++ b/" + w, b"+++ " + w)
    raw = raw.replace(b"Patched-SHA256: ", b"Forwarded-Hunk: upstream#1234\nPatched-SHA256: ", 1)
    (q / "patches" / name).write_bytes(raw)
    (q / "series").write_bytes((q / "series").read_bytes().replace(name.encode(), name.encode() + b" -p0"))
    (q / "targets.lock").write_bytes(render_lock(lock_queue(load_queue(q), open_source(f"rootfs:{old}"), f"rootfs:{old}")))
    new = make_root(tmp / "new", WEIGHTS_V2)
    assert rebase(q, new, old).status == "done"
    out = (q / "patches" / name).read_bytes()
    assert b"\n--- " + w + b"\n+++ " + w + b"\n" in out
    assert parse_patch(out).sections[0].extra == (("Forwarded-Hunk", "upstream#1234"),)
    verify_on(q, new)
    # and GNU patch -p0 still takes it
    work = tmp / "p0"
    shutil.copytree(new, work)
    base = parse_patch(out).sections[0]
    assert base.base_sha256 == sha256_hex(WEIGHTS_V2)
    subprocess.run(["patch", "-p0", "-s", "-i", str(q / "patches" / name)], cwd=work, check=True)
    assert (work / SITE311 / WEIGHTS).read_bytes() == patched(WEIGHTS_V2)


def test_the_quilt_work_tree_is_left_as_it_was(world) -> None:
    tmp, q, old = world
    mine = q / ".imgquilt/work" / SITE311 / WEIGHTS
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"# my work in progress\n")
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, b'logger.warning("shard %s", shard.name)'))
    assert rebase(q, new, old).status == "stopped"
    assert b"<<<<<<<" in mine.read_bytes()
    abort_rebase(q)
    assert mine.read_bytes() == b"# my work in progress\n"
    assert rebase(q, new, old).status == "stopped"
    mine.write_bytes(patched(WEIGHTS_V2.replace(DEBUG_LINE, b'logger.warning("shard %s", shard.name)')).replace(b"logger.warning", b"logger.info"))
    assert continue_rebase(q, opener).status == "done"
    assert mine.read_bytes() == b"# my work in progress\n"


def test_a_deletion_against_a_changed_file_conflicts_and_can_keep_the_deletion(tmp_path: Path) -> None:
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    q = tmp_path / "queue"
    q.mkdir()
    e = f"{SITE311}/{ENVS}"
    write_patch(q, "0001-drop-envs.patch", [(e, ENVS_V1, None)], fields={"Description": "Remove envs.py"})
    (q / "targets.lock").write_bytes(render_lock(lock_queue(load_queue(q), open_source(f"rootfs:{old}"), f"rootfs:{old}")))
    new = make_root(tmp_path / "new", WEIGHTS_V1, envs=ENVS_V1 + b'VLLM_NEW = os.getenv("VLLM_NEW", "")\n')
    report = rebase(q, new, old)
    [c] = report.conflicts
    assert c.conflict == "delete"
    (q / c.work).unlink()  # keep the deletion
    report = continue_rebase(q, opener)
    assert report.status == "done"
    s = parse_patch((q / "patches/0001-drop-envs.patch").read_bytes()).sections[0]
    assert s.is_delete and s.base_sha256 == sha256_hex(ENVS_V1 + b'VLLM_NEW = os.getenv("VLLM_NEW", "")\n')
    assert verify_on(q, new)[e] is None
    # upstream deleted it too: merged upstream
    newer = make_root(tmp_path / "newer", WEIGHTS_V1)
    (newer / e).unlink()
    report = rebase(q, newer)
    assert report.patches[0].state == "merged-upstream" and report.patches[0].dropped
    assert (q / "series").read_bytes() == b""
