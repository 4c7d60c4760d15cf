"""A new or patched `.py` that exhausts CPython's compiler (MemoryError, RecursionError) is a Python
error of that file: the Python check refuses it (exit 3) and nothing is written; never exit 1."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.hostile import canary_dir, refused, run, small_root, unchanged
from support.qtools import write_patch

SOURCES = {
    "unary-minus": b"x = " + b"-" * 100000 + b"1\n",  # MemoryError in the parser
    "long-sum": b"x = 1" + b"+1" * 300000 + b"\n",  # RecursionError in the compiler
    "call-chain": b"f" + b"()" * 100000 + b"\n",
}


@pytest.mark.parametrize("case", sorted(SOURCES))
def test_compiler_exhaustion_is_a_python_error(tmp_path: Path, cli_env: dict[str, str], case: str) -> None:
    root = small_root(tmp_path / "root")
    q = tmp_path / "q"
    write_patch(q, "0001-deep.patch", [("usr/lib/app/deep.py", None, SOURCES[case])])
    home = canary_dir(tmp_path)
    with unchanged(root, home):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 3, "deep.py", "too deeply nested")
    r = run(q, "apply", "--root", str(root), "--no-python-check", env=cli_env)
    assert r.code == 0, r.out + r.err
    assert (root / "usr/lib/app/deep.py").read_bytes() == SOURCES[case]
