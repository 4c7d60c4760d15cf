"""A patch that introduces a NameError or a syntax error is refused before boot, not at boot."""
from __future__ import annotations

from pathlib import Path

from imgquilt.pycheck.names import new_python_errors
from support.qtools import imgquilt, tree_hash, write_patch

BASE = b"import os\n\n\ndef workers():\n    return int(os.environ.get('W', '2'))\n"


def test_new_errors_only() -> None:
    assert new_python_errors(BASE, BASE.replace(b"os.environ", b"environ"), "x.py") == ["UndefinedName: undefined name 'environ'"]
    assert new_python_errors(BASE, BASE + b"def broken(:\n", "x.py")[0].startswith("SyntaxError")
    quirky = BASE + b"print(undefined_in_stock)\n"
    # the stock file already had this problem: a patch that keeps it is fine
    assert new_python_errors(quirky, quirky.replace(b"'2'", b"'4'"), "x.py") == []


def test_apply_refuses_a_patch_that_adds_a_name_error(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app/workers.py").write_bytes(BASE)
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-typo.patch", [("app/workers.py", BASE, BASE.replace(b"os.environ", b"envron"))])
    before = tree_hash(root)
    r = imgquilt("apply", "--root", str(root), cwd=q, check=3)
    assert "0001-typo.patch" in r.err and "envron" in r.err
    assert tree_hash(root) == before
    # the user can knowingly skip the check
    imgquilt("apply", "--root", str(root), "--no-python-check", cwd=q, check=0)
    assert b"envron" in (root / "app/workers.py").read_bytes()
