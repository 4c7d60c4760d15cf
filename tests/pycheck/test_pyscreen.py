"""The screen's rules on source text (pycheck/pyscreen.py): which names a file may have an item naming,
and the guess of the names a change binds."""
from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

import pytest

from imgquilt.pycheck.crosscheck import items_of
from imgquilt.pycheck.pyscreen import bound_words, names_used, words_of
from imgquilt.pycheck.pysearch import Place

PATH = "usr/lib/python3/dist-packages/pkg/mod.py"


@pytest.mark.parametrize("source", [
    b"X = 1\n",
    b"X: int = 1\n",
    b"X : int\n",
    b"def X():\n    pass\n",
    b"async  def X(a):\n    pass\n",
    b"class X(Base):\n    pass\n",
    b"if True:\n    X = 2\n",
    b"Y = 1\n",  # not there at all
    b"XX = 1\nX_ = 2\n_X = 3\n",  # only longer words
])
def test_a_name_only_bound_at_a_line_s_start_is_left_out(source: bytes) -> None:
    assert names_used(source, {"X"}, PATH) == set()


@pytest.mark.parametrize("source", [
    b"import X\n",
    b"from m import X\n",
    b"from m import (\n    a,\n    X,\n)\n",
    b"from m import a, \\\nX\n",
    b"X = 1\nm.X\n",
    b"X = 1\ny = (m.\nX)\n",
    b"X = 1\ny = {m.\nX: 1}\n",  # a dot at the end of the line before: an attribute, though it looks bound
    b"X = 1\ny = [m.  # why\nX]\n",
    b"X = 1\ny = m.\\\nX\n",
    b"X += 1\n",
    b"X, Y = 1, 2\n",
    b"global X\n",
    b"print(X)\n",
    b"X == 1\n",
    b"s = 'X'\n",  # text too: the screen is words, not a parser
    "X = 1\ncafé.X\n".encode(),
])
def test_a_name_used_anywhere_else_is_kept(source: bytes) -> None:
    assert names_used(source, {"X"}, PATH) == {"X"}


def test_a_name_that_is_a_part_of_the_path_is_kept() -> None:
    """`from . import x` in pkg/mod.py names module `pkg`: the path's parts are always kept."""
    assert names_used(b"pkg = 1\n", {"pkg"}, PATH) == {"pkg"}
    assert names_used(b"mod = 1\n", {"mod"}, PATH) == {"mod"}
    assert names_used(b"other = 1\n", {"other", "pkg"}, PATH) == set()


def _corpus() -> list[tuple[str, bytes]]:
    site = Path(sysconfig.get_paths()["purelib"])
    files = sorted(p for p in site.rglob("*.py") if "test" not in p.name)[:400]
    return [(str(p.relative_to(site)), p.read_bytes()) for p in files]


def test_every_name_an_item_names_is_kept_on_real_sources() -> None:
    """The rule names_used rests on: each name an item names (its module's last part, its name, its
    attribute) that is a word of the file is kept, whatever else the file does with it; checked on
    the installed packages. (A relative import's module, the file's own package, may be no word of it:
    crosscheck asks only about the words, as it did before this rule.)"""
    checked = 0
    for rel, source in _corpus():
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        parts = rel[:-3].split("/")
        package = rel.endswith("/__init__.py")
        module = ".".join(parts[:-1] if package else parts)
        place = Place(entries=(), module=module, is_package=package, version="311", site=True)
        words = words_of(source)
        named = {n for i in items_of(tree, place) for n in (i.name, i.attr, i.module.rsplit(".", 1)[-1]) if n in words}
        path = "usr/lib/python3.11/site-packages/" + rel
        assert names_used(source, named, path) == named, rel
        checked += len(named)
    assert checked > 1000


def test_bound_words_guesses_what_a_change_binds() -> None:
    assert bound_words([b"X = torch.__name__\n"]) == {"X"}
    assert bound_words([b"def added(a, b):\n", b"    return a\n"]) == {"added", "return", "a"} - {"return"}
    assert bound_words([b"from m import (a as b,\n"]) == {"m", "a", "b"}
    assert bound_words([b"class C(Base):\n", b"a, b = 1, 2\n", b"x: int = 3\n"]) == {"C", "a", "b", "x"}


def _imported_names(*sources: bytes) -> set[bytes]:
    """The rule: every word of an import statement's line (up to a comment), and of the brackets it
    leaves open up to the first `)`, the pattern tried at every line's start."""
    from imgquilt.pycheck.pyscreen import _IMPORT_LINE, _WORD

    out: set[bytes] = set()
    for src in sources:
        for m in _IMPORT_LINE.finditer(src):
            tail = m.group(1)
            out.update(_WORD.findall(m.group(0)))
            if b"(" in tail and b")" not in tail:
                end = src.find(b")", m.end())
                out.update(_WORD.findall(src[m.end(): end if end >= 0 else len(src)]))
    return out - {b"import", b"from", b"as"}


def test_imports_any_finds_every_word_of_an_import_statement() -> None:
    """imports_any looks only where the words occur; it says yes for every word the rule gives (and
    for few others: a word only beside an import statement, never one used elsewhere only)."""
    from imgquilt.pycheck.pyscreen import _WORD, imports_any

    tricky = [b"import a\r\nimport b", b"x = 1; import c\nimport", b"from . import (a,\n b)\n#import z\n  import q as r",
              b"from important import x\nimportant = 1\n", b"\timport  os.path as p  # import y\n", b"import", b"",
              b"from m import (\n  a, important,\n  b)\nc = f(b)\n", b"f(x)\nfrom m import (a,\n# )\n d)\n"]
    extra = 0
    for source in tricky + [source for _, source in _corpus()]:
        imported = _imported_names(source)
        for w in set(_WORD.findall(source)) - {b"import", b"from", b"as"}:
            got = imports_any([source], {w})
            assert got or w not in imported, (w, source[:80])
            extra += got and w not in imported
    assert imports_any([b"x = 1\n", b"import y\n"], {b"y"}) and not imports_any([None, b"y = 1\n"], {b"y"})
    assert extra < 100
