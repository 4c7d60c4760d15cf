"""The shared cache as a trust boundary (cache/trust.py): trusted like $HOME, so used only when it is
the user's alone. The forgeries an attacker who can write a shared cache makes (a "clean" pycheck row
for a file with a SyntaxError; a layer index relabelled from image A to a drifted image B) change no
verdict: a cache that others can write, that another user owns, or whose parts are links, is refused
(exit 6) before anything in it is read. `cache prune` and the size trim touch only imgquilt's entries.
"""
from __future__ import annotations

import hashlib
import json
import marshal
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from imgquilt.cache import DigestStore
from imgquilt.cache.layers import LayerCache
from imgquilt.cache.usage import prune, trim
from imgquilt.pycheck.names import checker_version
from imgquilt.pycheck.ruffscreen import ruff_screen
from support.qtools import empty_queue, imgquilt, tree_hash, write_patch
from support.registry_server import registry  # noqa: F401 (fixture)
from support.cache_rows import BROKEN, GOOD, _images, _layer

NOBODY = 65534
HOW = ["world-writable", "group-writable", "foreign-owner", "linked-part"]


def share(cache: Path, part: str, how: str, tmp_path: Path) -> Path:
    """Make the cache (or one part) writable by an attacker the way `how` says; returns the directory
    the attacker writes `part` in."""
    if how == "world-writable":
        os.chmod(cache, 0o777)
    elif how == "group-writable":
        os.chown(cache, -1, 4242)  # a group that is not the user's private one
        os.chmod(cache, 0o770)
    elif how == "foreign-owner":
        for dirpath, dirs, files in os.walk(cache):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(dirpath, name), NOBODY, NOBODY)
        os.lchown(cache, NOBODY, NOBODY)
    else:  # the part is a link to a directory the attacker controls
        theirs = tmp_path / "attacker" / part
        theirs.parent.mkdir(exist_ok=True)
        os.rename(cache / part, theirs)
        os.symlink(theirs, cache / part)
        return theirs
    return cache / part


@pytest.fixture
def env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


# --- the forged clean row --------------------------------------------------------------------------
def _forge_clean_rows(db_dir: Path, data: bytes, name: str) -> None:
    """Rows saying `data` (as `name`) has no finding, under every key imgquilt has used, with the
    row checksum recomputed (it is unkeyed: anyone can)."""
    version = checker_version(ruff_screen())
    keys = [hashlib.sha256(data).hexdigest(),  # by content (before)
            hashlib.sha256(name.encode() + b"\0" + data).hexdigest()]  # by name and content
    db = sqlite3.connect(db_dir / "findings.sqlite")
    db.execute("CREATE TABLE IF NOT EXISTS findings (version TEXT NOT NULL, key TEXT NOT NULL, errors TEXT NOT NULL, "
               "sum TEXT NOT NULL, PRIMARY KEY (version, key)) WITHOUT ROWID")
    for key in keys:
        total = hashlib.sha256(json.dumps([key, version, []]).encode()).hexdigest()
        db.execute("INSERT OR REPLACE INTO findings VALUES (?, ?, ?, ?)", (version, key, "[]", total))
    db.commit()
    db.close()


@pytest.mark.parametrize("how", HOW)
def test_a_forged_clean_row_in_a_shared_cache_lets_no_syntax_error_through(tmp_path: Path, env, how: str) -> None:
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app/server.py").write_bytes(GOOD)
    warm = empty_queue(tmp_path / "warm")
    write_patch(warm, "0001-ok.patch", [("app/other.py", None, b"X = 1\n")])
    scratch = tmp_path / "scratch"
    (scratch / "app").mkdir(parents=True)
    imgquilt("apply", "--root", str(scratch), cwd=warm, env=env, check=0)
    cache = tmp_path / "cache"
    assert (cache / "pycheck/findings.sqlite").is_file()  # a real run made the cache and its database
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-broken.patch", [("app/server.py", GOOD, BROKEN)])
    _forge_clean_rows(share(cache, "pycheck", how, tmp_path), BROKEN, "app/server.py")
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, env=env)
    assert r.code == 6, r.out + r.err
    assert "shared cache" in r.err and "does not use it" in r.err and "Traceback" not in r.err, r.err
    assert tree_hash(root) == before
    env["IMGQUILT_NO_CACHE"] = "1"  # without the cache the verdict is the honest one
    r = imgquilt("apply", "--root", str(root), cwd=q, env=env, check=3)
    assert "SyntaxError" in r.err


def test_the_users_own_cache_is_used(tmp_path: Path, env) -> None:
    """The check is no obstacle to a normal cache: private (0700), the user's, real directories; a group-
    writable parent that is sticky (/tmp) is fine too."""
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app/server.py").write_bytes(GOOD)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-broken.patch", [("app/server.py", GOOD, BROKEN)])
    for _ in range(2):  # cold, then with the findings cached
        imgquilt("apply", "--root", str(root), cwd=q, env=env, check=3)
    cache = tmp_path / "cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert all(stat.S_IMODE((cache / p).stat().st_mode) & 0o022 == 0 for p in os.listdir(cache))


def _relabel(cache: Path, layers_dir: Path, index_dir: Path, from_digest: str, to_digest: str) -> None:
    """What an attacker with write access does: A's index, re-dumped under B's digest, stored by its
    (unkeyed) sha256, and B's pointer aimed at it."""
    pointer = (cache / "layers" / from_digest.replace(":", "-")).read_bytes().split()[0].decode()  # "HEX SEAL"
    payload = (cache / "layer-index" / pointer[:2] / pointer).read_bytes()
    fields = list(marshal.loads(payload))
    assert fields[1] == from_digest
    fields[1] = to_digest
    forged = marshal.dumps(tuple(fields), 4)
    hexdigest = hashlib.sha256(forged).hexdigest()
    (index_dir / hexdigest[:2]).mkdir(exist_ok=True)
    (index_dir / hexdigest[:2] / hexdigest).write_bytes(forged)
    (layers_dir / to_digest.replace(":", "-")).write_bytes(hexdigest.encode() + b"\n")


@pytest.mark.parametrize("how", HOW)
def test_an_index_relabelled_from_image_a_to_b_changes_no_verdict(tmp_path: Path, env, how: str) -> None:
    a, b = _images(tmp_path)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-workers.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    imgquilt("apply", "--image", f"oci:{a}:latest", "--layer", str(tmp_path / "a.tar"), cwd=q, env=env, check=0)
    imgquilt("apply", "--image", f"oci:{b}:latest", cwd=q, env={**env, "IMGQUILT_NO_CACHE": "1"}, check=3)
    cache = tmp_path / "cache"
    layers_dir = share(cache, "layers", how, tmp_path)
    index_dir = cache / "layer-index" if how != "linked-part" else share(cache, "layer-index", how, tmp_path)
    _relabel(cache, layers_dir, index_dir, _layer(a), _layer(b))
    r = imgquilt("apply", "--image", f"oci:{b}:latest", "--layer", str(tmp_path / "b.tar"), cwd=q, env=env)
    assert r.code == 6 and "does not use it" in r.err, r.out + r.err
    assert not (tmp_path / "b.tar").exists()
    r = imgquilt("audit", "--image", f"oci:{b}:latest", cwd=q, env=env)
    assert r.code == 6 and "does not use it" in r.err, r.out + r.err


# --- links and odd files inside the cache --------------------------------------------------------
@pytest.mark.parametrize("part", ["files", "layer-index", "layers", "verified", "pycheck", "manifests", "configs"])
def test_a_linked_part_is_refused_and_nothing_is_written_through_it(tmp_path: Path, env, part: str, request) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"keep me\n")
    os.symlink(victim, cache / part)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-x.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    if part in ("manifests", "configs"):  # a registry image's small blobs
        ref = request.getfixturevalue("registry").ref("demo:latest")
    else:
        ref = f"oci:{_images(tmp_path)[0]}:latest"
    before = tree_hash(victim)
    r = imgquilt("apply", "--image", ref, "--layer", str(tmp_path / "l.tar"), cwd=q, env=env)
    assert r.code == 6 and f"{cache / part} is a symlink" in r.err, r.err
    assert tree_hash(victim) == before


def forget_checks() -> None:
    from imgquilt.cache.trust import forget_checks as forget

    forget()


def test_a_link_fifo_or_directory_where_an_entry_should_be_reads_as_absent(tmp_path: Path) -> None:
    forget_checks()
    store = DigestStore("files", tmp_path / "cache")
    secret = tmp_path / "secret"
    secret.write_bytes(b"secret")
    key = store.put(b"secret")
    path = store.path(key)
    path.unlink()
    path.symlink_to(secret)  # the right bytes, through a link: still not an entry imgquilt wrote
    assert store.get(key) is None and not path.exists() and secret.read_bytes() == b"secret"
    os.mkfifo(path)
    assert store.get(key) is None and not path.exists()  # no hang on the FIFO
    assert store.put(b"secret") == key and store.get(key) == b"secret"
    lc = LayerCache(tmp_path / "cache")
    fan = tmp_path / "cache/files" / "ab"
    os.symlink(tmp_path, fan)  # a linked fan-out directory: nothing below it is read
    assert DigestStore("files", tmp_path / "cache").get("ab" + "0" * 62) is None
    assert lc.load("sha256:" + "1" * 64) is None


def test_a_cache_above_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    from imgquilt.cache.trust import CacheDir
    from imgquilt.errors import UnsafeCache

    forget_checks()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # not sticky: anyone could swap the cache directory itself
    with pytest.raises(UnsafeCache, match="above the shared cache"):
        CacheDir(shared / "cache", "files")
    forget_checks()
    os.chmod(shared, 0o1777)  # sticky, as /tmp: only the owner may rename what is in it
    assert CacheDir(shared / "cache", "files").path.is_dir()


# --- prune and trim -----------------------------------------------------------------------------------
def _foreign(cache: Path) -> dict[str, bytes]:
    """Another program's files, as with IMGQUILT_CACHE_DIR=~/.cache by mistake."""
    files = {"pip/http/ab/cdef": b"pip's", "files/README": b"not ours", "files/ab/notes.txt": b"not ours either",
             "layers/sha256-short": b"looks close", "fontconfig/cache-4": b"fonts", "configs/zz/" + "a" * 64: b"odd dir",
             "top-level.txt": b"mine"}
    for rel, data in files.items():
        (cache / rel).parent.mkdir(parents=True, exist_ok=True)
        (cache / rel).write_bytes(data)
    return files


def test_prune_and_trim_remove_only_what_imgquilt_wrote(tmp_path: Path, env) -> None:
    cache = tmp_path / "cache"
    a, _ = _images(tmp_path)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-x.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    imgquilt("apply", "--image", f"oci:{a}:latest", "--layer", str(tmp_path / "l.tar"), cwd=q, env=env, check=0)
    foreign = _foreign(cache)
    ours = json.loads(imgquilt("cache", "--json", cwd=tmp_path, env=env, check=0).out)["cache"]["entries"]
    assert ours > 0
    forget_checks()
    evicted = trim(cache, cap=1)
    assert evicted.entries == ours
    assert {rel: (cache / rel).read_bytes() for rel in foreign} == foreign
    imgquilt("apply", "--image", f"oci:{a}:latest", "--layer", str(tmp_path / "l2.tar"), cwd=q, env=env, check=0)
    r = imgquilt("cache", "prune", cwd=tmp_path, env=env, check=0)
    assert "Removed" in r.out
    assert {rel: (cache / rel).read_bytes() for rel in foreign} == foreign
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    assert left == sorted(foreign)
    forget_checks()
    assert prune(cache).entries == 0


def test_prune_refuses_a_cache_that_is_not_the_users_alone(tmp_path: Path, env) -> None:
    cache = tmp_path / "cache"
    (cache / "files/ab").mkdir(parents=True)
    (cache / "files/ab" / ("ab" + "0" * 62)).write_bytes(b"x")
    os.chmod(cache, 0o777)
    r = imgquilt("cache", "prune", cwd=tmp_path, env=env)
    assert r.code == 6 and "writable by every user" in r.err, r.err
    assert (cache / "files/ab" / ("ab" + "0" * 62)).exists()
