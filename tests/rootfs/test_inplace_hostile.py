"""In-place apply against hostile or failing roots: planted journals, dangling links, xattrs, a
read-only mount, a full disk, an immutable file, a long name, a re-run, concurrent applies.

Each case asserts the exit code, the message, and that the root (and a canary outside it) is exactly
as before, with nothing left behind. The mount cases run in a private mount namespace (`unshare -m`,
or `unshare -Urm` when not root), so they never touch the host's mounts.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path

import pytest

from support.hostile import forger_seal
from support.imagetools import build_oci, dir_layer_bytes
from imgquilt.rootfs import journal as jmod
from imgquilt.rootfs.journal import JOURNAL
from support.qtools import TOOL, imgquilt, tree_hash, write_patch

PASSWD = b"root:x:0:0:root:/root:/bin/sh\n"
CONF = b"workers = 2\n"
NEW_CONF = b"workers = 8\n"
TESTS = Path(__file__).resolve().parents[1]


def _root(tmp: Path) -> Path:
    r = tmp / "root"
    (r / "etc").mkdir(parents=True)
    (r / "etc/passwd").write_bytes(PASSWD)
    (r / "etc/app.conf").write_bytes(CONF)
    return r


def _queue(tmp: Path, changes=None) -> Path:
    q = tmp / "q"
    write_patch(q, "0001-conf.patch", changes or [("etc/app.conf", CONF, NEW_CONF)])
    return q


def _apply(q: Path, root: Path, env: dict[str, str], *extra: str):
    return imgquilt("--queue", str(q), "apply", "--root", str(root), *extra, cwd=q, env=env)


def _forged_journal(root: Path, journal_ino: int) -> bytes:
    """A journal right in every field a reader could check (its inodes too: inode numbers can be guessed),
    sealed with a key of the forger's own, not the user's."""
    doc = {"format": jmod.FORMAT, "run": "0" * 32, "root_ino": root.stat().st_ino, "journal_ino": journal_ino,
           "phase": "commit", "dirs": [], "gone": [], "entries": [{"path": "etc/passwd", "has_old": False, "delete": False}]}
    return json.dumps({**doc, "seal": forger_seal(doc)}, sort_keys=True).encode()


def _no_leftovers(root: Path) -> None:
    left = [str(p.relative_to(root)) for p in root.rglob("*") if "imgquilt-" in p.name]
    assert not left, left


@pytest.mark.parametrize("kind", ["forged", "wrong-keys", "old-format-list", "symlink", "directory", "not-json"])
def test_planted_journal_is_refused_never_acted_on(tmp_path: Path, cli_env: dict[str, str], kind: str) -> None:
    root, q = _root(tmp_path), _queue(tmp_path)
    canary = tmp_path / "canary"
    canary.write_bytes(b"outside\n")
    j = root / JOURNAL
    if kind == "forged":
        j.write_bytes(b"{}")
        j.write_bytes(_forged_journal(root, j.stat().st_ino))  # rewritten in place: the same inode
        assert json.loads(j.read_bytes())["journal_ino"] == j.stat().st_ino
    elif kind == "wrong-keys":
        j.write_bytes(json.dumps({"entries": {"etc/passwd": 1}}).encode())
    elif kind == "old-format-list":
        j.write_bytes(json.dumps([{"resolved": "etc/passwd", "has_old": False, "delete": False}]).encode())
    elif kind == "symlink":
        os.symlink(str(canary), j)
    elif kind == "directory":
        j.mkdir()
    else:
        j.write_bytes(b"\x00\xff{not json")
    before = tree_hash(root)
    r = _apply(q, root, cli_env)
    assert r.code == 6, r.err
    assert "not a journal imgquilt wrote" in r.err and JOURNAL in r.err and "changed nothing" in r.err
    if kind == "forged":
        assert "not sealed with your imgquilt journal key" in r.err, r.err
    assert tree_hash(root) == before and (root / "etc/passwd").read_bytes() == PASSWD
    assert canary.read_bytes() == b"outside\n"
    # not blocked forever: once the planted file is gone, a benign apply goes through
    j.unlink() if not j.is_dir() or j.is_symlink() else j.rmdir()
    assert _apply(q, root, cli_env).code == 0
    assert (root / "etc/app.conf").read_bytes() == NEW_CONF and (root / "etc/passwd").read_bytes() == PASSWD


def test_journal_at_the_old_location_is_inert(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _root(tmp_path), _queue(tmp_path)
    (root / "var/lib/imgquilt").mkdir(parents=True)
    (root / "var/lib/imgquilt/journal.json").write_bytes(
        json.dumps([{"resolved": "etc/passwd", "has_old": False, "delete": False}]).encode())
    assert _apply(q, root, cli_env).code == 0
    assert (root / "etc/passwd").read_bytes() == PASSWD and (root / "etc/app.conf").read_bytes() == NEW_CONF


def test_journal_shipped_in_an_image_layer_is_refused(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Even a journal imgquilt really wrote and sealed (with this very user's key) is refused once copied:
    extracting gives it, and the root, new inodes."""
    src = _root(tmp_path / "src")
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        jmod.write_journal(fd, jmod.Journal("0" * 32, "commit", (jmod.Entry("etc/passwd", False, False),), ()))
        assert jmod.read_journal(fd, src) is not None  # in place, it authenticates
    finally:
        os.close(fd)
    layout = build_oci(tmp_path / "img", [src])
    # the root is that image extracted, as a build would: every file gets a new inode
    root = tmp_path / "extracted"
    root.mkdir()
    with tarfile.open(fileobj=BytesIO(dir_layer_bytes(src))) as t:
        t.extractall(root, filter="tar")
    q = _queue(tmp_path)
    before = tree_hash(root)
    r = _apply(q, root, cli_env, "--image", f"oci:{layout}:latest")
    assert r.code == 6, r.err
    assert "not a journal imgquilt wrote" in r.err and "inodes do not match" in r.err
    assert tree_hash(root) == before


def test_dangling_link_climbing_out_is_refused_before_anything_is_written(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root = _root(tmp_path)
    os.symlink("nonexist/../../outside", root / "lnk")
    (tmp_path / "outside").mkdir()
    q = _queue(tmp_path, [("etc/app.conf", CONF, NEW_CONF), ("lnk/new", None, b"x\n")])
    before = tree_hash(root)
    r = _apply(q, root, cli_env)
    assert r.code == 6, r.err
    assert "lnk/new" in r.err and "above the root" in r.err
    assert tree_hash(root) == before and not (root / JOURNAL).exists()
    assert list((tmp_path / "outside").iterdir()) == []
    # a benign queue on that root is not blocked
    q2 = tmp_path / "q2"
    write_patch(q2, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    assert _apply(q2, root, cli_env).code == 0


def test_xattrs_are_kept_on_replaced_files(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root = _root(tmp_path)
    (root / "usr/bin").mkdir(parents=True)
    ping = root / "usr/bin/ping"
    ping.write_bytes(b"#!/bin/sh\necho ping\n")
    os.chmod(ping, 0o755)
    os.setxattr(root / "etc/app.conf", "user.origin", b"vendor")
    if os.geteuid() == 0 and shutil.which("setcap"):
        subprocess.run(["setcap", "cap_net_raw+ep", str(ping)], check=True)
    else:
        os.setxattr(ping, "user.capability-standin", b"cap_net_raw+ep")
    caps = {a: os.getxattr(ping, a) for a in os.listxattr(ping)}
    assert caps
    q = _queue(tmp_path, [("etc/app.conf", CONF, NEW_CONF), ("usr/bin/ping", b"#!/bin/sh\necho ping\n", b"#!/bin/sh\necho pong\n")])
    ino = ping.stat().st_ino
    assert _apply(q, root, cli_env).code == 0
    assert ping.read_bytes() == b"#!/bin/sh\necho pong\n" and ping.stat().st_ino != ino
    assert {a: os.getxattr(ping, a) for a in os.listxattr(ping)} == caps
    assert os.getxattr(root / "etc/app.conf", "user.origin") == b"vendor"
    if "security.capability" in caps:
        out = subprocess.run(["getcap", str(ping)], capture_output=True, text=True).stdout
        assert "cap_net_raw" in out


def _in_mount_ns(tmp: Path, script: str) -> dict:
    """Run `script` (bash) in a private mount namespace; it prints one JSON line last."""
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    env = dict(os.environ, PYTHONPATH=f"{TOOL}{os.pathsep}{TESTS}", HOME=str(tmp / "home"), COLUMNS="200", PY=sys.executable)
    p = subprocess.run(cmd + ["bash", "-c", script], cwd=tmp, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


_REPORT = r'''
hash() { "$PY" -c 'import sys; from support.qtools import tree_hash; print(tree_hash(sys.argv[1]))' "$1"; }
'''


def test_read_only_root_is_exit_6_and_unchanged(tmp_path: Path) -> None:
    src = _root(tmp_path / "src")
    q = _queue(tmp_path)
    res = _in_mount_ns(tmp_path, _REPORT + f'''
set -e
mkdir -p mnt && mount -t tmpfs -o size=4m t mnt && cp -a {src}/. mnt/
before=$(hash mnt)
mount -o remount,ro mnt
set +e
"$PY" -m imgquilt --queue {q} apply --root mnt > out.txt 2> err.txt; rc=$?
set -e
"$PY" -c 'import json,sys; print(json.dumps({{"rc": int(sys.argv[1]), "same": sys.argv[2] == sys.argv[3], "err": open("err.txt").read()}}))' "$rc" "$before" "$(hash mnt)"
''')
    assert res["rc"] == 6, res
    assert res["same"], res
    assert "read-only" in res["err"].lower() and "EROFS" in res["err"] and "rolled back" in res["err"], res["err"]
    assert "Traceback" not in res["err"]


def test_full_disk_is_exit_6_and_leaves_nothing(tmp_path: Path) -> None:
    src = _root(tmp_path / "src")
    big = b"x" * (600 * 1024)
    (src / "var").mkdir()
    (src / "var/big.dat").write_bytes(b"y" * 1024)
    q = _queue(tmp_path, [("etc/app.conf", CONF, NEW_CONF), ("var/big.dat", b"y" * 1024, big), ("opt/new/file", None, b"n\n")])
    res = _in_mount_ns(tmp_path, _REPORT + f'''
set -e
mkdir -p mnt && mount -t tmpfs -o size=512k t mnt && cp -a {src}/. mnt/
before=$(hash mnt)
set +e
"$PY" -m imgquilt --queue {q} apply --root mnt > out.txt 2> err.txt; rc=$?
set -e
"$PY" -c 'import json,sys,os; print(json.dumps({{"rc": int(sys.argv[1]), "same": sys.argv[2] == sys.argv[3], "err": open("err.txt").read(), "files": sorted(os.path.relpath(os.path.join(d, n), "mnt") for d, ds, fs in os.walk("mnt") for n in ds + fs)}}))' "$rc" "$before" "$(hash mnt)"
''')
    assert res["rc"] == 6, res
    assert res["same"], res
    assert "ENOSPC" in res["err"] and "full" in res["err"] and "var/big.dat" in res["err"], res["err"]
    assert sorted(res["files"]) == sorted(["etc", "etc/passwd", "etc/app.conf", "var", "var/big.dat"]), res["files"]


def test_immutable_target_is_exit_6_and_unchanged(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root = _root(tmp_path)
    (root / "etc/hosts").write_bytes(b"127.0.0.1 localhost\n")
    q = _queue(tmp_path, [("etc/app.conf", CONF, NEW_CONF), ("etc/passwd", PASSWD, PASSWD + b"app:x:1000:1000::/home/app:/bin/sh\n")])
    before = tree_hash(root)
    chattr = subprocess.run(["chattr", "+i", str(root / "etc/passwd")], capture_output=True, text=True)
    assert chattr.returncode == 0, f"chattr +i needs root on a filesystem that supports it: {chattr.stderr}"
    try:
        r = _apply(q, root, cli_env)
        assert r.code == 6, r.err
        assert "etc/passwd" in r.err and "EPERM" in r.err and "chattr" in r.err and "rolled back" in r.err
        assert "Traceback" not in r.err
    finally:
        subprocess.run(["chattr", "-i", str(root / "etc/passwd")], check=True)
    assert tree_hash(root) == before
    _no_leftovers(root)


def test_long_name_is_exit_6(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root = _root(tmp_path)
    q = _queue(tmp_path, [("etc/" + "n" * 300, None, b"x\n")])
    before = tree_hash(root)
    r = _apply(q, root, cli_env)
    assert r.code == 6, r.err
    assert "ENAMETOOLONG" in r.err or "longer than" in r.err
    assert tree_hash(root) == before and not (root / JOURNAL).exists()


def test_rerun_without_lock_does_not_rewrite_the_record(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _root(tmp_path), _queue(tmp_path)
    assert _apply(q, root, cli_env).code == 0
    rec = root / "var/lib/imgquilt/applied.json"
    data, ino = rec.read_bytes(), rec.stat().st_ino
    after = tree_hash(root)
    r = _apply(q, root, cli_env, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["outputs"]["root"]["changed"] == []
    assert rec.read_bytes() == data and rec.stat().st_ino == ino
    assert tree_hash(root) == after


def test_concurrent_applies_on_one_root_serialize(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _root(tmp_path), _queue(tmp_path)
    with ThreadPoolExecutor(6) as pool:
        runs = list(pool.map(lambda _: _apply(q, root, cli_env), range(6)))
    assert [r.code for r in runs] == [0] * 6, [r.err for r in runs if r.code]
    assert (root / "etc/app.conf").read_bytes() == NEW_CONF
    assert sum("1 file(s) replaced" in r.out or "2 file(s) replaced" in r.out for r in runs) == 1
    _no_leftovers(root)


def test_journal_is_written_once_per_phase(tmp_path: Path, monkeypatch) -> None:
    from imgquilt.engine.plan import plan_apply
    from imgquilt.queue.queue import load_queue
    from imgquilt.rootfs import inplace
    from imgquilt.rootfs.source import RootfsSource

    root = _root(tmp_path)
    q = _queue(tmp_path, [(f"srv/f{i:04d}", None, b"%d\n" % i) for i in range(1000)])
    calls = []
    real = inplace.write_journal
    monkeypatch.setattr(inplace, "write_journal", lambda fd, j: (calls.append(len(j.entries)), real(fd, j)))
    inplace.write_in_place(root, plan_apply(load_queue(q), RootfsSource(root), None))
    assert calls == [1001, 1001, 1001]  # 1000 files and the record, one write per phase
    assert len(list((root / "srv").iterdir())) == 1000
    _no_leftovers(root)


@pytest.mark.parametrize("race", ["target-removed", "parent-swapped-for-file"])
def test_a_race_after_the_checks_is_exit_6_and_rolled_back(tmp_path: Path, monkeypatch, race: str) -> None:
    from imgquilt.engine.plan import plan_apply
    from imgquilt.errors import RootWriteFailed
    from imgquilt.queue.queue import load_queue
    from imgquilt.rootfs import inplace
    from imgquilt.rootfs.source import RootfsSource

    root = _root(tmp_path)
    (root / "srv").mkdir()
    (root / "srv/z.txt").write_bytes(b"z\n")
    q = _queue(tmp_path, [("etc/app.conf", CONF, NEW_CONF), ("srv/z.txt", b"z\n", b"zz\n"), ("srv/new/n.txt", None, b"n\n")])
    result = plan_apply(load_queue(q), RootfsSource(root), None)
    real = inplace._check_paths

    def racing(*a):
        dirs = real(*a)
        if race == "target-removed":
            (root / "srv/z.txt").unlink()  # another process removes a target between the checks and the writes
        else:
            (root / "srv/z.txt").unlink()
            (root / "srv").rmdir()
            (root / "srv").write_bytes(b"not a directory\n")
        return dirs

    monkeypatch.setattr(inplace, "_check_paths", racing)
    with pytest.raises((RootWriteFailed, inplace.UnsafePath)) as exc:
        inplace.write_in_place(root, result)
    assert exc.value.exit_code == 6
    assert "srv" in exc.value.message and "changed while imgquilt was working" in (exc.value.hint or "")
    assert (root / "etc/app.conf").read_bytes() == CONF  # the files written before the race are rolled back
    _no_leftovers(root)
    assert not (root / JOURNAL).exists()
