"""Issue 36, point 4: the base filesystems `boot --image` unpacks into the shared cache share the files
two images have in common (one inode, hard links), count in IMGQUILT_CACHE_MAX and are evicted least
recently used first, never while a boot uses them, and stay sealed.

Two real images built with umoci: A (a small OS layer and a package layer) and B (A's layers and one
more), so B's tree holds every file of A's.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.imagetools import build_oci, file
from support.qtools import imgquilt, write_patch

PKG = "usr/local/lib/python3.11/dist-packages/pkg"
OS_LAYER = [file("etc/os-release", "ID=tiny\n"), file("usr/bin/tool", "#!/bin/sh\n" + "# padding\n" * 2000, mode=0o755),
            file("usr/share/doc/big.txt", "x" * 300_000)]
PKG_LAYER = [file(f"{PKG}/__init__.py", ""), file(f"{PKG}/mod.py", "VALUE = 1\n" * 2000)]
EXTRA = [file("usr/share/doc/extra.txt", "y" * 200_000)]


@pytest.fixture
def images(tmp_path: Path) -> tuple[str, str]:
    a = build_oci(tmp_path / "a", [OS_LAYER, PKG_LAYER])
    b = build_oci(tmp_path / "b", [OS_LAYER, PKG_LAYER, EXTRA])
    return f"oci:{a}:latest", f"oci:{b}:latest"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(d))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("IMGQUILT_NO_CACHE", raising=False)
    monkeypatch.delenv("IMGQUILT_CACHE_MAX", raising=False)
    from imgquilt.cache.trust import forget_checks

    forget_checks()
    return d


def _tree(ref: str) -> Path:
    from imgquilt.sources import open_image
    from imgquilt.verbs.materialize import materialized

    from imgquilt.cache.rootfs import RootfsCache

    img = open_image(ref)
    with materialized(img) as tree:
        assert tree.is_dir()
    sealed = RootfsCache().believed(img.manifest_digest)  # a cold tree is sealed once its user is done
    assert sealed is not None and sealed.is_dir()
    return sealed


def _pool_names(pool: Path) -> dict[int, list[str]]:
    """inode -> the pool's directories that name it (sorted)."""
    out: dict[int, list[str]] = {}
    for f in pool.rglob("*"):
        if f.is_file() and not f.is_symlink() and f.name != ".seal":
            out.setdefault(f.stat().st_ino, []).append(f.parent.name)
    return {k: sorted(v) for k, v in out.items()}


def test_two_images_share_their_common_files(images, cache: Path) -> None:
    a, b = _tree(images[0]), _tree(images[1])
    assert a != b and a.is_dir() and b.is_dir()
    pool = _pool_names(cache / "rootfs/pool")
    for rel in ("usr/bin/tool", "usr/share/doc/big.txt", f"{PKG}/mod.py"):
        sa, sb = os.stat(a / rel), os.stat(b / rel)
        assert (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino), rel  # stored once
        # the first of its shape (A's, not hashed), then hashed when B brought a file of that shape
        assert sorted(d for d in pool[sa.st_ino] if d == "shapes" or len(d) == 2) == pool[sa.st_ino] and len(pool[sa.st_ino]) == 2
        assert sa.st_nlink == 2 + 2  # the pool's two names and one per tree
        assert (a / rel).read_bytes() == (b / rel).read_bytes()
    extra = os.stat(b / "usr/share/doc/extra.txt")
    assert pool[extra.st_ino] == ["shapes"] and extra.st_nlink == 2  # alone of its shape: never hashed
    # a file under the pool's floor (rootfs.extract.POOL_MIN) is each tree's own copy
    sa, sb = os.stat(a / "etc/os-release"), os.stat(b / "etc/os-release")
    assert sa.st_ino != sb.st_ino and sa.st_nlink == sb.st_nlink == 1
    assert os.stat(a / "usr/bin/tool").st_mode & 0o777 == 0o755
    # a file with the same bytes but another mode is its own inode
    assert os.stat(a / f"{PKG}/__init__.py").st_ino != os.stat(a / "usr/bin/tool").st_ino


def test_a_cold_tree_is_used_before_it_is_sealed_and_sealed_only_once_synced(images, cache: Path, monkeypatch) -> None:
    """The first user probes the tree where it was unpacked while its bytes go to disk; nothing is
    believed before the sync is done, and a failed sync seals nothing (the next run unpacks again)."""
    from imgquilt.cache import rootfs as rootfs_cache
    from imgquilt.cache.rootfs import RootfsCache
    from imgquilt.sources import open_image
    from imgquilt.verbs import materialize

    img = open_image(images[0])
    rc = RootfsCache()

    def failing(tree: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(materialize, "sync_tree", failing)
    with materialize.materialized(img) as tree:
        assert (tree / "usr/bin/tool").is_file()
        assert rc.believed(img.manifest_digest) is None  # in use, not sealed
    assert rc.believed(img.manifest_digest) is None and not tree.exists()  # the sync failed: nothing kept
    assert not [p for p in (cache / "rootfs").iterdir() if p.name != "pool"]

    monkeypatch.setattr(materialize, "sync_tree", rootfs_cache.sync_tree)
    with materialize.materialized(img) as tree:
        assert rc.believed(img.manifest_digest) is None
    sealed = rc.believed(img.manifest_digest)
    assert sealed is not None and (sealed / "usr/bin/tool").read_bytes() == ("#!/bin/sh\n" + "# padding\n" * 2000).encode()
    with materialize.materialized(img) as warm:
        assert warm == sealed  # warm: the sealed tree itself


def test_two_cold_boots_of_one_image_at_once_keep_the_first_sealed_tree(images, cache: Path) -> None:
    """Two processes unpack the same image at once: the one that seals second keeps the tree the
    first sealed (a third process may be probing it) and removes its own copy."""
    from imgquilt.cache.rootfs import RootfsCache
    from imgquilt.sources import open_image
    from imgquilt.verbs.materialize import materialized

    img = open_image(images[0])
    rc = RootfsCache()
    with materialized(img) as first:
        with materialized(open_image(images[0])) as second:
            assert second != first and second.is_dir()
        sealed = rc.believed(img.manifest_digest)
        assert sealed is not None
        ino = os.stat(sealed).st_ino
        with rc.held(img.manifest_digest):  # a third boot probing the sealed tree
            pass
    assert not first.exists()  # the second copy is removed, the sealed one untouched
    assert rc.believed(img.manifest_digest) == sealed and os.stat(sealed).st_ino == ino
    assert [p.name for p in (cache / "rootfs").iterdir() if p.name not in ("pool",) and p.suffix == ".tree"] == [sealed.name]


def test_the_trees_count_in_the_cap_and_the_least_recently_used_goes(images, cache: Path, monkeypatch) -> None:
    from imgquilt.cache.rootfs import RootfsCache
    from imgquilt.cache.usage import report, trim
    from imgquilt.sources import open_image

    a = _tree(images[0])
    size_a = report(cache).parts["rootfs"].bytes
    assert size_a >= 330_000  # the tree's bytes, not its marker's
    # a cap that holds one tree, not two: unpacking B evicts A (older), B stays
    monkeypatch.setenv("IMGQUILT_CACHE_MAX", str(size_a + 300_000))
    b = _tree(images[1])
    assert not a.exists() and b.is_dir()
    assert report(cache).parts["rootfs"].entries == 1
    # the pool keeps only what B's tree links to
    pool = cache / "rootfs/pool"
    held = {os.stat(p).st_ino for p in b.rglob("*") if p.is_file() and not p.is_symlink()}
    kept = _pool_names(pool)
    assert kept and set(kept) <= held
    # a tree in use is never evicted, even over the cap; once free, it goes
    rc = RootfsCache()
    digest = open_image(images[1]).manifest_digest
    with rc.held(digest):
        trim(cache, cap=1)
        assert b.is_dir() and rc.believed(digest) == b
    trim(cache, cap=1)
    assert not b.exists() and not any(p.is_file() and p.name != ".seal" for p in pool.rglob("*"))


def test_a_boot_over_the_cap_gives_the_same_verdicts_and_leaves_the_cache_under_it(images, tmp_path: Path, cli_env) -> None:
    """The whole verb: the tree unpacked, probed, then evicted (a cap smaller than one tree); nothing left."""
    import shutil

    if shutil.which("python3.11") is None:
        pytest.skip("needs a python3.11")
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-doc.patch", [("etc/os-release", b"ID=tiny\n", b"ID=tiny\nVARIANT=fixed\n")])
    env = {**cli_env, "IMGQUILT_CACHE_MAX": "100K"}
    doc = json.loads(imgquilt("boot", "--image", images[0], "--format", "json", cwd=q, env=env, check=0).out)
    assert doc["patches"][0]["verdict"] == "cannot tell"  # no Python module: nothing to probe
    rootfs = Path(cli_env["IMGQUILT_CACHE_DIR"]) / "rootfs"
    assert not [p for p in rootfs.iterdir() if p.name != "pool"]
    assert not any(p.is_file() and p.name != ".seal" for p in (rootfs / "pool").rglob("*"))


def test_an_image_with_no_python_is_cannot_tell_not_an_error(images, tmp_path: Path, cli_env) -> None:
    """Bad input of the acceptance: an image with no interpreter, a module outside any site-packages, a
    command path that is no executable of the image, a User the image does not have: "cannot tell" or
    a clear error with its exit code, never 1 (qtools.imgquilt asserts that for every run)."""
    import subprocess

    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-mod.patch", [(f"{PKG}/mod.py", b"VALUE = 1\n" * 2000, b"VALUE = 1\n" * 2000 + b"OTHER = 2\n")])
    write_patch(q, "0002-outside.patch", [("opt/app/run.py", None, b"X = 1\n")])
    r = imgquilt("boot", "--image", images[0], cwd=q, env=cli_env, check=0)
    assert "cannot tell  0001-mod.patch" in r.out and "the image has no python3.11 (nor python3) on its PATH" in r.out
    assert "cannot tell  0002-outside.patch" in r.out and "not under a directory an image's Python imports from" in r.out
    r = imgquilt("boot", "--image", images[0], "--", "/usr/share/doc/big.txt", cwd=q, env=cli_env, check=6)
    assert "The command '/usr/share/doc/big.txt' is not an executable file in the image." in r.err
    layout = Path(images[0].split(":")[1])
    subprocess.run(["umoci", "config", "--image", f"{layout}:latest", "--tag", "named", "--config.user", "app"],
                   check=True, capture_output=True)
    r = imgquilt("boot", "--image", f"oci:{layout}:named", cwd=q, env=cli_env, check=6)
    assert "The image's User 'app': no 'app' in the image's /etc/passwd." in r.err


def test_a_pool_restored_from_elsewhere_is_never_linked_from(images, cache: Path) -> None:
    """A pool file is linked into a new tree by its name alone (its sha256 and size): so a pool is used
    only under its seal (the pool directory's device and inode, under this user's cache key). A copy
    of a sealed pool with its seal (a cache restored from another job), whose files were replaced by
    other bytes of the same size, is removed before anything is linked from it."""
    import shutil

    a = _tree(images[0])
    pool = cache / "rootfs/pool"
    assert (pool / ".seal").is_file()
    restored = cache / "rootfs/restored"
    shutil.copytree(pool, restored, symlinks=True)
    planted = 0
    for f in restored.rglob("*"):
        if f.is_file() and f.name != ".seal":
            f.chmod(0o644)
            f.write_bytes(b"E" * f.stat().st_size)  # the same names and sizes, other bytes
            planted += 1
    assert planted >= 3
    pool.rename(cache / "rootfs/.old-pool")
    restored.rename(pool)
    b = _tree(images[1])
    for rel in ("usr/bin/tool", "usr/share/doc/big.txt", f"{PKG}/mod.py"):
        assert (b / rel).read_bytes() == (a / rel).read_bytes() and b"EEEE" not in (b / rel).read_bytes(), rel
    assert not any(f.is_file() and f.read_bytes().startswith(b"EEEE") for f in pool.rglob("*"))  # discarded
    assert (pool / ".seal").is_file()  # and made anew


def test_without_a_cache_key_no_pool_is_used(images, cache: Path, monkeypatch) -> None:
    from imgquilt.cache.rootfs import RootfsCache

    monkeypatch.setattr("imgquilt.cache.rootfs.entry_seal", lambda *a: None)
    monkeypatch.setattr("imgquilt.cache.rootfs.entry_sealed", lambda *a: False)
    assert RootfsCache().trusted_pool() is None
