"""Layer semantics as the runtime applies them, read from real umoci-built images.

Every image here is built by umoci (`umoci new`, `raw add-layer`, `unpack`/`repack`), with layers
recompressed to zstd or left uncompressed where a test asks for it.
"""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from support.imagetools import (
    blob_path,
    build_oci,
    dir_,
    file,
    flip_byte,
    hardlink,
    layer_bytes,
    layer_digests,
    opaque,
    symlink,
    umoci_edit,
    whiteout,
)
from imgquilt.errors import BadImage, BadInput, DigestMismatch
from imgquilt.image.layers.blobio import BlobLocation, FileRange
from imgquilt.sources import open_source
from imgquilt.image.layers.tarwalk import TarWalker
from support.layer_semantics import BASE

MIDDLE = [
    file("usr/share/doc/readme", "new readme\n"),  # overwritten
    whiteout("etc/motd"),  # deleted
    opaque("opt/app/conf"),  # lower content hidden
    file("opt/app/conf/c.conf", "c=1\n"),
    hardlink("usr/lib/python3/site-link2.py", "usr/lib/python3/site.py"),  # a link into a lower layer
]
TOP = [
    file("usr/bin/tool", "#!/bin/sh\necho top\n", mode=0o4755, uid=0, gid=50),
    file("usr/bin/tool-copy", "copy\n"),
    hardlink("usr/bin/tool-link", "usr/bin/tool-copy", mode=0o755),
]


@pytest.fixture(scope="module", params=["gzip", "zstd", None], ids=["gzip", "zstd", "uncompressed"])
def image(request, tmp_path_factory) -> Path:
    layout = tmp_path_factory.mktemp("sem") / "img"
    build_oci(layout, [BASE, MIDDLE, TOP], tag="v1", compression=request.param)
    return layout


def read(layout: Path, *paths: str, tag: str = "v1", **kw):
    source = open_source(f"oci:{layout}:{tag}", **kw)
    return source, source.read_targets(list(paths))


def test_upper_layer_wins(image):
    source, t = read(image, "usr/share/doc/readme")
    assert t["usr/share/doc/readme"].data == b"new readme\n"
    assert t["usr/share/doc/readme"].layer == layer_digests(image, "v1")[1]


def test_whiteout_deletes_and_names_the_layer(image):
    source, t = read(image, "etc/motd")
    assert t["etc/motd"].data is None and not t["etc/motd"].exists
    assert source.deleted_by("etc/motd") == layer_digests(image, "v1")[1]
    assert "etc/.wh.motd" in source.describe_deletion("etc/motd")
    assert [p.path for p in t["etc/motd"].parents] == ["etc"]


def test_opaque_directory_hides_lower_content(image):
    source, t = read(image, "opt/app/conf/a.conf", "opt/app/conf/c.conf")
    assert t["opt/app/conf/a.conf"].data is None
    assert source.deleted_by("opt/app/conf/a.conf") == layer_digests(image, "v1")[1]
    assert "opaque" in source.describe_deletion("opt/app/conf/a.conf")
    assert t["opt/app/conf/c.conf"].data == b"c=1\n"
    assert source.deleted_by("opt/app/conf/c.conf") is None


def test_directory_symlink_in_lower_layer(image):
    source, t = read(image, "bin/which")
    which = t["bin/which"]
    # bin -> usr/bin, which -> /etc/alternatives/which -> /usr/bin/which.debianutils
    assert which.resolved == "usr/bin/which.debianutils"
    assert which.data == b"which from debianutils\n"
    assert which.mode == 0o755
    assert [p.path for p in which.parents] == ["usr", "usr/bin"]


def test_relative_symlink_and_crlf_bytes(image):
    _, t = read(image, "etc/os-release")
    assert t["etc/os-release"].resolved == "usr/lib/os-release"
    assert t["etc/os-release"].data == b"NAME=Debian\r\nVERSION=12\r\n"


def test_symlinked_dir_to_file_in_upper_layer(image):
    # bin -> usr/bin is only found in the bottom layer, after the top layer holding usr/bin/tool
    source, t = read(image, "bin/tool")
    tool = t["bin/tool"]
    assert tool.resolved == "usr/bin/tool"
    assert tool.data == b"#!/bin/sh\necho top\n"
    assert (tool.mode, tool.uid, tool.gid) == (0o4755, 0, 50)
    assert tool.layer == layer_digests(image, "v1")[2]
    # the same-named file was kept while the top layer was scanned: no second pass needed
    assert source.stats.second_passes == []


def test_hard_links(image):
    _, t = read(image, "usr/lib/python3/site-link.py", "usr/lib/python3/site-link2.py", "usr/bin/tool-link",
                "lib/python3/site.py")
    same_layer = t["usr/lib/python3/site-link.py"]
    assert same_layer.data == b"print('base')\n"
    assert (same_layer.uid, same_layer.gid) == (1000, 1000)
    assert t["usr/lib/python3/site-link2.py"].data == b"print('base')\n"
    assert t["usr/lib/python3/site-link2.py"].layer == layer_digests(image, "v1")[1]
    assert t["usr/bin/tool-link"].data == b"copy\n"
    assert t["usr/bin/tool-link"].mode == 0o755
    assert t["lib/python3/site.py"].resolved == "usr/lib/python3/site.py"


def test_binary_file_and_new_file(image):
    _, t = read(image, "srv/data.bin", "etc/new.conf", "srv/sub/new.txt")
    assert t["srv/data.bin"].data == bytes(range(256)) * 64
    assert t["etc/new.conf"].data is None and t["etc/new.conf"].resolved == "etc/new.conf"
    assert t["srv/sub/new.txt"].data is None and [p.path for p in t["srv/sub/new.txt"].parents] == ["srv"]


def test_directory_target_is_bad_input(image):
    with pytest.raises(BadInput) as exc:
        read(image, "usr/bin")
    assert exc.value.exit_code == 6 and "directory" in exc.value.message


def test_reads_again_after_a_first_call(image):
    source = open_source(f"oci:{image}:v1")
    first = source.read_targets(["usr/bin/tool"])
    assert source.stats.layers_scanned == [layer_digests(image, "v1")[2]]
    second = source.read_targets(["usr/share/doc/readme", "usr/bin/tool"])
    assert first["usr/bin/tool"] == second["usr/bin/tool"]
    assert second["usr/share/doc/readme"].data == b"new readme\n"


# --- reading only what is needed --------------------------------------------------------------
def _three_layers(tmp_path: Path, compression) -> Path:
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("etc/base.conf", "base\n"), file("usr/lib/a.py", "a\n")],
        [file("usr/lib/b.py", "b\n")],
        [file("usr/lib/a.py", "a2\n"), dir_("etc"), file("etc/top.conf", "top\n")],
    ], tag="v1", compression=compression)
    return layout


@pytest.mark.parametrize("compression", ["gzip", None])
def test_lower_layers_are_not_read_once_targets_resolve(tmp_path, compression):
    layout = _three_layers(tmp_path, compression)
    digests = layer_digests(layout, "v1")
    # corrupt the two lower blobs: reading must not touch them
    for d in digests[:2]:
        flip_byte(blob_path(layout, d), blob_path(layout, d).stat().st_size // 2)
    source, t = read(layout, "usr/lib/a.py", "etc/top.conf")
    assert t["usr/lib/a.py"].data == b"a2\n"
    assert t["etc/top.conf"].data == b"top\n"
    assert source.stats.layers_scanned == [digests[2]]
    # a target that needs the corrupt layer below is refused
    with pytest.raises(DigestMismatch) as exc:
        read(layout, "usr/lib/b.py")
    assert exc.value.exit_code == 6 and digests[1] in exc.value.message


def test_absent_target_reads_every_layer(tmp_path):
    layout = _three_layers(tmp_path, "gzip")
    source, t = read(layout, "usr/lib/none.py")
    assert t["usr/lib/none.py"].data is None
    assert source.stats.layers_scanned == list(reversed(layer_digests(layout, "v1")))


def test_parent_whiteout_hides_everything_under_it(tmp_path):
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("opt/tool/bin/run", "run\n"), file("opt/keep", "keep\n")],
        [whiteout("opt/tool")],
    ], tag="v1")
    source, t = read(layout, "opt/tool/bin/run", "opt/keep")
    assert t["opt/tool/bin/run"].data is None
    assert source.deleted_by("opt/tool/bin/run") == layer_digests(layout, "v1")[1]
    assert t["opt/keep"].data == b"keep\n"


def test_upper_directory_replaces_lower_symlink(tmp_path):
    # overlayfs: a directory in an upper layer over a symlink below is a plain directory
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("usr/bin/which", "which\n"), symlink("bin", "usr/bin")],
        [dir_("bin"), file("bin/own", "own\n")],
    ], tag="v1")
    _, t = read(layout, "bin/which", "bin/own")
    assert t["bin/which"].data is None and t["bin/which"].resolved == "bin/which"
    assert t["bin/own"].data == b"own\n"


def test_file_replaced_by_symlink_in_upper_layer(tmp_path):
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("etc/conf", "lower\n"), file("etc/real", "real\n")],
        [symlink("etc/conf", "real")],
    ], tag="v1")
    _, t = read(layout, "etc/conf")
    assert t["etc/conf"].resolved == "etc/real" and t["etc/conf"].data == b"real\n"


def test_symlink_climbing_out_of_the_root_stays_in_the_image(tmp_path):
    """`..` at the root stays at the root, as the kernel resolves it in the container: never the host's file."""
    layout = tmp_path / "img"
    build_oci(layout, [[symlink("etc/passwd", "../../../../etc/passwd"), dir_("etc"),
                        file("real/hosts", "127.0.0.1 image\n"), symlink("etc/hosts", "../../../../real/hosts")]], tag="v1")
    with pytest.raises(BadInput, match="Too many levels of symbolic links"):  # itself, as the kernel finds it: ELOOP
        read(layout, "etc/passwd")
    _, t = read(layout, "etc/hosts")
    assert t["etc/hosts"].resolved == "real/hosts" and t["etc/hosts"].data == b"127.0.0.1 image\n"


def test_absolute_symlink_is_rooted_in_the_image(tmp_path):
    layout = tmp_path / "img"
    build_oci(layout, [[file("real/hosts", "127.0.0.1 image\n"), symlink("etc/hosts", "/real/hosts")]], tag="v1")
    _, t = read(layout, "etc/hosts")
    assert t["etc/hosts"].resolved == "real/hosts" and t["etc/hosts"].data == b"127.0.0.1 image\n"


def test_implicit_parents_take_metadata_from_a_lower_layer(tmp_path):
    layout = tmp_path / "img"
    build_oci(layout, [
        [dir_("srv", mode=0o750, uid=7, gid=8), file("srv/x", "x\n")],
        [file("srv/y", "y\n")],  # no directory entry for srv in this layer
    ], tag="v1", parents=False)
    _, t = read(layout, "srv/y")
    assert t["srv/y"].parents[0].path == "srv"
    assert (t["srv/y"].parents[0].mode, t["srv/y"].parents[0].uid, t["srv/y"].parents[0].gid) == (0o750, 7, 8)


# --- real umoci diffs -----------------------------------------------------------------------
def test_umoci_repacked_changes(tmp_path):
    layout = tmp_path / "img"
    build_oci(layout, [BASE], tag="v1")

    def edit(root: Path) -> None:
        (root / "usr/share/doc/readme").write_bytes(b"edited by umoci\n")
        (root / "etc/motd").unlink()
        (root / "usr/lib/os-release").write_bytes(b"NAME=Edited\n")

    umoci_edit(layout, "v1", edit)
    source, t = read(layout, "usr/share/doc/readme", "etc/motd", "etc/os-release", "bin/which")
    top = layer_digests(layout, "v1")[-1]
    assert t["usr/share/doc/readme"].data == b"edited by umoci\n" and t["usr/share/doc/readme"].layer == top
    assert t["etc/motd"].data is None and source.deleted_by("etc/motd") == top
    assert t["etc/os-release"].data == b"NAME=Edited\n"
    assert t["bin/which"].data == b"which from debianutils\n"


# --- the tar walker itself ------------------------------------------------------------------
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_walker_agrees_with_tarfile(tmp_path, fmt):
    long_dir = "d" * 60 + "/" + "e" * 60
    entries = [
        file(f"{long_dir}/file.txt", "long\n") if fmt != tarfile.USTAR_FORMAT else file("a/file.txt", "x\n"),
        file("plain.txt", b"\x00\xff" * 300),
        symlink("link", "plain.txt"),
        hardlink("hard", "plain.txt"),
        dir_("emptydir"),
    ]
    if fmt != tarfile.USTAR_FORMAT:
        entries.append(symlink("longlink", "/" + "x" * 150))
        entries.append(file("big-uid", "u\n", uid=3_000_000, gid=4_000_000))
        entries.append(file("ünïcödé.txt", "u\n"))
    data = layer_bytes(entries, fmt=fmt)
    path = tmp_path / "t.tar"
    path.write_bytes(data)
    with FileRange(BlobLocation(path, 0, len(data))) as f:
        walker = TarWalker(f, what="test tar")
        ours = []
        for e in walker:
            ours.append((e.name.rstrip("/"), e.type, e.mode, e.uid, e.gid, e.size, e.linkname,
                         walker.read_data() if e.is_file else None))
    theirs = []
    with tarfile.open(path) as tf:
        for m in tf:
            theirs.append((m.name, m.type.decode(), m.mode, m.uid, m.gid, m.size if m.isfile() else 0,
                           m.linkname, tf.extractfile(m).read() if m.isfile() else None))
    assert ours == theirs


def test_walker_reports_truncation(tmp_path):
    data = layer_bytes([file("a", "x" * 5000)])
    path = tmp_path / "t.tar"
    path.write_bytes(data[:3000])
    with FileRange(BlobLocation(path, 0, 3000)) as f, pytest.raises(BadImage) as exc:
        for _ in TarWalker(f, what="test tar"):
            pass
    assert "truncated" in exc.value.message


def test_walker_rejects_garbage(tmp_path):
    path = tmp_path / "t.tar"
    path.write_bytes(b"this is not a tar file" * 100)
    with FileRange(BlobLocation(path, 0, 2200)) as f, pytest.raises(BadImage) as exc:
        for _ in TarWalker(f, what="test tar"):
            pass
    assert "not a valid tar" in exc.value.message


def test_flat_tar_last_member_wins_and_whiteouts_are_plain_files(tmp_path):
    data = layer_bytes([file("etc/x", "first\n"), file("etc/.wh.y", ""), file("etc/y", "y\n"),
                        file("etc/x", "second\n")])
    path = tmp_path / "fs.tar"
    path.write_bytes(data)
    source = open_source(f"tar:{path}")
    t = source.read_targets(["etc/x", "etc/y", "etc/.wh.y"])
    assert t["etc/x"].data == b"second\n" and t["etc/y"].data == b"y\n" and t["etc/.wh.y"].data == b""
    assert t["etc/x"].layer is None
    assert source.info().kind == "tar" and source.info().digest is None


def test_walker_offsets_point_at_member_data(tmp_path):
    # the member count and the data offsets over a few thousand entries
    entries = [file(f"pkg/m{i:05d}.py", f"x = {i}\n") for i in range(3000)]
    data = layer_bytes(entries)
    path = tmp_path / "many.tar"
    path.write_bytes(data)
    with FileRange(BlobLocation(path, 0, len(data))) as f:
        seen = [(e.name, e.offset, e.size) for e in TarWalker(f, what="t")]
    files = [s for s in seen if s[0].startswith("pkg/m")]
    assert len(files) == 3000
    name, offset, size = files[1234]
    assert data[offset:offset + size] == b"x = 1234\n"


@pytest.mark.parametrize("compression", ["gzip", None])
def test_second_pass_reads_a_member_found_through_a_lower_symlink(tmp_path, compression):
    # the top layer changes usr/bin/which.debianutils; only the bottom layer says that
    # usr/bin/which leads there (through /etc/alternatives), so the top layer is read again
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("usr/bin/which.debianutils", "old\n", mode=0o755), dir_("etc/alternatives"),
         symlink("etc/alternatives/which", "/usr/bin/which.debianutils"),
         symlink("usr/bin/which", "/etc/alternatives/which")],
        [file("usr/bin/which.debianutils", "new\n", mode=0o755)],
    ], tag="v1", compression=compression)
    source, t = read(layout, "usr/bin/which")
    top = layer_digests(layout, "v1")[1]
    assert t["usr/bin/which"].data == b"new\n" and t["usr/bin/which"].layer == top
    assert source.stats.second_passes == [top]


def test_list_paths_is_the_merged_filesystem(tmp_path):
    """What rebase searches for moved targets: whiteouts, opaque dirs and symlinked parents hide paths."""
    layout = tmp_path / "img"
    build_oci(layout, [
        [file("opt/tool/bin/run", "run\n"), file("opt/keep", "keep\n"), file("opt/conf/a", "a\n"),
         file("srv/x/y", "y\n"), file("usr/lib/z", "z\n")],
        [whiteout("opt/tool"), opaque("opt/conf"), file("opt/conf/b", "b\n"), symlink("srv/x", "/usr/lib")],
    ], tag="v1")
    source = open_source(f"oci:{layout}:v1")
    assert source.list_paths() == ["opt/conf/b", "opt/keep", "srv/x", "usr/lib/z"]
