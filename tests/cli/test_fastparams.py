"""Plain options are coerced without pydantic (start-up time), with typer's usage errors kept."""
from __future__ import annotations

import subprocess
import sys

from conftest import TOOL

SCRIPT = r'''
import sys
from pathlib import Path
from typing import List, Optional
import typer
from imgquilt.cli.fastparams import install
install()
app = typer.Typer()
@app.command()
def main(n: int = typer.Option(1, "--n"), p: Optional[Path] = typer.Option(None, "--p"),
         names: List[str] = typer.Option([], "--name"), flag: bool = typer.Option(False, "--flag")) -> None:
    print(repr((n, p, names, flag)))
try:
    app(args=sys.argv[1:], standalone_mode=False)
except typer.BadParameter as exc:
    print("bad:", exc.format_message())
print("pydantic" in sys.modules)
'''


def _run(*args: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                       env={"PYTHONPATH": str(TOOL), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_plain_values_are_coerced_without_pydantic() -> None:
    assert _run("--n", "3", "--p", "a/b", "--name", "x", "--name", "y", "--flag") == [
        "(3, PosixPath('a/b'), ['x', 'y'], True)", "False"]
    assert _run() == ["(1, None, [], False)", "False"]


def test_a_bad_value_is_still_a_usage_error() -> None:
    out = _run("--n", "three")
    assert out[0].startswith("bad:") and "'three' is not a valid int" in out[0]


def test_an_empty_path_is_a_usage_error_not_this_directory() -> None:
    """Path("") is "."; `apply --root "$UNSET_VARIABLE"` patched (or audited, or booted) the current
    directory. An empty path is refused where every plain value is coerced."""
    out = _run("--p", "")
    assert out[0].startswith("bad:") and "an empty path names nothing" in out[0]
    assert _run("--p", ".")[0] == "(1, PosixPath('.'), [], False)"
