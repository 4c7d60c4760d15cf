"""The image's layers unpacked for `imgquilt boot --image` (rootfs/extract.py): whiteouts as the
runtime honours them, and nothing ever written outside the tree, whatever a layer's names and links say."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

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
