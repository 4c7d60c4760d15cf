"""The ways a sandbox is made, tried in order: `unshare` (util-linux: new user, mount, pid and network
namespaces, then sandbox_child.py builds the root), `bwrap` (bubblewrap: the same namespaces, the
mounts made by bwrap, also where it is installed setuid), `podman` (`podman run --network none
--read-only --rootfs ROOT:O`). IMGQUILT_SANDBOX names one or a comma-separated order of them
(default `auto`: all three in that order). Each is tried once per process with an empty program;
the first that works is used, and when none does, SandboxUnavailable names each one tried and why it
failed. Each `argv_*` gives the command line of one run from the run's spec (the same spec
sandbox_child.py takes).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import SandboxUnavailable, UsageError

WAYS = ("unshare", "bwrap", "podman")
_tried: dict[tuple[str, str], tuple[str | None, tuple[tuple[str, str], ...]]] = {}


def wanted() -> tuple[str, ...]:
    from ..settings import current

    raw = (current().of("IMGQUILT_SANDBOX") or "auto").strip()
    if raw in ("", "auto"):
        return WAYS
    names = tuple(x.strip() for x in raw.split(",") if x.strip())
    bad = [n for n in names if n not in WAYS]
    if bad or not names:
        raise UsageError(f"IMGQUILT_SANDBOX={raw!r}: expected auto, or one or more of {', '.join(WAYS)} (comma-separated).")
    return names


def choose() -> str:
    """The first way that works (memoized per PATH and setting); SandboxUnavailable naming each tried."""
    names = wanted()
    key = (os.environ.get("PATH", ""), ",".join(names))
    if key not in _tried:
        failed: list[tuple[str, str]] = []
        found = None
        for name in names:
            why = TRY[name]()
            if why is None:
                found = name
                break
            failed.append((name, why))
        _tried[key] = (found, tuple(failed))
    found, failed = _tried[key]
    if found is None:
        said = "; ".join(f"{DESCRIBED[n]}: {why}" for n, why in failed)
        raise SandboxUnavailable(
            f"No sandbox to run the image's Python in: tried {said}. Nothing was run.",
            hint="Run where unprivileged user namespaces are allowed (sysctl kernel.unprivileged_userns_clone=1, "
                 "user.max_user_namespaces > 0; AppArmor's kernel.apparmor_restrict_unprivileged_userns=0), or install "
                 "bubblewrap (setuid where namespaces are off) or a podman that can run containers here; "
                 "IMGQUILT_SANDBOX picks one (docs/boot.md).")
    return found


DESCRIBED = {"unshare": "unshare(1) with user, mount, pid and network namespaces", "bwrap": "bubblewrap (bwrap)",
             "podman": "podman run --network none --read-only --rootfs"}


def _ran(argv: list[str]) -> str | None:
    """None when `argv` exits 0, else why not (its last line of stderr)."""
    try:
        r = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]} could not run ({exc})"
    if r.returncode != 0:
        lines = r.stderr.decode("utf-8", "replace").strip().splitlines()
        return (lines or [f"exit {r.returncode}"])[-1].strip()
    return None


def unshare_argv() -> list[str]:
    return ["unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--kill-child"]


def _try_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not on PATH (util-linux)"
    return _ran([*unshare_argv(), "true"])


def _static_root() -> tempfile.TemporaryDirectory:
    """A root holding one static program (Debian's ldconfig is static-pie), to try bwrap and podman on
    without the host's filesystem."""
    tmp = tempfile.TemporaryDirectory(prefix="imgquilt-sandbox-try-")
    for cand in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.isfile(cand):
            shutil.copy(cand, os.path.join(tmp.name, "probe"))
            break
    return tmp


def _try_bwrap() -> str | None:
    if shutil.which("bwrap") is None:
        return "bwrap is not on PATH (Debian package bubblewrap)"
    with _static_root() as tmp:
        return _ran(["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", tmp, "/", "/probe", "--version"])


def _try_podman() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not on PATH"
    with _static_root() as tmp:
        return _ran(["podman", "run", "--rm", "--network", "none", "--read-only", "--rootfs", f"{tmp}:O", "/probe", "--version"])


TRY = {"unshare": _try_unshare, "bwrap": _try_bwrap, "podman": _try_podman}


def bwrap_has_overlay() -> bool:
    """bubblewrap 0.9 and later can overlay directories (--overlay-src, --ro-overlay)."""
    r = subprocess.run(["bwrap", "--help"], capture_output=True)
    return b"--overlay-src" in r.stdout + r.stderr


def argv_bwrap(spec: dict, root: Path, files: Path) -> list[str]:
    """bubblewrap: the root read only at /, the patched files bound over it, a tmpfs /tmp, its own /dev
    and /proc, the image's user and working directory; env is passed as the process environment."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", str(root), "/"]
    for lowers, rel in spec["overlays"]:
        if not bwrap_has_overlay():
            raise SandboxUnavailable(
                f"bubblewrap cannot show the new files under /{rel} over the root: it has no --overlay-src (bubblewrap "
                "0.9 and later have it).",
                hint="Use unshare or podman there (IMGQUILT_SANDBOX), or a newer bubblewrap; see docs/boot.md.")
        for low in lowers:
            argv += ["--overlay-src", low]
        argv += ["--overlay-src", str(root / rel) if rel else str(root), "--ro-overlay", "/" + rel]
    for src, rel in spec["binds"]:
        argv += ["--ro-bind", src, "/" + rel]
    if (root / "tmp").is_dir():
        argv += ["--size", str(spec["tmp_bytes"]), "--tmpfs", "/tmp"]
    if (root / "dev").is_dir():
        argv += ["--dev", "/dev"]
    if (root / "proc").is_dir():
        argv += ["--proc", "/proc"]
    if spec.get("user"):
        argv += ["--uid", str(spec["user"][0]), "--gid", str(spec["user"][1])]
    argv += ["--chdir", spec.get("cwd") or "/", "--cap-drop", "ALL", "--", *spec["argv"]]
    return argv


def argv_podman(spec: dict, root: Path, files: list[tuple[str, str]], timeout: float) -> list[str]:
    """podman: the root as an overlay rootfs (`:O`, so the mount points it makes never touch the root),
    read only, no network; each patched or new file (`files`: host path, path in the root) and each
    --mount-queue directory bound read only at its path."""
    argv = ["podman", "run", "--rm", "-i", "--network", "none", "--read-only", "--tmpfs", "/tmp", "--workdir", spec.get("cwd") or "/", "--timeout", str(max(1, int(timeout) + 1)),
            "--cap-drop", "all", "--security-opt", "no-new-privileges"]
    for src, rel in files:
        argv += ["--mount", f"type=bind,source={src},destination=/{rel},ro=true"]
    if spec.get("user"):
        argv += ["--user", f"{spec['user'][0]}:{spec['user'][1]}"]
    if spec.get("memory"):
        argv += ["--memory", str(spec["memory"])]
    for k, v in spec["env"].items():
        argv += ["--env", f"{k}={v}"]
    return [*argv, "--rootfs", f"{root}:O", *spec["argv"]]
