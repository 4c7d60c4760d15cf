"""Write file changes as bind-mountable files: DIR/<resolved path> plus DIR/mounts.tsv.

    podman run $(imgquilt overlay-args DIR --format podman) IMAGE

mounts.tsv has one line per file, sorted by container path: host path (absolute, inside DIR),
a TAB, the container path ("/usr/bin/which"), a TAB, the mode in octal ("0755"). Files keep
their mode, and their uid/gid when written as root. A deletion cannot be expressed as a bind
mount, and a bind mount cannot place a symlink (the kernel mounts what it points to), so a series
that deletes a file or leaves a symlink is refused before anything is written.

The directory is built beside DIR and renamed into place. An existing DIR is replaced only when
it is empty or holds an earlier overlay and nothing else (a valid mounts.tsv, env.list, the files
mounts.tsv lists and the directories on their way); anything else is refused.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...errors import UsageError, control_character
from ...fs.paths import check_member_path
from ...fs.types import FileChange
from ...util.atomic import write_new_file
from ...util.names import ENV_KEY
from .output_file import output_dir

MOUNTS_FILE = "mounts.tsv"
ENV_FILE = "env.list"  # the profile's env defaults, KEY=VALUE a line: docker's and podman's --env-file format


@dataclass(frozen=True)
class Mount:
    """One bind mount: a file under the overlay directory onto its path in the container."""

    host_path: Path
    container_path: str  # absolute, "/usr/bin/which"
    mode: int

    def line(self) -> str:
        return f"{self.host_path}\t{self.container_path}\t{self.mode:04o}\n"


@dataclass(frozen=True)
class OverlayInfo:
    """What write_overlay wrote."""

    path: Path
    mounts_file: Path
    mounts: tuple[Mount, ...]
    env_file: Path | None = None  # DIR/env.list when the apply declares environment defaults


def check_overlay(changes: Sequence[FileChange]) -> None:
    """Refuse changes an overlay cannot express (a deletion, a symlink), before any output is written."""
    links = [f for f in changes if f.link and not f.deleted]
    if links:
        names = ", ".join(f"{f.path} -> {f.data.decode('utf-8', 'backslashreplace')}" for f in links if f.data is not None)
        raise UsageError(
            f"The series leaves symlinks ({names}); a bind mount cannot put a symlink in place (the kernel "
            "mounts what the link points to), so no overlay was written.",
            hint="Use --layer, --output-image or --root for a series that creates or changes symlinks.",
        )
    deleted = [f for f in changes if f.deleted]
    if deleted:
        names = ", ".join(f"{f.path} (resolved: {f.resolved})" if f.path != f.resolved else f.resolved for f in deleted)
        raise UsageError(
            f"The series deletes {names}; a deletion cannot be bind-mounted, so no overlay was written.",
            hint="Use --layer or --output-image for a series that deletes files.",
        )


def _plan(changes: Sequence[FileChange], final_dir: Path) -> list[tuple[str, bytes, int, int, int]]:
    """(resolved, data, mode, uid, gid) per file, checked before anything is written."""
    check_overlay(changes)
    out = []
    for f in changes:
        if f.data is None:
            continue
        resolved = check_member_path(f.resolved, what="resolved path")
        if resolved in (MOUNTS_FILE, ENV_FILE):
            raise UsageError(f"A patched file is named {resolved!r} at the image root; it would clash with the overlay's list.")
        host = str(final_dir / resolved)
        if any(c in host for c in "\t\n\r"):
            raise UsageError(f"Cannot list {resolved!r} in {MOUNTS_FILE}: its path holds a tab or a newline.")
        out.append((resolved, f.data, f.mode & 0o7777, f.uid, f.gid))
    return sorted(out)


def _is_replaceable(dest: Path) -> bool:
    if not dest.exists():
        return True
    if not dest.is_dir() or dest.is_symlink():
        return False
    return not any(dest.iterdir()) or _holds_only_an_overlay(dest)


def _holds_only_an_overlay(dest: Path) -> bool:
    """Whether everything in `dest` is what an earlier overlay wrote: a valid mounts.tsv, env.list, the
    files mounts.tsv lists and the directories on their way. mounts.tsv is not sealed (an overlay may be
    moved or copied), so a file of that name is no licence to remove anything else a directory holds."""
    from ...errors import BadInput

    try:
        mounts = read_mounts(dest)
        read_env(dest)
    except (BadInput, OSError):
        return False
    files = {MOUNTS_FILE, ENV_FILE} | {m.container_path.lstrip("/") for m in mounts}
    dirs = {f.rsplit("/", 1)[0] for f in files if "/" in f}
    dirs |= {d.rsplit("/", i)[0] for d in list(dirs) for i in range(1, d.count("/") + 1)}

    def refuse(exc: OSError) -> None:
        raise exc

    try:
        for top, subdirs, names in os.walk(dest, onerror=refuse):  # links are listed, never followed
            rel = os.path.relpath(top, dest)
            prefix = "" if rel == "." else rel + "/"
            for d in subdirs:
                if prefix + d not in dirs or os.path.islink(os.path.join(top, d)):
                    return False
            if any(prefix + n not in files for n in names):
                return False
    except OSError:
        return False
    return True


def check_overlay_destination(dest_dir: Path) -> Path:
    """Refuse a bad `--overlay` directory before anything is computed or written."""
    dest = Path(os.path.abspath(dest_dir))
    if not dest.parent.is_dir():
        raise UsageError(f"Cannot write the overlay {str(dest_dir)!r}: directory {str(dest.parent)!r} does not exist.")
    if not _is_replaceable(dest):
        raise UsageError(
            f"Cannot write the overlay to {str(dest_dir)!r}: it exists and is not an earlier overlay (a valid {MOUNTS_FILE} "
            "and only the files it lists), so replacing it would remove files imgquilt did not write.",
            hint="Name a new or empty directory, or move the files you added out of it.",
        )
    return dest


def write_overlay(changes: Sequence[FileChange], dest_dir: Path, *, hidden: Sequence[str] = (),
                  env: Sequence[tuple[str, str]] = ()) -> OverlayInfo:
    """Write every changed file under `dest_dir` and list them in `dest_dir/mounts.tsv`, atomically.

    `hidden`: resolved paths to cover with an empty file (mode 0644), e.g. stale bytecode. `env`: the
    environment defaults the container must start with (a profile's), written to `dest_dir/env.list`
    in the same step: a bind mount cannot carry them, and a container without its kill switch is
    not the deployment the queue describes."""
    env_text = env_list(env)
    dest = Path(os.path.abspath(dest_dir))
    files = _plan([*changes, *(FileChange(p, p, b"") for p in hidden)], dest)
    check_overlay_destination(dest_dir)
    as_root = os.geteuid() == 0
    with output_dir(dest, failure=f"Cannot write the overlay {str(dest_dir)!r}") as tmp:
        mounts = []
        for resolved, data, mode, uid, gid in files:
            path = tmp / resolved
            path.parent.mkdir(parents=True, exist_ok=True)
            write_new_file(path, data)
            if as_root:
                os.chown(path, uid, gid)
            os.chmod(path, mode)  # after chown, which clears setuid bits
            mounts.append(Mount(dest / resolved, "/" + resolved, mode))
        mounts.sort(key=lambda m: m.container_path)
        (tmp / MOUNTS_FILE).write_text("".join(m.line() for m in mounts))
        if env_text:
            write_new_file(tmp / ENV_FILE, env_text)
    return OverlayInfo(dest, dest / MOUNTS_FILE, tuple(mounts), dest / ENV_FILE if env_text else None)


def env_list(env: Sequence[tuple[str, str]]) -> bytes:
    """env.list's bytes: `KEY=VALUE` lines, sorted by key. A value with a line break or another
    control character cannot be one line of an env file (nor a safe `-e` word): refused."""
    for key, value in env:
        if not ENV_KEY.fullmatch(key) or control_character(value) is not None:
            raise UsageError(f"The environment default {key!r} cannot be written to {ENV_FILE}: its name or value "
                             "holds a character an env file cannot carry.",
                             hint="Set it again with `imgquilt lock --profile NAME --env KEY=VALUE` (a value without control characters).")
    return "".join(f"{k}={v}\n" for k, v in sorted(env)).encode("utf-8", "surrogateescape")


def read_env(overlay: Path) -> tuple[tuple[str, str], ...]:
    """The environment defaults of an overlay (its env.list; none when there is none). Input like
    mounts.tsv: a line that is not KEY=VALUE, or a link in its place, is refused."""
    from ...errors import BadInput
    from ...util.regular import read_regular_file

    root = Path(os.path.realpath(overlay))
    raw = read_regular_file(root / ENV_FILE)
    if raw is None:
        return ()
    out: list[tuple[str, str]] = []
    for n, line in enumerate(raw.decode("utf-8", "surrogateescape").split("\n"), 1):
        if not line:
            continue
        key, eq, value = line.partition("=")
        if not eq or not ENV_KEY.fullmatch(key) or control_character(value) is not None:
            raise BadInput(f"{overlay}/{ENV_FILE} line {n} is not KEY=VALUE ({line[:120]!r}).",
                           hint="Write the overlay again with `imgquilt apply --overlay DIR`.")
        out.append((key, value))
    return tuple(out)


def env_args(env: Sequence[tuple[str, str]]) -> list[str]:
    """`-e KEY=VALUE` for each default (podman and docker take the same)."""
    return [w for k, v in env for w in ("-e", f"{k}={v}")]


# --- mounts.tsv rendered for the tools that mount it (`imgquilt overlay-args`) ------------------------
MOUNT_FORMATS = ("podman", "docker", "k8s")


def read_mounts(overlay: Path) -> tuple[Mount, ...]:
    """The mounts of an overlay directory, each host path taken from where the overlay is now
    (DIR/<container path>: a moved or copied overlay still renders right) and checked to be a regular
    file there; mounts.tsv is input like any other (a line naming `..`, a link or a missing file is refused)."""
    from ...errors import BadInput
    from ...util.regular import read_regular_file

    root = Path(os.path.realpath(overlay))
    raw = read_regular_file(root / MOUNTS_FILE)
    if raw is None:
        raise BadInput(f"{overlay} holds no {MOUNTS_FILE}: it is not an overlay `imgquilt apply --overlay` wrote.",
                       hint="Write one with `imgquilt apply --overlay DIR`.")
    out = []
    for n, line in enumerate(raw.decode("utf-8", "surrogateescape").splitlines(), 1):
        cols = line.split("\t")
        ok = len(cols) == 3 and cols[1].startswith("/") and re.fullmatch(r"[0-7]{3,4}", cols[2]) is not None
        try:
            rel = check_member_path(cols[1].lstrip("/"), what="container path") if ok else ""
        except BadInput:
            ok, rel = False, ""
        host = root / rel
        # no link on the way: the file bound is the one in the overlay
        if not ok or not rel or os.path.realpath(host) != str(host) or not host.is_file():
            raise BadInput(f"{overlay}/{MOUNTS_FILE} line {n} is not a mount of this overlay ({line[:120]!r}).",
                           hint="Write the overlay again with `imgquilt apply --overlay DIR`.")
        out.append(Mount(host, "/" + rel, int(cols[2], 8)))
    return tuple(out)


def mount_args(mounts: Sequence[Mount], fmt: str) -> list[str]:
    """Command-line arguments of `podman run/create` (`-v HOST:CTR:ro`) or `docker run/create`
    (`--mount type=bind,...,readonly`) that bind each file read-only at its path."""
    out: list[str] = []
    for m in mounts:
        host = str(m.host_path)
        if fmt == "podman":
            if ":" in host + m.container_path:
                raise UsageError(f"{host} -> {m.container_path}: a path holding ':' cannot be given to podman's -v.",
                                 hint="Use --format docker (podman create takes --mount too).")
            out += ["-v", f"{host}:{m.container_path}:ro"]
        else:
            if "," in host + m.container_path:
                raise UsageError(f"{host} -> {m.container_path}: a path holding ',' cannot be given to --mount.",
                                 hint="Use --format podman (-v), or move the overlay to a path without commas.")
            out += ["--mount", f"type=bind,source={host},target={m.container_path},readonly"]
    return out


def k8s_volumes(mounts: Sequence[Mount], env: Sequence[tuple[str, str]] = ()) -> dict[str, list[dict]]:
    """A Kubernetes pod's `volumes` (hostPath, type File) and its container's `volumeMounts` (readOnly),
    and, with environment defaults, the container's `env` (name, value)."""
    volumes, mounts_ = [], []
    for k, m in enumerate(mounts):
        name = f"imgquilt-{k}"
        volumes.append({"name": name, "hostPath": {"path": str(m.host_path), "type": "File"}})
        mounts_.append({"name": name, "mountPath": m.container_path, "readOnly": True})
    out: dict[str, list[dict]] = {"volumeMounts": mounts_, "volumes": volumes}
    if env:
        out["env"] = [{"name": k, "value": v} for k, v in env]
    return out
