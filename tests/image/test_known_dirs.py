"""An image source resolves a target from the directories it already resolved (fs.resolve's `known`):
the answer is the one a walk from the root gives, through symlinked directories (absolute, relative,
with `..` past the root), whiteouts, opaque directories and a directory replaced by a file in an upper
layer. Every path is read in one source after the others (its directories known) and in a source of
its own (nothing known), and the two answers are compared field by field."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.imagetools import build_oci, dir_, file, opaque, symlink, whiteout
from imgquilt.errors import ImgquiltError
from imgquilt.sources import open_source

LOW = [
    dir_("usr/lib/py/pkg/sub", mode=0o750, uid=7, gid=8),
    file("usr/lib/py/pkg/__init__.py", "A = 1\n"),
    file("usr/lib/py/pkg/sub/mod.py", "B = 2\n"),
    file("usr/lib/py/pkg/sub/gone.py", "C = 3\n"),
    file("usr/lib/py/other/x.py", "X = 1\n"),
    file("opt/app/conf/a.conf", "a=1\n"),
    dir_("var/data/deep/er"),
    file("var/data/deep/er/f.txt", "deep\n"),
    symlink("lib", "usr/lib"),
    symlink("usr/lib/py/alias", "pkg/sub"),
    symlink("usr/lib/py/abs", "/usr/lib/py/pkg"),
    symlink("usr/lib/py/up", "../../../../../usr/lib/py/other"),  # `..` stops at the root
]
HIGH = [
    whiteout("usr/lib/py/pkg/sub/gone.py"),
    opaque("opt/app/conf"),
    file("opt/app/conf/b.conf", "b=1\n"),
    file("var/data/deep", "now a file\n"),  # replaces the directory below
    file("usr/lib/py/pkg/sub/new.py", "N = 1\n"),
]
PATHS = [
    "usr/lib/py/pkg/__init__.py", "usr/lib/py/pkg/sub/mod.py", "lib/py/pkg/sub/mod.py", "usr/lib/py/alias/mod.py",
    "usr/lib/py/abs/sub/mod.py", "usr/lib/py/up/x.py", "lib/py/up/x.py", "usr/lib/py/pkg/sub/gone.py",
    "usr/lib/py/alias/gone.py", "usr/lib/py/pkg/sub/new.py", "lib/py/abs/sub/new.py", "opt/app/conf/a.conf",
    "opt/app/conf/b.conf", "var/data/deep/er/f.txt", "usr/lib/py/pkg/sub/none/x.py", "usr/lib/py/missing/x.py",
    "usr/lib/py/pkg/__init__.py/x.py",
]


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> str:
    layout = tmp_path_factory.mktemp("known") / "img"
    build_oci(layout, [LOW, HIGH])
    return f"oci:{layout}:latest"


def _answer(source, path: str):
    try:
        t = source.read_targets([path])[path]
    except ImgquiltError as e:
        return type(e).__name__, str(e)
    return t.path, t.resolved, t.data, t.mode, t.uid, t.gid, t.parents, t.via, t.link


def test_a_target_read_after_others_gets_what_a_fresh_walk_gets(ref: str) -> None:
    shared = open_source(ref)
    for order in (PATHS, list(reversed(PATHS))):
        for path in order:
            assert _answer(shared, path) == _answer(open_source(ref), path), path
    # the known directories were used: a path under a known directory looks up only what is below it
    assert shared._known_dirs.get("usr/lib/py/pkg/sub") is not None
    assert [p for p, _ in shared._known_dirs["usr/lib/py/pkg/sub"]] == ["usr", "usr/lib", "usr/lib/py", "usr/lib/py/pkg",
                                                                         "usr/lib/py/pkg/sub"]
    assert "var/data/deep" not in shared._known_dirs  # a file now, never remembered as a directory


def test_all_at_once_equals_one_by_one(ref: str) -> None:
    together = open_source(ref).read_targets([p for p in PATHS if _answer(open_source(ref), p)[0] == p])
    for path, t in together.items():
        assert (t.path, t.resolved, t.data, t.parents, t.via) == _answer(open_source(ref), path)[:3] + _answer(
            open_source(ref), path)[6:8], path


def test_peek_dir_through_known_directories(ref: str, tmp_path: Path) -> None:
    shared = open_source(ref)
    shared.read_targets(["usr/lib/py/pkg/sub/mod.py"])
    fresh = open_source(ref)
    fresh.read_targets(["usr/lib/py/other/x.py"])
    for d in ("usr/lib/py/pkg/sub", "usr/lib/py/alias", "lib/py/abs/sub"):
        assert shared.peek_dir(d) == fresh.peek_dir(d), d
