"""The journal of a rebase in `.imgquilt/rebase/state.json`, saved after every step.

Bytes live in the object store; the journal holds hashes, so it stays small and is rewritten
whole (atomically) each time.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BadInput, UsageError
from ..util.atomic import atomic_write, publish
from .report import FileOutcome, PatchOutcome, RebaseReport, patch_state

STATE_VERSION = 1
REBASE_DIR = Path(".imgquilt") / "rebase"


@dataclass
class CarriedSection:
    """One section in progress (journaled while its patch waits on a conflict)."""

    outcome: FileOutcome
    old_path: str
    raw_sha: str | None = None  # the rebased section's bytes, in the store
    ours_sha: str | None = None  # for the leftover-marker test on --continue
    theirs_sha: str | None = None
    mode: int | None = None

    def to_json(self) -> dict:
        return {"outcome": self.outcome.to_json(), "old_path": self.old_path, "raw_sha": self.raw_sha,
                "ours_sha": self.ours_sha, "theirs_sha": self.theirs_sha, "mode": self.mode}

    @classmethod
    def from_json(cls, doc: dict) -> CarriedSection:
        return cls(FileOutcome.from_json(doc["outcome"]), doc["old_path"], doc["raw_sha"], doc["ours_sha"], doc["theirs_sha"], doc["mode"])


@dataclass
class RebaseState:
    """Mutable on purpose: this is the journal, saved after every step."""

    new_ref: str
    platform: str | None
    keep_empty: bool
    paths: dict[str, str]  # old path -> path in the new image
    old_chain: dict[str, str]  # old path -> sha256 before patch `next` in the old series
    new_chain: dict[str, str]  # old path -> sha256 before patch `next` in the rebased series
    old_image: dict
    new_image: dict
    phase: str = "running"  # running | conflict | finishing
    next: int = 0
    done: list[dict] = field(default_factory=list)  # PatchOutcome JSON + "raw_sha"
    current: dict | None = None  # {"name", "sections": [...]} while stopped
    work_written: list[str] = field(default_factory=list)
    work_saved: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    version: int = STATE_VERSION

    def report(self, status: str) -> RebaseReport:
        patches = [PatchOutcome.from_json(d) for d in self.done]
        conflict_patch = None
        if self.current is not None:
            secs = [CarriedSection.from_json(d) for d in self.current["sections"]]
            outs = tuple(s.outcome for s in secs)
            patches.append(PatchOutcome(self.current["name"], patch_state(outs), outs))
            conflict_patch = self.current["name"]
        return RebaseReport(status, self.old_image, self.new_image, tuple(patches), tuple(self.notes), conflict_patch)


def state_dir(root: Path) -> Path:
    return root / REBASE_DIR


def save_state(root: Path, st: RebaseState) -> None:
    atomic_write(state_dir(root) / "state.json", (json.dumps(asdict(st), indent=1, sort_keys=True) + "\n").encode())


def load_state(root: Path) -> RebaseState:
    path = state_dir(root) / "state.json"
    try:
        doc = json.loads(path.read_bytes())
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}")
        return RebaseState(**doc)
    except FileNotFoundError:
        raise UsageError("No rebase in progress.", hint="Start one with `imgquilt rebase --image NEWREF`.") from None
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{path} cannot be read ({exc}).", hint="`imgquilt rebase --abort` restores the queue from the backup.") from None


def rebase_in_progress(root: Path) -> bool:
    return (state_dir(root) / "state.json").is_file()


def remove_state(root: Path) -> None:
    """Remove the state directory; the rename first makes "in progress" end at one instant."""
    sdir = state_dir(root)
    if not sdir.exists():
        return
    gone = sdir.with_name(f"rebase.done-{os.getpid()}")
    publish(sdir, gone)
    shutil.rmtree(gone, ignore_errors=True)


def clear_leftovers(root: Path) -> None:
    """Before a start: drop what crashed runs left behind without a journal."""
    sdir = state_dir(root)
    if sdir.exists():
        shutil.rmtree(sdir)  # a start that crashed before its journal existed: the queue was not touched
    for stale in sdir.parent.glob("rebase.done-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a finish that crashed while removing its state
