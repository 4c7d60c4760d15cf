"""The journal of a rebase in `.imgquilt/rebase/state.json`, saved after every step.

Bytes live in the object store; the journal holds hashes, so it stays small and is rewritten
whole (atomically) each time.

imgquilt acts on it (--continue writes and removes patch files, --abort restores and releases work
files), and a queue is cloned with whatever `.imgquilt/` its owner left, so the journal is sealed
like the queue journals (util.sealing: an HMAC under the user's own key, kept outside every queue)
and read back only when its seal verifies; every patch name in it must be a patch name and every
path a path inside the root, or it is refused (ForeignState, exit 6) before anything is done.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BadInput, ForeignState, ImgquiltError, UsageError
from ..fs.paths import check_member_path
from ..util.atomic import rename_at
from ..util.sealing import seal, sealed_here
from ..util.statedir import StateDir
from ..verbs.rebase_guard import rebase_in_progress as rebase_in_progress  # below the verbs, which refuse to work during a rebase
from .report import FileOutcome, PatchOutcome, RebaseReport, patch_state

# the fields that make one pin's part of a rebase (a "lane"): a rebase of several profiles keeps the
# one it works on at the top of the journal and the others in `others`, and swaps them (focus)
LANE_KEYS = ("profile", "select", "new_ref", "platform", "paths", "old_chain", "new_chain", "old_image", "new_image")

STATE_VERSION = 2  # 2: sealed (a version-1 journal is refused: `rebase --abort`, or remove .imgquilt/rebase)
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
    conflict_style: str = "diff3"  # --conflict-style
    python_check: bool = True  # --no-python-check turns it off
    boot: bool = False  # --boot: the patch's modules probed on the new image after each step (bootprobe.py)
    version: int = STATE_VERSION
    profile: str | None = None  # the pin re-pinned at the end (None: the default)
    select: list[str] = field(default_factory=list)  # the guards its selection turns on
    others: list[dict] = field(default_factory=list)  # the other pins rebased in this transaction (LANE_KEYS each)
    series: str | None = None  # the series carried, when --split rewrote it (None: the backup's)
    copies: dict[str, str] = field(default_factory=dict)  # --split: copy's name -> the patch it copies
    vendor: dict[str, str] = field(default_factory=dict)  # pin -> the other profile whose image it was re-pinned onto (--force)

    @property
    def pins(self) -> list[str | None]:
        """Every pin this rebase re-pins, the one in focus first."""
        return [self.profile, *(o["profile"] for o in self.others)]

    def focus(self, pin: str | None) -> None:
        """Put `pin`'s lane at the top of the journal (the fields every rebase step reads)."""
        if pin == self.profile:
            return
        i = next(i for i, o in enumerate(self.others) if o["profile"] == pin)
        mine = {k: getattr(self, k) for k in LANE_KEYS}
        for k in LANE_KEYS:
            setattr(self, k, self.others[i][k])
        self.others[i] = mine

    def lane(self, pin: str | None) -> dict:
        """`pin`'s lane (LANE_KEYS), read only."""
        if pin == self.profile:
            return {k: getattr(self, k) for k in LANE_KEYS}
        return next(o for o in self.others if o["profile"] == pin)

    def report(self, status: str) -> RebaseReport:
        patches = [PatchOutcome.from_json(d) for d in self.done]
        conflict_patch = None
        if self.current is not None:
            secs = [CarriedSection.from_json(d) for d in self.current["sections"]]
            outs = tuple(s.outcome for s in secs)
            patches.append(PatchOutcome(self.current["name"], patch_state(outs), outs,
                                        profiles=tuple(self.current.get("profiles", ()))))
            conflict_patch = self.current["name"]
        if not self.others:
            return RebaseReport(status, self.old_image, self.new_image, tuple(patches), tuple(self.notes), conflict_patch,
                                self.profile, vendor=self.vendor.get(self.profile or "") or None)
        lanes = sorted((self.lane(p) for p in self.pins), key=lambda d: d["profile"] or "")
        pins = tuple({"profile": d["profile"], "old": d["old_image"], "new": d["new_image"], "vendor": self.vendor.get(d["profile"] or "")}
                     for d in lanes)
        return RebaseReport(status, lanes[0]["old_image"], lanes[0]["new_image"], tuple(patches), tuple(self.notes),
                            conflict_patch, None, pins=pins)


def state_dir(root: Path) -> Path:
    return root / REBASE_DIR


def rebase_dir(root: Path, *sub: str) -> StateDir:
    """`.imgquilt/rebase/` (or below), every access without following links (the queue is untrusted)."""
    return StateDir(root, REBASE_DIR.name, *sub)


def save_state(root: Path, st: RebaseState) -> None:
    doc = json.loads(json.dumps(asdict(st)))  # as it will read back (tuples as lists): what the seal covers
    doc["seal"] = seal(doc)
    rebase_dir(root).write("state.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _foreign(path: Path, what: str) -> ForeignState:
    return ForeignState(f"{path} is {what}; imgquilt never acts on a rebase journal it did not write in this queue.",
                        hint="Remove .imgquilt/rebase (imgquilt keeps nothing else there), and restore series, patches/ "
                             "and targets.lock from git if a rebase of yours was in progress.")


def load_state(root: Path) -> RebaseState:
    path = state_dir(root) / "state.json"
    try:
        data = rebase_dir(root).read("state.json")
        if data is None:
            raise FileNotFoundError(path)
        try:
            doc = json.loads(data)
        except RecursionError:
            raise ValueError("nested too deep") from None
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            raise _foreign(path, f"not a rebase journal of this imgquilt (version "
                                 f"{doc.get('version') if isinstance(doc, dict) else None!r})")
        if not sealed_here(doc):
            raise _foreign(path, "not sealed with your imgquilt journal key (planted, copied from elsewhere, or "
                                 "written by another user)")
        st = RebaseState(**{k: v for k, v in doc.items() if k != "seal"})
        st.report("check")  # every recorded outcome must read back, or --continue fails halfway
        _check_names(st)
        return st
    except FileNotFoundError:
        raise UsageError("No rebase in progress.", hint="Start one with `imgquilt rebase --image NEWREF`.") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BadInput(f"{path} cannot be read ({exc!r}).", hint="`imgquilt rebase --abort` restores the queue from the backup.") from None


def _check_names(st: RebaseState) -> None:
    """Every name the journal holds is a patch name, every path a path inside the root (ValueError)."""
    from ..work.patchtext import check_patch_name

    names = [d["name"] for d in st.done] + ([st.current["name"]] if st.current is not None else [])
    paths = [*st.paths, *st.paths.values(), *st.old_chain, *st.new_chain, *st.work_written, *st.work_saved]
    for o in st.others:
        if set(o) != set(LANE_KEYS):
            raise ValueError("a pin of the rebase without its fields")
        paths += [*o["paths"], *o["paths"].values(), *o["old_chain"], *o["new_chain"]]
    names += [*st.copies, *st.copies.values()]
    try:
        for name in names:
            check_patch_name(name)
        for p in paths:
            check_member_path(p, what="path in the rebase journal")
    except ImgquiltError as exc:
        raise ValueError(exc.message) from None


def remove_state(root: Path) -> None:
    """Remove the state directory; the rename first makes "in progress" end at one instant."""
    if not rebase_dir(root).exists():  # also refuses a symlinked .imgquilt or .imgquilt/rebase
        return
    gone = f"rebase.done-{os.getpid()}"
    with StateDir(root).opened() as top:
        assert top is not None
        rename_at(top, REBASE_DIR.name, gone)
        shutil.rmtree(gone, dir_fd=top, ignore_errors=True)


def clear_leftovers(root: Path) -> None:
    """Before a start: drop what crashed runs left behind without a journal."""
    exists = rebase_dir(root).exists()
    with StateDir(root).opened() as top:
        if top is None:
            return
        if exists:
            shutil.rmtree(REBASE_DIR.name, dir_fd=top)  # a start that crashed before its journal existed: the queue was not touched
        for stale in os.listdir(top):
            if stale.startswith("rebase.done-"):
                shutil.rmtree(stale, dir_fd=top, ignore_errors=True)  # a finish that crashed while removing its state
