"""A section below a symlink the series creates, changes or deletes is refused by where it resolves, not by its name.

The shape a user hit: the image has `app/l2 -> l`; patch 1 creates the symlink `app/l` (git mode
120000), patch 2 creates `app/l2/x`, which lands below the link patch 1 makes. By name the two never
meet; as the image resolves them they do. Every output refuses it in the plan (exit 6), nothing
written: --root (where it used to wedge the root for ever), --layer, --output-image, --overlay. The same
with both sections in one patch, an absolute or `../..` link target, the link named through a
directory link, and an existing link the series retargets or deletes while a file is reached through
it. A root wedged by an older imgquilt (a stray directory where the link goes, its journal) is
recovered by the next command.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support.hostile import refused, run
from support.imagetools import build_oci, dir_, file, symlink
from imgquilt.queue.patchfile import Header, build_patch, make_section
from support.qtools import empty_queue, tree_hash

pytestmark = pytest.mark.skipif(shutil.which("umoci") is None, reason="umoci is needed")

X = b"x\n"
SHAPES = {
    # name: (image entries, patches: [[(path, old, new, link)]])
    "another-patch": ([dir_("app"), dir_("app/real"), symlink("app/l2", "l")],
                      [[("app/l", None, b"real", True)], [("app/l2/x", None, X, False)]]),
    "same-patch": ([dir_("app"), dir_("app/real"), symlink("app/l2", "l")],
                   [[("app/l", None, b"real", True), ("app/l2/x", None, X, False)]]),
    "absolute-target": ([dir_("app"), dir_("app/real"), symlink("app/l2", "/app/l")],
                        [[("app/l", None, b"/app/real", True)], [("app/l2/x", None, X, False)]]),
    "dotdot-target": ([dir_("app"), dir_("app/real"), dir_("app/sub"), symlink("app/sub/l2", "../../app/l")],
                      [[("app/l", None, b"real", True)], [("app/sub/l2/x", None, X, False)]]),
    "through-a-directory-link": ([dir_("app"), dir_("app/real"), symlink("d", "app")],
                                 [[("d/l", None, b"real", True)], [("app/l/x", None, X, False)]]),
    "retargeted-link": ([dir_("app"), dir_("app/real"), dir_("app/other"), file("app/real/x", X), symlink("app/l", "real"),
                         symlink("app/l2", "l")],
                        [[("app/l", b"real", b"other", True)], [("app/l2/x", X, b"y\n", False)]]),
    "deleted-link": ([dir_("app"), dir_("app/real"), file("app/real/x", X), symlink("app/l", "real"), symlink("app/l2", "l")],
                     [[("app/l", b"real", None, True)], [("app/l2/x", X, b"y\n", False)]]),
}


def _queue(q: Path, patches: list[list[tuple[str, bytes | None, bytes | None, bool]]]) -> Path:
    empty_queue(q)
    (q / "patches").mkdir()
    for i, sections in enumerate(patches, 1):
        name = f"{i:04d}-p.patch"
        p = build_patch(name, Header(b"Description: p\n\n"), [make_section(path, old, new, link=link) for path, old, new, link in sections])
        (q / "patches" / name).write_bytes(p.raw)
        with open(q / "series", "a") as f:
            f.write(name + "\n")
    return q


def _root(root: Path, entries: list[dict]) -> Path:
    root.mkdir(parents=True)
    for e in entries:
        p = root / e["path"]
        if e["kind"] == "dir":
            p.mkdir(exist_ok=True)
        elif e["kind"] == "symlink":
            os.symlink(e["target"], p)
        else:
            p.write_bytes(e["data"])
    return root


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_section_below_a_link_the_series_makes_is_refused_for_every_output(shape: str, tmp_path: Path,
                                                                              cli_env: dict[str, str]) -> None:
    entries, patches = SHAPES[shape]
    q = _queue(tmp_path / "q", patches)
    layout = build_oci(tmp_path / "layout", [entries])
    root = _root(tmp_path / "root", entries)
    before = tree_hash(root)
    image = f"oci:{layout}:latest"
    for args in (("--root", str(root)), ("--image", image, "--layer", str(tmp_path / "out.tar")),
                 ("--image", image, "--output-image", f"oci:{tmp_path / 'out'}:patched"),
                 ("--image", image, "--overlay", str(tmp_path / "ov"))):
        r = run(q, "apply", *args, "--no-python-check", env=cli_env)
        refused(r, 6, "below a link the series makes", "Nothing was written")
        assert "symlink app/l" in r.err, r.err
    assert tree_hash(root) == before, "the root is exactly as it was"
    assert not (root / ".imgquilt-journal.json").exists()
    for out in ("out.tar", "out", "ov"):
        assert not (tmp_path / out).exists(), out
    # the lock refuses it too
    refused(run(q, "lock", "--image", image, "--no-python-check", env=cli_env), 6, "symlink app/l")


def test_a_root_wedged_by_an_older_version_is_recovered_by_the_next_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """What an older imgquilt left after the shape above: the directory it made where the link goes, and
    its journal (commit phase: its rename of the link over that directory failed, and so did its roll-back,
    on EISDIR). Every later command recovered first and failed again, for ever. Now the roll-back removes
    the directory it made, and the next command goes on."""
    from imgquilt.rootfs.journal import Entry, Journal, write_journal

    entries, patches = SHAPES["another-patch"]
    root = _root(tmp_path / "root", entries)
    before = tree_hash(root)
    for d in ("app/l", "var", "var/lib", "var/lib/imgquilt"):
        (root / d).mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_journal(fd, Journal("0" * 32, "commit", (Entry("app/l", False, False), Entry("app/l/x", False, False),
                                                       Entry("var/lib/imgquilt/applied.json", False, False)),
                                  ("app/l", "var", "var/lib", "var/lib/imgquilt")))
    finally:
        os.close(fd)
    (root / "app/.imgquilt-" "0000000000000000000000000000000" "0-0.new").symlink_to("real")  # its staged link
    q = _queue(tmp_path / "q", patches)
    refused(run(q, "apply", "--root", str(root), "--no-python-check", env=cli_env), 6, "symlink app/l")
    assert tree_hash(root) == before, "recovered: exactly the root before the crashed apply"
    # a queue without the shape applies there as usual
    q2 = _queue(tmp_path / "q2", [[("app/l", None, b"real", True)], [("app/real/x", None, X, False)]])
    assert run(q2, "apply", "--root", str(root), "--no-python-check", env=cli_env).code == 0
    assert os.readlink(root / "app/l") == "real" and (root / "app/l2/x").read_bytes() == X


def test_the_in_place_writer_refuses_a_file_below_another_of_its_own_before_writing(tmp_path: Path) -> None:
    """Past the plan, the writer holds the same line itself: a write whose file would be a directory of
    another (a link app/l and a file app/l/x, as a plan that knew less could make) is refused before the
    first write, with no journal left, rather than failing its commit and its roll-back."""
    from imgquilt.engine.result import ApplyResult, FileResult
    from imgquilt.errors import UnsafePath
    from imgquilt.fs.types import TargetFile
    from imgquilt.rootfs.inplace import write_in_place
    from imgquilt.rootfs.source import RootfsSource

    root = _root(tmp_path / "root", SHAPES["another-patch"][0])
    before = tree_hash(root)
    files = (FileResult(TargetFile("app/l", "app/l", None), b"real", 0o777, 0, 0, ("1",), link=True),
             FileResult(TargetFile("app/l2/x", "app/l/x", None), X, 0o644, 0, 0, ("2",)))
    with pytest.raises(UnsafePath, match="another file of this write lies below it"):
        write_in_place(root, ApplyResult(RootfsSource(root).info(), "s", ("1", "2"), files, False))
    assert tree_hash(root) == before
