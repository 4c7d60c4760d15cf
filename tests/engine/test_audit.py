"""Audit engine: states per file and patch, chains, changes found at an offset, the apply record."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from imgquilt.cli.documents import audit_report
from imgquilt.verbs.audit import audit_source, chain_states, undo_change
from imgquilt.engine.apply import nearest_match
from imgquilt.engine.plan import plan_apply
from imgquilt.engine.result import RECORD_PATH
from imgquilt.queue.patchfile import make_section
from imgquilt.queue.queue import load_queue
from imgquilt.rootfs.inplace import write_in_place
from imgquilt.rootfs.source import RootfsSource
from support.qtools import write_patch
from support.audit_scenario import C, SCENARIO_BASE, SCENARIO_NOW, SCENARIO_PATCHES, check_scenario, edit, lines, write_queue, write_tree


def test_every_state_at_once_in_a_rootfs(tmp_path: Path) -> None:
    q = write_queue(tmp_path / "q", SCENARIO_PATCHES)
    root = write_tree(tmp_path / "root", SCENARIO_NOW)
    report = audit_source(load_queue(q), RootfsSource(root))
    doc = audit_report(report)
    check_scenario(doc)
    assert doc["record"] is None and doc["record_problems"] == []
    p7 = next(p for p in report.patches if p.name == "0007-partial-g.patch")
    assert p7.first_divergent is not None and p7.first_divergent.path == "etc/g2.conf"
    assert json.loads(json.dumps(doc)) == doc


# --- chains -------------------------------------------------------------------------------------
V0 = lines("v")
V1 = edit(V0, b"v line 2\n", b"v line 2 one\n")
V2 = edit(V1, b"v line 6\n", b"v line 6 two\n")
V3 = edit(V2, b"v line 10\n", b"v line 10 three\n")
CHAIN = [("0001-one.patch", [("etc/v.conf", V0, V1)]), ("0002-two.patch", [("etc/v.conf", V1, V2)]),
         ("0003-three.patch", [("etc/v.conf", V2, V3)])]


@pytest.mark.parametrize("now, want", [
    (V0, ["pending", "pending", "pending"]),
    (V1, ["live", "pending", "pending"]),
    (V2, ["live", "live", "pending"]),
    (V3, ["live", "live", "live"]),
])
def test_chain_of_three_on_one_file(tmp_path: Path, now: bytes, want: list[str]) -> None:
    q = write_queue(tmp_path / "q", CHAIN)
    root = write_tree(tmp_path / "root", {"etc/v.conf": now})
    report = audit_source(load_queue(q), RootfsSource(root))
    assert [p.state for p in report.patches] == want


def test_chain_through_a_symlink_is_one_chain(tmp_path: Path) -> None:
    """Two names of one file (bin/x and usr/bin/x) form one chain: the file is placed once."""
    X0 = lines("x")
    X1 = edit(X0, b"x line 3\n", b"x line 3 one\n")
    X2 = edit(X1, b"x line 9\n", b"x line 9 two\n")
    q = write_queue(tmp_path / "q", [("0001.patch", [("bin/x", X0, X1)]), ("0002.patch", [("usr/bin/x", X1, X2)])])
    root = write_tree(tmp_path / "root", {"usr/bin/x": X1})
    (root / "bin").symlink_to("usr/bin")
    report = audit_source(load_queue(q), RootfsSource(root))
    assert [(p.state, p.files[0].resolved) for p in report.patches] == [("live", "usr/bin/x"), ("pending", "usr/bin/x")]


def test_chain_drift_peels_later_patches_first(tmp_path: Path) -> None:
    """A later patch rewrote the line an earlier one added; the file also changed elsewhere: both changes are there."""
    W0 = lines("w")
    W1 = edit(W0, b"w line 5\n", b"w line 5\nx = 1\n")
    W2 = edit(W1, b"x = 1\n", b"x = 2\n")
    q = write_queue(tmp_path / "q", [("0001-add.patch", [("etc/w", W0, W1)]), ("0002-bump.patch", [("etc/w", W1, W2)])])
    root = write_tree(tmp_path / "root", {"etc/w": b"# local\n" + W2})
    report = audit_source(load_queue(q), RootfsSource(root))
    assert [p.state for p in report.patches] == ["drifted-live", "drifted-live"]
    # only the earlier change is there: the later one is drifted
    (root / "etc/w").write_bytes(b"# local\n" + W1)
    assert [p.state for p in audit_source(load_queue(q), RootfsSource(root)).patches] == ["drifted-live", "drifted"]


def test_revert_pair_is_pending_without_record_and_live_with_it() -> None:
    R0 = lines("r")
    R1 = edit(R0, b"r line 4\n", b"r line 4 tmp\n")
    chain = [make_section("f", R0, R1), make_section("f", R1, R0)]
    assert chain_states(chain, R0, [False, False]) == ["pending", "pending"]
    assert chain_states(chain, R0, [True, True]) == ["live", "live"]
    assert chain_states(chain, R1, [False, False]) == ["live", "pending"]


# --- new and deleted files ------------------------------------------------------------------------
def test_new_file_absent_is_pending_and_deleted_file_absent_is_live(tmp_path: Path) -> None:
    q = write_queue(tmp_path / "q", [
        ("0001-new.patch", [("etc/new.conf", None, b"fresh\n")]),
        ("0002-delete.patch", [("etc/old.conf", b"stale\n", None)]),
        ("0003-new-empty.patch", [("etc/empty", None, b"")]),
    ])
    root = write_tree(tmp_path / "root", {"etc/keep": b"x\n"})
    report = audit_source(load_queue(q), RootfsSource(root))
    assert [p.state for p in report.patches] == ["pending", "live", "pending"]
    write_tree(root, {"etc/new.conf": b"fresh\n", "etc/old.conf": b"stale\n", "etc/empty": b""})
    assert [p.state for p in audit_source(load_queue(q), RootfsSource(root)).patches] == ["live", "pending", "live"]
    # the new file exists with more in it (drifted-live); the deleted one came back changed (drifted)
    write_tree(root, {"etc/new.conf": b"fresh\nmore\n", "etc/old.conf": b"stale again\n"})
    assert [p.state for p in audit_source(load_queue(q), RootfsSource(root)).patches] == ["drifted-live", "drifted", "live"]


def test_a_directory_where_the_file_should_be_is_missing_not_an_error(tmp_path: Path) -> None:
    q = write_queue(tmp_path / "q", [("0001.patch", [("etc/a", b"1\n", b"2\n")]), ("0002.patch", [("etc/b", b"1\n", b"2\n")])])
    root = write_tree(tmp_path / "root", {"etc/b": b"2\n"})
    (root / "etc/a").mkdir()
    report = audit_source(load_queue(q), RootfsSource(root))
    assert [p.state for p in report.patches] == ["missing", "live"]
    assert "not a regular file" in report.patches[0].files[0].detail


# --- undo_change: the change is there, byte-exact, at an offset -----------------------------------------
def test_undo_change_is_byte_exact_with_crlf_and_no_final_newline() -> None:
    old = b"one\r\ntwo\r\nthree\xff\r\nfour"
    new = b"one\r\nTWO\r\nthree\xff\r\nfour"
    s = make_section("f", old, new)
    assert undo_change(new, s.hunks) == old
    shifted = b"zero\r\n" + new + b" and more"
    assert undo_change(shifted, s.hunks) is None  # the last context line "four" changed: no fuzz
    shifted = b"zero\r\nzero\r\n" + new
    assert undo_change(shifted, s.hunks) == b"zero\r\nzero\r\n" + old
    assert undo_change(old, s.hunks) is None


def test_undo_change_prefers_the_named_place_and_keeps_hunk_order() -> None:
    old = lines("u", 30)
    new = edit(edit(old, b"u line 5\n", b"u line 5 x\n"), b"u line 25\n", b"u line 25 y\n")
    s = make_section("f", old, new)
    assert len(s.hunks) == 2
    moved = b"head\n" * 7 + new
    assert undo_change(moved, s.hunks) == b"head\n" * 7 + old
    only_second = edit(old, b"u line 25\n", b"u line 25 y\n")
    assert undo_change(only_second, s.hunks) is None


def test_one_nearest_search_audit_takes_the_earlier_of_two_equally_near_import_the_later() -> None:
    # the search audit's undo and import's placement share; only the tie rule differs, as before
    src = [b"x\n", b"a\n", b"x\n", b"a\n", b"x\n"]
    assert nearest_match(src, [b"a\n"], 2, 0, earlier_on_tie=True) == 1
    assert nearest_match(src, [b"a\n"], 2, 0) == 3
    assert nearest_match(src, [b"a\n", b"x\n"], 9, 0) == 3  # past the end: the last that fits
    assert nearest_match(src, [b"a\n"], 0, 2) == 3  # never before lo
    assert nearest_match(src, [b"b\n"], 2, 0) is None


# --- the apply record ------------------------------------------------------------------------------------
def applied_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A queue and a rootfs it was applied to in place (the record written by apply)."""
    patches = [p for p in SCENARIO_PATCHES if p[0] != "0006-missing-f.patch"] + [
        ("0008-new.patch", [("etc/new.conf", None, b"made\n")]),
        ("0009-chain-a.patch", [("etc/a.conf", SCENARIO_PATCHES[0][1][0][2], SCENARIO_PATCHES[0][1][0][2] + b"tail\n")]),
    ]
    q = write_queue(tmp_path / "q", patches)
    root = write_tree(tmp_path / "root", dict(SCENARIO_BASE))
    write_in_place(root, plan_apply(load_queue(q), RootfsSource(root), None))
    return q, root


def test_after_in_place_apply_everything_is_live_and_the_record_agrees(tmp_path: Path) -> None:
    q, root = applied_copy(tmp_path)
    assert (root / RECORD_PATH).is_file()
    report = audit_source(load_queue(q), RootfsSource(root))
    assert report.all_in("live")
    assert report.record is not None and report.record.series_matches and report.record.problems == ()
    assert {p.record for p in report.patches} == {"applied"}
    doc = audit_report(report)
    assert doc["record"]["agrees"] is True and doc["record_problems"] == []


def test_tampered_file_is_drifted_and_the_record_disagrees(tmp_path: Path) -> None:
    q, root = applied_copy(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    target = copy / "etc/b.conf"
    target.write_bytes(target.read_bytes().replace(b"b line 9 patched\n", b"b line 9 hacked\n"))
    report = audit_source(load_queue(q), RootfsSource(copy))
    states = {p.name: p.state for p in report.patches}
    assert states["0002-live-b.patch"] == "drifted"
    assert all(s == "live" for n, s in states.items() if n != "0002-live-b.patch")
    assert report.record is not None
    (problem,) = report.record.problems
    assert problem.kind == "not-live" and problem.patch == "0002-live-b.patch" and problem.path == "etc/b.conf"
    assert "recorded as applied, but the file drifted" in problem.message
    # the original is untouched and still agrees
    assert audit_source(load_queue(q), RootfsSource(root)).record.problems == ()


def test_record_of_another_series_is_reported(tmp_path: Path) -> None:
    q, root = applied_copy(tmp_path)
    write_patch(q, "0010-later.patch", [("etc/c.conf", edit(C, b"c line 5\n", b"c line 5 patched\n"), b"later\n")])
    report = audit_source(load_queue(q), RootfsSource(root))
    kinds = {x.kind: x for x in report.record.problems}
    assert not report.record.series_matches
    assert set(kinds) == {"series"}
    assert report.patches[-1].state == "pending" and report.patches[-1].record == "not-recorded"
    # a patch dropped from the series, but still in the record
    series = q / "series"
    series.write_text("".join(l for l in series.read_text().splitlines(keepends=True) if "0002" not in l))
    kinds = {x.kind: x for x in audit_source(load_queue(q), RootfsSource(root)).record.problems}
    assert kinds["not-in-series"].patch == "0002-live-b.patch"


def test_unreadable_record_is_reported_not_fatal(tmp_path: Path) -> None:
    q, root = applied_copy(tmp_path)
    (root / RECORD_PATH).write_bytes(b"{not json")
    report = audit_source(load_queue(q), RootfsSource(root))
    assert report.all_in("live")
    assert [x.kind for x in report.record.problems] == ["unreadable"]


def test_a_symlink_out_of_the_root_is_missing_and_nothing_outside_is_read(tmp_path: Path) -> None:
    (tmp_path / "victim").write_bytes(b"1\n")
    q = write_queue(tmp_path / "q", [("0001.patch", [("etc/evil", b"1\n", b"2\n")])])
    root = write_tree(tmp_path / "root", {"etc/keep": b""})
    (root / "etc/evil").symlink_to("../../victim")
    (p,) = audit_source(load_queue(q), RootfsSource(root)).patches
    assert p.state == "missing" and p.files[0].actual == "absent"
    assert p.files[0].resolved == "victim"  # `..` stops at the root, as the kernel resolves it: the root's own victim


_LINES = st.lists(st.sampled_from([b"a\n", b"b\n", b"c\r\n", b"\xff\n", b"d"]), max_size=14).map(
    lambda ls: b"".join(x if x.endswith(b"\n") or i == len(ls) - 1 else x + b"\n" for i, x in enumerate(ls))
)


@settings(max_examples=200, deadline=None)
@given(_LINES, _LINES)
def test_undo_change_of_a_result_is_its_base(old: bytes, new: bytes) -> None:
    """On the exact result, the change is found and undoing it gives the base back, byte for byte."""
    if old == new:
        return
    s = make_section("f", old, new)
    assert undo_change(new, s.hunks) == old
