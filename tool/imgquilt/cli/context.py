"""Global options and output helpers shared by every command module."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..queue.queue import Queue, find_queue, load_queue


@dataclass
class Globals:
    """Options accepted before or after the command name."""

    queue: str | None = None
    json: bool = False
    debug: bool = False


G = Globals()
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

GLOBAL_FLAGS = {"--json": "json", "--debug": "debug"}


def hoist_globals(argv: list[str]) -> list[str]:
    """Take --queue/--json/--debug out of argv wherever they stand (DESIGN: before or after the command)."""
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest.extend(argv[i:])
            break
        if a in GLOBAL_FLAGS:
            setattr(G, GLOBAL_FLAGS[a], True)
        elif a == "--queue" and i + 1 < len(argv):
            G.queue = argv[i + 1]
            i += 1
        elif a.startswith("--queue="):
            G.queue = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return rest


def queue_root() -> Path:
    return find_queue(G.queue)


def refuse_during_rebase(root: Path) -> None:
    """A stopped rebase owns series, patches/ and the work tree until --continue or --abort."""
    from ..errors import UsageError
    from ..rebase import rebase_in_progress

    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is in progress in this queue.",
            hint="Resolve it with `imgquilt rebase --continue`, or give it up with `imgquilt rebase --abort`.",
        )


def load() -> Queue:
    return load_queue(queue_root())


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def cache_dir() -> Path | None:
    try:
        return queue_root() / ".imgquilt" / "cache"
    except Exception:
        return None
