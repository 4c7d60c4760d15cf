"""A small Python base image made offline from the interpreter running the tests, for building the
repository's Containerfile with buildah where no registry is reachable.

It holds this interpreter (the real one under a virtualenv) and its standard library, imgquilt's runtime
dependencies and pip as this environment has them installed, /bin/sh, and every shared library those
link against (ldd), each at its own path: what `python3 -m pip install --no-index imgquilt-*.whl`
needs, and what imgquilt needs to run. Committed to the containers-storage store the environment
names (the test's private one, conftest.own_store) as `localhost/imgquilt-test-python:KEY` (one KEY
per interpreter and set of dependency versions), and reused while that store lives.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages", "dist-packages",
                "__pycache__", "pydoc_data", "unittest"}


def _run(*args: str, **kw) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw).stdout


def runtime_dists() -> list[metadata.Distribution]:
    """imgquilt's dependencies (recursively, no extras) and pip, as installed here."""
    seen: dict[str, metadata.Distribution] = {}
    todo = ["pip"] + [_req_name(r) for r in metadata.requires("imgquilt") or [] if "extra ==" not in r]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        dist = metadata.distribution(name)
        seen[key] = dist
        todo += [_req_name(r) for r in dist.requires or [] if "extra ==" not in r and _applies(r)]
    return list(seen.values())


def _req_name(req: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", req.strip(), maxsplit=1)[0]


def _applies(req: str) -> bool:
    marker = req.partition(";")[2].strip()
    if not marker:
        return True
    try:
        from packaging.markers import Marker

        return Marker(marker).evaluate()
    except Exception:  # noqa: BLE001 - a marker this environment cannot judge: take the dependency
        return True


def image_key() -> str:
    h = hashlib.sha256(os.path.realpath(sys.executable).encode() + b"\0v2")
    for d in sorted(runtime_dists(), key=lambda d: d.metadata["Name"].lower()):
        h.update(f"{d.metadata['Name']}=={d.version}\n".encode())
    return h.hexdigest()[:16]


def _copy(src: Path, root: Path) -> None:
    dest = root / str(src).lstrip("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        target = os.readlink(src)
        os.symlink(target, dest)
        _copy(Path(os.path.normpath(src.parent / target)), root)
    else:
        shutil.copy2(src, dest)


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _libs(elf: Path) -> list[Path]:
    out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True).stdout
    return [Path(m) for m in re.findall(r"(/\S+)\s+\(0x", out)]


def python_rootfs(root: Path) -> None:
    """Fill `root` as the module docstring says."""
    exe = Path(os.path.realpath(sys.executable))
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix, "installed_base": sys.base_prefix}
    stdlib = Path(sysconfig.get_path("stdlib", vars=base))
    dynload = Path(sysconfig.get_path("platstdlib", vars=base)) / "lib-dynload"
    # where pip installs for this interpreter outside a virtualenv (Debian: /usr/local/lib/pythonX.Y/dist-packages)
    site = Path(_run(str(exe), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    elves = [exe]
    _copy(exe, root)
    for dirpath, dirnames, filenames in os.walk(stdlib):
        rel = Path(dirpath).relative_to(stdlib)
        dirnames[:] = [d for d in dirnames if d not in _SKIP_STDLIB and not (rel == Path(".") and d.startswith("config-"))]
        for name in filenames:
            _copy(Path(dirpath) / name, root)
    if dynload.is_dir():
        for p in dynload.iterdir():
            _copy(p, root)
            elves.append(p)
    bindir = root / "usr/local/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for dist in runtime_dists():
        top = Path(dist.locate_file(""))
        for f in dist.files or []:
            src = Path(os.path.normpath(top / f))
            if not src.is_file() or "__pycache__" in src.parts:
                continue
            if src.is_relative_to(top):
                dest = root / str(site).lstrip("/") / src.relative_to(top)
            elif _is_elf(src):  # a binary a dependency installs in bin/ (ruff)
                dest = bindir / src.name
            else:
                continue  # a console script of this environment: pip writes the image's own
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            if _is_elf(dest):
                elves.append(src)
    (root / "bin").mkdir(exist_ok=True)
    for tool in ("sh", "rm", "ls", "cat"):  # what a RUN line and the test use, as a real base has them
        found = Path(os.path.realpath(shutil.which(tool) or f"/bin/{tool}"))
        shutil.copy2(found, root / "bin" / tool)
        elves.append(found)
    for elf in elves:
        for lib in _libs(elf):
            _copy(lib, root)
            _copy(Path(os.path.realpath(lib)), root)
    for name in ("python3", "python"):
        link = bindir / name
        if not link.exists():
            os.symlink(exe, link)
    for d in ("tmp", "root", "etc"):
        (root / d).mkdir(exist_ok=True)
    os.chmod(root / "tmp", 0o1777)


def _scripts_dir() -> str:
    exe = os.path.realpath(sys.executable)
    return _run(exe, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['scripts'])").strip()


def base_image(work: Path) -> str:
    """The image, made once: its reference in containers-storage."""
    name = f"localhost/imgquilt-test-python:{image_key()}"
    if subprocess.run(["podman", "image", "exists", name]).returncode == 0:
        return name
    root = work / "pybase"
    python_rootfs(root)
    ctr = _run("buildah", "from", "scratch").strip()
    try:
        _run("buildah", "copy", ctr, str(root), "/")
        # pip puts console scripts where this interpreter keeps them (/usr/local/bin for Debian's)
        _run("buildah", "config", "--env", f"PATH={_scripts_dir()}:/usr/local/bin:/usr/bin:/bin", "--env", "HOME=/root", ctr)
        _run("buildah", "commit", "--quiet", ctr, name)
    finally:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
    return name
