"""docs/cli.md, generated from the typer app: every command with its help, options and examples,
exactly as `imgquilt COMMAND -h` prints them (at a fixed width, so the file does not depend on the
terminal).

    PYTHONPATH=tool python -m imgquilt.cli.reference > docs/cli.md
"""
from __future__ import annotations

import sys

import typer
import typer.main

REGENERATE = "PYTHONPATH=tool python -m imgquilt.cli.reference > docs/cli.md"


def _help(*args: str) -> str:
    """What `imgquilt ARGS -h` prints (click caps the width at 80 columns; COLUMNS keeps it there)."""
    import contextlib
    import io
    import os

    from .main import main

    buf, saved = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        with contextlib.redirect_stdout(buf):
            code = main([*args, "-h"])
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    if code != 0:  # pragma: no cover - help always exits 0
        raise RuntimeError(f"imgquilt {' '.join(args)} -h exited {code}")
    return buf.getvalue().rstrip() + "\n"


def reference() -> str:
    """The whole of docs/cli.md."""
    from .main import app

    names = sorted(typer.main.get_command(app).commands)
    out = [
        "# Command-line reference\n",
        "\n",
        f"Generated from the code by `{REGENERATE}`; do not edit by hand (a test fails when it is out of date).\n",
        "Each section is what `imgquilt COMMAND -h` prints. Exit codes: [exit-codes.md](exit-codes.md); the `--json`\n",
        "document of each command: [json.md](json.md) and [schemas/](schemas/).\n",
        "\n",
        "Commands: " + ", ".join(f"[`{n}`](#imgquilt-{n})" for n in names) + ".\n",
        "\n",
        "## imgquilt\n",
        "\n",
        "```text\n",
        _help(),
        "```\n",
    ]
    for name in names:
        out += ["\n", f"## imgquilt {name}\n", "\n", "```text\n", _help(name), "```\n"]
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(reference())
