"""Finding the queue directory: small on purpose, so `imgquilt top` loads no patch or lock parser."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import QueueNotFound


def find_queue(explicit: str | os.PathLike | None = None, cwd: Path | None = None) -> Path:
    """`--queue DIR`, else IMGQUILT_QUEUE, else the nearest directory at or above cwd holding `series`."""
    if explicit:
        p = Path(explicit)
        if not p.is_dir():
            if p.exists():  # `--queue series`: the file, not the directory that holds it
                raise QueueNotFound(f"Queue directory {str(p)!r} is not a directory.",
                                    hint=f"Pass the directory that holds the series file (--queue {str(p.parent)!r}).")
            raise QueueNotFound(f"Queue directory {str(p)!r} does not exist.")
        return p.resolve()
    from ..settings import current

    env = current().of("IMGQUILT_QUEUE")
    if env:
        p = Path(env)
        if not p.is_dir():
            raise QueueNotFound(f"IMGQUILT_QUEUE={env!r} is not a directory.")
        return p.resolve()
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "series").is_file():
            return d
    raise QueueNotFound(
        f"No queue found: no `series` file in {here} or above.",
        hint="Run inside a queue directory, pass --queue DIR, or set IMGQUILT_QUEUE (create one with `imgquilt init`).",
    )
