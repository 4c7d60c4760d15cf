"""The object store: sha256-named, written once, read back only when the bytes still match."""
from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from imgquilt.store import ObjectStore, remember, remember_named

# a real-looking base: CRLF, non-UTF-8 and no final newline must all come back exactly
CONF = b"[server]\r\nname = caf\xe9\r\nworkers = 2"


def test_put_get_round_trip_is_byte_exact(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path)
    sha = store.put(CONF)
    assert sha == hashlib.sha256(CONF).hexdigest()
    assert store.get(sha) == CONF
    path = tmp_path / ".imgquilt" / "objects" / sha[:2] / sha
    assert path.read_bytes() == CONF
    assert stat.S_IMODE(path.stat().st_mode) == 0o444  # write-once: read-only
    assert store.has(sha) and store.has("absent")
    assert store.get_or_absent("absent") == (True, None)


def test_put_twice_keeps_one_object_and_no_temp_files(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path)
    a = store.put(b"x = 1\n")
    before = (tmp_path / ".imgquilt/objects" / a[:2] / a).stat().st_mtime_ns
    assert store.put(b"x = 1\n") == a
    assert (tmp_path / ".imgquilt/objects" / a[:2] / a).stat().st_mtime_ns == before
    files = [p for p in (tmp_path / ".imgquilt/objects").rglob("*") if p.is_file()]
    assert files == [tmp_path / ".imgquilt/objects" / a[:2] / a]


def test_missing_or_damaged_objects_read_as_missing(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path)
    sha = store.put(b"print('hello')\n")
    assert store.get("0" * 64) is None
    assert store.get("not-a-hash") is None
    path = store.path(sha)
    path.chmod(0o644)
    path.write_bytes(b"print('tampered')\n")
    assert store.get(sha) is None  # never hand out bytes that are not what the name says
    assert store.put(b"print('hello')\n") == sha  # a put repairs it
    assert store.get(sha) == b"print('hello')\n"


def test_remember_stores_every_content_and_skips_absent(tmp_path: Path) -> None:
    n = remember(tmp_path, [b"a\n", None, b"b\n", b"a\n"])
    assert n == 2
    store = ObjectStore(tmp_path)
    assert store.get(hashlib.sha256(b"a\n").hexdigest()) == b"a\n"
    assert remember(tmp_path, [b"a\n"]) == 0


def test_remember_is_best_effort_when_the_queue_cannot_be_written(tmp_path: Path) -> None:
    # `.imgquilt` is a file here, so no object can be written: apply/audit must still go on
    (tmp_path / ".imgquilt").write_bytes(b"")
    assert remember(tmp_path, [b"a\n"]) == 0


def test_remember_named_keeps_only_what_the_queue_names(tmp_path: Path) -> None:
    from imgquilt.queue.queue import load_queue
    from support.qtools import write_patch

    write_patch(tmp_path, "0001-workers.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"8"))])
    q = load_queue(tmp_path)
    assert remember_named(q, [CONF, b"some drifted content\n", None, CONF.replace(b"2", b"8")]) == 2
    store = ObjectStore(tmp_path)
    assert store.get(hashlib.sha256(CONF).hexdigest()) == CONF
    assert store.get(hashlib.sha256(b"some drifted content\n").hexdigest()) is None


def test_planning_a_lock_writes_nothing_and_the_lock_verb_keeps_every_base_and_result(tmp_path: Path) -> None:
    from imgquilt.engine.plan import plan_lock
    from imgquilt.queue.queue import load_queue
    from imgquilt.rootfs.source import RootfsSource
    from imgquilt.verbs.lock import lock_queue
    from support.qtools import write_patch

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/svc.conf").write_bytes(CONF)
    q = tmp_path / "q"
    result = CONF.replace(b"2", b"8")
    write_patch(q, "0001-workers.patch", [("etc/svc.conf", CONF, result)])
    plan = plan_lock(load_queue(q), RootfsSource(root), f"rootfs:{root}")
    assert not (q / ".imgquilt").exists()  # the engine plans; it does not write
    assert set(plan.contents) == {CONF, result}
    lock = lock_queue(load_queue(q), RootfsSource(root), f"rootfs:{root}")
    assert lock == plan.lock
    store = ObjectStore(q)
    assert store.get(hashlib.sha256(CONF).hexdigest()) == CONF
    assert store.get(hashlib.sha256(result).hexdigest()) == result


def test_remember_walks_the_store_once_and_never_through_a_planted_link(tmp_path: Path) -> None:
    """remember() asks which objects are stored for all contents at once (ObjectStore.present); it
    counts only real files, and a directory of the store replaced by a symlink is refused, as has() does."""
    import os

    import pytest

    from imgquilt.errors import LinkedState

    q = tmp_path / "q"
    q.mkdir()
    datas = [b"one\n" * 2000, b"two\n", b"three\r\n", None, b"two\n"]
    assert remember(q, datas) == 3
    store = ObjectStore(q)
    shas = [hashlib.sha256(d).hexdigest() for d in datas if d is not None]
    assert store.present(shas + ["0" * 64, "absent", "x"]) == set(shas)
    assert remember(q, datas) == 0  # all there: nothing written again
    # a fake object: a directory where a file should be does not count as stored
    fake = "f" * 64
    (q / ".imgquilt/objects/ff" / fake).mkdir(parents=True)
    assert store.present([fake]) == set()
    # a planted link in place of a fan-out directory: refused, never followed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sha = hashlib.sha256(b"four\n").hexdigest()
    (elsewhere / sha).write_bytes(b"four\n")
    os.symlink(elsewhere, q / ".imgquilt/objects" / sha[:2])
    with pytest.raises(LinkedState):
        store.present([sha])
    with pytest.raises(LinkedState):
        remember(q, [b"four\n"])


def test_remember_writes_new_objects_one_walk_per_fan_out_directory(tmp_path: Path, monkeypatch) -> None:
    """The first run of a long queue stores thousands of objects: remember() walks to each fan-out
    directory once for all its new objects (put() walked from the queue root twice per object), and
    what it writes is what put() writes: the exact bytes, read-only, no temp file left."""
    import os
    import stat

    from imgquilt.util import statedir

    q = tmp_path / "q"
    q.mkdir()
    datas = [f"object {i}\n".encode() * (i + 1) for i in range(300)]
    walks = []
    real = statedir.open_dir_below
    monkeypatch.setattr(statedir, "open_dir_below", lambda *a, **k: walks.append(a[1]) or real(*a, **k))
    assert remember(q, datas) == 300
    fan_outs = {hashlib.sha256(d).hexdigest()[:2] for d in datas}
    # present() and the writes: each fan-out directory at most twice, plus the store itself
    assert len(walks) <= 2 * len(fan_outs) + 4
    store = ObjectStore(q)
    for d in datas:
        sha = hashlib.sha256(d).hexdigest()
        assert store.get(sha) == d
        assert stat.S_IMODE(os.stat(store.path(sha)).st_mode) == 0o444
    assert not [p for p in (q / ".imgquilt/objects").rglob("*") if p.is_file() and ".tmp" in p.name]


def test_write_many_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    import os

    import pytest

    from imgquilt.errors import LinkedState
    from imgquilt.util.statedir import StateDir

    q = tmp_path / "q"
    (q / ".imgquilt/objects").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, q / ".imgquilt/objects/ab")
    with pytest.raises(LinkedState):
        StateDir(q, "objects").write_many([("aa/one", b"1\n"), ("ab/two", b"2\n")], mode=0o444, durable=False)
    assert list(elsewhere.iterdir()) == []
