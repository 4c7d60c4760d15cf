"""When each patch entered and left the series: a walk over the git history of the queue.

Every commit that touches the queue's `series` or `patches/` (oldest first, every branch) is
compared with its parents: names that entered or left `series`, patch files that were created,
changed or deleted. A merge only counts for what it changed against every parent, so a change
made on a branch is credited to the branch commit, not to the merge. The queue may have moved
inside the repository: its `series` is followed through renames.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..util.regular import read_regular_file

ADDED = "added"  # the name entered series
CHANGED = "changed"  # its patch file was created or changed (or deleted, when not listed)
REMOVED = "removed"  # the name left series

SILENT_REMOVAL = "silent-removal"
DELETED_WHILE_LISTED = "deleted-while-listed"
RE_ADDED = "re-added"


@dataclass(frozen=True)
class CommitInfo:
    hexsha: str
    subject: str
    date: str  # committer date, ISO 8601
    author: str

    @property
    def short(self) -> str:
        return self.hexsha[:12]


@dataclass(frozen=True)
class Event:
    kind: str
    commit: CommitInfo
    detail: str = ""


@dataclass(frozen=True)
class Flag:
    kind: str
    patch: str
    commit: CommitInfo
    message: str


@dataclass(frozen=True)
class PatchHistory:
    name: str
    in_series: bool  # listed in the series being audited (the working tree)
    events: tuple[Event, ...]


@dataclass(frozen=True)
class History:
    repo: str
    queue_path: str  # the queue directory inside the repository ("." for the top)
    commits: int  # commits walked
    patches: tuple[PatchHistory, ...]
    flags: tuple[Flag, ...]


@dataclass(frozen=True)
class _Snapshot:
    names: frozenset[str]  # listed in series
    files: dict[str, str]  # patch file name (relative to patches/) -> blob sha


_EMPTY = _Snapshot(frozenset(), {})


def series_names(data: bytes) -> list[str]:
    """The names in a series file, leniently: an old commit's series may hold what parse_series refuses."""
    names = []
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            names.append(words[0])
    return names


def names_patch(message: str, name: str) -> bool:
    """Does a commit message name the patch? Its file name, or that name without `.patch`/`.diff`
    and without a leading number (`0003-fix-foo.patch`: `fix-foo`), case-insensitive."""
    text = message.lower()
    base = posixpath.basename(name).lower()
    stem = re.sub(r"\.(patch|diff)$", "", base)
    bare = re.sub(r"^\d+[-_]", "", stem)
    return any(c in text for c in {name.lower(), base, stem} | ({bare} if len(bare) >= 3 else set()))


def _join(d: str, name: str) -> str:
    return f"{d}/{name}" if d else name


def _queue_dirs(repo, rel: str) -> list[str]:
    """Every directory the queue's series lived in, newest first (followed through renames)."""
    import git

    dirs = [rel]
    try:
        log = repo.git.log("--follow", "--name-status", "--format=", "--", _join(rel, "series"))
    except git.GitCommandError:
        return dirs
    for line in log.splitlines():
        parts = line.split("\t")
        for p in parts[1:]:
            if posixpath.basename(p) == "series":
                d = posixpath.dirname(p)
                if d not in dirs:
                    dirs.append(d)
    return dirs


def _snapshot(commit, dirs: list[str], cache: dict[str, _Snapshot]) -> _Snapshot:
    hit = cache.get(commit.hexsha)
    if hit is not None:
        return hit
    snap = _EMPTY
    for d in dirs:
        try:
            series = commit.tree / _join(d, "series")
        except KeyError:
            continue
        names = frozenset(series_names(series.data_stream.read())) if series.type == "blob" else frozenset()
        files: dict[str, str] = {}
        try:
            pdir = commit.tree / _join(d, "patches")
        except KeyError:
            pdir = None
        if pdir is not None and pdir.type == "tree":
            prefix = pdir.path + "/"
            for item in pdir.traverse():
                if item.type == "blob":
                    files[item.path[len(prefix):]] = item.hexsha
        snap = _Snapshot(names, files)
        break
    cache[commit.hexsha] = snap
    return snap


def _info(commit) -> CommitInfo:
    return CommitInfo(commit.hexsha, commit.summary if isinstance(commit.summary, str) else commit.summary.decode("utf-8", "replace"),
                      commit.committed_datetime.isoformat(), str(commit.author.name))


def _walk(repo, dirs: list[str]) -> list[str]:
    import git

    specs = [s for d in dirs for s in (_join(d, "series"), _join(d, "patches"))]
    try:
        out = repo.git.log("--reverse", "--topo-order", "--full-history", "--format=%H", "--", *specs)
    except git.GitCommandError:
        return []  # no commits yet
    return out.split()


def open_repo(queue_root: Path):
    """The git repository holding the queue, and the queue's path inside it."""
    from ..util.gitexe import require_git

    require_git("audit --history")  # GitPython cannot even be imported without it
    import git

    try:
        repo = git.Repo(queue_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise UsageError(
            f"--history: the queue {queue_root} is not inside a git repository.",
            hint="Commit the queue to git (series, patches/, targets.lock) to get its history.",
        ) from None
    if repo.working_tree_dir is None:
        raise UsageError(f"--history: the repository of {queue_root} is bare.")
    top = Path(repo.working_tree_dir).resolve()
    rel = Path(queue_root).resolve().relative_to(top).as_posix()
    return repo, "" if rel == "." else rel


def queue_history(queue_root: Path, listed: list[str] | None = None) -> History:
    """Walk the history of the queue at `queue_root`; `listed`: the series being audited (default: the working tree's)."""
    repo, rel = open_repo(queue_root)
    if listed is None:
        series = Path(queue_root) / "series"
        listed = series_names(read_regular_file(series) or b"")
    dirs = _queue_dirs(repo, rel)
    cache: dict[str, _Snapshot] = {}
    events: dict[str, list[Event]] = {}
    flags: list[Flag] = []
    ever_listed: set[str] = set()
    removed_in: dict[str, CommitInfo] = {}
    hexshas = _walk(repo, dirs)
    for hexsha in hexshas:
        commit = repo.commit(hexsha)
        snap = _snapshot(commit, dirs, cache)
        parents = [_snapshot(p, dirs, cache) for p in commit.parents] or [_EMPTY]
        info = _info(commit)
        message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
        added = {n for n in snap.names if all(n not in p.names for p in parents)}
        removed = {n for n in set().union(*(p.names for p in parents)) if n not in snap.names and all(n in p.names for p in parents)}
        touched = set(snap.files) | set().union(*(p.files for p in parents))
        for name in sorted(touched | added | removed):
            now = snap.files.get(name)
            before = [p.files.get(name) for p in parents]
            file_changed = all(now != b for b in before)
            if name in added:
                ever_listed.add(name)
                events.setdefault(name, []).append(Event(ADDED, info, "" if now else "its patch file does not exist"))
                if name in removed_in:
                    prev = removed_in[name]
                    flags.append(Flag(RE_ADDED, name, info, f"{name} was re-added to series by {info.short} ({info.subject!r}) after its removal in {prev.short} ({prev.subject!r})."))
                continue
            if name in removed:
                detail = "its patch file was deleted too" if now is None and file_changed else ""
                events.setdefault(name, []).append(Event(REMOVED, info, detail))
                removed_in[name] = info
                if not names_patch(message, name):
                    flags.append(Flag(SILENT_REMOVAL, name, info, f"{info.short} ({info.subject!r}) removed {name} from series without naming it in its message."))
                continue
            if not file_changed:
                continue
            if now is None:
                if name in snap.names:
                    events.setdefault(name, []).append(Event(CHANGED, info, "its patch file was deleted while still listed in series"))
                    flags.append(Flag(DELETED_WHILE_LISTED, name, info, f"{info.short} ({info.subject!r}) deleted patches/{name} while series still lists it."))
                else:
                    events.setdefault(name, []).append(Event(CHANGED, info, "its patch file was deleted"))
            else:
                detail = "its patch file was created" if all(b is None for b in before) else "its patch file was changed"
                events.setdefault(name, []).append(Event(CHANGED, info, detail))
    order = {h: i for i, h in enumerate(hexshas)}
    patches = tuple(
        PatchHistory(name, name in listed, tuple(events[name]))
        for name in sorted(ever_listed, key=lambda n: (order[events[n][0].commit.hexsha], n))
    )
    kept = tuple(f for f in flags if f.patch in ever_listed)
    return History(str(repo.working_tree_dir), rel or ".", len(hexshas), patches, kept)
