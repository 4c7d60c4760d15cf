"""Issue 35, point 5: a patch written with --no-python-check says so in its header (`Python-Check:
skipped`, docs/patch-format.md); `check` and `apply` name it, `check --strict` refuses it, and a
refresh or a rebase with the checks on takes the mark away. Real console script, rootfs trees in tmp."""
from __future__ import annotations

import json
from pathlib import Path

from support.qtools import imgquilt
from support.rebase_queue import WEIGHTS_V1, WEIGHTS_V2, make_patches, make_root

APP = "usr/lib/python3/dist-packages/app/main.py"
BASE = b"import os\n\n\ndef port():\n    return int(os.environ.get('PORT', '8080'))\n"
TYPO = BASE.replace(b"return int(", b"return intt(")
FIXED = BASE.replace(b"'8080'", b"'9000'")
MARK = b"Python-Check: skipped\n"
UNCHECKED = "never Python-checked"


def _patch(q: Path, name: str) -> bytes:
    return (q / "patches" / name).read_bytes()


def test_refresh_without_the_check_marks_the_patch_until_a_checked_refresh(tmp_path: Path, cli_env) -> None:
    root = tmp_path / "root"
    (root / APP).parent.mkdir(parents=True)
    (root / APP).write_bytes(BASE)
    q = tmp_path / "q"
    q.mkdir()
    env = cli_env
    imgquilt("init", cwd=q, env=env, check=0)
    imgquilt("new", "0001-port.patch", cwd=q, env=env, check=0)
    imgquilt("add", "--image", f"rootfs:{root}", APP, cwd=q, env=env, check=0)
    work = q / ".imgquilt/work" / APP
    work.write_bytes(TYPO)
    imgquilt("refresh", cwd=q, env=env, check=3)  # the check refuses the typo
    imgquilt("refresh", "--no-python-check", cwd=q, env=env, check=0)
    assert MARK in _patch(q, "0001-port.patch").split(b"\nIndex: ")[0]
    # check names it, --strict refuses it (exit 6) with the way on; the JSON lists it
    r = imgquilt("check", cwd=q, env=env, check=0)
    assert "The queue is sound" in r.out and f"{UNCHECKED} (written with --no-python-check" in r.out
    assert "0001-port.patch" in r.out
    r = imgquilt("check", "--strict", cwd=q, env=env, check=6)
    assert f"0001-port.patch: {UNCHECKED}" in r.err and "imgquilt refresh" in r.err
    doc = json.loads(imgquilt("--json", "check", cwd=q, env=env, check=0).out)
    assert doc["unchecked"] == ["0001-port.patch"]
    # apply says so too (here with the check off: the typo is still there)
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "l.tar"), "--no-python-check", cwd=q,
                 env=env, check=0)
    assert "Never Python-checked" in r.out + r.err and "0001-port.patch" in r.out + r.err
    # a refresh without the check that changes nothing keeps the mark; a checked refresh drops it
    imgquilt("refresh", "--no-python-check", cwd=q, env=env, check=0)
    assert MARK in _patch(q, "0001-port.patch")
    work.write_bytes(FIXED)
    imgquilt("refresh", cwd=q, env=env, check=0)
    assert MARK not in _patch(q, "0001-port.patch")
    imgquilt("check", "--strict", cwd=q, env=env, check=0)
    doc = json.loads(imgquilt("--json", "check", cwd=q, env=env, check=0).out)
    assert "unchecked" not in doc


def test_a_non_python_patch_refreshed_without_the_check_is_not_marked(tmp_path: Path, cli_env) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(b"port = 8080\n")
    q = tmp_path / "q"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    imgquilt("new", "0001-conf.patch", cwd=q, env=cli_env, check=0)
    imgquilt("add", "--image", f"rootfs:{root}", "etc/app.conf", cwd=q, env=cli_env, check=0)
    (q / ".imgquilt/work/etc/app.conf").write_bytes(b"port = 9000\n")
    imgquilt("refresh", "--no-python-check", cwd=q, env=cli_env, check=0)
    assert MARK not in _patch(q, "0001-conf.patch")
    imgquilt("check", "--strict", cwd=q, env=cli_env, check=0)


def _rebase_session(tmp_path: Path, env) -> tuple[Path, Path, Path]:
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    new = make_root(tmp_path / "new", WEIGHTS_V2)
    q = tmp_path / "queue"
    make_patches(q)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=env, check=0)
    return q, old, new


def test_rebase_without_the_check_marks_the_python_patches_it_carries(tmp_path: Path, cli_env) -> None:
    q, old, new = _rebase_session(tmp_path, cli_env)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", "--no-python-check", cwd=q, env=cli_env,
                 check=0)
    assert "Rebased 3 patch(es)" in r.out
    names = ["0001-log-shard-tensors.patch", "0002-log-verify.patch", "0003-spawn-workers.patch"]
    for name in names:  # every one carries a .py section
        assert MARK in _patch(q, name).split(b"\nIndex: ")[0], name
    r = imgquilt("check", cwd=q, env=cli_env, check=0)
    assert UNCHECKED in r.out and all(n in r.out for n in names)
    r = imgquilt("check", "--strict", cwd=q, env=cli_env, check=6)
    assert all(f"{n}: {UNCHECKED}" in r.err for n in names)
    r = imgquilt("apply", "--image", f"rootfs:{new}", "--layer", str(tmp_path / "l.tar"), cwd=q, env=cli_env, check=0)
    assert "Never Python-checked" in r.out + r.err


def test_rebase_with_the_check_marks_nothing(tmp_path: Path, cli_env) -> None:
    q, old, new = _rebase_session(tmp_path, cli_env)
    imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    assert not any(MARK in p.read_bytes() for p in (q / "patches").iterdir())
    imgquilt("check", "--strict", cwd=q, env=cli_env, check=0)


def test_continue_without_the_check_after_a_python_stop_marks_what_it_carries(tmp_path: Path, cli_env) -> None:
    """The issue's own shape: the rebase stops on a Python finding, the user goes on with
    `rebase --continue --no-python-check`; the patches carried from there on are marked, the one merged
    before with the check on is not, and check / check --strict / apply say which."""
    from support.rebase_queue import SITE311, WEIGHTS

    q, old, _ = _rebase_session(tmp_path, cli_env)
    # upstream renamed load_checkpoint's `verify` to `check`: 0002's new line still says `verify`
    renamed = WEIGHTS_V2.replace(b"*, verify: bool = False) -> list[ShardSpec]", b"*, check: bool = False) -> list[ShardSpec]")
    renamed = renamed.replace(b"iter_shards(root, verify=verify)", b"iter_shards(root, verify=check)")
    new = make_root(tmp_path / "renamed", renamed)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=cli_env, check=4)
    assert "0002-log-verify.patch" in r.err and "verify" in r.err
    assert b"<<<<<<<" not in (q / ".imgquilt/work" / SITE311 / WEIGHTS).read_bytes()  # a clean merge, wrong code
    r = imgquilt("rebase", "--continue", "--no-python-check", cwd=q, env=cli_env, check=0)
    assert "Rebased 3 patch(es)" in r.out
    assert MARK not in _patch(q, "0001-log-shard-tensors.patch")  # merged with the check on
    marked = ["0002-log-verify.patch", "0003-spawn-workers.patch"]
    for name in marked:
        assert MARK in _patch(q, name).split(b"\nIndex: ")[0], name
    r = imgquilt("check", cwd=q, env=cli_env, check=0)
    assert UNCHECKED in r.out and all(n in r.out for n in marked) and "0001-log-shard-tensors.patch" not in r.out
    r = imgquilt("check", "--strict", cwd=q, env=cli_env, check=6)
    assert all(f"{n}: {UNCHECKED}" in r.err for n in marked)
    r = imgquilt("apply", "--image", f"rootfs:{new}", "--layer", str(tmp_path / "l.tar"), "--no-python-check", cwd=q,
                 env=cli_env, check=0)
    assert "Never Python-checked" in r.out + r.err and all(n in r.out + r.err for n in marked)
