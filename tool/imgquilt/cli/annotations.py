"""`--format github`: problems as GitHub Actions workflow commands (`::error file=...::message`)."""
from __future__ import annotations

import re
from enum import Enum

from .common import raw_say


class Format(str, Enum):
    text = "text"
    github = "github"


FormatOpt_help = "text (default) or github: GitHub Actions annotations (::error file=...::message), one per problem."

_PATCH = re.compile(r"^(?:patches/)?([^\s:/]+\.(?:patch|diff))\b")


def problem_file(problem: str) -> str:
    """The queue file a problem is about: series or targets.lock when it starts with them, else the
    patch it names first, else series. A profile's problem (`profile NAME: ...`) is about what follows."""
    for lead in ("profile ", "the default selection (no --profile): "):
        if problem.startswith(lead) and ": " in problem:
            problem = problem.split(": ", 1)[1]
    if problem.startswith(("series", "targets.lock")):
        return problem.split()[0].rstrip(":")
    m = _PATCH.match(problem) or re.search(r"patches/([^\s:,']+)", problem)
    return f"patches/{m.group(1)}" if m else "series"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotate(level: str, file: str | None, title: str, message: str, line: int | None = None) -> None:
    """One workflow command; GitHub shows it on the file (the queue's patch, or `line` of a file) in the run and the PR."""
    props = ",".join(x for x in ((f"file={_prop(file)}" if file else ""), (f"line={line}" if file and line else ""),
                                 f"title={_prop(title)}") if x)
    raw_say(f"::{level} {props}::{_data(message)}")
