"""Issue 26, points 2-4: what upstream changed under each patch (regions by AST, by lines), diff3
markers and `--continue` refusing any marker left, a fresh clone rebasing without --from, and
`imgquilt diff --upstream`."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import build_oci, file
from imgquilt.pycheck.regions import CHANGED, CLASS, FUNCTION, LINES, MOVED, REMOVED, regions_of, upstream_changes
from imgquilt.queue.patchfile import make_section
from support.qtools import imgquilt, write_patch
from support.schemas import validator
from support.rebase_queue import DEBUG_LINE, ENVS, ENVS_V1, SITE311, WEIGHTS, WEIGHTS_V1, WEIGHTS_V2, make_patches, make_root

W311 = f"{SITE311}/{WEIGHTS}"

MOD_V1 = b'''import os


class Pool:
    def __init__(self, size):
        self.size = size

    def grow(self, n):
        self.size += n
        return self.size


def connect(host, port):
    return (host, port)


def retry(fn):
    return fn()


LIMIT = 10
'''
MOD_V2 = b'''import os

from .net import connect


class Pool:
    def __init__(self, size, *, name="pool"):
        self.size = size
        self.name = name

    def grow(self, n):
        self.size += n
        return self.size


LIMIT = 20
'''


def test_regions_by_ast_and_what_upstream_did_to_each() -> None:
    ours = (MOD_V1.replace(b"        self.size = size\n", b"        self.size = max(size, 1)\n")
            .replace(b"    return (host, port)", b"    return (host, int(port))")
            .replace(b"    return fn()", b"    return fn() or fn()")
            .replace(b"LIMIT = 10", b"LIMIT = 12")
            .replace(b"        self.size += n\n", b"        self.size += abs(n)\n"))
    sec = make_section("app/mod.py", MOD_V1, ours)
    regions = regions_of(sec, MOD_V1)
    assert [(r.kind, r.name) for r in regions] == [(FUNCTION, "Pool.__init__"), (FUNCTION, "Pool.grow"), (FUNCTION, "connect"),
                                                   (FUNCTION, "retry"), (LINES, "def retry(fn):")]
    got = {c.region.name: c for c in upstream_changes("app/mod.py", regions, MOD_V1, MOD_V2)}
    init = got["Pool.__init__"]
    assert (init.change, init.params_added, init.params_removed) == (CHANGED, ("*", "name")[1:], ())
    assert (init.lines_added, init.lines_removed) == (2, 1) and "+        self.name = name" in init.diff
    assert "Pool.grow" not in got  # upstream left it alone
    assert (got["connect"].change, got["connect"].moved_to) == (MOVED, ".net")
    assert got["retry"].change == REMOVED
    assert got["def retry(fn):"].change == CHANGED  # LIMIT's line, at module level
    # a class region: a hunk on the class line itself
    cls = make_section("app/mod.py", MOD_V1, MOD_V1.replace(b"class Pool:", b"class Pool(object):"))
    (region,) = regions_of(cls, MOD_V1)
    assert (region.kind, region.name) == (CLASS, "Pool")
    (c,) = upstream_changes("app/mod.py", [region], MOD_V1, MOD_V2)
    assert c.params_added == ("name",) and c.region.kind == CLASS


def test_a_region_of_lines_in_a_file_that_is_no_python() -> None:
    conf = b"[server]\nport = 80\nworkers = 2\n\n[cache]\ndir = /var/cache\nttl = 60\nsize = 10\n"
    new = conf.replace(b"port = 80", b"port = 8080")
    sec = make_section("etc/app.ini", conf, conf.replace(b"workers = 2", b"workers = 4"))
    (r,) = regions_of(sec, conf)
    assert r.kind == LINES and r.name == "[server]"
    (c,) = upstream_changes("etc/app.ini", [r], conf, new)
    assert (c.change, c.lines_added, c.lines_removed) == (CHANGED, 1, 1) and "+port = 8080" in c.diff
    # upstream's edit elsewhere in the file is not under the patch
    far = conf.replace(b"size = 10", b"size = 20")
    assert upstream_changes("etc/app.ini", [r], conf, far) == []


@pytest.fixture
def session(tmp_path: Path, cli_env):
    old = make_root(tmp_path / "old", WEIGHTS_V1)
    q = tmp_path / "queue"
    make_patches(q)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    return tmp_path, q, old, cli_env


def test_conflict_markers_carry_the_base_section_and_continue_refuses_any_left(session) -> None:
    tmp, q, old, env = session
    upstream = b'logger.debug("loading shard %s from %s", shard.name, model_dir)'
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, upstream))
    for style_args, has_base in (([], True), (["--conflict-style", "merge"], False)):
        r = imgquilt("rebase", "--image", f"rootfs:{new}", *style_args, cwd=q, env=env, check=4)
        text = (q / ".imgquilt/work" / W311).read_bytes()
        assert text.count(b"<<<<<<< 0001-log-shard-tensors.patch") == 1 and text.count(b">>>>>>> ") == 1
        if has_base:  # as git merge-file --diff3: the old image's lines between ||||||| and =======
            start = text.index(b"||||||| old image\n")
            assert text[start:].split(b"\n")[1].strip() == DEBUG_LINE
        else:
            assert b"|||||||" not in text
        imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    work = q / ".imgquilt/work" / W311
    text = work.read_bytes()
    lines = text.splitlines(keepends=True)
    at = {k: next(i for i, ln in enumerate(lines) if ln.startswith(k)) for k in (b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>")}
    theirs = lines[at[b"======="] + 1: at[b">>>>>>>"]]
    resolved = lines[: at[b"<<<<<<<"]] + theirs + lines[at[b">>>>>>>"] + 1:]
    # every marker style is refused while any is left: a bare 3-way base marker, a 2-way separator
    for leftover in (b"||||||| old image\n", b"|||||||\n", b"=======\n", b"<<<<<<< mine\n", b">>>>>>>\n"):
        work.write_bytes(b"".join(resolved[:5] + [leftover] + resolved[5:]))
        r = imgquilt("rebase", "--continue", cwd=q, env=env, check=4)
        assert "conflict markers remain at line(s) 6" in r.err, leftover
    work.write_bytes(b"".join(resolved))  # upstream's side taken: the patch's change is dropped
    imgquilt("rebase", "--continue", cwd=q, env=env, check=0)
    assert "0001-log-shard-tensors.patch" not in (q / "series").read_text()


def test_a_fresh_clone_rebases_without_from_when_the_lock_reaches_the_image(tmp_path: Path, cli_env) -> None:
    """targets.lock pins a local OCI layout (relative to the queue); the clone has no object store."""
    env = cli_env
    files_v1 = {W311: WEIGHTS_V1, f"{SITE311}/{ENVS}": ENVS_V1}
    files_v2 = {W311: WEIGHTS_V2, f"{SITE311}/{ENVS}": ENVS_V1}
    work = tmp_path / "work"
    work.mkdir()
    build_oci(work / "images", [[file(p, d) for p, d in files_v1.items()]], tag="1")
    build_oci(work / "images", [[file(p, d) for p, d in files_v2.items()]], tag="2")
    q = work / "queue"
    make_patches(q)
    imgquilt("lock", "--image", "oci:../images:1", cwd=q, env=env, check=0)
    assert "oci:../images:1" in (q / "targets.lock").read_text()
    (q / ".gitignore").write_text(".imgquilt/\n")  # as `imgquilt init` writes it
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    subprocess.run(["git", "-C", str(q), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(q), "commit", "-qm", "queue"], check=True)
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(q), str(clone)], check=True)
    assert not (clone / ".imgquilt").exists()
    r = imgquilt("rebase", "--image", "oci:../images:2", cwd=clone, env=env, check=0)
    assert "Rebased 3 patch(es)" in r.out and "merged" in r.out
    imgquilt("apply", "--image", "oci:../images:2", "--locked", cwd=clone, env=env, check=0)
    # the object store is a cache, the lock's image the source: with neither, --from is asked for
    clone2 = work / "clone2"
    subprocess.run(["git", "clone", "-q", str(q), str(clone2)], check=True)
    shutil.move(str(work / "images"), str(work / "elsewhere"))
    r = imgquilt("rebase", "--image", "oci:../elsewhere:2", cwd=clone2, env=env, check=6)
    assert "--from OLDREF" in r.err and "targets.lock pins oci:../images:1" in r.err
    imgquilt("rebase", "--image", "oci:../elsewhere:2", "--from", "oci:../elsewhere:1", cwd=clone2, env=env, check=0)


def test_diff_upstream_shows_upstreams_change_of_the_regions_a_patch_touches(session) -> None:
    tmp, q, old, env = session
    new = make_root(tmp / "new", WEIGHTS_V2.replace(b"def iter_shards(model_dir: Path, *, verify: bool = False)",
                                                    b"def iter_shards(model_dir: Path, *, verify: bool = False, strict: bool = True)"))
    r = imgquilt("diff", "--upstream", "0001-log-shard-tensors.patch", "--image", f"rootfs:{new}", cwd=q, env=env, check=0)
    assert f"{W311}: function iter_shards: new parameter strict" in r.out
    assert "+def iter_shards(model_dir: Path, *, verify: bool = False, strict: bool = True)" in r.out
    doc = json.loads(imgquilt("--json", "diff", "--upstream", "0001-log-shard-tensors.patch", "--image", f"rootfs:{new}",
                              cwd=q, env=env, check=0).out)
    validator("diff", "upstream").validate(doc)  # docs/schemas/diff.schema.json
    assert doc["patch"] == "0001-log-shard-tensors.patch" and doc["new"]["ref"] == f"rootfs:{new}"
    (change,) = doc["upstream"]
    assert (change["name"], change["params_added"]) == ("iter_shards", ["strict"])
    # a patch whose regions upstream left alone
    r = imgquilt("diff", "--upstream", "0003-spawn-workers.patch", "--image", f"rootfs:{new}", cwd=q, env=env, check=0)
    assert "upstream changed nothing" in r.out


def test_the_report_names_the_file_a_function_moved_to(tmp_path: Path, cli_env) -> None:
    site = "usr/local/lib/python3.11/site-packages/pkg"
    v1 = {f"{site}/__init__.py": b"", f"{site}/core.py": MOD_V1}
    v2 = {f"{site}/__init__.py": b"", f"{site}/core.py": MOD_V2, f"{site}/net.py": b"def connect(host, port, timeout=5):\n    return (host, port)\n"}
    for name, files in (("old", v1), ("new", v2)):
        for rel, data in files.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_bytes(data)
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-port.patch", [(f"{site}/core.py", MOD_V1, MOD_V1.replace(b"    return (host, port)", b"    return (host, int(port))"))])
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    imgquilt("lock", "--image", f"rootfs:{tmp_path / 'old'}", cwd=q, env=cli_env, check=0)
    # upstream moved connect() out of core.py: the merge conflicts (the patch edits lines upstream removed)
    r = imgquilt("--json", "rebase", "--image", f"rootfs:{tmp_path / 'new'}", cwd=q, env=cli_env, check=4)
    doc = json.loads(r.out)
    (change,) = doc["patches"][0]["upstream"]
    assert (change["name"], change["change"], change["moved_to"], change["moved_path"]) == \
        ("connect", "moved", "pkg.net", f"{site}/net.py")
    r = imgquilt("rebase", "--status", cwd=q, env=cli_env, check=0)
    assert f"{site}/core.py: function connect moved to {site}/net.py" in r.out


def test_diff_upstream_during_a_stopped_rebase_takes_its_old_pin_and_new_image(session) -> None:
    """A rebase of the default pin stopped on a conflict: with no --image, the diff goes from the pin the
    rebase started from to the image it rebases onto, and names no profile."""
    tmp, q, old, env = session
    upstream = b'logger.debug("loading shard %s from %s", shard.name, model_dir)'
    new = make_root(tmp / "new", WEIGHTS_V2.replace(DEBUG_LINE, upstream))
    imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=env, check=4)
    r = imgquilt("diff", "--upstream", "0001-log-shard-tensors.patch", cwd=q, env=env, check=0)
    assert r.out.startswith(f"Upstream's change, rootfs:{old} -> rootfs:{new}, of what 0001-log-shard-tensors.patch edits:")
    assert "profile" not in r.out and "None" not in r.out
    doc = json.loads(imgquilt("--json", "diff", "--upstream", "0001-log-shard-tensors.patch", cwd=q, env=env, check=0).out)
    validator("diff", "upstream").validate(doc)
    assert doc["old"]["ref"] == f"rootfs:{old}" and doc["new"]["ref"] == f"rootfs:{new}" and "profile" not in doc
    imgquilt("rebase", "--abort", cwd=q, env=env, check=0)
