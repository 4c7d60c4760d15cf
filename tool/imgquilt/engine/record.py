"""The apply record, var/lib/imgquilt/applied.json: written by every output, read by audit.

Reading it must not cost more than the targets do. An image whose top layers decide every target
is not read further just to learn that the record is absent: `peek_targets` resolves with the layers
already scanned, and a record those layers do not decide counts as not there.
"""
from __future__ import annotations

import json
from typing import Sequence

from .. import __version__
from ..errors import BadImage, BadInput
from ..fs.content import held
from ..fs.types import Source, TargetFile
from ..queue.queue import Queue
from .bytecode import Bytecode
from .result import RECORD_PATH


def recorded_ref(ref: str) -> str | None:
    """The reference the record keeps: a registry's (the same on every machine), never a local path,
    so the same queue on the same image digest gives the same record (and layer) bytes anywhere."""
    return ref if ref.startswith("docker://") else None


def record_bytes(queue: Queue, image_digest: str | None, image_ref: str | None, targets: dict[str, TargetFile],
                 bytecode: Sequence[Bytecode] = (), env: Sequence[tuple[str, str]] = ()) -> bytes:
    """What was applied, reproducible (no timestamps); `bytecode`: the stale bytecode the apply
    removes, `env`: the environment defaults it sets in the image's config (each listed only when
    there is some, so a record without them is as it always was)."""
    doc = {
        "imgquilt_version": __version__,
        "series_sha256": queue.series_sha256,
        "image": {"ref": image_ref, "digest": image_digest},
        "patches": [
            {
                "name": p.name,
                "files": [
                    {"path": s.path, "resolved": targets[s.path].resolved, "base_sha256": s.base_sha256, "patched_sha256": s.patched_sha256}
                    for s in p.sections
                ],
            }
            for p in queue.patches
        ],
    }
    if env:
        doc["env"] = dict(env)
    if bytecode:
        doc["bytecode"] = [{"path": b.path, "source": b.source, "action": "removed"} for b in bytecode]
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def names_series(record, series_sha256: str) -> bool:
    """Does this record (a file's bytes) say that series was applied? A record that is not ours says no
    (one too large to hold is not ours)."""
    try:
        return record is not None and json.loads(held(record, RECORD_PATH)).get("series_sha256") == series_sha256
    except (ValueError, AttributeError, BadInput, RecursionError):
        return False


def read_record_target(source: Source) -> TargetFile | None:
    """The record as `source` holds it, reading nothing beyond what the targets needed.

    None: not decided by what was read, or not a readable file (audit reports no record then).
    Call after read_targets for the queue's targets.
    """
    peek = getattr(source, "peek_targets", None)
    try:
        found = peek([RECORD_PATH]) if callable(peek) else source.read_targets([RECORD_PATH])
    except BadImage:
        raise
    except BadInput:
        return None
    return found.get(RECORD_PATH)
