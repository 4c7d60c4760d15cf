"""The repository's Containerfile (the imgquilt image docs/fleet.md runs) builds with buildah, offline,
from a wheel of this checkout built here (`pip wheel`), and the image it makes runs imgquilt on its queue.

The base is a small Python image made from this very interpreter (tests/support/pybase.py): no registry is
reached. buildah runs the RUN step with chroot isolation (an OCI runtime cannot run here), pip installs
with --no-index, and the image is checked by running imgquilt in it (`buildah run`).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from support.pybase import base_image
from support.qtools import REPO

pytestmark = pytest.mark.skipif(shutil.which("buildah") is None or shutil.which("podman") is None,
                                reason="buildah and podman (Debian packages, .ci/install-tools)")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(args)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def test_the_containerfile_builds_offline_from_the_repository_wheel_and_runs_imgquilt_on_its_queue(tmp_path: Path, own_store) -> None:
    # own_store: buildah and podman share a private store whose driver is named, so the image buildah
    # commits is the one podman inspects, whichever tool touched the machine's own store first
    # the build context as a clone has it: the Containerfile, its ignore file and the queue ...
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for name in ("Containerfile", ".containerignore", "series", "targets.lock"):
        shutil.copy2(REPO / name, ctx / name)
    shutil.copytree(REPO / "patches", ctx / "patches")
    # ... and the wheel, built from a copy of the sources (a build leaves build/ and *.egg-info behind)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "tool", src / "tool", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", str(ctx / "dist"), str(src))
    (wheel,) = (ctx / "dist").glob("imgquilt-*.whl")
    (ctx / "dist" / "stray.txt").write_text("the context holds only what .containerignore lets in\n")
    (ctx / "notes.txt").write_text("not in the image\n")

    base = base_image(tmp_path)
    tag = f"localhost/imgquilt-queue-test:{uuid.uuid4().hex[:12]}"
    ctr = None
    try:
        run("buildah", "bud", "--quiet", "--pull-never", "--isolation", "chroot", "--build-arg", f"BASE={base}",
            "--build-arg", "PIP_OPTIONS=--no-index", "-t", tag, "-f", "Containerfile", ".", cwd=ctx)
        cfg = run("podman", "image", "inspect", tag, "--format", "{{json .Config.Entrypoint}} {{.Config.WorkingDir}}").stdout
        assert cfg.split() == ['["imgquilt"]', "/queue"]
        ctr = run("buildah", "from", "--pull-never", tag).stdout.strip()

        def inside(*args: str) -> str:
            return run("buildah", "run", "--isolation", "chroot", ctr, "--", *args).stdout

        assert inside("imgquilt", "--version").strip() == f"imgquilt {_version()}"
        # the queue at /queue is the repository's, and sound: the lock is its own
        assert inside("sh", "-c", "cd /queue && imgquilt check").strip().startswith("The queue is sound: 6 patch(es)")
        assert inside("sh", "-c", "cd /queue && cat series") == (REPO / "series").read_text()
        installed = inside("python3", "-m", "pip", "show", "imgquilt")
        assert "Version: " + _version() in installed
        listing = inside("sh", "-c", "ls /queue; ls /tmp")
        assert "notes.txt" not in listing and "stray.txt" not in listing and wheel.name not in listing
    finally:
        if ctr:
            subprocess.run(["buildah", "rm", ctr], capture_output=True)
        subprocess.run(["buildah", "rmi", tag], capture_output=True)


def _version() -> str:
    from imgquilt import __version__

    return __version__
