"""`boot`: import every module the queue patches with the image's own Python, in a sandbox, on the
base and on the patched tree; only a failure the base does not have counts.

For each patched `.py` file the image's Python would import (found from where the file sits: a
`site-packages` or `dist-packages` under `lib/python3.X/`, or `/usr/lib/python3/dist-packages`, and the
interpreter of that version on the image's PATH), one probe per tree (rootfs.sandbox) imports the
module and reports the exception, if any, with its traceback's file:line. Per module:

    boots        it imports on the patched tree
    fails        it fails on the patched tree and imports on the base (or the base has no such file)
    cannot tell  it fails on the base too (the base's error is named), or it cannot be probed (why)

A failure is attributed to the patch that changed the file its traceback ends in (the innermost frame
in a patched file; the last patch of the series that touches that file), else to the module's own.
A patch fails when a failure is attributed to it, is "cannot tell" when any of its modules is, and
boots otherwise. A command (`-- CMD ...`) runs the same way on both trees: it fails when its exit
status is non-zero on the patched tree only.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..engine.plan import plan_apply
from ..engine.result import RECORD_PATH, ApplyResult
from ..errors import BadInput, BootFailed, UsageError
from ..fs.types import Source
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..rootfs.sandbox import Ran, Sandbox, Staged

BOOTS, FAILS, CANNOT_TELL = "boots", "fails", "cannot tell"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_TIMEOUT = 120.0
_SITE = re.compile(r"(?:^|/)lib/python(3(?:\.\d+)?)/(?:(?:site|dist)-packages/)?")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Runs on the image's Python (any 3.x): imports argv[1]; writes one JSON line on the original stdout
# (what the module prints goes to stderr), the exception with its traceback's frames when it fails.
PROBE = r"""
import json, os, sys, traceback
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
res = {"ok": True}
try:
    __import__(sys.argv[1])
except BaseException as e:
    frames = [[f[0], f[1]] for f in traceback.extract_tb(e.__traceback__)]
    if isinstance(e, SyntaxError) and e.filename:
        frames.append([e.filename, e.lineno or 0])
    res = {"ok": False, "type": type(e).__name__, "message": str(e)[:2000], "frames": frames[-64:]}
out.write(json.dumps(res) + "\n")
out.flush()
"""
PATHS = "import json, sys; print(json.dumps([p for p in sys.path if p.startswith('/')]))"


@dataclass(frozen=True)
class Failure:
    """An exception a probe met: its type, message and where (the innermost frame in a patched file,
    else the innermost frame); `path` relative to the root."""

    type: str
    message: str
    path: str | None = None
    line: int | None = None

    def render(self) -> str:
        where = f"{self.path}:{self.line}: " if self.path else ""
        return f"{where}{self.type}: {self.message}"

    def json(self) -> dict:
        return {"type": self.type, "message": self.message, "path": self.path, "line": self.line}


@dataclass(frozen=True)
class Outcome:
    """One probe on one tree: `ok`, `error` (the failure), `timeout` (killed), `crash` (no report)."""

    state: str
    seconds: float
    failure: Failure | None = None
    code: int | None = None
    stderr: str = ""

    def json(self) -> dict:
        return {"state": self.state, "seconds": round(self.seconds, 3), "exit_code": self.code,
                "failure": None if self.failure is None else self.failure.json(),
                **({"stderr_tail": self.stderr} if self.state != "ok" and self.stderr else {})}


@dataclass(frozen=True)
class Probe:
    """One patched module, probed on the base and the patched tree."""

    path: str  # resolved, relative to the root
    module: str | None
    python: str | None
    verdict: str
    why: str = ""
    base: Outcome | None = None
    patched: Outcome | None = None
    blamed: str | None = None  # the patch a failure is attributed to
    importer_of: str | None = None  # an unpatched module probed because it imports this patched one

    def json(self) -> dict:
        return {"path": self.path, "module": self.module, "python": self.python, "verdict": self.verdict, "why": self.why,
                "attributed_to": self.blamed, "importer_of": self.importer_of, "base": None if self.base is None else self.base.json(),
                "patched": None if self.patched is None else self.patched.json()}


@dataclass(frozen=True)
class PatchBoot:
    name: str
    verdict: str
    modules: tuple[str, ...]
    failures: tuple[tuple[str, Failure], ...] = ()  # (module, failure)
    why: str = ""


@dataclass(frozen=True)
class CommandBoot:
    argv: tuple[str, ...]
    verdict: str
    base: Ran
    patched: Ran


@dataclass(frozen=True)
class BootReport:
    ref: str
    digest: str | None
    profile: str | None
    patches: tuple[PatchBoot, ...]
    probes: tuple[Probe, ...]
    command: CommandBoot | None = None
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    sandbox_seconds: float = 0.0  # the wall time of every sandboxed process: the probes' own time
    sandbox_cpu_seconds: float = 0.0  # their CPU time
    patched_digest: str | None = None  # over the files shown over the base (queue.lock.rootfs_digest of path, sha256)

    @property
    def failed(self) -> bool:
        return any(p.verdict == FAILS for p in self.patches) or (self.command is not None and self.command.verdict == FAILS)

    def failure(self) -> BootFailed | None:
        if not self.failed:
            return None
        names = [p.name for p in self.patches if p.verdict == FAILS]
        what = []
        if names:
            what.append(f"{len(names)} patch(es) fail to boot on {self.ref}: {', '.join(names)}")
        if self.command is not None and self.command.verdict == FAILS:
            what.append(f"the command `{' '.join(self.command.argv)}` exits {self.command.patched.code} on the patched tree "
                        f"and {self.command.base.code} on the base")
        return BootFailed("; ".join(what) + ".", hint="Each failure names the patched file and line; fix the patch and run "
                                                       "`imgquilt boot` again.",
                          problems=[f"{p.name}: {m}: {f.render()}" for p in self.patches for m, f in p.failures])

    def record(self) -> dict:
        """What `apply --boot` keeps in the apply record (docs/applied-record.md): the verdicts and the
        probes without times or output, so the same boot gives the same record bytes."""
        def side(o: Outcome | None) -> dict | None:
            return None if o is None else {"state": o.state, "failure": None if o.failure is None else o.failure.json()}

        return {"base_digest": self.digest, "patched_digest": self.patched_digest, "profile": self.profile,
                "timeout": self.timeout, "patches": [{"name": p.name, "verdict": p.verdict, "why": p.why} for p in self.patches],
                "probes": [{"path": p.path, "module": p.module, "verdict": p.verdict, "why": p.why,
                            "attributed_to": p.blamed, "importer_of": p.importer_of, "base": side(p.base),
                            "patched": side(p.patched)} for p in self.probes]}


@dataclass(frozen=True)
class BootPlan:
    """What to run: the root, the patched files over it, the env, the limits."""

    root: Path
    result: ApplyResult
    env: Mapping[str, str]
    cwd: str = "/"
    timeout: float = DEFAULT_TIMEOUT
    memory: int | None = None
    user: tuple[int, int] | None = None  # the image's User (uid, gid); None: root
    command: tuple[str, ...] = ()
    mounts: tuple[tuple[Path, str], ...] = ()  # (host directory, path in the root): --mount-queue
    staged: tuple[Staged, ...] | None = None  # the files shown over the root (None: the series' results)
    importers: int = 5  # per patched module, at most this many modules of its package that import it


# --- the verb -----------------------------------------------------------------------------------
def patched_result(queue: Queue, source: Source, lock: Lock | None, image_bytes=None) -> ApplyResult:
    """The series applied in memory (verified as apply verifies it); the static Python check is not
    the question here, so it does not run."""
    return plan_apply(queue, source, lock, image_bytes=image_bytes)


@dataclass(frozen=True)
class Change:
    """One file the series changes, as the probes see it: its path in the root (resolved), whether the
    base has it, whether the series leaves it (not deleted), and the patches that touch it."""

    resolved: str
    on_base: bool
    kept: bool
    patches: tuple[str, ...]


def changes_of(result: ApplyResult) -> list[Change]:
    return [Change(f.resolved, f.target.data is not None, f.final is not None, tuple(f.patches)) for f in result.files
            if f.changed and f.target.path != RECORD_PATH]


def run_boot(plan: BootPlan, *, ref: str, digest: str | None, profile: str | None,
             env_shown: tuple[tuple[str, str], ...] = (), on_probe: Callable[[str], None] | None = None) -> BootReport:
    result = plan.result
    changed = [f for f in result.files if f.changed and f.target.path != RECORD_PATH]
    staged = list(plan.staged) if plan.staged is not None else [Staged(f.resolved, f.final, f.mode) for f in changed
                                                                  if f.final is not None and not f.link]
    if plan.staged is None:  # stale bytecode apply removes: an empty file over it, as the overlay covers it (CPython ignores it)
        staged += [Staged(b.path, b"", 0o644) for b in result.bytecode]
    changes = changes_of(result)
    with Sandbox(plan.root, staged, binds=plan.mounts, timeout=plan.timeout, memory=plan.memory, cwd=plan.cwd,
                 user=plan.user) as box:
        probes = probe_changes(box, plan.env, changes, plan.importers, on_probe)
        command = _command(box, plan) if plan.command else None
    held = {p for f in result.files if not f.changed and f.final is not None and f.target.path != RECORD_PATH
            and f.resolved.endswith(".py") for p in f.patches}
    return BootReport(ref, digest, profile, verdicts(result.patches, changes, probes, held), tuple(probes), command,
                      env_shown, plan.timeout, box.seconds, box.cpu_seconds, tree_digest(staged))


def tree_digest(staged: Sequence[Staged]) -> str:
    """A digest of the files a probe sees over the base: over their (path, sha256) pairs."""
    import hashlib

    from ..fs.content import chunks_of
    from ..queue.lock import rootfs_digest

    pairs = []
    for s in staged:
        if s.data is not None:
            h = hashlib.sha256()
            for chunk in chunks_of(s.data):
                h.update(chunk)
            pairs.append((s.rel, h.hexdigest()))
    return rootfs_digest(pairs)


def probe_changes(box: Sandbox, env: Mapping[str, str], changes: Sequence[Change], importers: int,
                  on_probe: Callable[[str], None] | None = None) -> list[Probe]:
    """Probe every changed `.py` module on the base and the patched tree of `box`, then up to
    `importers` modules of its package that import it."""
    owners = {c.resolved: c.patches for c in changes}
    pythons = _Pythons(box, env)
    probes = []
    for f in changes:
        if not f.resolved.endswith(".py"):
            continue
        if on_probe is not None:
            on_probe(f.resolved)
        probes.append(_probe(box, env, pythons, f, owners))
    seen = {f.resolved for f in changes}
    by_path = {f.resolved: f for f in changes}
    for pr in list(probes):
        if importers <= 0 or pr.module is None or pr.python is None or pr.verdict == CANNOT_TELL and not pr.base:
            continue
        for path, module in _importers_of(box, pythons.sys_path(pr.python), pr.module, importers, seen):
            seen.add(path)
            probes.append(_probe_importer(box, env, pr, by_path[pr.path], path, module, owners))
    return probes


class _Pythons:
    """The image's interpreters, found on its PATH by version, and their sys.path (asked once each)."""

    def __init__(self, box: Sandbox, env: Mapping[str, str]) -> None:
        self.box, self.env = box, env
        self._paths: dict[str, list[str] | str] = {}

    def find(self, version: str) -> str | None:
        names = [f"python{version}"] + (["python3"] if version != "3" else [])
        for name in names:
            for d in self.env.get("PATH", DEFAULT_PATH).split(":"):
                if d.startswith("/") and _executable(self.box, f"{d.rstrip('/')}/{name}"):
                    return f"{d.rstrip('/')}/{name}"
        return None

    def sys_path(self, python: str) -> list[str] | str:
        """Its sys.path entries (absolute), or why they could not be read."""
        if python not in self._paths:
            ran = self.box.run([python, "-B", "-c", PATHS], self.env, patched=False)
            try:
                self._paths[python] = list(json.loads(ran.stdout.decode().strip().splitlines()[-1]))
            except (ValueError, IndexError, UnicodeDecodeError):
                why = "killed at the time limit" if ran.timed_out else f"exit {ran.code}: {ran.tail().strip()[-300:]}"
                self._paths[python] = f"{python} did not report its sys.path on the base ({why})"
        return self._paths[python]


def _executable(box: Sandbox, path: str) -> bool:
    """Does `path` name an executable file in the root (its links resolved inside the root)?"""
    import os

    from ..fs.resolve import resolve
    from ..rootfs.dirfd import open_root
    from ..rootfs.source import RootfsSource

    fd = open_root(box.root)
    try:
        r = resolve(path.lstrip("/"), RootfsSource._lookup(fd))
    except BadInput:
        return False
    finally:
        os.close(fd)
    return r.node is not None and r.node.kind == "file" and bool(r.node.mode & 0o111)


def _module_of(path: str, entries: Sequence[str]) -> str | None:
    full = "/" + path
    best = max((e.rstrip("/") for e in entries if full.startswith(e.rstrip("/") + "/")), key=len, default=None)
    if best is None:
        return None
    parts = full[len(best) + 1:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(_IDENT.match(p) for p in parts):
        return None
    return ".".join(parts)


def _probe(box: Sandbox, env: Mapping[str, str], pythons: _Pythons, f: Change, owners) -> Probe:
    m = _SITE.search(f.resolved)
    if m is None:
        return Probe(f.resolved, None, None, CANNOT_TELL, "not under a directory an image's Python imports from "
                     "(site-packages or dist-packages under lib/python3.X, or /usr/lib/python3/dist-packages)")
    python = pythons.find(m.group(1))
    if python is None:
        return Probe(f.resolved, None, None, CANNOT_TELL,
                     f"the image has no python{m.group(1)} (nor python3) on its PATH ({env.get('PATH', DEFAULT_PATH)})")
    entries = pythons.sys_path(python)
    if isinstance(entries, str):
        return Probe(f.resolved, None, python, CANNOT_TELL, entries)
    module = _module_of(f.resolved, entries)
    if module is None:
        return Probe(f.resolved, None, python, CANNOT_TELL, f"not importable by name from {python}'s sys.path")
    if not f.kept:
        return Probe(f.resolved, module, python, CANNOT_TELL, "the series deletes it (a probe cannot hide the base's file)")
    if module.rpartition(".")[2] == "__main__":
        return Probe(f.resolved, module, python, CANNOT_TELL, "a __main__ module runs the program when imported: give it "
                     "a command (`imgquilt boot -- ...`) instead")
    patched = _run_probe(box, env, python, module, patched=True, owners=owners)
    if patched.state == "ok":
        return Probe(f.resolved, module, python, BOOTS, patched=patched)
    base = _run_probe(box, env, python, module, patched=False, owners=owners) if f.on_base else None
    if base is not None and base.state != "ok":
        said = base.failure.render() if base.failure else base.state
        return Probe(f.resolved, module, python, CANNOT_TELL, f"it fails on the base too: {said}", base, patched)
    blamed = _blame(patched, f, owners)
    return Probe(f.resolved, module, python, FAILS, "", base, patched, blamed)


def _probe_importer(box: Sandbox, env: Mapping[str, str], of: Probe, f: Change, path: str, module: str, owners) -> Probe:
    """A module of the package that imports a patched one: probed the same way; its failure is the
    patch's whose file the traceback ends in (else the imported module's patch)."""
    assert of.python is not None and of.module is not None
    patched = _run_probe(box, env, of.python, module, patched=True, owners=owners)
    if patched.state == "ok":
        return Probe(path, module, of.python, BOOTS, patched=patched, importer_of=of.module)
    base = _run_probe(box, env, of.python, module, patched=False, owners=owners)
    if base.state != "ok":
        said = base.failure.render() if base.failure else base.state
        return Probe(path, module, of.python, CANNOT_TELL, f"it fails on the base too: {said}", base, patched,
                     importer_of=of.module)
    return Probe(path, module, of.python, FAILS, "", base, patched, _blame(patched, f, owners), of.module)


def _importers_of(box: Sandbox, entries, module: str, limit: int, seen: set[str]) -> list[tuple[str, str]]:
    """Up to `limit` modules of `module`'s top-level package (in the base) that import it, by path."""
    import ast
    import os

    from ..fs.resolve import resolve
    from ..rootfs.dirfd import open_root
    from ..rootfs.source import RootfsSource

    top, _, _ = module.partition(".")
    if isinstance(entries, str):
        return []
    last = module.rpartition(".")[2]
    found: list[tuple[str, str]] = []
    for entry in entries:
        fd = open_root(box.root)
        try:
            r = resolve(entry.strip("/"), RootfsSource._lookup(fd)) if entry.strip("/") else None
        except BadInput:
            continue
        finally:
            os.close(fd)
        base = (r.resolved if r is not None and r.node is not None and r.node.kind == "dir" else None)
        if base is None or not box.is_dir(f"{base}/{top}"):
            continue
        pkg_dir = Path(box.root) / base / top
        for dirpath, dirnames, filenames in os.walk(pkg_dir, followlinks=False):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), box.root)
                if rel in seen or not box.is_file(rel):
                    continue
                mod = _module_of(rel, ["/" + base])
                if mod is None or mod == module:
                    continue
                try:
                    with open(os.path.join(dirpath, name), "rb", opener=lambda p, fl: os.open(p, fl | os.O_NOFOLLOW)) as fh:
                        text = fh.read(4 << 20)
                    if last.encode() not in text or not _names_in_import(text, last):
                        continue
                    tree = ast.parse(text)
                except (OSError, SyntaxError, ValueError):
                    continue
                if _imports(tree, mod, name == "__init__.py", module):  # (parsed only when an import line names it)
                    found.append((rel, mod))
                    if len(found) >= limit:
                        return found
        break  # the first sys.path entry that has the package is the one Python imports it from
    return found


def _names_in_import(text: bytes, last: str) -> bool:
    """A cheap screen before the parse: does a line that starts an import statement (or continues
    one in parentheses) name `last`? A file that only mentions it elsewhere is not parsed."""
    word = re.compile(rb"\b" + re.escape(last.encode()) + rb"\b")
    in_parens = False
    for line in text.splitlines():
        s = line.lstrip()
        if in_parens or s.startswith((b"import ", b"from ")):
            if word.search(line):
                return True
            in_parens = ((in_parens or b"(" in s) and b")" not in s) or s.rstrip().endswith(b"\\")
    return False


def _imports(tree, mod: str, is_pkg: bool, target: str) -> bool:
    """Does the module `mod` (its AST) import `target` at any level?"""
    import ast

    here = mod if is_pkg else mod.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(a.name == target or a.name.startswith(target + ".") for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".") if here else []
                if node.level - 1 > len(parts):
                    continue
                pkg = ".".join(parts[:len(parts) - (node.level - 1)])
                name = ".".join(x for x in (pkg, node.module or "") if x)
            else:
                name = node.module or ""
            if name == target or name.startswith(target + ".") or any(f"{name}.{a.name}" == target for a in node.names):
                return True
    return False


def _blame(outcome: Outcome, f: Change, owners) -> str:
    fl = outcome.failure
    if fl is not None and fl.path in owners and owners[fl.path]:
        return owners[fl.path][-1]
    return f.patches[-1]


def _run_probe(box: Sandbox, env: Mapping[str, str], python: str, module: str, *, patched: bool, owners) -> Outcome:
    ran = box.run([python, "-B", "-c", PROBE, module], env, patched=patched)
    if ran.timed_out:
        return Outcome("timeout", ran.seconds, Failure("Timeout", f"killed after {box.timeout:g} s (--timeout)"),
                       stderr=ran.tail())
    line = ran.stdout.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    try:
        doc = json.loads(line[0])
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        why = f"exit {ran.code}" if ran.code is None or ran.code >= 0 else f"killed by signal {-ran.code}"
        return Outcome("crash", ran.seconds, Failure("Crash", f"the interpreter ended without a report ({why})"),
                       ran.code, ran.tail())
    if doc.get("ok"):
        return Outcome("ok", ran.seconds, code=ran.code)
    frames = [(str(p), int(n)) for p, n in doc.get("frames") or [] if isinstance(p, str) and isinstance(n, int)]
    where = next(((p, n) for p, n in reversed(frames) if p.lstrip("/") in owners), None) or (frames[-1] if frames else None)
    failure = Failure(str(doc.get("type")), str(doc.get("message")), where[0].lstrip("/") if where else None,
                      where[1] if where else None)
    return Outcome("error", ran.seconds, failure, ran.code, ran.tail())


def verdicts(names: Sequence[str], changed: Sequence[Change], probes: Sequence[Probe], held: set[str] = frozenset()) -> tuple[PatchBoot, ...]:
    """Each patch's verdict from its modules' probes (the module docstring's rule)."""
    by_path = {p.path: p for p in probes}
    out = []
    for name in names:
        mine = [by_path[f.resolved] for f in changed if name in f.patches and f.resolved in by_path]
        failures = tuple((p.module or p.path, p.patched.failure) for p in probes
                         if p.verdict == FAILS and p.blamed == name and p.patched and p.patched.failure)
        modules = tuple(p.module or p.path for p in mine)
        if failures:
            out.append(PatchBoot(name, FAILS, modules, failures))
            continue
        unsure = [p for p in mine if p.verdict != BOOTS]
        if not mine and name in held:
            out.append(PatchBoot(name, CANNOT_TELL, (), why="the root already holds its result, so there is no base to "
                                 "compare with: boot the unpatched image or root"))
        elif not mine:
            out.append(PatchBoot(name, CANNOT_TELL, (), why="it changes no Python module"))
        elif unsure:
            p = unsure[0]
            why = p.why or (f"{p.module} fails in a file {p.blamed} changed" if p.verdict == FAILS else "")
            out.append(PatchBoot(name, CANNOT_TELL, modules, why=f"{p.module or p.path}: {why}"))
        else:
            out.append(PatchBoot(name, BOOTS, modules))
    return tuple(out)


def _command(box: Sandbox, plan: BootPlan) -> CommandBoot:
    argv = list(plan.command)
    if "/" not in argv[0]:
        found = next((f"{d.rstrip('/')}/{argv[0]}" for d in plan.env.get("PATH", DEFAULT_PATH).split(":")
                      if d.startswith("/") and _executable(box, f"{d.rstrip('/')}/{argv[0]}")), None)
        if found is None:
            raise BadInput(f"The command {argv[0]!r} is not on the image's PATH ({plan.env.get('PATH', DEFAULT_PATH)}).",
                           hint="Name a program the image has, or give its path in the image.")
        argv[0] = found
    elif not _executable(box, argv[0]):
        raise BadInput(f"The command {argv[0]!r} is not an executable file in the image.",
                       hint="Name a program the image has, or give its path in the image.")
    base = box.run(argv, plan.env, patched=False)
    patched = box.run(argv, plan.env, patched=True)
    if patched.code == 0:
        verdict = BOOTS
    elif base.code == 0:
        verdict = FAILS
    else:
        verdict = CANNOT_TELL
    return CommandBoot(tuple(plan.command), verdict, base, patched)


@dataclass(frozen=True)
class BootRequest:
    """A boot, as api.boot() takes it (see its docstring for each field)."""

    queue: str | os.PathLike[str] | None = None
    image: str | None = None
    root: str | os.PathLike[str] | None = None
    overlay: str | os.PathLike[str] | None = None
    platform: str | None = None
    profile: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    memory: int | None = None
    command: tuple[str, ...] = ()
    mount_queue: str | None = None
    progress: Callable[[int, int, str], None] | None = None
    on_probe: Callable[[str], None] | None = None
    importers: int = 5


def boot(req: BootRequest) -> BootReport:
    """The verb of api.boot(): the queue loaded, then boot_queue."""
    from .refs import load_queue, open_ref, pick_ref
    from .restore import image_bytes

    return boot_queue(load_queue(req.queue), image=req.image, root=Path(req.root) if req.root is not None else None,
                      overlay=Path(req.overlay) if req.overlay is not None else None, platform=req.platform,
                      profile=req.profile, timeout=req.timeout, memory=req.memory, command=tuple(req.command),
                      mount_queue=req.mount_queue, progress=req.progress, on_probe=req.on_probe, open_ref=open_ref,
                      pick_ref=pick_ref, image_bytes=lambda q, lock: image_bytes(q, lock, req.platform, req.progress),
                      importers=req.importers)


def boot_queue(q: Queue, *, image: str | None, root: Path | None, overlay: Path | None, platform: str | None, profile: str | None,
               timeout: float, memory: int | None, command: tuple[str, ...], mount_queue: str | None, progress,
               on_probe, open_ref, pick_ref, image_bytes, importers: int = 5) -> BootReport:
    """The verb: resolve the profile, read the bases, apply in memory, probe (see the module docstring)."""
    from .profiles import lock_file, need_pin, resolve

    check_timeout(timeout)
    if importers < 0:
        raise UsageError(f"--importers {importers}: give how many importers to probe per module, 0 or more (0: none).")
    if memory is not None and not 0 < memory < 2**63:  # setrlimit takes a signed 64-bit count
        raise UsageError(f"--memory: {memory} bytes is no limit a probe can be given: give more than 0 and less than 8 EiB "
                         "(e.g. 8G), or no --memory for none.")
    mounts = (_mount_point(q.root, mount_queue),) if mount_queue is not None else ()
    if mount_queue is not None and not command:
        raise UsageError("--mount-queue shows the queue to a command: give one after `--` (imgquilt boot --mount-queue "
                         "/queue -- python3 -m pytest -q /queue/tests).")
    lf = lock_file(q.root)
    chosen = resolve(q, profile, lf)
    need_pin(chosen, lf, image if root is None else root)
    image_env: dict[str, str] | None = None
    cwd = "/"
    if root is not None:
        from ..rootfs.source import RootfsSource

        if image is not None:
            raise UsageError("--root boots that root, --image an image; give one of them.")
        if not root.is_dir():
            raise BadInput(f"Root filesystem {root} does not exist or is not a directory.")
        source: Source = RootfsSource(root)
        result = patched_result(chosen.queue, source, chosen.lock, image_bytes(q.root, chosen.lock))
        plan = BootPlan(root, result, boot_env(None, chosen.env), cwd, timeout, memory, None, command, mounts,
                        _overlay_files(overlay, result), importers)
        return run_boot(plan, ref=f"rootfs:{root}", digest=None, profile=chosen.name, env_shown=chosen.env,
                        on_probe=on_probe)
    from .materialize import materialized

    ref = pick_ref(image, chosen.lock, q.root)
    source = open_ref(ref, platform, root=q.root, progress=progress)
    from ..rootfs.source import RootfsSource

    if isinstance(source, RootfsSource):  # rootfs:DIR (given, or the pin): that root, read only
        return boot_queue(q, image=None, root=source.root, overlay=overlay, platform=platform, profile=profile,
                          timeout=timeout, memory=memory, command=command, mount_queue=mount_queue, progress=progress,
                          on_probe=on_probe, open_ref=open_ref, pick_ref=pick_ref, image_bytes=image_bytes, importers=importers)
    img = getattr(source, "image", None)
    if img is None:
        raise BadInput(f"{ref} is not an image with layers; boot a root filesystem with --root DIR.")
    image_env, cwd, user = config_of(img.config_bytes)
    with materialized(img, progress=progress) as base_root:
        # the series verified on the unpacked tree (it is the image's filesystem): the layers are read
        # once, to unpack them, not a second time to plan (docs/decisions.md)
        result = patched_result(chosen.queue, RootfsSource(base_root, ref=ref), chosen.lock, image_bytes(q.root, chosen.lock))
        plan = BootPlan(base_root, result, boot_env(image_env, chosen.env), cwd, timeout, memory, user_of(user, base_root),
                        command, mounts, _overlay_files(overlay, result), importers)
        return run_boot(plan, ref=ref, digest=img.manifest_digest, profile=chosen.name, env_shown=chosen.env,
                        on_probe=on_probe)


def _overlay_files(overlay: Path | None, result: ApplyResult) -> tuple[Staged, ...] | None:
    """--overlay DIR: the files an overlay (`apply --overlay`) binds, as it binds them; it must hold the
    series' results on this base (else it is another queue's or another base's overlay: refused)."""
    if overlay is None:
        return None
    from ..image.sinks.overlay import read_mounts
    from ..util.regular import read_regular_file

    mounts = read_mounts(overlay)
    staged = tuple(Staged(m.container_path.lstrip("/"), read_regular_file(m.host_path) or b"", m.mode) for m in mounts)
    have = {s.rel: s.data for s in staged}
    wrong = [f.resolved for f in result.files if f.changed and f.target.path != RECORD_PATH and f.final is not None
             and not f.link and have.get(f.resolved) != f.final]
    if wrong:
        raise BadInput(f"The overlay {overlay} does not hold the series' result on this base for {len(wrong)} file(s): "
                       + ", ".join(wrong[:5]) + (" ..." if len(wrong) > 5 else "") + ".",
                       hint="Write it again with `imgquilt apply --overlay DIR` (with the same --image or --root), then boot it.")
    return staged


def config_of(config: bytes) -> tuple[dict[str, str] | None, str, str]:
    """The image config's Env, WorkingDir and User."""
    try:
        cfg = (json.loads(config).get("config") or {})
    except (ValueError, AttributeError):
        return None, "/", ""
    env = cfg.get("Env") if isinstance(cfg.get("Env"), list) else []
    wd = cfg.get("WorkingDir")
    user = cfg.get("User")
    return (dict(e.partition("=")[::2] for e in env if isinstance(e, str)) or None,
            wd if isinstance(wd, str) and wd.startswith("/") else "/", user if isinstance(user, str) else "")


def user_of(spec: str, root: Path) -> tuple[int, int] | None:
    """The image's `User` (uid, name, uid:gid, name:group) as numbers, names looked up in the root's
    /etc/passwd and /etc/group as a container runtime does; None for root or none given."""
    if not spec:
        return None
    name, _, group = spec.partition(":")

    def lookup(table: str, key: str) -> tuple[int, int] | None:
        if key.isdigit():
            return int(key), -1
        for line in _read_in_root(root, f"etc/{table}").splitlines():
            fields = line.split(":")
            if len(fields) >= 4 and fields[0] == key and fields[2].isdigit():
                return int(fields[2]), int(fields[3]) if fields[3].isdigit() else -1
        raise BadInput(f"The image's User {spec!r}: no {key!r} in the image's /etc/{table}.",
                       hint="Set the image's User to a uid (e.g. 1000:1000), or add the user to its /etc/passwd.")

    found = lookup("passwd", name)
    assert found is not None
    uid, gid = found[0], found[1] if not name.isdigit() else 0
    if group:
        g = lookup("group", group)
        assert g is not None
        gid = g[0]
    gid = max(gid, 0)
    return None if uid == 0 and gid == 0 else (uid, gid)


def _read_in_root(root: Path, rel: str) -> str:
    """A small text file of the root, its links resolved inside the root ("" when absent)."""
    import os

    from ..fs.resolve import resolve
    from ..rootfs.dirfd import open_root
    from ..rootfs.source import RootfsSource

    fd = open_root(root)
    try:
        r = resolve(rel, RootfsSource._lookup(fd))
    except BadInput:
        return ""
    finally:
        os.close(fd)
    if r.node is None or r.node.kind != "file":
        return ""
    from ..util.regular import read_regular_file

    return (read_regular_file(Path(root) / r.resolved) or b"")[: 1 << 20].decode("utf-8", "replace")


def _mount_point(queue_root: Path, where: str) -> tuple[Path, str]:
    from ..fs.paths import check_member_path

    if not where.startswith("/") or where.rstrip("/") == "":
        raise UsageError(f"--mount-queue {where!r}: give an absolute path inside the image other than / (e.g. /queue).")
    return queue_root.resolve(), check_member_path(where.strip("/"), what="--mount-queue path")


def boot_env(image_env: Mapping[str, str] | None, profile_env: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The profile's env over the image's (an image with none: a PATH and HOME as a shell would have)."""
    env = dict(image_env) if image_env else {"PATH": DEFAULT_PATH, "HOME": "/root"}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(dict(profile_env))
    return env


MAX_TIMEOUT = 7 * 24 * 3600  # a week: poll() takes the time left in milliseconds as a C int (24.8 days)


def check_timeout(timeout: float) -> float:
    if not 0 < timeout <= MAX_TIMEOUT:
        raise UsageError(f"--timeout {timeout:g}: the time limit of a probe must be more than 0 seconds and at most "
                         f"{MAX_TIMEOUT} (a week).")
    return timeout


__all__ = ["BOOTS", "CANNOT_TELL", "FAILS", "BootPlan", "BootReport", "Probe", "PatchBoot", "patched_result", "run_boot",
           "boot_env", "check_timeout"]
