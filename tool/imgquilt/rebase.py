"""Carry a queue onto a new image with 3-way merges; stop on conflicts; `--continue` / `--abort`.

Per patch in series order and per file section: a new base equal to the old one carries the
section unchanged; otherwise git merges (base = old base, ours = old result, theirs = new base)
and a clean merge rewrites the section against the new base. A chain on one file rebases each
patch against the previous patch's new result.

Transaction: `series`, `patches/` and `targets.lock` are not touched until every patch is
carried. At the start they are copied to `.imgquilt/rebase/backup/`, and `state.json` journals
the progress (bytes live in the object store, the journal holds hashes). The finish writes the
queue and then removes the state directory, so until that removal `--abort` restores the old
queue byte for byte, also after a crash, and `--continue` redoes an interrupted finish.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .engine.hunks import ABSENT, HunkError, apply_hunks, sha256_hex
from .engine.merge import leftover_markers, merge3
from .engine.pycheck import new_python_errors
from .errors import BadInput, BaseDrift, ImgquiltError, MalformedPatch, MissingTarget, RebaseConflict, UsageError
from .fs.paths import check_member_path
from .fs.types import Source
from .queue.lock import render_lock
from .queue.patchfile import FileSection, Patch, make_section, parse_patch
from .queue.queue import Queue, load_queue
from .queue.series import parse_series
from .rootfs.dirfd import open_root, parent_dir, read_at
from .store import ObjectStore, fsync_dir
from .util.atomic import atomic_write

STATE_VERSION = 1
REBASE_DIR = Path(".imgquilt") / "rebase"
WORK_DIR = Path(".imgquilt") / "work"

# file and patch states of the report
UNCHANGED, MERGED, CONFLICT, MOVED, UPSTREAM = "unchanged", "merged", "conflict", "moved", "merged-upstream"
STATES = (UNCHANGED, MERGED, CONFLICT, MOVED, UPSTREAM)

Opener = Callable[[str, "str | None"], Source]


# --------------------------------------------------------------------------------------------
# values
@dataclass(frozen=True)
class RebaseOptions:
    new_ref: str
    platform: str | None = None
    from_ref: str | None = None
    keep_empty: bool = False
    maps: tuple[tuple[str, str], ...] = ()  # --map OLD=NEW path prefixes


@dataclass(frozen=True)
class FileOutcome:
    """What happened to one file section."""

    path: str  # in the rebased queue
    state: str
    old_base: str
    old_patched: str
    new_base: str
    new_patched: str | None = None  # None while a conflict waits for its resolution
    moved_from: str | None = None
    merged: bool = False  # the diff was rewritten by a 3-way merge (also for moved files)
    by_hand: bool = False  # a conflict resolved in the work tree
    conflict: str | None = None  # markers | binary | delete | python
    work: str | None = None  # the work-tree file to resolve, relative to the queue
    detail: str = ""

    def to_json(self) -> dict:
        return {
            "path": self.path, "from": self.moved_from, "state": self.state, "merged": self.merged,
            "by_hand": self.by_hand, "old_base": self.old_base, "old_patched": self.old_patched,
            "new_base": self.new_base, "new_patched": self.new_patched, "conflict": self.conflict,
            "work": self.work, "detail": self.detail,
        }


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    state: str
    files: tuple[FileOutcome, ...]
    dropped: bool = False
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.name, "state": self.state, "dropped": self.dropped, "notes": list(self.notes),
                "files": [f.to_json() for f in self.files]}


@dataclass(frozen=True)
class RebaseReport:
    """The outcome of a rebase step: done, stopped on a conflict, or aborted."""

    status: str  # done | stopped | aborted
    old_image: dict
    new_image: dict
    patches: tuple[PatchOutcome, ...]
    notes: tuple[str, ...] = ()
    conflict_patch: str | None = None

    @property
    def conflicts(self) -> list[FileOutcome]:
        return [f for p in self.patches if p.state == CONFLICT for f in p.files if f.state == CONFLICT]

    def summary(self) -> dict[str, int]:
        counts = {s: 0 for s in STATES}
        for p in self.patches:
            counts[p.state] += 1
        counts["dropped"] = sum(1 for p in self.patches if p.dropped)
        return counts

    def to_json(self) -> dict:
        doc = {
            "status": self.status,
            "image": {"old": self.old_image, "new": self.new_image},
            "patches": [p.to_json() for p in self.patches],
            "summary": self.summary(),
            "notes": list(self.notes),
        }
        if self.status == "stopped":
            doc["conflict"] = {
                "patch": self.conflict_patch,
                "files": [{"path": f.path, "work": f.work, "kind": f.conflict, "detail": f.detail} for f in self.conflicts],
                "next": ["imgquilt rebase --continue", "imgquilt rebase --abort"],
            }
        return doc


def patch_state(files: Sequence[FileOutcome]) -> str:
    """A patch takes the most telling state of its files."""
    states = {f.state for f in files}
    if CONFLICT in states:
        return CONFLICT
    if states == {UPSTREAM}:
        return UPSTREAM
    if MOVED in states:
        return MOVED
    if states & {MERGED, UPSTREAM}:
        return MERGED
    return UNCHANGED


# --------------------------------------------------------------------------------------------
# the journal
@dataclass
class _Section:
    """One section in progress (journaled while its patch waits on a conflict)."""

    outcome: FileOutcome
    old_path: str
    raw_sha: str | None = None  # the rebased section's bytes, in the store
    ours_sha: str | None = None  # for the leftover-marker test on --continue
    theirs_sha: str | None = None
    mode: int | None = None


@dataclass
class _State:
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


def _state_dir(root: Path) -> Path:
    return root / REBASE_DIR


def _save(root: Path, st: _State) -> None:
    atomic_write(_state_dir(root) / "state.json", (json.dumps(asdict(st), indent=1, sort_keys=True) + "\n").encode())


def _load(root: Path) -> _State:
    path = _state_dir(root) / "state.json"
    try:
        doc = json.loads(path.read_bytes())
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}")
        return _State(**doc)
    except FileNotFoundError:
        raise UsageError("No rebase in progress.", hint="Start one with `imgquilt rebase --image NEWREF`.") from None
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{path} cannot be read ({exc}).", hint="`imgquilt rebase --abort` restores the queue from the backup.") from None


def rebase_in_progress(root: Path) -> bool:
    return (_state_dir(root) / "state.json").is_file()


def _outcome(doc: dict) -> FileOutcome:
    return FileOutcome(
        path=doc["path"], state=doc["state"], old_base=doc["old_base"], old_patched=doc["old_patched"],
        new_base=doc["new_base"], new_patched=doc["new_patched"], moved_from=doc["from"], merged=doc["merged"],
        by_hand=doc["by_hand"], conflict=doc["conflict"], work=doc["work"], detail=doc["detail"],
    )


def _patch_outcome(doc: dict) -> PatchOutcome:
    return PatchOutcome(doc["name"], doc["state"], tuple(_outcome(f) for f in doc["files"]), doc["dropped"], tuple(doc["notes"]))


def _section_doc(s: _Section) -> dict:
    return {"outcome": s.outcome.to_json(), "old_path": s.old_path, "raw_sha": s.raw_sha, "ours_sha": s.ours_sha,
            "theirs_sha": s.theirs_sha, "mode": s.mode}


def _section_from(doc: dict) -> _Section:
    return _Section(_outcome(doc["outcome"]), doc["old_path"], doc["raw_sha"], doc["ours_sha"], doc["theirs_sha"], doc["mode"])


# --------------------------------------------------------------------------------------------
# backup and restore
def _backup(root: Path, q: Queue) -> None:
    """Copy series, every listed patch and targets.lock (with their modes) below rebase/backup."""
    bdir = _state_dir(root) / "backup"
    (bdir / "patches").mkdir(parents=True, exist_ok=True)
    manifest: dict = {"series": None, "patches": {}, "lock": None}
    series = root / "series"
    if series.is_file():
        atomic_write(bdir / "series", series.read_bytes())
        manifest["series"] = stat.S_IMODE(series.stat().st_mode)
    for name in q.names:
        src = q.patches_dir / name
        dest = bdir / "patches" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, src.read_bytes())
        manifest["patches"][name] = stat.S_IMODE(src.stat().st_mode)
    if q.lock_path.is_file():
        atomic_write(bdir / "targets.lock", q.lock_path.read_bytes())
        manifest["lock"] = stat.S_IMODE(q.lock_path.stat().st_mode)
    atomic_write(bdir / "manifest.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    fsync_dir(bdir)


def _backup_queue(root: Path) -> Queue:
    """The queue as it was when the rebase started."""
    return load_queue(_state_dir(root) / "backup")


def _restore(root: Path) -> list[str]:
    """Put series, patches/ and targets.lock back as backed up; returns what was restored."""
    bdir = _state_dir(root) / "backup"
    manifest = json.loads((bdir / "manifest.json").read_bytes())
    restored: list[str] = []
    if manifest["series"] is not None:
        atomic_write(root / "series", (bdir / "series").read_bytes(), mode=manifest["series"])
        restored.append("series")
    for name, mode in sorted(manifest["patches"].items()):
        dest = root / "patches" / name
        data = (bdir / "patches" / name).read_bytes()
        if not dest.is_file() or dest.read_bytes() != data or stat.S_IMODE(dest.stat().st_mode) != mode:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data, mode=mode)
        restored.append(f"patches/{name}")
    lock = root / "targets.lock"
    if manifest["lock"] is not None:
        atomic_write(lock, (bdir / "targets.lock").read_bytes(), mode=manifest["lock"])
        restored.append("targets.lock")
    elif lock.exists():
        lock.unlink()  # the rebase wrote it; there was none before
        restored.append("targets.lock (removed)")
    return restored


def _remove_state(root: Path) -> None:
    """Remove the state directory; the rename first makes "in progress" end at one instant."""
    sdir = _state_dir(root)
    if not sdir.exists():
        return
    gone = sdir.with_name(f"rebase.done-{os.getpid()}")
    os.replace(sdir, gone)
    fsync_dir(sdir.parent)
    shutil.rmtree(gone, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# the work tree (conflicted files for the user to resolve)
def _work_root(root: Path) -> Path:
    d = root / WORK_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def _work_read(root: Path, path: str) -> bytes | None:
    fd = open_root(_work_root(root))
    try:
        return read_at(fd, check_member_path(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(fd)


def _work_write(root: Path, path: str, data: bytes | None) -> None:
    """Write (or, for None, remove) a work-tree file without following any symlink in it."""
    fd = open_root(_work_root(root))
    try:
        with parent_dir(fd, check_member_path(path), create=data is not None) as (dfd, name):
            if data is None:
                try:
                    os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                return
            tmp = f".{name}.imgquilt-tmp"
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                with os.fdopen(wfd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
    except FileNotFoundError:
        if data is not None:
            raise
    finally:
        os.close(fd)


def _put_work(root: Path, st: _State, path: str, data: bytes | None) -> str:
    """Put a conflicted file in the work tree, saving what the quilt workflow had there first."""
    if path not in st.work_written:
        prior = _work_read(root, path)
        if prior is not None:
            saved = _state_dir(root) / "saved-work" / path
            saved.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(saved, prior)
            st.work_saved.append(path)
        st.work_written.append(path)
        _save(root, st)  # journal it before the file exists, so an abort after a crash cleans it up
    _work_write(root, path, data)
    return str(WORK_DIR / path)


def _release_work(root: Path, st: _State, paths: Iterable[str]) -> None:
    """Take our conflict files out of the work tree and put back what was there before."""
    for path in list(paths):
        if path not in st.work_written:
            continue
        saved = _state_dir(root) / "saved-work" / path
        _work_write(root, path, saved.read_bytes() if path in st.work_saved else None)
        st.work_written.remove(path)
        if path in st.work_saved:
            st.work_saved.remove(path)


# --------------------------------------------------------------------------------------------
# finding moved targets
_SKIP_TOP = {"proc", "sys", "dev"}


def _walk_rootfs(top: Path) -> tuple[list[str], set[str]]:
    """Every non-directory path below `top` and every directory, not following symlinks."""
    files: list[str] = []
    dirs: set[str] = set()
    stack = [("", top)]
    while stack:
        rel, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            child = f"{rel}/{e.name}" if rel else e.name
            if not rel and e.name in _SKIP_TOP:
                continue
            if e.is_dir(follow_symlinks=False):
                dirs.add(child)
                stack.append((child, Path(e.path)))
            elif e.is_file(follow_symlinks=False) or e.is_symlink():
                files.append(child)
    return files, dirs


def image_listing(source: Source) -> tuple[list[str], set[str]] | None:
    """(file paths, directory paths) of a source, or None when it cannot list itself.

    Images offer `list_paths()` (every non-directory path of the merged filesystem); a rootfs
    is walked here.
    """
    lister = getattr(source, "list_paths", None)
    if callable(lister):
        files = [p.strip("/") for p in lister() if p.strip("/")]
        dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
        return files, dirs
    root = getattr(source, "root", None)
    if isinstance(root, Path) and root.is_dir():
        return _walk_rootfs(root)
    return None


def _tail(a: str, b: str) -> int:
    """How many trailing path components `a` and `b` share."""
    pa, pb = a.split("/"), b.split("/")
    n = 0
    while n < min(len(pa), len(pb)) and pa[-1 - n] == pb[-1 - n]:
        n += 1
    return n


def find_moved(missing: Sequence[str], files: Sequence[str], taken: set[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Match each missing path to the file with the same basename and longest common path tail.

    A match needs a unique best candidate that shares at least two components (or is the only
    file with that name). Returns (moves, ambiguous: path -> tied candidates).
    """
    by_name: dict[str, list[str]] = {}
    wanted = {p.rsplit("/", 1)[-1] for p in missing}
    for f in files:
        name = f.rsplit("/", 1)[-1]
        if name in wanted and f not in taken:
            by_name.setdefault(name, []).append(f)
    moves: dict[str, str] = {}
    ambiguous: dict[str, list[str]] = {}
    for p in missing:
        cands = by_name.get(p.rsplit("/", 1)[-1], [])
        if not cands:
            continue
        scored = sorted(((_tail(p, c), c) for c in cands), reverse=True)
        best = scored[0][0]
        tied = sorted(c for s, c in scored if s == best)
        if len(tied) > 1:
            ambiguous[p] = tied
        elif best >= 2 or len(cands) == 1:
            moves[p] = tied[0]
    return moves, ambiguous


def _prefix_of_move(old: str, new: str) -> tuple[str, str] | None:
    n = _tail(old, new)
    po, pn = old.split("/")[:-n], new.split("/")[:-n]
    return ("/".join(po), "/".join(pn)) if po and pn else None


def _map_path(path: str, maps: Sequence[tuple[str, str]]) -> str | None:
    """Apply the longest matching `OLD=NEW` prefix (whole components) to `path`."""
    best: tuple[str, str] | None = None
    for old, new in maps:
        if (path == old or path.startswith(old + "/")) and (best is None or len(old) > len(best[0])):
            best = (old, new)
    if best is None:
        return None
    return best[1] + path[len(best[0]):]


def parse_map(value: str) -> tuple[str, str]:
    """`OLD=NEW` as given to --map, both checked as in-image paths."""
    if "=" not in value:
        raise UsageError(f"--map {value!r}: expected OLD=NEW (path prefixes inside the image).")
    old, new = value.split("=", 1)
    return check_member_path(old, what="--map OLD"), check_member_path(new, what="--map NEW")


# --------------------------------------------------------------------------------------------
# start
def _first_bases(q: Queue) -> dict[str, str]:
    firsts: dict[str, str] = {}
    for p in q.patches:
        for s in p.sections:
            firsts.setdefault(s.path, s.base_sha256)
    return firsts


def _first_is_delete(q: Queue, path: str) -> bool:
    for p in q.patches:
        for s in p.sections:
            if s.path == path:
                return s.is_delete
    return False


def _plan_paths(q: Queue, source: Source, maps: Sequence[tuple[str, str]]) -> tuple[dict[str, str], dict[str, bytes | None], list[str]]:
    """Where each target is in the new image and its bytes there; notes on what moved."""
    firsts = _first_bases(q)
    for old, _ in maps:
        if not any(p == old or p.startswith(old + "/") for p in firsts):
            raise UsageError(f"--map {old}=…: no target of the queue is at or below {old!r}.")
    paths = {p: _map_path(p, maps) or p for p in firsts}
    targets = source.read_targets(sorted(set(paths.values())))
    data = {old: targets[new].data for old, new in paths.items()}
    notes: list[str] = []
    # a missing file the queue changes (not one it creates) may have moved
    missing = [p for p, base in firsts.items() if data[p] is None and base != ABSENT and paths[p] == p]
    moves: dict[str, str] = {}
    dirs: set[str] | None = None
    listing = None
    if missing:
        listing = image_listing(source)
        if listing is not None:
            files, dirs = listing
            moves, ambiguous = find_moved(missing, files, set(paths.values()))
            for p, cands in sorted(ambiguous.items()):
                raise BadInput(
                    f"{p} is not in the new image, and {len(cands)} files could be it: {', '.join(cands)}.",
                    hint=f"Say which with --map {p}=NEW_PATH (or map a directory prefix).",
                )
    # new files go where their moved neighbours went
    prefixes = {pp for pp in (_prefix_of_move(o, n) for o, n in moves.items()) if pp}
    if prefixes and dirs is not None:
        for p, base in firsts.items():
            if base == ABSENT and paths[p] == p:
                mapped = _map_path(p, sorted(prefixes))
                parent = p.rsplit("/", 1)[0] if "/" in p else ""
                if mapped and parent not in dirs:
                    moves[p] = mapped
    if moves:
        moved_targets = source.read_targets(sorted(set(moves.values())))
        for old, new in moves.items():
            paths[old] = new
            data[old] = moved_targets[new].data
            notes.append(f"{old} moved to {new} in the new image.")
    seen: dict[str, str] = {}
    for old, new in sorted(paths.items()):
        if new in seen:
            raise BadInput(f"{seen[new]} and {old} would both become {new}.", hint="Give --map to say where each goes.")
        seen[new] = old
    gone = [p for p, base in firsts.items() if data[p] is None and base != ABSENT and not _first_is_delete(q, p)]
    if gone:
        searched = "not found elsewhere with the same path tail" if listing is not None else "this image cannot be searched for moved files"
        raise MissingTarget(
            f"Not in the new image ({searched}): " + ", ".join(paths[p] for p in sorted(gone)) + ".",
            hint="Tell imgquilt where they went with --map OLD=NEW (a path or a directory prefix), or remove the patch first.",
        )
    return paths, data, notes


def _fill_from_old(q: Queue, store: ObjectStore, ref: str, opener: Opener, platform: str | None) -> None:
    """Read the old image's targets, check the series verifies on it, store every base and result."""
    from .engine.plan import run_series

    source = opener(ref, platform)
    targets = source.read_targets(q.target_paths())
    states, problems = run_series(q, targets, source=source, python_check=False)
    if problems:
        raise BaseDrift(
            f"--from {ref} is not the image this queue was made for:\n" + "\n".join(f"  - {p.render()}" for p in problems),
            hint="Pass the image the queue applies to (the one targets.lock pins).",
        )
    for data in [t.data for t in targets.values()] + [s.data for s in states.values()]:
        if data is not None:
            store.put(data)


def start_rebase(root: Path, opts: RebaseOptions, opener: Opener) -> RebaseReport:
    """Begin a rebase of the queue at `root` onto `opts.new_ref` and run it as far as it goes."""
    sdir = _state_dir(root)
    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is already in progress.",
            hint="Resolve and run `imgquilt rebase --continue`, or `imgquilt rebase --abort`.",
        )
    _refuse_applied_work(root)
    if sdir.exists():
        shutil.rmtree(sdir)  # a start that crashed before its journal existed: the queue was not touched
    for stale in sdir.parent.glob("rebase.done-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a finish that crashed while removing its state
    q = load_queue(root)
    store = ObjectStore(root)
    old_lock = q.lock()
    source = opener(opts.new_ref, opts.platform)
    paths, new_data, notes = _plan_paths(q, source, opts.maps)
    firsts = _first_bases(q)
    new_chain = {p: sha256_hex(d) for p, d in new_data.items()}
    for data in new_data.values():
        if data is not None:
            store.put(data)  # unlike remember(), failing to store here must stop the rebase
    # the old bytes are only needed where the base changed; a chain on an unchanged base is carried
    needed = [p for p, base in firsts.items() if new_chain[p] != base and base != ABSENT and not store.has(base)]
    if needed and opts.from_ref:
        _fill_from_old(q, store, opts.from_ref, opener, opts.platform)
        needed = [p for p in needed if not store.has(firsts[p])]
    if needed:
        pinned = f" (targets.lock pins {old_lock.image.ref})" if old_lock else ""
        raise BadInput(
            "The object store has no copy of the old base of " + ", ".join(f"{p} ({firsts[p][:12]}…)" for p in needed)
            + ", which a 3-way merge needs.",
            hint=f"Pass --from OLDREF, the image the queue was made for{pinned}: `imgquilt rebase --image {opts.new_ref} --from OLDREF`.",
        )
    info = source.info()
    st = _State(
        new_ref=opts.new_ref,
        platform=opts.platform,
        keep_empty=opts.keep_empty,
        paths=paths,
        old_chain=dict(firsts),
        new_chain=new_chain,
        old_image={"ref": old_lock.image.ref, "digest": old_lock.image.digest} if old_lock else {"ref": None, "digest": None},
        new_image={"ref": opts.new_ref, "digest": info.digest},
        notes=notes,
    )
    sdir.mkdir(parents=True)
    _backup(root, q)
    _save(root, st)  # from here on, --abort restores the backup
    return _guarded(_advance, root, st, opener)


def _refuse_applied_work(root: Path) -> None:
    """Rebase rewrites patches; ones pushed in the quilt work tree would be left on stale bases."""
    from .work import WorkTree

    applied = WorkTree(root).applied()
    if applied:
        raise UsageError(
            f"{len(applied)} patch(es) are applied in the work tree ({', '.join(applied)}); rebase rewrites them.",
            hint="`imgquilt refresh` what you want to keep, then `imgquilt pop -a`, and rebase again.",
        )


def _guarded(step: Callable[..., RebaseReport], *args: object) -> RebaseReport:
    """Run a step of a started rebase; an error tells the user the rebase is still there to abort."""
    try:
        return step(*args)
    except RebaseConflict:
        raise  # its own hint already names --continue and --abort
    except ImgquiltError as exc:
        more = "The rebase is still in progress: fix the cause and `imgquilt rebase --continue`, or `imgquilt rebase --abort`."
        exc.hint = f"{exc.hint}\n{more}" if exc.hint else more
        raise


# --------------------------------------------------------------------------------------------
# the loop
def _labels(patch: str, st: _State) -> dict[str, str]:
    return {"ours_label": f"{patch} (old image + patch)", "base_label": "old image", "theirs_label": f"{st.new_ref} (new image)"}


def _retarget(s: FileSection, new_path: str, patch: str) -> bytes:
    """The section's bytes with its path lines naming `new_path` (the diff itself is kept)."""
    lines = s.raw.splitlines(keepends=True)
    out: list[bytes] = []
    old = re.escape(s.path.encode("utf-8", "surrogateescape"))
    new = new_path.encode("utf-8", "surrogateescape")
    in_head = True
    for ln in lines:
        if ln.startswith(b"@@"):
            in_head = False
        if in_head:
            if ln.startswith(b"Index: "):
                ln = b"Index: " + new + (b"\r\n" if ln.endswith(b"\r\n") else b"\n")
            else:
                ln = re.sub(rb"^(---|\+\+\+) ([ab]/)?" + old + rb"(?=[\t\r\n]|$)", lambda m: m.group(1) + b" " + (m.group(2) or b"") + new, ln)
        out.append(ln)
    raw = b"".join(out)
    got = parse_patch(raw, patch).sections[0]
    if got.path != new_path or got.hunks != s.hunks:
        raise MalformedPatch(f"{patch}: cannot rename section {s.path} to {new_path}.")
    return raw


def _rewritten(path: str, old: bytes | None, new: bytes | None, like: FileSection, strip: int, patch: str) -> FileSection:
    """A fresh section for old→new that keeps what the user's section had beyond the diff:
    its unknown fields, its Mode, and no a/ b/ prefixes for a `-p0` series entry."""
    raw = make_section(path, old, new, like.mode).raw
    if like.extra or strip == 0:
        lines = raw.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.startswith(b"--- "))
        extra = [f"{k}: {v}\n".encode("utf-8", "surrogateescape") for k, v in like.extra]
        if strip == 0:
            for i in (at, at + 1):
                lines[i] = re.sub(rb"^(---|\+\+\+) [ab]/", rb"\1 ", lines[i])
        raw = b"".join(lines[:at] + extra + lines[at:])
    return parse_patch(raw, patch).sections[0]


def _old_bytes(store: ObjectStore, sha: str, path: str, patch: str) -> bytes | None:
    found, data = store.get_or_absent(sha)
    if not found:
        raise BadInput(
            f"{patch}: {path}: the object store lost the bytes of {sha}.",
            hint="`imgquilt rebase --abort`, then start again with --from OLDREF.",
        )
    return data


def _rebase_section(root: Path, st: _State, store: ObjectStore, patch: Patch, s: FileSection, strip: int) -> _Section:
    """Carry or merge one section; a conflict puts the file in the work tree."""
    new_path = st.paths[s.path]
    moved_from = s.path if new_path != s.path else None
    old_base = st.old_chain[s.path]
    if old_base != s.base_sha256:
        raise BadInput(
            f"{patch.name}: {s.path}: Base-SHA256 {s.base_sha256} does not continue the chain (the file is at {old_base}).",
            hint="Run `imgquilt check`; rebase needs a sound queue.",
        )
    new_base = st.new_chain[s.path]
    base = FileOutcome(new_path, UNCHANGED, old_base, s.patched_sha256, new_base, moved_from=moved_from)
    if new_base == old_base:
        raw = s.raw if moved_from is None else _retarget(s, new_path, patch.name)
        oc = replace(base, state=MOVED if moved_from else UNCHANGED, new_patched=s.patched_sha256)
        return _Section(oc, s.path, store.put(raw), mode=s.mode)
    ob = _old_bytes(store, old_base, s.path, patch.name)
    try:
        applied = apply_hunks(ob or b"", s.hunks)
    except HunkError as exc:
        raise MalformedPatch(f"{patch.name}: {s.path}: {exc}", hint="Regenerate the patch (`imgquilt refresh`).") from None
    ours = None if s.is_delete else applied
    if sha256_hex(ours) != s.patched_sha256:
        raise MalformedPatch(f"{patch.name}: {s.path}: the patch does not produce its Patched-SHA256 {s.patched_sha256}.")
    if ours is not None:
        store.put(ours)
    nb = _old_bytes(store, new_base, new_path, patch.name)
    if ours is None:
        if nb is None:
            return _Section(replace(base, state=UPSTREAM, new_patched=ABSENT), s.path, mode=s.mode)
        work = _put_work(root, st, new_path, nb)
        detail = "the patch deletes the file, the new image changed it: delete the work-tree file to keep the deletion, or leave the version to keep"
        return _Section(replace(base, state=CONFLICT, conflict="delete", work=work, detail=detail), s.path, mode=s.mode,
                        ours_sha=None, theirs_sha=store.put(nb))
    m = merge3(ob or b"", ours, nb or b"", **_labels(patch.name, st))
    if m.clean:
        if m.data == (nb or b"") and (nb is not None or not m.data):
            return _Section(replace(base, state=UPSTREAM, merged=True, new_patched=new_base), s.path, mode=s.mode)
        errs = new_python_errors(nb, m.data, new_path) if new_path.endswith(".py") else []
        if errs:
            work = _put_work(root, st, new_path, m.data)
            detail = "merged without conflict markers, but the result has new Python errors: " + "; ".join(errs)
            return _Section(replace(base, state=CONFLICT, conflict="python", work=work, detail=detail), s.path, mode=s.mode,
                            ours_sha=store.put(ours), theirs_sha=store.put(nb or b""))
        sec = _rewritten(new_path, nb, m.data, s, strip, patch.name)
        oc = replace(base, state=MOVED if moved_from else MERGED, merged=True, new_patched=sec.patched_sha256)
        store.put(m.data)
        return _Section(oc, s.path, store.put(sec.raw), mode=s.mode)
    work = _put_work(root, st, new_path, m.data)
    if m.binary:
        detail = "binary file: no markers; the work-tree file is the new image's version, make it the patched one"
        kind = "binary"
    else:
        detail = f"{m.conflicts} conflict(s) marked in the file"
        kind = "markers"
    return _Section(replace(base, state=CONFLICT, conflict=kind, work=work, detail=detail), s.path, mode=s.mode,
                    ours_sha=store.put(ours), theirs_sha=store.put(nb or b""))


def _original_section(patch: Patch, path: str) -> FileSection:
    return next(s for s in patch.sections if s.path == path)


def _finish_patch(root: Path, st: _State, store: ObjectStore, patch: Patch, sections: list[_Section], strip: int) -> None:
    """Assemble the rebased patch, advance both chains and journal the patch as done."""
    dropped_names = {d["name"] for d in st.done if d["dropped"]}
    header = patch.header
    notes: list[str] = []
    reqs = header.requires
    if any(r in dropped_names for r in reqs):
        kept = [r for r in reqs if r not in dropped_names]
        header = header.with_field("Requires", ", ".join(kept) if kept else None)
        notes.append("Requires no longer names " + ", ".join(r for r in reqs if r in dropped_names) + " (dropped as merged upstream).")
    outcomes = [s.outcome for s in sections]
    state = patch_state(outcomes)
    raws: list[bytes] = []
    for s in sections:
        if s.outcome.state == UPSTREAM:
            if st.keep_empty:
                nb = _old_bytes(store, s.outcome.new_base, s.outcome.path, patch.name)
                like = _original_section(patch, s.old_path)
                raws.append(_rewritten(s.outcome.path, nb, nb, like, strip, patch.name).raw)
            continue
        data = store.get(s.raw_sha or "")
        if data is None:
            raise BadInput(f"{patch.name}: the object store lost a rebased section of {s.outcome.path}.",
                           hint="`imgquilt rebase --abort` and start again.")
        raws.append(data)
    dropped = not raws
    raw_sha = None
    if dropped:
        notes.append(f"Its change is already in {st.new_ref}: dropped from series (--keep-empty keeps it).")
    else:
        if state == UPSTREAM and header.get("Applied-Upstream") is None:
            header = header.with_field("Applied-Upstream", st.new_ref)
            notes.append("Kept with no-op sections (--keep-empty); Applied-Upstream names the new image.")
        raw = header.raw + b"".join(raws)
        parse_patch(raw, patch.name)  # a rebased patch must read back
        raw_sha = store.put(raw)
    for s in sections:
        st.old_chain[s.old_path] = s.outcome.old_patched
        st.new_chain[s.old_path] = s.outcome.new_patched or ABSENT
    st.done.append({**PatchOutcome(patch.name, state, tuple(outcomes), dropped, tuple(notes)).to_json(), "raw_sha": raw_sha})
    st.next += 1
    st.current = None


def _advance(root: Path, st: _State, opener: Opener) -> RebaseReport:
    """Run patches from `st.next` until the end (then finish) or a conflict."""
    store = ObjectStore(root)
    q = _backup_queue(root)
    while st.next < len(q.patches):
        patch = q.patches[st.next]
        strip = q.entries[st.next].strip
        sections = [_rebase_section(root, st, store, patch, s, strip) for s in patch.sections]
        if any(s.outcome.state == CONFLICT for s in sections):
            st.phase = "conflict"
            st.current = {"name": patch.name, "sections": [_section_doc(s) for s in sections]}
            _save(root, st)
            return _report(st, "stopped")
        _finish_patch(root, st, store, patch, sections, strip)
        _save(root, st)
    return _finish(root, st, q, opener)


def _finish(root: Path, st: _State, old: Queue, opener: Opener) -> RebaseReport:
    """Verify the rebased queue on the new image, then write patches, series and targets.lock."""
    from .engine.plan import plan_lock

    store = ObjectStore(root)
    st.phase = "finishing"
    _save(root, st)
    kept = {d["name"]: d["raw_sha"] for d in st.done if not d["dropped"]}
    dropped = [d["name"] for d in st.done if d["dropped"]]
    patches: list[Patch] = []
    for e in old.entries:
        if e.name in kept:
            data = store.get(kept[e.name])
            if data is None:
                raise BadInput(f"The object store lost the rebased {e.name}.", hint="`imgquilt rebase --abort` and start again.")
            patches.append(parse_patch(data, e.name))
    series_bytes = _drop_series_lines(old.series_bytes, {e.line for e in old.entries if e.name in dropped})
    new_q = Queue(root, series_bytes, tuple(parse_series(series_bytes)), tuple(patches))
    source = opener(st.new_ref, st.platform)
    lock = plan_lock(new_q, source, st.new_ref)  # verifies the whole rebased series on the new image
    st.new_image = {"ref": st.new_ref, "digest": lock.image.digest}
    for p in patches:
        dest = root / "patches" / p.name
        if not dest.is_file() or dest.read_bytes() != p.raw:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, p.raw, mode=_mode_of(dest))
    for name in dropped:
        (root / "patches" / name).unlink(missing_ok=True)
    if not (root / "series").is_file() or (root / "series").read_bytes() != series_bytes:
        atomic_write(root / "series", series_bytes, mode=_mode_of(root / "series"))
    atomic_write(root / "targets.lock", render_lock(lock), mode=_mode_of(root / "targets.lock"))
    report = _report(st, "done")
    _release_work(root, st, list(st.work_written))
    _remove_state(root)
    return report


def _mode_of(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o644


def _drop_series_lines(series: bytes, lines: set[int]) -> bytes:
    """series without the given (1-based) lines; every other byte, comments included, kept."""
    if not lines:
        return series
    return b"".join(ln for i, ln in enumerate(series.splitlines(keepends=True), 1) if i not in lines)


def _report(st: _State, status: str) -> RebaseReport:
    patches = [_patch_outcome(d) for d in st.done]
    conflict_patch = None
    if st.current is not None:
        secs = [_section_from(d) for d in st.current["sections"]]
        outs = tuple(s.outcome for s in secs)
        patches.append(PatchOutcome(st.current["name"], patch_state(outs), outs))
        conflict_patch = st.current["name"]
    return RebaseReport(status, st.old_image, st.new_image, tuple(patches), tuple(st.notes), conflict_patch)


# --------------------------------------------------------------------------------------------
# continue and abort
def continue_rebase(root: Path, opener: Opener) -> RebaseReport:
    """Take the resolved work-tree files of the stopped patch, then go on."""
    st = _load(root)
    if st.phase != "conflict" or st.current is None:
        # an interrupted run or finish: redo from the journal
        return _guarded(_advance, root, st, opener)
    return _guarded(_resolve_and_go_on, root, st, opener)


def _resolve_and_go_on(root: Path, st: _State, opener: Opener) -> RebaseReport:
    store = ObjectStore(root)
    q = _backup_queue(root)
    patch = q.patches[st.next]
    strip = q.entries[st.next].strip
    sections = [_section_from(d) for d in st.current["sections"]]
    unresolved: list[str] = []
    resolved: list[_Section] = []
    for s in sections:
        if s.outcome.state != CONFLICT:
            resolved.append(s)
            continue
        oc = s.outcome
        data = _work_read(root, oc.path)
        if oc.conflict == "markers" and data is not None:
            sides = [store.get(x) or b"" for x in (s.ours_sha, s.theirs_sha) if x]
            left = leftover_markers(data, *sides)
            if left:
                unresolved.append(f"{oc.work}: conflict markers remain at line(s) {', '.join(map(str, left[:10]))}")
                continue
        nb = _old_bytes(store, oc.new_base, oc.path, patch.name)
        errs = new_python_errors(nb, data, oc.path) if data is not None and oc.path.endswith(".py") else []
        if errs:
            unresolved.append(f"{oc.work}: new Python errors: {'; '.join(errs)}")
            continue
        if sha256_hex(data) == oc.new_base:
            resolved.append(replace(s, outcome=replace(oc, state=UPSTREAM, by_hand=True, new_patched=oc.new_base, work=None)))
            continue
        sec = _rewritten(oc.path, nb, data, _original_section(patch, s.old_path), strip, patch.name)
        if data is not None:
            store.put(data)
        state = MOVED if oc.moved_from else MERGED
        new = replace(oc, state=state, merged=True, by_hand=True, new_patched=sec.patched_sha256, work=None, detail="resolved by hand")
        resolved.append(replace(s, outcome=new, raw_sha=store.put(sec.raw)))
    if unresolved:
        raise RebaseConflict(
            f"{patch.name} is still conflicted:\n" + "\n".join(f"  - {u}" for u in unresolved),
            hint="Edit the file(s), then `imgquilt rebase --continue`; or `imgquilt rebase --abort`.",
        )
    _finish_patch(root, st, store, patch, resolved, strip)
    st.phase = "running"
    _save(root, st)  # journal the resolution before its files leave the work tree
    _release_work(root, st, [s.outcome.path for s in sections if s.outcome.state == CONFLICT])
    _save(root, st)
    return _advance(root, st, opener)


def abort_rebase(root: Path) -> tuple[RebaseReport | None, list[str]]:
    """Restore series, patches/ and targets.lock as they were; end the rebase."""
    sdir = _state_dir(root)
    if not sdir.exists():
        raise UsageError("No rebase in progress.", hint="Nothing to abort.")
    if not rebase_in_progress(root):
        _remove_state(root)  # crashed before its journal existed: nothing was changed
        return None, []
    try:
        st: _State | None = _load(root)
    except ImgquiltError:
        st = None
    restored = _restore(root)
    report = None
    if st is not None:
        report = _report(st, "aborted")
        _release_work(root, st, list(st.work_written))
    _remove_state(root)
    return report, restored
