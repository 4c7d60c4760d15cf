"""The apply record, var/lib/imgquilt/applied.json: written by every output, read back by audit,
reverse, restore, attest and a refused apply (one reading of the document: `record_document`).

Reading it must not cost more than the targets do. An image whose top layers decide every target
is not read further just to learn that the record is absent: `peek_targets` resolves with the layers
already scanned, and a record those layers do not decide counts as not there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from .. import __version__
from ..errors import BadImage, BadInput
from ..fs.content import Data, held, held_if_small
from ..fs.types import Source, TargetFile
from ..queue.queue import Queue
from ..fs.pycache import Bytecode
from .result import RECORD_PATH


def recorded_ref(ref: str) -> str | None:
    """The reference the record keeps: a registry's (the same on every machine), never a local path,
    so the same queue on the same image digest gives the same record (and layer) bytes anywhere."""
    return ref if ref.startswith("docker://") else None


def record_bytes(queue: Queue, image_digest: str | None, image_ref: str | None, targets: dict[str, TargetFile],
                 bytecode: Sequence[Bytecode] = (), env: Sequence[tuple[str, str]] = (), boot: dict | None = None) -> bytes:
    """What was applied, reproducible (no timestamps); `bytecode`: the stale bytecode the apply
    removes, `env`: the environment defaults it sets in the image's config (each listed only when
    there is some, so a record without them is as it always was); `boot`: apply --boot's result
    (verbs.boot.BootReport.record())."""
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
    if boot is not None:  # apply --boot: the probes and verdicts that let this be written
        doc["boot"] = boot
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


@dataclass(frozen=True)
class RecordFile:
    """One file of one patch as a record lists it."""

    path: str
    resolved: str
    base_sha256: str
    patched_sha256: str


@dataclass(frozen=True)
class Record:
    """An apply record as read back from a root or an image: what imgquilt applied there. It is input
    like any file of a root: used to explain and to undo (every byte written is checked against it and
    the object store), never trusted to name a place outside the root."""

    series_sha256: str
    image_digest: str | None
    imgquilt_version: str
    patches: tuple[tuple[str, tuple[RecordFile, ...]], ...]
    created_dirs: tuple[str, ...] = ()  # in place only: the directories that apply created, in the order made
    bytecode: tuple[str, ...] = ()  # the stale bytecode files that apply removed

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.patches]

    def first_and_last(self) -> dict[str, tuple[str, str, str]]:
        """Per resolved file: (a named path, the base the image had, the result the series left)."""
        out: dict[str, tuple[str, str, str]] = {}
        for _, files in self.patches:
            for f in files:
                named, base, _ = out.get(f.resolved, (f.path, f.base_sha256, ""))
                out[f.resolved] = (named, base, f.patched_sha256)
        return out


def record_document(data: Data) -> dict:
    """applied.json's JSON object as record_bytes writes it (UTF-8, an object with a `patches` list).
    Raises ValueError (its words say why) on anything else, one too large to hold included."""
    small = held_if_small(data)
    if small is None:
        raise ValueError("far larger than an apply record")
    doc = json.loads(small.decode("utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("patches"), list):
        raise ValueError("not an imgquilt apply record (no `patches` list)")
    return doc


def parse_record(data: Data | None) -> Record | None:
    """The record in `data`; None when it is not one imgquilt writes (absent, damaged, foreign)."""
    if data is None:
        return None
    try:
        doc = record_document(data)
        image = doc.get("image") or {}
        patches = tuple(
            (str(p["name"]), tuple(RecordFile(str(f["path"]), str(f["resolved"]), str(f["base_sha256"]), str(f["patched_sha256"]))
                                   for f in p["files"]))
            for p in doc["patches"])
        dirs = doc.get("created_dirs") or []
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            return None
        bytecode = tuple(str(b["path"]) for b in doc.get("bytecode") or [])
        return Record(str(doc["series_sha256"]), image.get("digest") if isinstance(image.get("digest"), str) else None,
                      str(doc.get("imgquilt_version", "")), patches, tuple(dirs), bytecode)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class RecordSeen:
    """The record as audit reads it: only what it compares (a record missing the fields the undo needs
    is still read, so audit can say where it disagrees)."""

    series_sha256: str | None
    image_ref: str | None
    image_digest: str | None
    version: str | None
    files: dict[str, dict[str, str]]  # patch name -> named path -> recorded patched sha256


def read_record_seen(data: Data) -> RecordSeen:
    """Read applied.json for audit. Raises ValueError (or KeyError, TypeError) on anything else."""
    doc = record_document(data)
    files: dict[str, dict[str, str]] = {}
    for p in doc["patches"]:
        name = str(p["name"])
        files[name] = {str(f["path"]): str(f["patched_sha256"]) for f in p.get("files", [])}
    image = doc.get("image") or {}
    return RecordSeen(doc.get("series_sha256"), image.get("ref"), image.get("digest"), doc.get("imgquilt_version"), files)


def with_created_dirs(record: bytes, dirs: Sequence[str]) -> bytes:
    """The record of an in-place apply that created `dirs` (so that `apply --reverse` removes exactly
    them); the record as it is when it created none (then every output writes the same bytes)."""
    if not dirs:
        return record
    doc = json.loads(record)
    doc["created_dirs"] = list(dirs)
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
