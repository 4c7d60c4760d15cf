"""The cross-module check's rules, one at a time (pycheck/crosscheck.py, pysearch.py, pyiface.py):
module search as CPython's FileFinder, names, calls bound as CPython binds them, "cannot tell",
only new findings, and reads that stop as soon as they can."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from support import boottools as bt
from imgquilt.pycheck.crosscheck import FileCheck, cross_check
from imgquilt.pycheck.pyiface import bind, interface
from imgquilt.pycheck.pysearch import SourceModules, place_of
from imgquilt.rootfs.source import RootfsSource
from imgquilt.sources import open_source

SITE = "usr/local/lib/python3.11/site-packages"


def _root(tmp: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return tmp


def check(root: Path, path: str, final: bytes, base: bytes | None = None, source=None) -> list[str]:
    """Every new finding and "cannot tell" of the file at `path`, rendered."""
    files = SourceModules(source or RootfsSource(root))
    overlay = {path: final}
    got = cross_check([FileCheck(path, path, base, final)], [(path, base, final)], files.view(overlay), files.view())
    return [x for ff in got for f in ff.findings + ff.notes for x in f.located(path)]


def test_bind_says_what_cpython_says() -> None:
    """Random signatures and calls: bind() gives CPython's own TypeError message, or None when CPython binds."""
    rng = random.Random(26)
    names = ["a", "b", "c", "d", "e"]
    for _ in range(1500):
        params = rng.sample(names, rng.randint(0, 5))
        n_pos = rng.randint(0, len(params))
        posonly = params[: rng.randint(0, n_pos)]
        args = params[len(posonly): n_pos]
        kwonly = params[n_pos:]
        defaults = rng.randint(0, len(posonly) + len(args))
        parts = []
        positional = posonly + args
        for i, p in enumerate(positional):
            parts.append(p + ("=0" if i >= len(positional) - defaults else ""))
        if posonly:
            parts.insert(len(posonly), "/")
        if rng.random() < 0.3:
            parts.append("*rest")
        elif kwonly:
            parts.append("*")
        parts += [k + ("=0" if rng.random() < 0.5 else "") for k in kwonly]
        if rng.random() < 0.3:
            parts.append("**more")
        src = f"def f({', '.join(parts)}):\n    pass\n"
        ns: dict = {}
        exec(src, ns)
        sig = interface(src.encode()).names["f"][0].signature
        npos = rng.randint(0, 6)
        kws = rng.sample(names + ["z"], rng.randint(0, 3))
        try:
            ns["f"](*range(npos), **{k: 0 for k in kws})
            want = None
        except TypeError as exc:
            want = str(exc)
        assert bind(sig, "f", npos, kws) == want, (src, npos, kws)


def test_the_search_path_of_a_file() -> None:
    class NoFiles:
        def look(self, paths, *, settle):
            from imgquilt.pycheck.pysearch import Look
            return {p: Look("absent") for p in paths}

        def platform(self):
            return None

    deb = place_of("usr/local/lib/python3.12/dist-packages/vllm/model_executor/layer.py", NoFiles(), settle=True)
    assert deb.entries == ("usr/local/lib/python3.12/dist-packages", "usr/lib/python3/dist-packages", "usr/lib/python3.12/dist-packages")
    assert (deb.module, deb.version, deb.is_package) == ("vllm.model_executor.layer", "312", False)
    venv = place_of("opt/venv/lib/python3.11/site-packages/pkg/__init__.py", NoFiles(), settle=True)
    assert venv.entries == ("opt/venv/lib/python3.11/site-packages",) and (venv.module, venv.is_package) == ("pkg", True)
    # no site directory: absolute imports from the package tree's top (no __init__.py anywhere: the file's
    # own directory), relative ones by directories from the root
    app = place_of("srv/my-app/main.py", NoFiles(), settle=True)
    assert app.entries == ("srv/my-app", "") and app.module == "srv.my-app.main"
    assert place_of("srv/app/not-a-module.py", NoFiles(), settle=True) is None


def test_a_tree_of_namespace_packages_outside_site_packages(tmp_path: Path) -> None:
    """No __init__.py anywhere (run as `python -m pkg.cli.main` from srv/app): relative imports go by
    directories, and "beyond the top package" is never claimed where the top is not known."""
    root = _root(tmp_path, {"srv/app/pkg/errors.py": "class Oops(Exception):\n    pass\n", "srv/app/pkg/cli/util.py": "def run():\n    pass\n"})
    me = "srv/app/pkg/cli/main.py"
    got = check(root, me, b"from ..errors import Oops, Missing\nfrom .util import run\nfrom ....... import far\nimport pkg.cli.util\nrun(1)\n")
    assert got == [
        f"{me}:1:1: ImportError: cannot import name 'Missing' from 'srv.app.pkg.errors' (srv/app/pkg/errors.py: binds no 'Missing' at module level)",
        f"{me}:5:1: TypeError: run() takes 0 positional arguments but 1 was given (srv/app/pkg/cli/util.py: line 1: def run())",
    ]


def test_modules_as_cpython_finds_them(tmp_path: Path) -> None:
    root = _root(tmp_path, {
        f"{SITE}/pkg/__init__.py": "from .core import *\nfrom .loose import *\nfrom os import *\n",
        f"{SITE}/pkg/core.py": "__all__ = ['run']\ndef run(x):\n    return x\ndef _hidden():\n    pass\n",
        f"{SITE}/pkg/loose.py": "def public():\n    pass\ndef _private():\n    pass\n",
        f"{SITE}/pkg/fast.py": "def slow_only():\n    pass\n",
        f"{SITE}/pkg/fast.cpython-311-x86_64-linux-gnu.so": b"\x7fELF",  # the extension wins over fast.py
        f"{SITE}/pkg/both.py": "X = 1\n",
        f"{SITE}/pkg/both/__init__.py": "Y = 1\n",  # the package wins over both.py
        f"{SITE}/ns/part/mod.py": "Z = 1\n",  # ns/ and ns/part/: namespace packages
        "usr/lib/python3/dist-packages/debonly.py": "D = 1\n",
    })
    me = f"{SITE}/app/boot.py"
    src = b"""from pkg import run, public, nothing
from pkg.fast import slow_only
from pkg.both import Y
from pkg.both import X
from ns.part import mod
from ns.part import gone
import ns.missing
from pkg import _hidden
from os import path, not_in_os
import typing
if typing.TYPE_CHECKING:
    from pkg import only_for_typing
try:
    from pkg import optional_thing
except ImportError:
    optional_thing = None
"""
    got = check(root, me, src)
    # `from .loose import *` exports public names only; `from os import *` (the standard library) cannot be followed
    assert f"{me}:1:1: cannot tell: whether pkg has 'nothing' ({SITE}/pkg/__init__.py: `from os import *` in pkg cannot be followed)" in got[-3:] or \
        any("whether pkg has 'nothing'" in g and "`from os import *`" in g for g in got)
    assert any(f"{me}:2:1: cannot tell: whether pkg.fast has 'slow_only'" in g and "a native extension" in g for g in got)
    assert any(f"{me}:4:1: ImportError: cannot import name 'X' from 'pkg.both'" in g for g in got)
    assert any(f"{me}:6:1: ImportError: cannot import name 'gone' from 'ns.part'" in g and "a namespace package" in g for g in got)
    assert any(f"{me}:7:1: ModuleNotFoundError: No module named 'ns.missing'" in g for g in got)
    assert any("whether pkg has '_hidden'" in g for g in got)  # a private name is no star export: cannot tell (os's star)
    text = "\n".join(got)
    for fine in ("'run'", "'public'", "'Y'", "'mod'", "not_in_os", "only_for_typing", "optional_thing", "'path'"):
        assert f"cannot import name {fine}" not in text, fine
    assert len([g for g in got if "cannot tell" not in g]) == 3


def test_a_debian_layout_and_relative_imports(tmp_path: Path) -> None:
    root = _root(tmp_path, {
        "usr/lib/python3/dist-packages/debpkg/__init__.py": "def make(a, b=1):\n    pass\n",
        "usr/local/lib/python3.12/dist-packages/fix/__init__.py": "",
        "usr/local/lib/python3.12/dist-packages/fix/util.py": "def helper():\n    pass\n",
    })
    me = "usr/local/lib/python3.12/dist-packages/fix/boot.py"
    got = check(root, me, b"from debpkg import make\nfrom .util import helper, missing\nfrom ... import beyond\nmake()\nmake(1, 2, 3)\nhelper(1)\n")
    assert got == [
        f"{me}:2:1: ImportError: cannot import name 'missing' from 'fix.util' (usr/local/lib/python3.12/dist-packages/fix/util.py: binds no 'missing' at module level)",
        f"{me}:3:1: ImportError: attempted relative import beyond top-level package",
        f"{me}:4:1: TypeError: make() missing 1 required positional argument: 'a' (usr/lib/python3/dist-packages/debpkg/__init__.py: line 1: def make(a, b=…))",
        f"{me}:5:1: TypeError: make() takes from 1 to 2 positional arguments but 3 were given (usr/lib/python3/dist-packages/debpkg/__init__.py: line 1: def make(a, b=…))",
        f"{me}:6:1: TypeError: helper() takes 0 positional arguments but 1 was given (usr/local/lib/python3.12/dist-packages/fix/util.py: line 1: def helper())",
    ]


def test_calls_it_cannot_judge_and_names_it_does_not_follow(tmp_path: Path) -> None:
    root = _root(tmp_path, {
        f"{SITE}/lib/__init__.py": "import functools\n\n@functools.cache\ndef cached(a):\n    pass\n\ndef plain(a):\n    pass\n\n"
                                   "class Meta(type):\n    pass\n\nclass WithMeta(metaclass=Meta):\n    def __init__(self, a):\n        pass\n",
    })
    me = f"{SITE}/app.py"
    src = b"from lib import cached, plain, WithMeta, plain2\nimport lib\ncached(1, 2)\nplain(*[1])\nWithMeta()\nlib.plain()\n" \
          b"def f(plain2):\n    return plain2(1, 2, 3)\n"
    got = check(root, me, src)
    assert any(f"{me}:3:1: cannot tell: whether the call of lib.cached() fits" in g and "decorated" in g for g in got)
    assert any(f"{me}:4:1: cannot tell: whether the call of lib.plain() fits" in g and "unpacks *args" in g for g in got)
    assert any(f"{me}:5:1: cannot tell: whether the call of lib.WithMeta() fits" in g and "metaclass" in g for g in got)
    # `import lib` then lib.plain(): a call through the module's attribute
    assert any(f"{me}:6:1: TypeError: plain() missing 1 required positional argument: 'a'" in g for g in got)
    assert not any(":8:" in g for g in got)  # plain2 is also a parameter of f there: a name bound otherwise is not judged


def test_only_new_findings_count(tmp_path: Path) -> None:
    root = _root(tmp_path, {f"{SITE}/lib.py": "def call(a):\n    pass\n"})
    me = f"{SITE}/app.py"
    base = b"from lib import call, gone\ncall()\n"
    assert check(root, me, base + b"X = 1\n", base) == []  # the base had both
    moved = b"X = 1\n" + base  # the same shapes at other lines: not new
    assert check(root, me, moved, base) == []
    got = check(root, me, base + b"call(1, 2)\n", base)
    assert got == [f"{me}:3:1: TypeError: call() takes 1 positional argument but 2 were given ({SITE}/lib.py: line 1: def call(a))"]


def test_a_patched_module_is_read_with_the_patch(tmp_path: Path) -> None:
    """The patched files' final bytes win over the image's: a patch adding a parameter and a caller passing it."""
    root = _root(tmp_path, {f"{SITE}/lib.py": "def call(a):\n    pass\n", f"{SITE}/app.py": "from lib import call\n"})
    files = SourceModules(RootfsSource(root))
    lib_new = b"def call(a, mode):\n    pass\n"
    app_new = b"from lib import call\ncall(1, mode='x')\n"
    overlay = {f"{SITE}/lib.py": lib_new, f"{SITE}/app.py": app_new}
    changed = [(f"{SITE}/lib.py", b"def call(a):\n    pass\n", lib_new), (f"{SITE}/app.py", b"from lib import call\n", app_new)]
    fc = FileCheck(f"{SITE}/app.py", f"{SITE}/app.py", b"from lib import call\n", app_new)
    assert cross_check([fc], changed, files.view(overlay), files.view()) == []
    # and an item the base shares is judged anew when a patched module changed what it offers
    app_old_call = b"from lib import call\ncall(1)\n"
    fc = FileCheck(f"{SITE}/app.py", f"{SITE}/app.py", app_old_call, app_old_call + b"X = 1\n")
    changed = [(f"{SITE}/lib.py", b"def call(a):\n    pass\n", lib_new), (f"{SITE}/app.py", app_old_call, app_old_call + b"X = 1\n")]
    got = cross_check([fc], changed, files.view({**overlay, f"{SITE}/app.py": app_old_call + b"X = 1\n"}), files.view())
    assert [f.message for ff in got for f in ff.findings] == ["call() missing 1 required positional argument: 'mode'"]


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return bt.build_images(tmp_path_factory.mktemp("xcheck-images"))


def test_reads_stop_at_the_layer_that_answers_unless_a_finding_needs_the_rest(images, monkeypatch, tmp_path: Path) -> None:
    """No full scan: with nothing to report, the check reads only the layer that holds the modules; a
    finding is confirmed by deciding every file CPython would try first, the lower layer included."""
    monkeypatch.setenv("IMGQUILT_NO_CACHE", "1")
    old, new = images
    me = f"{bt.SITE}/tinyfix/boot.py"
    src = open_source(f"oci:{old}:latest")
    assert check(tmp_path, me, bt.BOOT, source=src) == [
        f"{me}:4:1: cannot tell: whether tinylib.lazy has 'lazy_anything' ({bt.PKG}/lazy.py: defines a module __getattr__)"]
    assert len(src.stats.layers_scanned) == 1  # the tinylib layer; the base layer below was never opened
    assert src.stats.second_passes == []  # the package's modules were kept as the layer was read
    src = open_source(f"oci:{new}:latest")
    got = check(tmp_path, me, bt.BOOT, source=src)
    assert sum("ImportError" in g for g in got) == 2
    assert len(src.stats.layers_scanned) == 2  # confirming "not there" reads every layer


class Memo:
    def __init__(self) -> None:
        self.saved: dict[str, list[str]] = {}

    def get_many(self, keys):
        return {k: self.saved[k] for k in keys if k in self.saved}

    def put_many(self, entries) -> None:
        self.saved.update(entries)


def test_a_remembered_answer_is_used_only_while_what_it_read_is_unchanged(tmp_path: Path) -> None:
    root = _root(tmp_path, {f"{SITE}/lib.py": "def call(a):\n    pass\n\ndef other():\n    pass\n"})
    me = f"{SITE}/app.py"
    final = b"from lib import call, other\ncall(1)\nother()\n"
    memo = Memo()

    def run() -> tuple[list[str], int]:
        files = SourceModules(RootfsSource(root))
        got = cross_check([FileCheck(me, me, None, final)], [(me, None, final)], files.view({me: final}), files.view(),
                          {me: final.splitlines(keepends=True)}, memo)
        return [x for ff in got for f in ff.findings for x in f.located(me)], files.reads

    assert run()[0] == [] and len(memo.saved) == 3  # the file's row; its module's changed names; the names it names
    assert run()[0] == []  # from the memo (every path it looked up still holds what it held)
    # the image changed under the same queue: the answer is not taken from the memo
    (root / SITE / "lib.py").write_text("def call(a, b):\n    pass\n\ndef other():\n    pass\n")
    got, _ = run()
    assert got == [f"{me}:2:1: TypeError: call() missing 1 required positional argument: 'b' ({SITE}/lib.py: line 1: def call(a, b))"]
    # and a module that appears where the check found none (a package shadowing lib.py) also counts
    (root / SITE / "lib.py").write_text("def call(a):\n    pass\n\ndef other():\n    pass\n")
    assert run()[0] == []
    (root / SITE / "lib").mkdir()
    (root / SITE / "lib" / "__init__.py").write_text("def call():\n    pass\n\ndef other():\n    pass\n")
    got, _ = run()
    assert got == [f"{me}:2:1: TypeError: call() takes 0 positional arguments but 1 was given ({SITE}/lib/__init__.py: line 1: def call())"]


def test_refresh_keeps_a_package_s_modules_as_the_layer_is_read(images, monkeypatch, tmp_path: Path) -> None:
    """`refresh`'s check reads the work tree's image as apply's does: the modules of a package looked up
    are kept while its layer is read, so the next module needs no second pass over the layer. (Before,
    refresh's lazily opened image did not pass the request on: on the vLLM image a cold refresh of a fix
    to platforms/cuda.py made 24 second passes, 4x apply's time.)"""
    from imgquilt.work.push import push
    from imgquilt.work.refresh import refresh
    from imgquilt.work.tree import WorkTree

    monkeypatch.setenv("IMGQUILT_NO_CACHE", "1")
    old, _ = images
    q = bt.make_queue(tmp_path / "q")
    push(WorkTree(q, open_image=lambda: open_source(f"oci:{old}:latest"), image_explicit=True), all=True)
    src = open_source(f"oci:{old}:latest")  # refresh: a command of its own, the image opened anew
    done = refresh(WorkTree(q, open_image=lambda: src, image_explicit=True), "0001-tinyfix.patch")
    assert any("cannot tell: whether tinylib.lazy has 'lazy_anything'" in n for n in done.notes), done.notes
    assert src.stats.layers_scanned  # the check read the image
    assert src.stats.second_passes == []  # tinylib's modules were kept as its layer was read


class CountingMemo(Memo):
    def __init__(self) -> None:
        super().__init__()
        self.asks: list[int] = []
        self.puts: list[set[str]] = []

    def get_many(self, keys):
        keys = list(keys)
        self.asks.append(len(keys))
        return super().get_many(keys)

    def put_many(self, entries) -> None:
        files = {k for k, v in entries.items() if v and '"seen"' in v[0]}  # a file's row (not a module's names)
        if files:
            self.puts.append(files)
        super().put_many(entries)


def _series_check(root: Path, finals: dict[str, bytes], bases: dict[str, bytes | None], memo) -> dict[str, list[str]]:
    """The cross-module check of several patched files at once, as the engine asks it; findings and
    notes by file, rendered."""
    files = SourceModules(RootfsSource(root))
    changed = [(p, bases.get(p), b) for p, b in finals.items()]
    lines = {p: [ln for ln in b.splitlines(keepends=True)] for p, b in finals.items()}
    got = cross_check([FileCheck(p, p, bases.get(p), b) for p, b in finals.items()], changed, files.view(finals),
                      files.view(), lines, memo)
    return {ff.check.path: [x for f in ff.findings + ff.notes for x in f.located(ff.check.path)] for ff in got}


def test_each_file_is_remembered_on_its_own_and_rechecked_only_with_what_it_imports(tmp_path: Path) -> None:
    """Point 1 of issue 37: a file's answer is kept by its bytes and what its imports resolved to; a
    change to one module re-checks the files that looked it up, and no other; one query for all."""
    root = _root(tmp_path, {f"{SITE}/lib.py": "def call(a):\n    pass\n",
                            f"{SITE}/other.py": "def go(x):\n    pass\n",
                            f"{SITE}/dyn.py": "def __getattr__(name):\n    pass\n"})
    a, b, c = f"{SITE}/a.py", f"{SITE}/b.py", f"{SITE}/c.py"
    finals = {a: b"from lib import call\ncall(1, 2)\n", b: b"from other import go\ngo(1)\n",
              c: b"from dyn import thing\nthing()\n"}
    memo = CountingMemo()
    cold = _series_check(root, finals, {}, memo)
    assert cold[a] == [f"{a}:2:1: TypeError: call() takes 1 positional argument but 2 were given ({SITE}/lib.py: line 1: def call(a))"]
    assert b not in cold and cold[c] and all("__getattr__" in x for x in cold[c])
    assert memo.asks[-1] == 3 and len(memo.puts) == 1 and len(memo.puts[0]) == 3
    # warm: the same findings and notes, nothing checked again (nothing stored)
    assert _series_check(root, finals, {}, memo) == cold
    assert memo.asks[-1] == 3 and len(memo.puts) == 1
    # a module one file imports changes in the image: that file alone is checked again
    (root / SITE / "lib.py").write_text("def call(a, b):\n    pass\n")
    again = _series_check(root, finals, {}, memo)
    assert a not in again and again[c] == cold[c]
    assert len(memo.puts) == 2 and len(memo.puts[1]) == 1
    # a patched file changes: it, and the patched file importing it, are checked again; c is not
    finals2 = dict(finals, **{b: b"from other import go\nfrom a import call\ngo(1)\ncall(1)\n",
                               a: b"from lib import call\ncall(1, 2)\nX = 1\n"})
    _series_check(root, finals2, {}, memo)
    assert memo.puts[2] and len(memo.puts[2]) == 2
    finals3 = dict(finals2, **{a: b"from lib import call\ncall(1, 2)\nX = 2\n"})  # b imports a: both again
    _series_check(root, finals3, {}, memo)
    assert len(memo.puts[3]) == 2


def test_remembered_answers_equal_fresh_ones(tmp_path: Path) -> None:
    """Warm and cold give the same findings and notes, shape by shape (a memo, none, a memo again)."""
    root = _root(tmp_path, {f"{SITE}/lib.py": "class K:\n    def __init__(self, a):\n        pass\n\ndef f(*, k):\n    pass\n",
                            f"{SITE}/pkg/__init__.py": "from .inner import *\n",
                            f"{SITE}/pkg/inner.py": "def g():\n    pass\n"})
    finals = {f"{SITE}/m{i}.py": src for i, src in enumerate([
        b"from lib import K, f\nK()\nf(1)\n", b"import pkg\npkg.g(1)\npkg.h()\n", b"from lib import missing\n",
        b"import nowhere_at_all\n", b"from pkg import inner\ninner.g()\n"])}
    bases = {f"{SITE}/m4.py": b"from pkg import inner\n"}
    fresh = _series_check(root, finals, bases, None)
    memo = Memo()
    assert _series_check(root, finals, bases, memo) == fresh
    assert _series_check(root, finals, bases, memo) == fresh
    assert any(fresh.values())


def test_a_forged_or_unsealed_row_is_not_believed(tmp_path: Path, monkeypatch) -> None:
    """The rows live in the shared cache's sealed SQLite file: a row whose seal does not verify (planted,
    or from another cache key) is dropped and the file checked again."""
    import json
    import sqlite3

    from imgquilt.pycheck.rows import PyCheckResults

    monkeypatch.setenv("IMGQUILT_CACHE_KEY", "k" * 40)
    root = _root(tmp_path / "root", {f"{SITE}/lib.py": "def call(a):\n    pass\n"})
    a = f"{SITE}/a.py"
    finals = {a: b"from lib import call\ncall(1, 2)\n"}
    rows = PyCheckResults("v1", tmp_path / "cache")
    cold = _series_check(root, finals, {}, rows)
    assert len(cold[a]) == 1
    db = sqlite3.connect(rows.path)
    (key, raw), = [r for r in db.execute("SELECT key, errors FROM findings").fetchall() if 'seen' in r[1]]
    doc = json.loads(json.loads(raw)[0])
    doc["files"] = []  # "no findings"
    forged = json.dumps([json.dumps(doc)])
    db.execute("UPDATE findings SET errors = ? WHERE key = ?", (forged, key))  # the old seal: does not verify
    db.commit()
    assert _series_check(root, finals, {}, PyCheckResults("v1", tmp_path / "cache")) == cold
    # sealed under another key (a cache restored from elsewhere): not believed either
    from imgquilt.cache import seal

    monkeypatch.setenv("IMGQUILT_CACHE_KEY", "z" * 40)
    other = seal.entry_seal("pycheck", key, "v1", forged)
    monkeypatch.setenv("IMGQUILT_CACHE_KEY", "k" * 40)
    db.execute("UPDATE findings SET errors = ?, sum = ? WHERE key = ?", (forged, other, key))
    db.commit()
    assert _series_check(root, finals, {}, PyCheckResults("v1", tmp_path / "cache")) == cold
    # and a row sealed by this key is believed: the same answer, nothing stored again
    memo = CountingMemo()
    _series_check(root, finals, {}, memo)
    _series_check(root, finals, {}, memo)
    assert len(memo.puts) == 1


def test_absent_as_gives_what_each_lookup_gives(tmp_path: Path) -> None:
    """A directory's absent names decided by one listing equal, name by name, what look() settles
    each to: through a symlinked directory, a missing one, a directory only the patches create, and
    never for a name that is there or that the overlay holds (then: None, look them up)."""
    from imgquilt.pycheck.pysearch import ABSENT

    root = _root(tmp_path, {f"{SITE}/pkg/__init__.py": "", f"{SITE}/real/mod.py": "X = 1\n", f"{SITE}/lib.py": ""})
    (root / SITE / "linked").symlink_to("real")
    (root / SITE / "up").symlink_to("../../../../..")  # `..` past the root stops at the root
    overlay: dict[str, bytes | None] = {f"{SITE}/new/made.py": b"", f"{SITE}/pkg/patched.py": b"", f"{SITE}/pkg/gone.py": None}
    view = SourceModules(RootfsSource(root)).view(overlay)
    names = ["a.py", "a.cpython-311-x86_64-linux-gnu.so", "b", "__init__.py"]
    decided = 0
    for parent in ["", SITE, f"{SITE}/pkg", f"{SITE}/real", f"{SITE}/linked", f"{SITE}/nowhere", f"{SITE}/nowhere/deeper",
                   f"{SITE}/new", f"{SITE}/up/usr", f"{SITE}/lib.py"]:
        for extra in ([], ["mod.py"], ["patched.py"], ["gone.py"], ["made.py"]):
            asked = frozenset(names + extra)
            where = view.absent_as(parent, asked)
            looks = view.look([f"{parent}/{n}" if parent else n for n in sorted(asked)], settle=True)
            if where is None:
                continue
            decided += 1
            rparent, dirs = where
            for n in asked:
                lk = looks[f"{parent}/{n}" if parent else n]
                assert (lk.kind, lk.resolved, lk.dirs) == (ABSENT, f"{rparent}/{n}" if rparent else n, dirs), (parent, n)
    assert decided >= 8
    assert view.absent_as(f"{SITE}/real", frozenset(["mod.py"])) is None  # there: looked up
    assert view.absent_as(f"{SITE}/pkg", frozenset(["patched.py"])) is None  # patched: looked up
    assert view.absent_as(f"{SITE}/pkg", frozenset(["gone.py"])) is None
    assert view.absent_as(f"{SITE}/linked", frozenset(["x.py"])) == (f"{SITE}/real", view.look([f"{SITE}/linked/x.py"], settle=True)[f"{SITE}/linked/x.py"].dirs)


def test_the_names_found_absent_are_held_by_directory_and_checked_again(tmp_path: Path, monkeypatch) -> None:
    """A module search tries dozens of names a directory (an image with no platform: every platform's
    extension suffixes); a row holds the absent ones by directory, and a warm run checks them against
    the directory's listing instead of one lookup each. A name that appears there (an extension
    module) or a directory on the way that resolves elsewhere now makes the file be checked again,
    with what a fresh check says."""
    import imgquilt.pycheck.pysearch as pysearch

    root = _root(tmp_path / "root", {f"{SITE}/lib.py": "def call(a):\n    pass\n"})
    me = f"{SITE}/app.py"
    finals = {me: b"from nowhere_at_all import thing\nthing(1)\nfrom lib import call\ncall(1, 2)\n"}
    looked: list[int] = []
    look = pysearch._View.look

    def counting(self, paths, *, settle):
        looked.append(len(paths))
        return look(self, paths, settle=settle)

    monkeypatch.setattr(pysearch._View, "look", counting)
    memo = CountingMemo()
    cold = _series_check(root, finals, {}, memo)
    cold_looks = sum(looked)
    assert [x.split(": ")[1] for x in cold[me]] == ["TypeError"], cold  # a module not in the image: not a finding
    row = next(json.loads(v[0]) for v in memo.saved.values() if '"seen"' in v[0])
    assert any(e.startswith("gf\0") for e in row["seen"]) and len(row["seen"]) < 20
    looked.clear()
    assert _series_check(root, finals, {}, memo) == cold and len(memo.puts) == 1
    assert 0 < sum(looked) * 10 < cold_looks  # the absent names: by listing, not looked up
    # an extension module appears under one of the names the search tried: checked again, as fresh
    ext = root / SITE / "nowhere_at_all.cpython-311-x86_64-linux-gnu.so"
    ext.write_bytes(b"\x7fELF")
    now = _series_check(root, finals, {}, memo)
    assert len(memo.puts) == 2 and now == _series_check(root, finals, {}, None) and now != cold
    ext.unlink()
    assert _series_check(root, finals, {}, memo) == cold and len(memo.puts) == 3  # gone again: checked again
    assert _series_check(root, finals, {}, memo) == cold and len(memo.puts) == 3  # and that row holds
    # the site directory moves behind a symlink: the same names now resolve elsewhere: checked again
    site = root / SITE
    site.rename(site.with_name("moved"))
    site.symlink_to("moved")
    moved = _series_check(root, finals, {}, memo)
    assert len(memo.puts) == 4 and moved == _series_check(root, finals, {}, None) and "python3.11/moved/lib.py" in moved[me][0]


def test_a_directory_s_absent_names_hold_only_where_they_resolved(tmp_path: Path) -> None:
    """The rule itself: a row's names held by directory still hold when none is there AND the
    directory resolves as it did (not through a new symlink, not newly made); the same answer by one
    listing as by a lookup each (a view that does not list)."""
    from imgquilt.pycheck.crosscheck import _Recorder, _still_seen

    root = _root(tmp_path, {f"{SITE}/pkg/there.py": ""})
    rec = _Recorder(SourceModules(RootfsSource(root)).view(), "f", {})
    rec.look([f"{SITE}/pkg/a.py", f"{SITE}/pkg/a.abi3.so", f"{SITE}/nowhere/c.py", f"{SITE}/nowhere/__init__.py"], settle=True)
    doc = {"seen": rec.entries()}
    assert len(doc["seen"]) == 2 and all(e.startswith("gf\0") for e in doc["seen"])

    class OneByOne:  # a view with no listings: each name looked up
        def __init__(self, view) -> None:
            self.look, self.platform = view.look, view.platform

    def holding() -> list[set[str]]:
        views = [SourceModules(RootfsSource(root)).view() for _ in range(2)]
        return [_still_seen([doc], v, v) for v in (views[0], OneByOne(views[1]))]

    assert holding() == [set(doc["seen"])] * 2
    (root / SITE / "pkg").rename(root / SITE / "real")
    (root / SITE / "pkg").symlink_to("real")  # the same names in it, reached another way
    assert holding() == [{e for e in doc["seen"] if "nowhere" in e}] * 2
    (root / SITE / "nowhere").mkdir()
    assert holding() == [set()] * 2
