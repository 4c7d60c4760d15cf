"""Plan an apply: read every target, apply the series in memory, verify every base and result.

Nothing here writes: the ApplyResult is handed to sinks only when everything verified.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

from ..errors import BadInput, BaseDrift, ImgquiltError, MalformedPatch, MissingTarget, PythonCheckFailed, Refused, ResultMismatch, StaleLock, UnsafePath
from ..fs.content import Data, held, held_or_none
from ..fs.types import ImageInfo, Source, TargetFile, read_targets
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.lock import Lock, LockTarget, patch_hashes, read_note, rootfs_digest, stale_lock_advice
from ..queue.patchfile import rehash_command
from ..queue.queue import Queue
from .apply import HunkError, apply_section, link_target_problem
from ..fs.pycache import Bytecode, find_bytecode, is_python_source
from .drift import ImageBytes, diagnose, older_versions
from .record import parse_record, read_record_target, record_bytes, recorded_ref
from .result import RECORD_PATH, ApplyResult, FileResult


class PendingPython(Protocol):
    """A syntax and name check under way: findings by key, or given up."""

    def result(self) -> dict[str, set[str]]: ...

    def close(self) -> None: ...


class PythonChecks(Protocol):
    """The Python check the gate is given (imgquilt.pycheck.Checks): the engine holds no Python
    analysis and imports none; without one (None), no Python check runs. `key`, `start`, `errors`,
    `located`: the syntax and name check of (content, filename) pairs; `modules`, `check`, `culprit`:
    the cross-module check of patched files against the image's modules."""

    def key(self, data: Data, path: str) -> str: ...

    def start(self, files: Iterable[tuple[Data | None, str]]) -> PendingPython: ...

    def errors(self, files: Iterable[tuple[Data | None, str]]) -> dict[str, set[str]]: ...

    def located(self, data: Data, path: str, errors: Iterable[str]) -> list[str]: ...

    def modules(self, source: Source) -> Any: ...

    def check(self, files: Sequence[tuple[str, str, Any, Any]], image_view: Any, base_view: Any, *,
              changed: Sequence[tuple[str, Any, Any]], lines: dict[str, list[bytes]] | None = None) -> list[Any]: ...

    def culprit(self, steps: Sequence[tuple[str, Data | None]], resolved: str, finding: Any, place: Any,
                patched_by: dict[str, str]) -> str: ...


LOCK_HINT = "Run `imgquilt lock` to pin the queue to the image again."
NO_LOCK_HINT = "Pin the queue to its image with `imgquilt lock --image REF` and commit targets.lock."


@dataclass(frozen=True)
class Problem:
    """One failed verification, with every fact a refusal must name."""

    kind: str  # "drift", "missing", "type", "result", "hunk", "python", "lock"
    patch: str
    path: str
    resolved: str
    expected: str
    actual: str
    detail: str = ""
    locations: tuple[str, ...] = ()  # "python": each finding as path:line:col
    cause: str = ""  # "drift"/"missing": why (engine.drift): "image", "hand", "later", "older"

    def render(self) -> str:
        where = self.path if self.path == self.resolved else f"{self.path} (resolved: {self.resolved})"
        if self.kind == "python" and self.locations:
            return f"{self.patch}: the patch adds Python errors: {'; '.join(self.locations)}."
        text = {
            "drift": f"{self.patch}: {where}: base drifted: expected sha256 {self.expected}, found {self.actual}.",
            "missing": f"{self.patch}: {where}: the file does not exist (expected sha256 {self.expected}).",
            "type": f"{self.patch}: {where}: {self.detail}.",
            "result": f"{self.patch}: {where}: the result is not the pinned one: expected sha256 {self.expected}, got {self.actual}.",
            "hunk": f"{self.patch}: {where}: base matches ({self.expected}) but {self.detail}.",
            "alias": f"{self.patch}: {where}: the same file as its section {self.detail} (through a symbolic link).",
            "python": f"{self.patch}: {where}: the patch adds Python errors: {self.detail}.",
            "lock": f"targets.lock: {where}: pinned base sha256 {self.expected}, found {self.actual}.",
        }[self.kind]
        if self.detail and self.kind in ("drift", "missing"):
            text += f" {self.detail}"
        return text


@dataclass
class _FileState:
    target: TargetFile
    data: Data | None
    patches: list[str] = field(default_factory=list)
    broken: bool = False
    mode: int | None = None
    steps: list[tuple[str, str, str]] = field(default_factory=list)
    chain: list = field(default_factory=list)  # (patch name, path as named, section) applied, in order
    link: bool = False  # the file is a symlink at this point (data: its target)


NEXT_STEP = {
    "drift": "The image changed under the queue: `imgquilt rebase --image REF` carries the patches onto it.",
    "missing": "The file is gone from this image: check --image, or `imgquilt rebase` (it finds moved files).",
    "type": "The image holds another kind of file there than the patch was made for (a symlink where it expects a "
            "regular file, or the reverse): apply onto the image the patch was made for, or `imgquilt rebase --image REF`.",
    "result": "A patch whose body was edited by hand no longer gives its Patched-SHA256: {rehash} re-pins it "
              "(and re-chains the patches after it).",
    "hunk": "A hunk does not fit the base its patch pins: fix its context and removed lines by hand, then {rehash}.",
    "python": "Fix the patch so the file compiles, its names resolve, and its imports and calls fit the image's modules.",
    "lock": LOCK_HINT,
    "alias": "A patch changes a file once: keep one section per file, named by the path the links lead to.",
}


# the way on for a drifted or missing file, by its cause (engine.drift); {root}: the root's path
WAY_ON = {
    "hand": "Put back what the image has: `imgquilt restore {paths} --root {root}` (journaled, as apply is); or keep the "
            "edit in the queue: `imgquilt new NAME.patch`, `imgquilt add PATH`, copy the file from the root into "
            ".imgquilt/work/PATH, `imgquilt refresh`.",
    "unsure": "If the root was edited by hand, `imgquilt restore {paths} --root {root}` puts back what the image has; "
              "if it is another image (a new version), `imgquilt rebase --image REF` carries the queue onto it.",
    "later": "`imgquilt apply --reverse --root {root}` takes off what imgquilt applied there; then apply again.",
    "later-unrecorded": "No apply record says imgquilt put it there: a change applied by hand goes back with "
                        "`imgquilt restore {paths} --root {root}`; a change upstream has made already is dropped by "
                        "`imgquilt rebase --image REF` (it finds the patches already in the image).",
    "later-image": "Apply to the image the queue is pinned to, not to one already patched (`imgquilt audit --image REF` "
                   "shows what of the queue is live in it).",
    "older": "The root runs an older version of this queue: {older}. Not a rebase: `imgquilt apply --reverse --root {root}` "
             "takes that version off (its bases from .imgquilt/objects, or --image REF), then `imgquilt apply --root {root}` "
             "puts this one on.",
    "older-image": "The image runs an older version of this queue: {older}. Not a rebase: apply to the image that version "
                   "was applied to{digest}, not to the patched one (`imgquilt audit --image REF` shows what of this queue "
                   "is live in it).",
}


def way_on(problems: list[Problem], info: ImageInfo | None, older: tuple[str, str | None] | None = None) -> list[str]:
    """The hints of the drifted files whose cause is not the image: one per cause, naming the root.
    `older`: (how the version the target's apply record names differs, the image it went on); None
    when the target has no record."""
    rootfs = info is not None and info.kind == "rootfs"
    root = info.ref.removeprefix("rootfs:") if info is not None else "ROOT"
    hints = []
    for cause in ("hand", "unsure", "later", "older"):
        mine = [p for p in problems if p.cause == cause]
        if not mine:
            continue
        key = cause if rootfs or cause in ("hand", "unsure") else f"{cause}-image"
        if key == "later" and older is None:
            key = "later-unrecorded"
        summary, digest = older or ("", None)
        hints.append(WAY_ON[key].format(paths=" ".join(dict.fromkeys(p.path for p in mine)), root=root, older=summary,
                                        digest=f" ({digest})" if digest else ""))
    return hints


def refusal(problems: list[Problem], info: ImageInfo | None = None, older: tuple[str, str | None] | None = None,
            notes: list[str] | tuple[str, ...] = ()) -> ImgquiltError:
    """One error naming every problem (and, after them, the Python check's "cannot tell" notes);
    bad input (6) wins over verification failures (3). `older`: the version of the queue a target's
    record names, and the image it went on (engine.drift)."""
    kinds = {p.kind for p in problems}
    cls: type[BadInput] | type[Refused]
    if kinds & {"missing", "hunk", "alias"}:
        cls = {frozenset({"missing"}): MissingTarget, frozenset({"hunk"}): MalformedPatch}.get(frozenset(kinds), BadInput)
    else:
        by_kind = {"drift": BaseDrift, "type": BaseDrift, "result": ResultMismatch, "python": PythonCheckFailed, "lock": BaseDrift}
        cls = by_kind[next(iter(kinds))] if len(kinds) == 1 else Refused
    msg = f"Refused: {len(problems)} verification failure(s); nothing was written.\n" + "\n".join(
        f"  - {p.render()}" for p in problems
    ) + "".join(f"\n  note: {n}" for n in notes)
    hints = way_on(problems, info, older)
    for kind in sorted(kinds):
        names = list(dict.fromkeys(p.patch for p in problems if p.kind == kind and p.cause in ("", "image")))
        if names:
            hints.append(NEXT_STEP[kind].format(rehash=rehash_command(names)))
    err = cls(msg, hint="\n".join(hints))
    err.problems = problems  # type: ignore[union-attr]  # read back by diagnose(); no error class declares it
    return err


def check_lock_fresh(queue: Queue, lock: Lock | None, *, locked: bool) -> None:
    if lock is None:
        if locked:
            raise StaleLock(f"--locked given, but {queue.lock_path} does not exist.", hint=NO_LOCK_HINT)
        return
    if lock.series_sha256 != queue.series_sha256:
        what, todo = stale_lock_advice(lock, queue.names, [p.raw for p in queue.patches], series_sha256=queue.series_sha256,
                                       note=read_note(queue.root))
        raise StaleLock(
            f"targets.lock is stale ({what}): it pins series sha256 {lock.series_sha256}, but the queue is now {queue.series_sha256}.",
            hint=todo[0].upper() + todo[1:],
        )


def deleted_note(source: Source, t: TargetFile) -> str:
    by = getattr(source, "deleted_by", None)
    layer = by(t.path) if callable(by) else None
    return f"It was deleted (whited out) by layer {layer}." if layer else ""


def run_series(queue: Queue, targets: dict[str, TargetFile], *, source: Source | None = None,
               python: PythonChecks | None = None, notes: list[str] | None = None,
               modules: Any = None) -> tuple[dict[str, _FileState], list[Problem]]:
    """Apply every section in series order to the targets' bytes; collect every problem. With
    `python`, the Python check of the patched files; with a `source` too, it also looks across
    modules (its "cannot tell"s go to `notes`; `modules`: python.modules(source), opened already)."""
    states, problems = _apply_series(queue, targets, source)
    if python is not None:
        problems += python_problems(states, python)
        if source is not None:
            found, said = cross_module_problems(states, targets, modules or python.modules(source), python)
            problems += found
            if notes is not None:
                notes += said
    return states, problems


def _apply_series(queue: Queue, targets: dict[str, TargetFile], source: Source | None) -> tuple[dict[str, _FileState], list[Problem]]:
    """The series applied in memory, every section verified (the Python check is the caller's)."""
    states: dict[str, _FileState] = {}
    for path, t in targets.items():
        states.setdefault(t.resolved, _FileState(t, t.data, link=t.link))
    problems: list[Problem] = []
    for patch in queue.patches:
        named: dict[str, str] = {}  # resolved -> the first of this patch's sections that reached it
        for s in patch.sections:
            t = targets[s.path]
            st = states[t.resolved]
            first = named.setdefault(t.resolved, s.path)
            if first != s.path:  # two names of one file (through links): which section wins is anyone's guess
                problems.append(Problem("alias", patch.name, s.path, t.resolved, s.base_sha256, "", first))
                st.broken = True
                continue
            if st.broken:
                continue
            actual = sha256_hex(st.data)
            if actual != s.base_sha256:
                kind = "missing" if st.data is None else "drift"
                note = deleted_note(source, t) if (kind == "missing" and source is not None) else ""
                problems.append(Problem(kind, patch.name, s.path, t.resolved, s.base_sha256, actual, note))
                st.broken = True
                continue
            if st.data is not None and st.link != s.link:
                problems.append(Problem("type", patch.name, s.path, t.resolved, s.base_sha256, actual, kind_mismatch(s.link)))
                st.broken = True
                continue
            try:
                new = apply_section(st.data, s)
            except HunkError as exc:
                problems.append(Problem("hunk", patch.name, s.path, t.resolved, s.base_sha256, actual, str(exc)))
                st.broken = True
                continue
            result = None if s.is_delete else new
            bad_link = link_target_problem(held(result, s.path)) if s.link and result is not None else None
            if bad_link:
                problems.append(Problem("hunk", patch.name, s.path, t.resolved, s.base_sha256, actual, bad_link))
                st.broken = True
                continue
            if s.is_delete and new:
                problems.append(Problem("result", patch.name, s.path, t.resolved, ABSENT, sha256_hex(new), "the deletion leaves content"))
                st.broken = True
                continue
            got = sha256_hex(result)
            if got != s.patched_sha256:
                problems.append(Problem("result", patch.name, s.path, t.resolved, s.patched_sha256, got))
                st.broken = True
                continue
            if s.is_new and s.mode is not None:
                st.mode = s.mode
            elif s.new_mode is not None:
                st.mode = s.new_mode
            st.data = result
            st.link = s.link if result is not None else False
            st.patches.append(patch.name)
            st.steps.append((patch.name, actual, got))
            st.chain.append((patch.name, s.path, s))
    return states, problems


def check_link_parents(queue: Queue) -> None:
    """A path the series names below a symlink the series itself changes is refused: where the file
    is would change with the link, after it was read. (By name, before anything is read; the same rule
    on the paths as the image resolves them is check_resolved_link_parents.)"""
    links = queue.link_paths()
    if not links:
        return
    for path in queue.target_paths():
        parts = path.split("/")
        via = next(("/".join(parts[:k]) for k in range(1, len(parts)) if "/".join(parts[:k]) in links), None)
        if via is not None:
            raise BadInput(
                f"The series names {path}, below the symlink {via} that it changes itself; imgquilt reads and writes "
                "every file as the image has it, never through a link the series makes.",
                hint=f"Name the file by the path {via} leads to, in a patch of its own.",
            )


def check_resolved_link_parents(queue: Queue, targets: dict[str, TargetFile]) -> None:
    """The link rule on the paths as the image resolves them: a target (or the record) that lies below a
    symlink the series creates, changes or deletes, or is reached through one, by any name and through
    any other link (`app/l2 -> l` in the image, a patch making `app/l` a link, another creating
    `app/l2/x`), is refused before anything is written: its place would move with the link, and an
    in-place write would make a directory where the link goes."""
    links = {targets[p].resolved: p for p in queue.link_paths() if p in targets}
    if not links:
        return
    for t in [*targets.values(), TargetFile(RECORD_PATH, RECORD_PATH, None)]:
        parts = t.resolved.split("/")
        below = next(("/".join(parts[:k]) for k in range(1, len(parts)) if "/".join(parts[:k]) in links), None)
        through = next((v for v in t.via if v in links), None)
        hit = below or through
        if hit is None:
            continue
        name = links[hit]
        if through and not below:
            how = f"it is reached through the symlink {hit}"
        else:
            how = f"it resolves to {t.resolved}, below the symlink {hit}" if t.path != t.resolved else f"it lies below the symlink {hit}"
        where = "" if name == hit else f" (named {name} in the series)"
        raise BadInput(
            f"The series names {t.path}: {how}{where}, which the series itself creates, changes or deletes; imgquilt "
            "reads and writes every file as the image has it, never through or below a link the series makes. "
            "Nothing was written.",
            hint=f"Name the file by the path {hit} leads to (with no link of the series on the way), or change the link "
                 "in a queue of its own, applied after this one.",
        )


def kind_mismatch(link: bool) -> str:
    if link:
        return "the patch changes a symlink, but the file here is a regular file"
    return "the patch changes a regular file, but the path here is a symlink (imgquilt does not follow it for a series that changes the link itself)"




def final_mode(st: "_FileState") -> int:
    """The permission bits a file ends with: a mode change's or a new file's, else the base's (0644 for a new file)."""
    if st.mode is not None:
        return st.mode
    return st.target.mode if st.target.data is not None else 0o644


def python_problems(states: dict[str, _FileState], python: PythonChecks) -> list[Problem]:
    """Each patched .py file's final state against its base, once; the chain is walked only for a
    file whose final state has an error its base had not, to name the patch that brought it."""
    return PythonCheck(states, python).problems()


def cross_module_problems(states: dict[str, _FileState], targets: dict[str, TargetFile],
                          image: Any, python: PythonChecks) -> tuple[list[Problem], list[str]]:
    """The cross-module check (pycheck's `check`) of every patched .py file: its imports and calls
    against the image with every patched file's final bytes, new findings only (those its base,
    against the image as it is, did not have). Returns the problems, one per file and patch that
    brought findings, and the "cannot tell" notes. `image`: python.modules(the source)."""
    # every patched file's bytes as far as the series got: a file another finding broke still holds them
    # a .py file is parsed whole (held, within IMGQUILT_IN_MEMORY_MAX); other files' bytes are only hashed
    def py(r: str, data):
        return held_or_none(data, r) if r.endswith(".py") else data

    changed = [(r, py(r, st.target.data), py(r, st.data)) for r, st in states.items() if st.chain and st.data != st.target.data]
    files = [(st.target.path, r, py(r, st.target.data), py(r, st.data)) for r, st in states.items()
             if r.endswith(".py") and st.chain and not st.broken and st.data is not None and st.data != st.target.data]
    if not files:
        return [], []
    overlay = {r: after for r, _, after in changed}
    named = {t.path: t.resolved for t in targets.values() if t.resolved in overlay}
    patched_by = {r: states[r].chain[-1][0] for r in overlay}
    # the lines each file's patches add and remove: only files whose changes may matter are parsed
    lines = {r: [hl.text for _n, _p, sec in states[r].chain for h in sec.hunks for hl in h.lines if hl.kind != " "]
             for r, _b, _a in changed}
    results = python.check(files, image.view(overlay, named), image.view({}, {}), changed=changed, lines=lines)
    problems: list[Problem] = []
    notes: list[str] = []
    for ff in results:
        st = states[ff.check.resolved]
        for f in ff.notes:
            notes += f.located(ff.check.path)
        if not ff.findings:
            continue
        steps, data = [], st.target.data
        for name, _path, sec in st.chain:
            data = None if sec.is_delete else apply_section(data, sec)
            steps.append((name, held_or_none(data, sec.path)))  # the cross-module check reads bytes
        by_patch: dict[str, list] = {}
        for f in ff.findings:
            by_patch.setdefault(python.culprit(steps, ff.check.resolved, f, ff.place, patched_by), []).append(f)
        for name, found in by_patch.items():
            sec = next(s for n, _p, s in st.chain if n == name) if any(n == name for n, _p, _s in st.chain) else st.chain[-1][2]
            places = [x for f in found for x in f.located(ff.check.path)]
            problems.append(Problem("python", name, ff.check.path, ff.check.resolved, sec.base_sha256, sec.patched_sha256,
                                    "; ".join(f.text() for f in found), tuple(places)))
        st.broken = True
    return problems, notes


class PythonCheck:
    """The Python check of a planned series, begun here and under way (see pycheck.names.PendingErrors):
    `problems()` waits for it; `close()` stops it without using the answer."""

    def __init__(self, states: dict[str, _FileState], python: PythonChecks) -> None:
        self.python = python
        self.checked = [st for resolved, st in states.items()
                        if resolved.endswith(".py") and not st.broken and st.chain and st.data is not None and not st.link
                        and st.data != st.target.data]
        self.pending = python.start((_final(st), st.target.resolved) for st in self.checked)

    def problems(self) -> list[Problem]:
        finals = self.pending.result()
        key = self.python.key
        suspects = [st for st in self.checked if finals[key(_final(st), st.target.resolved)]]
        bases = self.python.errors((st.target.data, st.target.resolved) for st in suspects if st.target.data is not None)
        problems = []
        for st in suspects:
            before = bases[key(st.target.data, st.target.resolved)] if st.target.data is not None else set()
            new = finals[key(_final(st), st.target.resolved)] - before
            if new:
                problems.append(_culprit(st, new, before, self.python))
                st.broken = True
        return problems

    def close(self) -> None:
        self.pending.close()


def _final(st: _FileState) -> Data:
    """The result of a file the Python check judges (PythonCheck keeps only files that have one)."""
    assert st.data is not None
    return st.data


def _culprit(st: _FileState, new: set[str], base_errors: set[str], python: PythonChecks) -> Problem:
    """The first patch whose result has one of `new` that its input had not (one exists: the base has none)."""
    data, before = st.target.data, base_errors
    for name, path, s in st.chain:
        out = apply_section(data, s)  # applied cleanly once already
        after = python.errors([(out, st.target.resolved)])[python.key(out, st.target.resolved)] if not s.is_delete else set()
        brought = after - before
        if brought & new:
            return Problem("python", name, path, st.target.resolved, s.base_sha256, s.patched_sha256,
                           "; ".join(sorted(brought)), tuple(python.located(out, path, brought)))
        data, before = out, after
    raise AssertionError("a new Python error that no patch brought")  # pragma: no cover


def unchecked_notes(queue: Queue) -> list[str]:
    """The patches whose header says they were written with the Python checks off (`Python-Check: skipped`)."""
    names = [p.name for p in queue.patches if p.header.python_unchecked]
    if not names:
        return []
    return [f"Never Python-checked (written with --no-python-check; `Python-Check: skipped` in the header): "
            f"{', '.join(names)}."]


def already_applied(queue: Queue, targets: dict[str, TargetFile]) -> bool:
    """True when every target is already at the series' final state (re-running an in-place apply)."""
    finals = queue.final_hashes()
    return bool(finals) and all(sha256_hex(targets[p].data) == h for p, h in finals.items())


def stale_bytecode(source: Source, states: dict[str, _FileState], targets: dict[str, TargetFile]) -> tuple[Bytecode, ...]:
    """The bytecode `source` holds for every .py file the series changes (creates, edits, deletes):
    CPython could load it instead of the new bytes, so an apply removes it. A symlink in __pycache__
    counts (CPython follows it): the link itself goes, never what it names."""
    names: dict[str, list[str]] = {}
    for path, t in targets.items():
        names.setdefault(t.resolved, []).append(path)
    found: dict[str, Bytecode] = {}
    for resolved, st in states.items():
        if st.broken or st.data == st.target.data or st.link or not is_python_source(resolved):
            continue
        for named in names.get(resolved, [st.target.path]):
            for b in find_bytecode(source, named, resolved, source_gone=st.data is None, kinds=("file", "symlink")):
                found.setdefault(b.path, b)
    return tuple(found[p] for p in sorted(found))


def plan_apply(queue: Queue, source: Source, lock: Lock | None, *, locked: bool = False,
               python: PythonChecks | None = None, bytecode_source: Source | None = None, env: tuple[tuple[str, str], ...] = (),
               module_source: Source | None = None, image_bytes: ImageBytes | None = None) -> ApplyResult:
    """Read, apply and verify everything in memory. Raises a refusal naming every problem."""
    result, gate = plan_apply_gated(queue, source, lock, locked=locked, python=python,
                                    bytecode_source=bytecode_source, env=env, module_source=module_source,
                                    image_bytes=image_bytes)
    gate.check()
    return result


class Gate:
    """What must still pass before a planned apply may become visible: the Python check, under way
    in other processes while the caller stages its writes. `check()` raises the refusal."""

    def __init__(self, pending: PythonCheck | None = None) -> None:
        self.pending = pending

    def check(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            problems = pending.problems()
            if problems:
                raise refusal(problems)

    def close(self) -> None:
        """The caller gave up before checking: let the helpers finish, use nothing."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.close()


def plan_apply_gated(queue: Queue, source: Source, lock: Lock | None, *, locked: bool = False,
                     python: PythonChecks | None = None, bytecode_source: Source | None = None, env: tuple[tuple[str, str], ...] = (),
                     module_source: Source | None = None, image_bytes: ImageBytes | None = None,
                     boot: dict | None = None) -> tuple[ApplyResult, Gate]:
    """plan_apply, with the Python check left running: every other verification is done and refused
    here; the result may be staged but not made visible before `gate.check()` passed.

    `python`: the Python check (imgquilt.pycheck.checks()); None: none runs (--no-python-check).

    `bytecode_source`: where to look for bytecode the change makes stale (default: `source`; an
    in-place apply looks in the root it writes). `env`: environment defaults for the image's config,
    carried in the result and its record. `module_source`: where the cross-module Python check reads
    the modules the patched files import (default: `source`). `image_bytes`: the image's bytes of a
    path by sha256 (the object store), to show a hand edit of a root as a diff. `boot`: apply --boot's
    result, kept in the record."""
    check_lock_fresh(queue, lock, locked=locked)
    paths = queue.target_paths()
    check_link_parents(queue)
    modules = python.modules(module_source or source) if python is not None else None
    if modules is not None:
        modules.expect(paths)  # the layers read for the targets keep their packages' modules
    targets = read_targets(source, paths, queue.link_paths())
    check_resolved_link_parents(queue, targets)
    # an image whose scanned layers do not decide the record gets one at its plain path
    record_target = _own_record_path(read_record_target(source) or TargetFile(RECORD_PATH, RECORD_PATH, None))
    info = source.info()
    notes: list[str] = []
    if lock is None:
        notes.append("The image is not pinned (no targets.lock): verified against the patch headers alone.")
    notes += unchecked_notes(queue)
    done = already_applied(queue, targets) and not at_first_bases(queue, targets)
    pending: PythonCheck | None = None
    if done:
        notes.append("Every target is already at the series' result: nothing to change.")
        states = {t.resolved: _FileState(t, t.data, list(queue.patches_naming.get(t.path, ())), link=t.link)
                  for t in targets.values()}
        problems: list[Problem] = []
    else:
        states, problems = _apply_series(queue, targets, source)
        if python is not None:
            pending = PythonCheck(states, python)
            found, said = cross_module_problems(states, targets, modules, python)
            problems += found
            notes += said
    if lock is not None:
        if not done:
            for lt in lock.targets:
                t = targets.get(lt.path)
                if t is not None and sha256_hex(t.data) != lt.base_sha256 and not any(p.path == lt.path for p in problems):
                    problems.append(Problem("lock", "-", lt.path, t.resolved, lt.base_sha256, sha256_hex(t.data)))
        # only a manifest digest says something the per-file hashes do not (a rootfs has none)
        if info.digest and lock.image.digest and info.digest != lock.image.digest and not done:
            notes.append(f"The image digest {info.digest} differs from the lock's {lock.image.digest}; the file hashes decide.")
    if problems:  # one refusal names everything, the Python check's findings included
        if pending is not None:
            problems += pending.problems()
        record = parse_record(held_or_none(record_target.data, RECORD_PATH))
        problems = diagnose(problems, queue, targets, info, lock, record, image_bytes)
        raise refusal(problems, info, (older_versions(queue, record), record.image_digest) if record is not None else None,
                      notes=[n for n in notes if ": cannot tell: " in n])
    files = []
    for st in states.values():
        t = st.target
        files.append(FileResult(t, st.data, final_mode(st), t.uid, t.gid, tuple(st.patches), tuple(st.steps), link=st.link))
    # the record names the image the series was applied on: its own manifest digest (one platform of
    # an index has its own), else (a rootfs) the lock's pin, else a digest over the targets
    image_digest = info.digest or (lock.image.digest if lock else rootfs_digest([(t.resolved, sha256_hex(t.data)) for t in targets.values()]))
    bytecode = () if done else stale_bytecode(bytecode_source or source, states, targets)
    record_data = record_bytes(queue, image_digest, recorded_ref(info.ref), targets, bytecode, env, boot)
    files.append(FileResult(record_target, record_data, record_target.mode if record_target.data is not None else 0o644, record_target.uid, record_target.gid, ()))
    files.sort(key=lambda f: f.resolved)
    result = ApplyResult(info, queue.series_sha256, tuple(queue.names), tuple(files), lock is not None, tuple(notes), bytecode,
                         tuple(env))
    return result, Gate(pending)


def _own_record_path(t: TargetFile) -> TargetFile:
    """The record is written at its own path only: a symlink on the way (`applied.json -> /etc/passwd`,
    planted in a root or an image) would make the record overwrite another file."""
    if t.resolved != RECORD_PATH:
        raise UnsafePath(
            f"{RECORD_PATH} leads through a symlink to {t.resolved!r}; imgquilt writes its record only at its own path "
            "and never through a link.",
            hint=f"Remove the link at {RECORD_PATH} (or on its way) from the root or image, then apply again.",
        )
    return t


def at_first_bases(queue: Queue, targets: dict[str, TargetFile]) -> bool:
    """True when every target is at the base the series starts from."""
    return all(sha256_hex(targets[p].data) == h for p, h in queue.first_bases().items())


@dataclass(frozen=True)
class LockPlan:
    """A lock and the file contents it was verified with (every base and result, for the store)."""

    lock: Lock
    contents: tuple[Data | None, ...]
    notes: tuple[str, ...] = ()  # the cross-module check's "cannot tell"s


def plan_lock(queue: Queue, source: Source, ref: str, *, python: PythonChecks | None = None) -> LockPlan:
    """Pin the image and every target: the whole series must verify on it (with `python`, the
    Python check too)."""
    paths = queue.target_paths()
    check_link_parents(queue)
    modules = python.modules(source) if python is not None else None
    if modules is not None:
        modules.expect(paths)
    targets = read_targets(source, paths, queue.link_paths())
    check_resolved_link_parents(queue, targets)
    notes: list[str] = []
    states, problems = run_series(queue, targets, source=source, python=python, notes=notes, modules=modules)
    if problems:
        raise refusal(problems, notes=notes)
    info = source.info()
    digest = info.digest or rootfs_digest([(t.resolved, sha256_hex(t.data)) for t in targets.values()])
    lock_targets = []
    for path in paths:
        t = targets[path]
        st = states[t.resolved]
        mode = t.mode if t.data is not None else final_mode(st)
        lock_targets.append(
            LockTarget(
                path=path,
                resolved=t.resolved,
                base_sha256=sha256_hex(t.data),
                final_sha256=sha256_hex(st.data),
                mode=mode,
                uid=t.uid,
                gid=t.gid,
                layer=t.layer,
                patches=queue.patches_naming[path],
                link=t.link if t.data is not None else st.link,
            )
        )
    from ..fs.types import ImageInfo

    lock = Lock(queue.series_sha256, ImageInfo(ref, digest, info.platform, info.kind), tuple(lock_targets),
                patch_sha256=patch_hashes(queue.names, [p.raw for p in queue.patches]))
    return LockPlan(lock, tuple(t.data for t in targets.values()) + tuple(st.data for st in states.values()), tuple(notes))
