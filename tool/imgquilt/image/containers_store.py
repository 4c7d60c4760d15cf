"""Which store a `containers-storage:` reference means: the one podman itself uses.

containers/storage keeps one directory tree per graph driver under a graph root (`overlay/`, `vfs/`,
...). When storage.conf names no driver (Debian's does not), each tool picks one on its own: podman
pins the driver of its first run in its database, skopeo takes "the prior driver" it finds on disk. On
a used machine the two can differ, and an image skopeo wrote is then where podman does not look.

So imgquilt asks podman (`podman info`) for its driver, graph root and run root, names them to
skopeo (`containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME`) for reads and writes, and after a write
asks podman whether it sees the image. A reference that carries its own `[...]` store is taken as
written. Without podman, skopeo's default store is used, and described as storage.conf names it.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import BadImage, ImgquiltError, UsageError

NamedBy = Literal["podman", "reference", "storage.conf"]
PODMAN_TIMEOUT = 120  # seconds: a podman waiting on another's lock is said to, not waited on for ever
_DRIVER = re.compile(r"^[a-z][a-z0-9_]*$")
# what skopeo's specifier cannot hold in a path: it splits on `]`, `+` and `:` (options), and `,` (between options)
_UNSPELLABLE = re.compile(r"[\]\[+:,@\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Store:
    """A containers-storage store: its driver (None: whichever the store already holds), graph root, run root."""

    driver: str | None
    graph_root: str | None
    run_root: str | None
    named_by: NamedBy
    config: str | None = None  # the storage.conf read (named_by "storage.conf")

    @property
    def specifier(self) -> str:
        """`[DRIVER@GRAPHROOT+RUNROOT]` as skopeo takes it ('' for the default store)."""
        if self.named_by == "storage.conf" or not self.graph_root:
            return ""
        run = f"+{self.run_root}" if self.run_root else ""
        return f"[{self.driver}@{self.graph_root}{run}]" if self.driver else f"[{self.graph_root}{run}]"

    def describe(self) -> str:
        driver = self.driver or "none set (the one the store already holds, else overlay)"
        where = {"podman": "podman's store, as `podman info` shows it",
                 "reference": "the store the reference names",
                 "storage.conf": f"skopeo's default store, as {self.config or 'storage.conf'} names it (podman is not installed)"}
        return f"driver {driver}, graph root {self.graph_root}, run root {self.run_root} ({where[self.named_by]})"

    def json(self) -> dict[str, Any]:
        return {"driver": self.driver, "graph_root": self.graph_root, "run_root": self.run_root, "named_by": self.named_by}


@dataclass(frozen=True)
class StorageRef:
    """A `containers-storage:` reference resolved to a store: what skopeo is given, and what podman takes."""

    name: str  # NAME[:TAG] (or @ID) without a store specifier: what `podman image inspect` takes
    store: Store
    skopeo_ref: str


def split_specifier(rest: str) -> tuple[str | None, str]:
    """`[SPEC]NAME` -> (SPEC, NAME); a reference without one -> (None, rest)."""
    if rest.startswith("["):
        spec, sep, name = rest[1:].partition("]")
        if sep:
            return spec, name
    return None, rest


def parse_specifier(spec: str, *, whole: str, error: type[ImgquiltError] = UsageError) -> Store:
    """`DRIVER@GRAPHROOT[+RUNROOT]` or `GRAPHROOT[+RUNROOT]`: absolute, plain paths; no options."""
    driver, at, roots = spec.partition("@") if "@" in spec else (None, "", spec)
    graph, _, run = roots.partition("+")
    problem = None
    if at and not _DRIVER.match(driver or ""):
        problem = f"{driver!r} is no storage driver name (overlay, vfs, btrfs, zfs, ...)"
    for path in (graph, run):
        if problem is None and path:
            problem = path_problem(path)
    if problem is None and not graph:
        problem = "it names no graph root"
    if problem is not None:
        raise error(f"containers-storage:{whole} names no store imgquilt takes: {problem}.",
                         hint="Spell the store as [DRIVER@GRAPHROOT+RUNROOT] with absolute paths (no options), "
                              "or leave it out to use podman's store.")
    return Store(driver or None, graph, run or None, "reference")


def path_problem(path: str) -> str | None:
    """Why `path` cannot be a graph or run root named to skopeo, or None."""
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    if ".." in path.split("/"):
        return f"{path!r} holds a `..` component"
    bad = _UNSPELLABLE.search(path)
    if bad:
        return f"{path!r} holds {bad.group()!r}, which skopeo's store specifier cannot carry"
    return None


def _env_key() -> tuple[str | None, ...]:
    names = ("PATH", "CONTAINERS_STORAGE_CONF", "CONTAINERS_CONF", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
             "XDG_RUNTIME_DIR", "HOME", "CONTAINER_HOST", "CONTAINER_CONNECTION")
    return tuple(os.environ.get(n) for n in names)


def podman() -> str | None:
    return shutil.which("podman")


def podman_store() -> Store | None:
    """podman's store as `podman info` shows it (asked once per environment), or None without podman."""
    return _podman_store(_env_key())


@functools.lru_cache(maxsize=4)
def _podman_store(_key: tuple[str | None, ...]) -> Store | None:
    exe = podman()
    if exe is None:
        return None
    store = ask_podman(exe)
    for path in (store.graph_root, store.run_root):
        problem = path_problem(path or "")
        if problem is not None:
            raise BadImage(f"podman's store cannot be named to skopeo: {problem}.",
                           hint="Write oci-archive:FILE instead and `podman load -i FILE`, or name another store: "
                                "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME.")
    return store


def ask_podman(exe: str) -> Store:
    from .skopeo_text import skopeo_message

    try:
        proc = subprocess.run([exe, "info", "--format", "json"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PODMAN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise BadImage(f"`podman info` did not answer in {PODMAN_TIMEOUT} s (another podman holding its store's lock?).",
                       hint="Run `podman info` to see what it waits for, or name the store yourself: "
                            "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME.") from None
    try:
        info = json.loads(proc.stdout) if proc.returncode == 0 else None
        store = info["store"] if isinstance(info, dict) else None
        driver, graph, run = store["graphDriverName"], store["graphRoot"], store["runRoot"]  # type: ignore[index]
        remote = bool((info.get("host") or {}).get("serviceIsRemote"))  # type: ignore[union-attr]
    except (ValueError, KeyError, TypeError, AttributeError):
        said = skopeo_message(proc.stderr) or f"exit status {proc.returncode}"
        raise BadImage(f"podman is installed but `podman info` did not say where its store is: {said}.",
                       hint="Fix podman (run `podman info`), or name the store yourself: "
                            "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME.") from None
    if remote:
        raise BadImage("podman talks to a remote service (podman machine, CONTAINER_HOST): its store is not on this "
                       "machine's filesystem, so skopeo cannot write or read it.",
                       hint="Write oci-archive:FILE and `podman load -i FILE`, or save it with `podman save` and read that.")
    if not all(isinstance(x, str) and x for x in (driver, graph, run)):
        raise BadImage("`podman info` named no driver, graph root or run root for its store.",
                       hint="Name the store yourself: containers-storage:[DRIVER@GRAPHROOT+RUNROOT]NAME.")
    return Store(driver, graph, run, "podman")


def default_store() -> Store:
    """skopeo's default store as storage.conf names it (no podman to ask): what is reported, not what decides."""
    import tomllib

    rootless = os.geteuid() != 0
    home = Path(os.environ.get("HOME") or Path.home())
    user_conf = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "containers/storage.conf"
    system = next((p for p in (Path("/etc/containers/storage.conf"), Path("/usr/share/containers/storage.conf")) if p.is_file()), None)
    conf = Path(os.environ["CONTAINERS_STORAGE_CONF"]) if os.environ.get("CONTAINERS_STORAGE_CONF") else \
        user_conf if rootless and user_conf.is_file() else system

    def table(path: Path | None) -> dict[str, Any]:
        try:
            return tomllib.loads(path.read_text()).get("storage") or {} if path is not None else {}
        except (OSError, ValueError, UnicodeDecodeError):
            return {}

    got = table(conf)
    graph, run = got.get("graphroot"), got.get("runroot")
    if rootless and conf == system:  # the system file's graph root is root's; a user's is rootless_storage_path
        graph = got.get("rootless_storage_path")
        run = None
    if rootless:
        data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
        graph = graph or str(data / "containers/storage")
        run = run or f"{os.environ.get('XDG_RUNTIME_DIR') or f'/run/user/{os.geteuid()}'}/containers"
    driver = got.get("driver") or None
    return Store(driver if isinstance(driver, str) else None, str(graph or "/var/lib/containers/storage"),
                 str(run or "/run/containers/storage"), "storage.conf", str(conf) if conf is not None else None)


def resolve(rest: str, *, error: type[ImgquiltError] = UsageError) -> StorageRef:
    """The store `containers-storage:rest` means: its own specifier, else podman's, else skopeo's default."""
    spec, name = split_specifier(rest)
    if spec is not None:
        return StorageRef(name, parse_specifier(spec, whole=rest, error=error), f"containers-storage:{rest}")
    store = podman_store()
    if store is None:
        return StorageRef(name, default_store(), f"containers-storage:{rest}")
    return StorageRef(name, store, f"containers-storage:{store.specifier}{name}")


def check_write_store(ref: StorageRef) -> None:
    """Refuse, before any work, a named store that is podman's graph root under another driver: podman
    would never list what is written there (the trap this module exists for)."""
    if ref.store.named_by != "reference" or podman() is None:
        return
    try:
        theirs = podman_store()
    except BadImage:
        return  # the user named the store; a podman that cannot answer has no say in it
    if theirs is None or theirs.graph_root != ref.store.graph_root or ref.store.driver in (None, theirs.driver):
        return
    raise BadImage(f"containers-storage:[{ref.store.driver}@{ref.store.graph_root}...] is podman's graph root under the "
                   f"{ref.store.driver} driver, but podman uses the {theirs.driver} driver there: podman would not list "
                   "the image.", hint=f"Leave the store out (containers-storage:{ref.name}) to write where podman looks, "
                                      f"or name podman's driver: [{theirs.driver}@{theirs.graph_root}+{theirs.run_root}].")


def podman_image_id(name: str) -> str | None:
    """The ID podman shows for `name` in its store, or None when it sees no such image."""
    exe = podman()
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "image", "inspect", "--format", "{{.Id}}", name], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=PODMAN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None
