"""docs/cli.md is generated from the typer app; it must say what the code says."""
from __future__ import annotations

from support.qtools import REPO, imgquilt


def test_cli_reference_is_up_to_date() -> None:
    from imgquilt.cli.reference import REGENERATE, reference

    assert (REPO / "docs/cli.md").read_text() == reference(), f"docs/cli.md is out of date: regenerate it with `{REGENERATE}`"


def test_cli_reference_holds_every_command_as_its_help_prints_it(tmp_path) -> None:
    import typer.main

    from imgquilt.cli.main import app

    text = (REPO / "docs/cli.md").read_text()
    for name in typer.main.get_command(app).commands:
        assert f"\n## imgquilt {name}\n" in text, name
    # the section is what -h prints (at the reference's fixed width)
    shown = imgquilt("rebase", "-h", cwd=tmp_path, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"}).out
    assert "--skip" in shown and "imgquilt rebase --skip" in text
    assert shown.strip() in text


def test_help_examples_stand_one_per_line() -> None:
    """An example block without click's \\b marker is re-wrapped into one run-on paragraph."""
    import re

    text = (REPO / "docs/cli.md").read_text()
    assert not re.search(r"Examples?:[ ]+\S", text), re.search(r".{60}Examples?:[ ]+\S.{40}", text)
