"""CLI sessions written as transcripts, as quilt's test/*.test files are: tests/transcripts/*.t.

Format of a transcript:
  - `# ...` lines are comments; blank lines between commands are ignored.
  - `$ COMMAND` runs COMMAND with `sh -c` in a fresh copy of the demo queue (qtools.copy_demo_queue),
    with `imgquilt` on PATH (this worktree's code) and $SANDBOX naming a scratch directory.
  - The lines after it, up to the next `$ ` line, are the expected stdout and stderr together, in the
    order they were written; the sandbox path is shown as $SANDBOX. `[exit N]` as the last of them
    states a non-zero exit status (no such line: exit 0 is expected).

Every command's output is compared exactly. `IMGQUILT_TRANSCRIPTS=update` rewrites the files with
what the commands print now (then read the diff before committing it).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.qtools import TOOL, copy_demo_queue

HERE = Path(__file__).resolve().parents[1] / "transcripts"
EXIT = re.compile(r"^\[exit (\d+)\]$")


@dataclass(frozen=True)
class Step:
    command: str
    output: tuple[str, ...]
    code: int
    comments: tuple[str, ...]  # the comment and blank lines before the command, kept for update mode


def parse(text: str) -> list[Step]:
    """Split a transcript into steps. A run of `#` lines after a blank line (or at the top) belongs to
    the next command as its comment; trailing blank lines of an output are not significant."""
    chunks: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines():
        if line.startswith("$ "):
            chunks.append((line[2:], []))
        else:
            chunks[-1][1].append(line)
    steps: list[Step] = []
    comments = _split_comments(chunks[0][1], whole=True)[1]
    for command, body in chunks[1:]:
        output, next_comments = _split_comments(body)
        code = 0
        if output and EXIT.match(output[-1]):
            code = int(EXIT.match(output.pop()).group(1))
        steps.append(Step(command, tuple(output), code, tuple(comments)))
        comments = next_comments
    return steps


def _split_comments(lines: list[str], whole: bool = False) -> tuple[list[str], list[str]]:
    """(output, comment block at the end): the block is the `#`/blank lines after the last blank line."""
    lines = list(lines)
    while lines and lines[-1] == "":
        lines.pop()
    if whole:
        return [], lines
    cut = len(lines)
    while cut > 0 and (lines[cut - 1].startswith("#")):
        cut -= 1
    if cut < len(lines) and (cut == 0 or lines[cut - 1] == ""):
        output, comments = lines[:cut], lines[cut:]
        while output and output[-1] == "":
            output.pop()
        return output, ["", *comments]
    return lines, [""]


def render(steps: list[Step]) -> str:
    out: list[str] = []
    for s in steps:
        out += list(s.comments)
        out.append(f"$ {s.command}")
        out += list(s.output)
        if s.code:
            out.append(f"[exit {s.code}]")
    return "\n".join(out).strip("\n") + "\n"


def sandbox_env(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "imgquilt"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m imgquilt "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMGQUILT_", "_IMGQUILT"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(TOOL),
        PYTHONUNBUFFERED="1",  # stdout and stderr reach the shared pipe in the order they are written
        HOME=str(tmp / "home"),
        COLUMNS="200",
        LC_ALL="C.UTF-8",
        SANDBOX=str(tmp / "sandbox"),
        SOURCE_DATE_EPOCH="0",
    )
    (tmp / "sandbox").mkdir()
    return env


def run_step(step: Step, cwd: Path, env: dict[str, str], tmp: Path) -> Step:
    p = subprocess.run(["sh", "-c", step.command], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.decode("utf-8", "replace").replace(env["SANDBOX"], "$SANDBOX").replace(str(tmp), "$TMP")
    lines = text.splitlines()
    while lines and lines[-1] == "":
        lines.pop()
    return Step(step.command, tuple(lines), p.returncode, step.comments)


@pytest.mark.parametrize("path", sorted(HERE.glob("*.t")), ids=lambda p: p.name)
def test_transcript(path: Path, tmp_path: Path) -> None:
    steps = parse(path.read_text())
    assert steps, f"{path} holds no command"
    q = copy_demo_queue(tmp_path / "queue")
    env = sandbox_env(tmp_path)
    got = [run_step(s, q, env, tmp_path) for s in steps]
    if os.environ.get("IMGQUILT_TRANSCRIPTS") == "update":
        path.write_text(render(got))
        return
    for want, have in zip(steps, got):
        assert (have.output, have.code) == (want.output, want.code), (
            f"{path.name}: $ {want.command}\n--- expected (exit {want.code})\n" + "\n".join(want.output)
            + f"\n--- got (exit {have.code})\n" + "\n".join(have.output)
        )


def test_the_parser_reads_commands_output_and_exit_lines() -> None:
    steps = parse("# a comment\n$ imgquilt top\nNo patches applied.\n[exit 2]\n\n$ imgquilt series\na.patch\n")
    assert [(s.command, s.output, s.code) for s in steps] == [
        ("imgquilt top", ("No patches applied.",), 2),
        ("imgquilt series", ("a.patch",), 0),
    ]
    assert render(steps) == "# a comment\n$ imgquilt top\nNo patches applied.\n[exit 2]\n\n$ imgquilt series\na.patch\n"
    text = "# top\n$ imgquilt header\nDescription: x\n# not a comment\n\n# the next one\n# says this\n$ imgquilt top\n"
    steps = parse(text)
    assert steps[0].output == ("Description: x", "# not a comment") and steps[1].comments == ("", "# the next one", "# says this")
    assert render(steps) == text
