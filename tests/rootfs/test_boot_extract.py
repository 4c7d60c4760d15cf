"""The image's layers unpacked for `imgquilt boot --image` (rootfs/extract.py): whiteouts as the
runtime honours them, and nothing ever written outside the tree, whatever a layer's names and links say."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from imgquilt.rootfs.extract import extract_layers


def _tar(members: list[tuple[str, str, bytes | str]]) -> io.BytesIO:
    """(kind, name, data or link target) members: file, dir, sym, hard."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                raw = data if isinstance(data, bytes) else data.encode()
                info.size = len(raw)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(raw))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}[kind]
            info.mode = 0o755
            if kind in ("sym", "hard"):
                info.linkname = str(data)
            tar.addfile(info)
    buf.seek(0)
    return buf


def test_whiteouts_and_opaque_directories(tmp_path: Path) -> None:
    dest = tmp_path / "tree"
    dest.mkdir()
    lower = _tar([("dir", "a", ""), ("file", "a/x", "x"), ("file", "a/y", "y"), ("dir", "b", ""), ("file", "b/old", "old"),
                  ("file", "c", "c1")])
    upper = _tar([("file", "a/.wh.x", ""), ("dir", "b", ""), ("file", "b/.wh..wh..opq", ""), ("file", "b/new", "new"),
                  ("file", "c", "c2"), ("hard", "d", "c")])
    assert extract_layers(dest, [("l1", lower), ("l2", upper)]) == 0
    assert sorted(p.name for p in (dest / "a").iterdir()) == ["y"]
    assert sorted(p.name for p in (dest / "b").iterdir()) == ["new"]
    assert (dest / "c").read_text() == "c2" and (dest / "d").stat().st_ino == (dest / "c").stat().st_ino


def test_names_and_links_never_lead_out_of_the_tree(tmp_path: Path) -> None:
    dest = tmp_path / "tree"
    dest.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    hostile = _tar([("sym", "evil", str(outside)), ("sym", "up", "../../.."), ("dir", "etc", "")])
    writes = _tar([("file", "evil/planted", "x"), ("file", "up/etc/planted2", "y"), ("file", "../../escaped", "z"),
                   ("file", "/abs", "w"), ("hard", "h", "/etc/passwd")])
    extract_layers(dest, [("l1", hostile), ("l2", writes)])
    assert list(outside.iterdir()) == [] and not (tmp_path / "escaped").exists()
    # an absolute link is the tree's own root, `..` stops at it: as in the container
    assert (dest / outside.relative_to("/") / "planted").read_text() == "x"
    assert (dest / "etc/planted2").read_text() == "y"
    assert (dest / "escaped").read_text() == "z" and (dest / "abs").read_text() == "w"
    assert not (dest / "h").exists()  # a hard link to a file the tree does not have


def test_a_remembered_parent_replaced_by_a_link_is_resolved_again(tmp_path: Path) -> None:
    """The unpacker remembers the directories it opened; a later layer that turns one into a symlink
    (to an absolute path, re-rooted at the tree) must not be written through the old directory nor
    out of the tree."""
    dest = tmp_path / "tree"
    dest.mkdir()
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    lower = _tar([("dir", "a", ""), ("dir", "a/b", ""), ("file", "a/b/f", "1"), ("dir", "elsewhere", ""),
                  ("dir", "elsewhere/b", "")])
    upper = _tar([("file", ".wh.a", ""), ("sym", "a", "/elsewhere"), ("file", "a/b/g", "2"),
                  ("sym", "o", str(outside)), ("file", "o/b/h", "3")])
    assert extract_layers(dest, [("l1", lower), ("l2", upper)]) == 0
    assert (dest / "a").is_symlink() and (dest / "elsewhere/b/g").read_text() == "2"
    assert not (outside / "b/h").exists() and (dest / outside.relative_to("/") / "b/h").read_text() == "3"


def _file_tar(files: list[tuple[str, bytes, int]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, raw, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), mode
            tar.addfile(info, io.BytesIO(raw))
    buf.seek(0)
    return buf


@pytest.mark.parametrize("held", [True, False])
def test_the_pool_stores_identical_files_once_from_its_floor_up(tmp_path: Path, monkeypatch, held: bool) -> None:
    """Files of the same bytes and mode, from POOL_MIN bytes up, are one inode (in a tree and across
    trees; data across the walker's 4 MiB chunks too, held for the hasher or, too large to hold,
    hashed as written); a different mode is another file; a file under the floor is its own copy,
    never pooled; bytes and modes (setuid too) are the layer's."""
    from imgquilt.rootfs import extract

    if not held:
        monkeypatch.setattr(extract, "_INFLIGHT_BYTES", 1 << 20)

    mid = b"m" * extract.POOL_MIN
    big = bytes(range(256)) * (5 << 12)  # 5 MiB
    files = [("s1", mid, 0o644), ("s2", mid, 0o644), ("x", mid, 0o4755), ("b1", big, 0o644),
             ("b2", big, 0o644), ("t1", b"tiny", 0o644), ("t2", b"tiny", 0o644), ("e1", b"", 0o600), ("e2", b"", 0o600)]
    pool = tmp_path / "pool"
    trees = []
    for t in ("t1", "t2"):
        dest = tmp_path / t
        dest.mkdir()
        written: list[int] = []
        assert extract_layers(dest, [("l", _file_tar(files))], pool=pool, written=written) == 0
        assert written == [sum(len(raw) for _, raw, _ in files)]
        for name, raw, mode in files:
            assert (dest / name).read_bytes() == raw and (dest / name).stat().st_mode & 0o7777 == mode, name
        assert not [p.name for p in dest.iterdir() if p.name.startswith(".")]  # no link left half-made
        trees.append(dest)
    ino = {(t.name, n): (t / n).stat().st_ino for t in trees for n, _, _ in files}
    names: dict[int, list[str]] = {}  # inode -> the pool's directories that name it
    sizes: dict[int, int] = {}
    for f in pool.rglob("*"):
        if f.is_file():
            names.setdefault(f.stat().st_ino, []).append(f.parent.name)
            sizes[f.stat().st_ino] = f.stat().st_size
    for a, b, raw in (("s1", "s2", mid), ("b1", "b2", big)):
        assert len({ino[(t, n)] for t in ("t1", "t2") for n in (a, b)}) == 1, a
        # its shape's first (not hashed then) and, once a second file of that shape came, its sha256 name
        assert sorted(names[ino[("t1", a)]]) == [hashlib.sha256(raw).hexdigest()[:2], "shapes"], a
        assert (trees[0] / a).stat().st_nlink == 2 + 4  # the pool's two names and two per tree
    assert ino[("t1", "x")] != ino[("t1", "s1")]
    assert sorted(names[ino[("t1", "x")]]) == sorted(names[ino[("t1", "s1")]])  # its own shape and sha256 name
    for n in ("t1", "t2", "e1", "e2"):  # under the floor: written, not pooled
        assert (trees[0] / n).stat().st_nlink == 1, n
    assert sorted(sizes.values()) == [len(mid), len(mid), len(big)]


def test_a_pooled_file_replaced_or_linked_before_it_is_hashed_keeps_the_layers_meaning(tmp_path: Path) -> None:
    """The pool links a file after it is written (its hash comes from a thread): a later member that
    replaces or removes the name meanwhile is not undone, and a tar hard link to a pooled file is the
    same inode as it."""
    from imgquilt.rootfs import extract

    one, two = b"1" * extract.POOL_MIN, b"2" * extract.POOL_MIN
    pool = tmp_path / "pool"
    seed = tmp_path / "seed"
    seed.mkdir()
    extract_layers(seed, [("l", _file_tar([("a", one, 0o644)]))], pool=pool)  # the pool holds `one`
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, raw in (("f", one), ("f", two), ("g", one), ("gone", one)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
        info = tarfile.TarInfo("h")
        info.type, info.linkname = tarfile.LNKTYPE, "g"
        tar.addfile(info)
    buf.seek(0)
    wh = _tar([("file", ".wh.gone", b"")])
    dest = tmp_path / "tree"
    dest.mkdir()
    assert extract_layers(dest, [("l1", buf), ("l2", wh)], pool=pool) == 0
    assert (dest / "f").read_bytes() == two and (dest / "g").read_bytes() == one and not (dest / "gone").exists()
    assert (dest / "h").stat().st_ino == (dest / "g").stat().st_ino == (seed / "a").stat().st_ino
    assert (dest / "f").stat().st_ino != (seed / "a").stat().st_ino


def test_a_planted_pool_entry_that_is_not_the_file_is_not_linked(tmp_path: Path) -> None:
    """A pool name that is a symlink or of another size is never linked into a tree: the file is written."""
    import hashlib
    import os

    from imgquilt.rootfs.extract import POOL_MIN

    raw = b"print('hi')\n" * (POOL_MIN // 12 + 1)
    pool = tmp_path / "pool"
    key = f"{hashlib.sha256(raw).hexdigest()}-644-{os.geteuid()}-{os.getegid()}"
    (pool / key[:2]).mkdir(parents=True)
    (tmp_path / "secret").write_text("not the file")
    (pool / key[:2] / key).symlink_to(tmp_path / "secret")
    dest = tmp_path / "tree"
    dest.mkdir()
    extract_layers(dest, [("l", _file_tar([("f", raw, 0o644)]))], pool=pool)
    assert not (dest / "f").is_symlink() and (dest / "f").read_bytes() == raw


def test_owners_and_setuid_bits_are_the_layers(tmp_path: Path) -> None:
    """A file another user owns keeps its setuid bit (a chown clears it; it is put back), one of this
    process's owner gets its mode without a chown, whatever the umask."""
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("ownership needs root")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, mode, uid in (("su", 0o4755, 1234), ("sg", 0o2711, 0), ("ro", 0o444, 0), ("all", 0o777, 0)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = 1, mode, uid, uid
            tar.addfile(info, io.BytesIO(b"x"))
    buf.seek(0)
    dest = tmp_path / "tree"
    dest.mkdir()
    old = os.umask(0o077)
    try:
        extract_layers(dest, [("l", buf)], pool=tmp_path / "pool")
    finally:
        os.umask(old)
    got = {n: ((dest / n).stat().st_mode & 0o7777, (dest / n).stat().st_uid, (dest / n).stat().st_gid)
           for n in ("su", "sg", "ro", "all")}
    assert got == {"su": (0o4755, 1234, 1234), "sg": (0o2711, 0, 0), "ro": (0o444, 0, 0), "all": (0o777, 0, 0)}


def test_a_file_alone_of_its_shape_is_never_hashed(tmp_path: Path, monkeypatch) -> None:
    """Two files can only be the same with the same size, mode and owner: a file whose shape the pool
    has not seen is linked as that shape's first and not hashed. A second file of the shape is
    hashed, with the first once; the same bytes are then one inode, other bytes of that size are not."""
    from imgquilt.rootfs import extract

    hashed: list[int] = []
    real = extract._sha256_of

    def counting(fd: int, size: int) -> str:
        hashed.append(size)
        return real(fd, size)

    monkeypatch.setattr(extract, "_sha256_of", counting)
    n = extract.POOL_MIN
    a, b, c = b"a" * n, b"b" * (n + 1), b"c" * (n + 2)
    pool = tmp_path / "pool"
    one = tmp_path / "one"
    one.mkdir()
    assert extract_layers(one, [("l", _file_tar([("a", a, 0o644), ("b", b, 0o644), ("c", c, 0o755)]))], pool=pool) == 0
    assert hashed == []  # three shapes, each alone
    # another image: the same `a`, a `b2` of b's size with other bytes, and `c` under another mode
    two = tmp_path / "two"
    two.mkdir()
    b2 = b"B" * (n + 1)
    assert extract_layers(two, [("l", _file_tar([("a", a, 0o644), ("b", b2, 0o644), ("c", c, 0o644), ("a2", a, 0o644)]))],
                          pool=pool) == 0
    assert sorted(hashed) == [n, n, n, n + 1, n + 1]  # a's first once, a, a2; b's first and b2; c alone of its shape
    assert (two / "a").stat().st_ino == (one / "a").stat().st_ino == (two / "a2").stat().st_ino
    assert (two / "b").stat().st_ino != (one / "b").stat().st_ino and (two / "b").read_bytes() == b2
    assert (two / "c").stat().st_ino != (one / "c").stat().st_ino and (two / "c").stat().st_mode & 0o777 == 0o644
    for tree, files in ((one, {"a": a, "b": b, "c": c}), (two, {"a": a, "b": b2, "c": c, "a2": a})):
        assert {f: (tree / f).read_bytes() for f in files} == files


def test_a_shape_s_first_that_is_not_a_regular_file_of_its_size_is_never_hashed_or_linked(tmp_path: Path) -> None:
    """A planted `shapes/` name (a symlink, or a file of another size) is not read as the first of its
    shape: the new file is hashed and pooled on its own, and never linked to it."""
    import os

    from imgquilt.rootfs.extract import POOL_MIN

    raw = b"x" * POOL_MIN
    pool = tmp_path / "pool"
    (pool / "shapes").mkdir(parents=True)
    shape = f"{POOL_MIN}-644-{os.geteuid()}-{os.getegid()}"
    (tmp_path / "secret").write_bytes(b"s" * POOL_MIN)
    (pool / "shapes" / shape).symlink_to(tmp_path / "secret")
    dest = tmp_path / "tree"
    dest.mkdir()
    extract_layers(dest, [("l", _file_tar([("f", raw, 0o644)]))], pool=pool)
    assert (dest / "f").read_bytes() == raw and (dest / "f").stat().st_ino != (tmp_path / "secret").stat().st_ino
    assert (tmp_path / "secret").read_bytes() == b"s" * POOL_MIN
