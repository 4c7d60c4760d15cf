"""The install story works from a clone as docs/install.md writes it, and `make demo` says where the
command is. The page's `sh` blocks run as written, in one shell, with IMGQUILT_GIT naming a git
repository of this checkout (its files as they are now) and HOME a scratch directory."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from support.qtools import REPO, TOOL, copy_demo_queue


def clone_source(tmp: Path) -> Path:
    """A git repository holding this checkout's files as they are (committed or not): what a clone gets."""
    src = tmp / "imgquilt-git"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        rel = Path(os.fsdecode(name))
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org")
    subprocess.run("git init -q && git add -A && git commit -qm snapshot", shell=True, cwd=src, env=env, check=True)
    return src


def test_the_install_page_runs_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"^```sh\n(.*?)^```", (REPO / "docs/install.md").read_text(), re.S | re.M)
    assert len(blocks) == 2 and "pip install ." in blocks[0] and "pipx install ." in blocks[1]
    home = tmp_path / "home"
    home.mkdir()
    # pipx itself, as `pip install --user pipx` would give it; pip's own download cache is the user's
    tools = tmp_path / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache/pip")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMGQUILT_", "PIPX_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(HOME=str(home), PIP_CACHE_DIR=cache, IMGQUILT_GIT=str(clone_source(tmp_path)),
               PATH=os.pathsep.join([str(home / ".local/bin"), "/usr/local/bin", "/usr/bin", "/bin", str(tools / "bin")]))
    subprocess.run([str(tools / "bin/pip"), "install", "-q", "pipx"], env=env, check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    # the first block, then the second from the same clone: one shell, as a user would type them
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + blocks[0] + "\nrm ~/.local/bin/imgquilt\n" + blocks[1]],
                       cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from imgquilt import __version__

    assert r.stdout.count(f"imgquilt {__version__}\n") == 2
    # each installed command is a real install, not this checkout: it runs with no PYTHONPATH from any directory
    venv_cmd = home / ".local/share/imgquilt/venv/bin/imgquilt"
    pipx_cmd = home / ".local/bin/imgquilt"
    for cmd in (venv_cmd, pipx_cmd):
        out = subprocess.run([str(cmd), "--version"], cwd="/", env=env, capture_output=True, text=True, check=True).stdout
        assert out == f"imgquilt {__version__}\n", cmd
    assert str(TOOL) not in subprocess.run([str(venv_cmd.parent / "python"), "-c", "import imgquilt; print(imgquilt.__file__)"],
                                           env=env, capture_output=True, text=True, check=True).stdout


def test_no_doc_names_a_tag_or_a_package_that_does_not_exist() -> None:
    pages = [REPO / "README.md", REPO / ".pre-commit-hooks.yaml", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "examples").rglob("*.yml")), *sorted((REPO / "examples").rglob("Dockerfile*"))]
    for page in pages:
        text = page.read_text()
        assert not re.search(r"rev:\s*v\d|imgquilt[^\s]*@v\d|IMGQUILT_VERSION", text), page.name  # no release tag exists
        assert not re.search(r"pip install (--user )?[\"']?imgquilt(?! @)", text), page.name  # nor a package on an index


def test_make_demo_says_where_the_command_is_and_writes_no_escape_codes_into_a_pipe(tmp_path: Path) -> None:
    q = copy_demo_queue(tmp_path / "clone")
    cmd = tmp_path / "bin/imgquilt"
    cmd.parent.mkdir()
    cmd.write_text(f'#!/bin/sh\nPYTHONPATH="{TOOL}" exec "{sys.executable}" -m imgquilt "$@"\n')
    cmd.chmod(0o755)
    env = dict(os.environ, HOME=str(tmp_path / "home"), PYTHON=sys.executable)
    env.pop("IMGQUILT_QUEUE", None)
    r = subprocess.run(["bash", "examples/demo.sh", str(cmd), str(tmp_path / "out")], cwd=q, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    assert b"\x1b" not in r.stdout
    assert r.stdout.decode().rstrip().endswith(f"The imgquilt command: {cmd} (run it by that path, or put imgquilt on "
                                               "PATH as docs/install.md shows)")


def test_make_demo_writes_only_below_out_and_the_queues_state(tmp_path: Path) -> None:
    """README: the demo writes only below out/ and .imgquilt/: imgquilt's shared cache and its key
    included (not ~/.cache/imgquilt or ~/.local/state/imgquilt), and it leaves no temporary file."""
    q = copy_demo_queue(tmp_path / "clone")
    cmd = tmp_path / "bin/imgquilt"
    cmd.parent.mkdir()
    cmd.write_text(f'#!/bin/sh\nPYTHONPATH="{TOOL}" exec "{sys.executable}" -m imgquilt "$@"\n')
    cmd.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, HOME=str(tmp_path / "home"), PYTHON=sys.executable, TMPDIR=str(tmp_path / "tmp"))
    for name in ("IMGQUILT_QUEUE", "IMGQUILT_CACHE_DIR", "IMGQUILT_STATE_DIR", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        env.pop(name, None)  # as on a user's machine: imgquilt's defaults are the home directory's
    before = {p for p in tmp_path.rglob("*")}
    r = subprocess.run(["bash", "examples/demo.sh", str(cmd), "out"], cwd=q, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert r.returncode == 0, r.stdout.decode()[-3000:]
    assert not (tmp_path / "home").exists()
    assert not any((tmp_path / "tmp").iterdir())
    new = {p.relative_to(q) for p in set(tmp_path.rglob("*")) - before}
    assert new and all(p.parts[0] in ("out", ".imgquilt") for p in new), sorted(map(str, new))[:20]
    assert (q / "out/cache").is_dir() and (q / "out/state").is_dir()
