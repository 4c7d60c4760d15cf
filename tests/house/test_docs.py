"""The documentation stands alone in a clone: links resolve inside the repository, the tutorial's
commands run as written, and the integration recipes use commands and options that exist."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import REPO, TOOL, copy_demo_queue, imgquilt

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RECIPES = [REPO / "examples/ci/imgquilt-audit.yml", REPO / "docs/fleet.md", REPO / "examples/docker/Dockerfile.layer", REPO / "examples/docker/Dockerfile.inplace"]


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower().replace("`", "")
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_docs_exist() -> None:
    for name in ("index", "patch-format", "series", "targets-lock", "applied-record", "exit-codes",
                 "image-references", "json", "tutorial", "coming-from", "integrations"):
        assert (DOCS / f"{name}.md").is_file(), name
    assert (REPO / "LICENSE").read_text().count("Apache License") >= 1


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve_inside_the_repository(page: Path) -> None:
    found = links(page)
    assert found or page.name != "README.md"
    for target in found:
        assert not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I), f"{page.name}: {target} leaves the repository"
        assert not target.startswith("/"), f"{page.name}: {target} is absolute"
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert dest.exists(), f"{page.name}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}: no heading #{anchor} in {dest.name}"


def test_readme_keeps_its_first_commands_and_points_at_docs() -> None:
    text = (REPO / "README.md").read_text()
    first = FENCE.search(text).group(0).splitlines()
    assert first[1].startswith("make demo") and first[2].startswith("make test")
    assert "docs/index.md" in links(REPO / "README.md")
    # the README is the two commands and one screen; the decisions and the figures have pages of their own
    assert {"docs/decisions.md", "docs/performance.md"} <= set(links(REPO / "README.md"))
    assert (DOCS / "decisions.md").read_text().startswith("# Decisions where the design is silent")
    assert "## Benchmark" in (DOCS / "performance.md").read_text()
    assert len(text.splitlines()) < 100
    for what in ("15-30 min", "apt-get install", "deb-src", "containerd", "stargz-snapshotter", "docker-registry", "strace",
                 "apache2-utils"):
        assert what in text, what  # what `make test` takes and installs


def test_every_schema_is_listed_in_json_md() -> None:
    listed = set(links(DOCS / "json.md"))
    for schema in sorted((DOCS / "schemas").glob("*.schema.json")):
        assert f"schemas/{schema.name}" in listed, schema.name


# --- the tutorial runs as written ----------------------------------------------------------
def imgquilt_on_path(tmp: Path) -> dict[str, str]:
    """An `imgquilt` on PATH that runs this checkout's code, as an installed console script would."""
    bindir = tmp / "bin"
    bindir.mkdir()
    script = bindir / "imgquilt"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(TOOL))} exec {shlex.quote(sys.executable)} -m imgquilt "$@"\n')
    script.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", COLUMNS="200", HOME=str(tmp / "home"), TMPDIR=str(tmp))
    env.pop("IMGQUILT_QUEUE", None)
    return env


def test_tutorial_runs_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"^```sh\n(.*?)^```", (DOCS / "tutorial.md").read_text(), re.S | re.M)
    assert len(blocks) >= 8
    clone = copy_demo_queue(tmp_path / "clone")
    env = imgquilt_on_path(tmp_path)
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(blocks)], cwd=clone, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # what the prose says happens, happens
    assert "refused with exit 3" in r.stdout and "base drifted" in r.stderr
    assert "2 merged" in r.stdout
    assert "request_timeout_s = 120" in r.stdout and "count = 4" in r.stdout
    assert "2 patch(es): 2 live." in r.stdout
    # the lock names the image relative to the queue: a clone of the queue (CI's) opens the same image
    assert re.findall(r'^ref = "(.*)"$', r.stdout, re.M) == ["oci:images/demo:latest"]


# --- the integration recipes ----------------------------------------------------------------
def imgquilt_invocations(text: str) -> list[list[str]]:
    """Each `imgquilt ...` command line in a recipe, up to the first shell operator."""
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0]
        if line.lstrip().startswith("#") or line.lstrip().startswith("name:"):
            continue
        for m in re.finditer(r"(?:^|[\s&|;])(?:\S*/)?imgquilt\s+(?=--|[a-z])", line):
            words = shlex.split(line[m.end():].replace("$", "X"))
            args = []
            for w in words:
                if w in ("|", "||", "&&", ";", ">", "2>") or w.startswith(">"):
                    break
                args.append(w)
            out.append(args)
    return out


def test_recipes_use_commands_and_options_that_exist() -> None:
    import typer.main

    from imgquilt.cli.main import app

    root = typer.main.get_command(app)
    globals_ = {o for p in root.params for o in p.opts}
    seen = 0
    for recipe in RECIPES:
        for args in imgquilt_invocations(recipe.read_text()):
            options = [a.split("=", 1)[0] for a in args if a.startswith("-")]
            words = [a for a in args if not a.startswith("-")]
            command = next(w for w in words if w in root.commands)
            known = globals_ | {o for p in root.commands[command].params for o in p.opts}
            assert set(options) <= known, f"{recipe.name}: imgquilt {' '.join(args)}: unknown {set(options) - known}"
            seen += 1
    assert seen >= 5


def test_layer_recipe_gives_the_patched_files(tmp_path: Path, cli_env) -> None:
    """Dockerfile.layer's steps outside Docker: apply onto the base rootfs as a layer, unpack it,
    copy the files over the base (what COPY does), and audit: every patch is live."""
    text = (REPO / "examples/docker/Dockerfile.layer").read_text()
    assert "apply --image rootfs:/base --layer /out/fix.tar" in text and "tar -xpf /out/fix.tar -C /out/files" in text
    q = copy_demo_queue(tmp_path / "queue")
    base = tmp_path / "base"
    subprocess.run([sys.executable, "examples/build_demo.py", "--rootfs", str(base)], cwd=q, check=True, capture_output=True)
    image = tmp_path / "image"
    shutil.copytree(base, image, symlinks=True)
    imgquilt("--queue", str(q), "apply", "--image", f"rootfs:{base}", "--layer", str(tmp_path / "fix.tar"), cwd=tmp_path, env=cli_env, check=0)
    files = tmp_path / "files"
    files.mkdir()
    subprocess.run(["tar", "-xpf", str(tmp_path / "fix.tar"), "-C", str(files), "--numeric-owner"], check=True)
    subprocess.run(["cp", "-a", f"{files}/.", str(image)], check=True)
    r = imgquilt("--queue", str(q), "audit", "--root", str(image), cwd=tmp_path, env=cli_env, check=0)
    assert "6 live" in r.out


def test_inplace_recipe_patches_the_root(tmp_path: Path, cli_env) -> None:
    """Dockerfile.inplace's imgquilt step on an extracted rootfs: `--queue Q apply --root /`."""
    assert "imgquilt --queue /tmp/queue apply --root /" in (REPO / "examples/docker/Dockerfile.inplace").read_text()
    q = copy_demo_queue(tmp_path / "queue")
    root = tmp_path / "root"
    subprocess.run([sys.executable, "examples/build_demo.py", "--rootfs", str(root)], cwd=q, check=True, capture_output=True)
    imgquilt("--queue", str(q), "apply", "--root", str(root), cwd=tmp_path, env=cli_env, check=0)
    r = imgquilt("--queue", str(q), "audit", "--root", str(root), cwd=tmp_path, env=cli_env, check=0)
    assert "6 live" in r.out


def test_every_command_is_in_the_commands_table() -> None:
    """docs/index.md's "Commands at a glance" names every command the CLI has."""
    from imgquilt.cli.app import COMMAND_MODULES

    text = (DOCS / "index.md").read_text().split("## Commands at a glance", 1)[1]
    rows = " ".join(line for line in text.splitlines() if line.startswith("|"))
    words = set(re.findall(r"[a-z][a-z-]*", rows))
    missing = [c for c in COMMAND_MODULES if c not in words]
    assert not missing, f"docs/index.md's command table misses {missing}"


def test_the_error_tree_in_exit_codes_md_is_the_code() -> None:
    """Each error class sits in the row of its own exit code, and every class of errors.py is listed."""
    import inspect

    from imgquilt import errors

    classes = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, errors.ImgquiltError)}
    table = (DOCS / "exit-codes.md").read_text().split("## The error tree", 1)[1]
    listed: dict[str, int] = {}
    for cells, code in re.findall(r"^\| (.+) \| (\d) \|$", table, re.M):
        for name in re.findall(r"`(\w+)`", cells):
            listed[name] = int(code)
    assert {n: c.exit_code for n, c in classes.items() if n != "ImgquiltError"} == listed


def test_every_overlay_args_example_keeps_a_path_with_a_space_whole(tmp_path: Path, cli_env) -> None:
    """Each podman or docker line the docs (and `overlay-args --help`) show runs the arguments through
    `eval`: an unquoted `$(imgquilt overlay-args DIR)` splits a path with a space into words. Each such
    line, run by bash as written (podman and docker replaced by a program that prints its argv), gets
    exactly the arguments `--json` lists, for an overlay below a directory with a space."""
    help_text = imgquilt("overlay-args", "--help", cwd=tmp_path, env=cli_env, check=0).out
    lines = [ln.strip() for page in PAGES for ln in page.read_text().splitlines()] + [ln.strip() for ln in help_text.splitlines()]
    examples = [ln for ln in lines if "$(imgquilt overlay-args" in ln and "k8s" not in ln]
    assert len(examples) >= 4, examples
    q = copy_demo_queue(tmp_path / "clone")
    overlay = tmp_path / "my fixes" / "overlay"
    overlay.parent.mkdir()
    imgquilt("apply", "--image", f"oci:{REPO}/examples/demo-image:latest", "--overlay", str(overlay), cwd=q, env=cli_env, check=0)
    shim = tmp_path / "bin"
    shim.mkdir()
    for tool in ("podman", "docker"):
        (shim / tool).write_text(f'#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n')
        (shim / tool).chmod(0o755)
    (shim / "imgquilt").write_text(f'#!/bin/sh\nPYTHONPATH="{TOOL}" exec "{sys.executable}" -m imgquilt "$@"\n')
    (shim / "imgquilt").chmod(0o755)
    env = {**cli_env, "PATH": f"{shim}{os.pathsep}{cli_env['PATH']}"}
    for line in examples:
        command = re.sub(r"overlay-args [^\s)]+", lambda _: f"overlay-args {shlex.quote(str(overlay))}", line.split("  #")[0].strip())
        done = subprocess.run(["bash", "-c", command], cwd=q, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (line, done.stderr)
        fmt = "docker" if "--format docker" in line else "podman"
        want = json.loads(imgquilt("--json", "overlay-args", str(overlay), "--format", fmt, cwd=q, env=cli_env, check=0).out)["args"]
        got = json.loads(done.stdout)
        assert got[0] in ("create", "run") and got[1:-1] == want and got[-1] == "IMAGE", (line, got)
