"""A user's quilt-style session, run through the real console script on real files (python -m imgquilt)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import Header, build_patch, make_section, parse_patch
from support.qtools import CONF, SERVER, imgquilt

SERVER_9000 = SERVER.replace(b"'8000'", b"'9000'")
SERVER_FINAL = SERVER_9000.replace(b"    return PORT\n", b"    return PORT  # from the environment\n")
CONF_8 = b"[server]\r\nworkers = 8\r\n"


@pytest.fixture
def world(tmp_path: Path, svc: Path, cli_env):
    """A fresh queue made by `imgquilt init` beside the svc rootfs (patches name lib/svc/..., a merged-/usr path)."""
    q = tmp_path / "queue"
    q.mkdir()
    r = imgquilt("init", cwd=q, env=cli_env, check=0)
    assert "Initialized a queue" in r.out
    assert (q / "series").read_bytes() == b"" and (q / "patches").is_dir()
    assert (q / ".gitignore").read_text() == ".imgquilt/\n"
    return q, svc, cli_env


def run(q: Path, env: dict, *args: str, code: int = 0):
    return imgquilt(*args, cwd=q, env=env, check=code)


def test_session_new_add_edit_refresh_pop_push_diff_header_rename_delete_check(world) -> None:
    q, root, env = world
    work = q / ".imgquilt/work"

    # a brand-new queue (made by `init`): `new` adds the patch to series and patches/
    r = run(q, env, "new", "0001-port.patch", "-d", "Serve on port 9000", "--author", "Ops <ops@example.org>")
    assert "0001-port.patch is now on top" in r.out
    assert (q / "series").read_bytes() == b"0001-port.patch\n"
    assert (q / "patches/0001-port.patch").read_bytes() == b"Description: Serve on port 9000\nAuthor: Ops <ops@example.org>\n\n"
    assert run(q, env, "top").out == "0001-port.patch\n"
    assert (q / ".imgquilt/.gitignore").read_text() == "*\n"

    # edit: the file comes from the image (through the lib -> usr/lib symlink), then the editor runs
    editor = f"{sys.executable} -c \"import sys; p=sys.argv[1]; d=open(p,'rb').read(); open(p,'wb').write(d.replace(b\\\"'8000'\\\", b\\\"'9000'\\\"))\""
    r = imgquilt("edit", "lib/svc/server.py", "--image", f"rootfs:{root}", cwd=q, env={**env, "IMGQUILT_EDITOR": editor}, check=0)
    assert "File lib/svc/server.py added to patch 0001-port.patch" in r.out
    assert (work / "lib/svc/server.py").read_bytes() == SERVER_9000
    assert (root / "usr/lib/svc/server.py").read_bytes() == SERVER  # the image is never touched

    # refresh writes the header verbatim and one canonical section with real hashes
    r = run(q, env, "refresh")
    assert "Refreshed patch 0001-port.patch" in r.out
    want = build_patch("0001-port.patch", Header(b"Description: Serve on port 9000\nAuthor: Ops <ops@example.org>\n\n"),
                       [make_section("lib/svc/server.py", SERVER, SERVER_9000)])
    assert (q / "patches/0001-port.patch").read_bytes() == want.raw
    assert "up to date" in run(q, env, "refresh").out

    # pop restores: the work tree holds only files of applied patches
    r = run(q, env, "pop")
    assert "Removing patch 0001-port.patch" in r.out and "No patches applied" in r.out
    assert not (work / "lib").exists()
    assert run(q, env, "top", code=2).code == 2
    assert json.loads(run(q, env, "applied", "--json").out) == {"applied": []}
    assert json.loads(run(q, env, "--json", "unapplied").out) == {"unapplied": ["0001-port.patch"]}

    # push again: the image is remembered; every base hash is checked
    r = run(q, env, "push")
    assert "Applying patch 0001-port.patch" in r.out and "Now at patch 0001-port.patch" in r.out
    assert (work / "lib/svc/server.py").read_bytes() == SERVER_9000

    # another change, not refreshed: diff shows it, pop refuses to lose it
    (work / "lib/svc/server.py").write_bytes(SERVER_FINAL)
    r = run(q, env, "diff")
    assert r.out.startswith("Index: lib/svc/server.py\nBase-SHA256: " + sha256_hex(SERVER) + "\nPatched-SHA256: " + sha256_hex(SERVER_FINAL) + "\n")
    assert "-    return PORT\n+    return PORT  # from the environment\n" in r.out
    r = run(q, env, "pop", code=3)
    assert "lib/svc/server.py" in r.err and "refresh" in r.err
    assert (work / "lib/svc/server.py").read_bytes() == SERVER_FINAL  # nothing changed
    run(q, env, "refresh")
    assert parse_patch((q / "patches/0001-port.patch").read_bytes()).sections[0].patched_sha256 == sha256_hex(SERVER_FINAL)

    # header: print, set one field (others kept byte for byte)
    assert run(q, env, "header").out == "Description: Serve on port 9000\nAuthor: Ops <ops@example.org>\n\n"
    run(q, env, "header", "--set", "Status=reviewed", "--set", "Forwarded=not-needed")
    raw = (q / "patches/0001-port.patch").read_bytes()
    assert raw.startswith(b"Description: Serve on port 9000\nAuthor: Ops <ops@example.org>\nStatus: reviewed\nForwarded: not-needed\n\nIndex: lib/svc/server.py\n")
    assert raw.endswith(make_section("lib/svc/server.py", SERVER, SERVER_FINAL).raw)

    # a second patch on a CRLF file, needing the first
    run(q, env, "new", "0002-tmp.patch", "-d", "More workers", "--requires", "0001-port.patch")
    run(q, env, "add", "etc/svc.conf")
    assert (work / "etc/svc.conf").read_bytes() == CONF
    (work / "etc/svc.conf").write_bytes(CONF_8)
    run(q, env, "refresh")
    assert parse_patch((q / "patches/0002-tmp.patch").read_bytes()).sections[0].raw == make_section("etc/svc.conf", CONF, CONF_8).raw

    # rename the top patch, then the first one: its Requires: follows
    r = run(q, env, "rename", "0002-workers.patch")
    assert "renamed to 0002-workers.patch" in r.out
    assert not (q / "patches/0002-tmp.patch").exists()
    run(q, env, "rename", "-P", "0001-port.patch", "0001-serve-port.patch")
    assert (q / "series").read_text() == "0001-serve-port.patch\n0002-workers.patch\n"
    assert b"Requires: 0001-serve-port.patch\n" in (q / "patches/0002-workers.patch").read_bytes()
    assert json.loads(run(q, env, "--json", "series").out) == {
        "series": ["0001-serve-port.patch", "0002-workers.patch"], "applied": ["0001-serve-port.patch", "0002-workers.patch"], "top": "0002-workers.patch"}
    assert run(q, env, "series", "-v").out == "+ 0001-serve-port.patch\n= 0002-workers.patch\n"

    # a scratch patch, deleted with its file
    run(q, env, "new", "0003-scratch.patch")
    assert (q / "patches/0003-scratch.patch").read_bytes() == b"Description: scratch\n\n"
    r = run(q, env, "delete", "-r", "0003-scratch.patch")
    assert not (q / "patches/0003-scratch.patch").exists()
    assert (q / "series").read_text() == "0001-serve-port.patch\n0002-workers.patch\n"
    assert run(q, env, "top").out == "0002-workers.patch\n"

    # the queue is sound, and applies to a copy of the image exactly as the work tree says
    run(q, env, "check")
    out = q.parent / "copy"
    shutil.copytree(root, out, symlinks=True)
    run(q, env, "apply", "--root", str(out))
    assert (out / "usr/lib/svc/server.py").read_bytes() == (work / "lib/svc/server.py").read_bytes() == SERVER_FINAL
    assert (out / "etc/svc.conf").read_bytes() == (work / "etc/svc.conf").read_bytes() == CONF_8

    # pop everything: the work tree is empty again, push -a brings it all back
    r = run(q, env, "pop", "-a")
    assert r.out.splitlines()[:2] == ["Removing patch 0002-workers.patch", "Removing patch 0001-serve-port.patch"]
    assert list(work.rglob("*")) == []
    r = run(q, env, "--json", "push", "-a")
    assert json.loads(r.out)["pushed"] == ["0001-serve-port.patch", "0002-workers.patch"]
    assert (work / "etc/svc.conf").read_bytes() == CONF_8


def test_push_refuses_a_drifted_image_and_writes_nothing(world) -> None:
    q, root, env = world
    run(q, env, "new", "0001-port.patch")
    run(q, env, "add", "lib/svc/server.py", "--image", f"rootfs:{root}")
    (q / ".imgquilt/work/lib/svc/server.py").write_bytes(SERVER_9000)
    run(q, env, "refresh")
    run(q, env, "pop")
    (root / "usr/lib/svc/server.py").write_bytes(SERVER + b"# changed upstream\n")
    state = sorted(p.relative_to(q).as_posix() for p in q.rglob("*") if "objects" not in p.parts)
    r = run(q, env, "push", code=3)
    assert "0001-port.patch" in r.err and "lib/svc/server.py" in r.err
    assert sha256_hex(SERVER) in r.err and sha256_hex(SERVER + b"# changed upstream\n") in r.err
    assert "rebase" in r.err
    assert sorted(p.relative_to(q).as_posix() for p in q.rglob("*") if "objects" not in p.parts) == state
    assert json.loads(run(q, env, "--json", "applied").out) == {"applied": []}


def test_lock_pins_bases_so_push_needs_no_image(world) -> None:
    q, root, env = world
    run(q, env, "new", "0001-port.patch")
    run(q, env, "add", "lib/svc/server.py", "--image", f"rootfs:{root}")
    (q / ".imgquilt/work/lib/svc/server.py").write_bytes(SERVER_9000)
    run(q, env, "refresh")
    run(q, env, "lock", "--image", f"rootfs:{root}")
    run(q, env, "pop")
    (q / ".imgquilt/state/image").unlink()
    shutil.rmtree(root)  # the image is gone: the store holds the base the lock pins
    run(q, env, "push")
    assert (q / ".imgquilt/work/lib/svc/server.py").read_bytes() == SERVER_9000


def test_header_edit_with_an_editor_keeps_the_diff(world) -> None:
    q, root, env = world
    run(q, env, "new", "0001-port.patch", "-d", "first words")
    run(q, env, "add", "etc/svc.conf", "--image", f"rootfs:{root}")
    (q / ".imgquilt/work/etc/svc.conf").write_bytes(CONF_8)
    run(q, env, "refresh")
    before = (q / "patches/0001-port.patch").read_bytes()
    script = q.parent / "ed.py"
    script.write_text("import sys\np = sys.argv[1]\nd = open(p).read()\nopen(p, 'w').write(d.replace('first words', 'Better words\\n Long text.') + 'Bug: https://bugs.example.org/1\\n\\n\\n')\n")
    r = imgquilt("header", "-e", cwd=q, env={**env, "IMGQUILT_EDITOR": f"{sys.executable} {script}"}, check=0)
    assert "Header of 0001-port.patch updated" in r.out
    after = (q / "patches/0001-port.patch").read_bytes()
    assert after.startswith(b"Description: Better words\n Long text.\n\nBug: https://bugs.example.org/1\n\nIndex: etc/svc.conf\n")
    assert after.split(b"Index: ", 1)[1] == before.split(b"Index: ", 1)[1]
    # no editor and no terminal: a clear usage error
    env2 = {k: v for k, v in env.items() if k not in ("IMGQUILT_EDITOR",)}
    assert run(q, env2, "header", "-e", code=2).code == 2


def test_header_edit_when_the_editor_removes_the_file(world) -> None:
    """An editor (or a script in IMGQUILT_EDITOR) that deletes the file it was given leaves no header to
    read: a usage error as for an editor that fails, the patch as it was, no temp file left behind."""
    q, root, env = world
    run(q, env, "new", "0001-port.patch", "-d", "first words")
    before = (q / "patches/0001-port.patch").read_bytes()
    script = q.parent / "ed.py"
    script.write_text("import os, sys\nos.unlink(sys.argv[1])\n")
    r = imgquilt("header", "-e", cwd=q, env={**env, "IMGQUILT_EDITOR": f"{sys.executable} {script}"}, check=2)
    assert "removed the header file" in r.err and "--set" in r.err, r.err
    assert "Traceback" not in r.err and "internal error" not in r.err
    assert (q / "patches/0001-port.patch").read_bytes() == before
    assert not list((q / ".imgquilt").rglob("header-*"))
    # one that leaves a directory or a link in its place: exit 6, and nothing of it left either
    for act in ("os.mkdir(sys.argv[1])", "os.symlink('/etc/passwd', sys.argv[1])"):
        script.write_text(f"import os, sys\nos.unlink(sys.argv[1])\n{act}\n")
        r = imgquilt("header", "-e", cwd=q, env={**env, "IMGQUILT_EDITOR": f"{sys.executable} {script}"}, check=6)
        assert (q / "patches/0001-port.patch").read_bytes() == before
        assert not list((q / ".imgquilt").rglob("header-*")), act


def test_new_when_patches_is_a_file_says_so(world) -> None:
    """`patches` replaced by a file: `new` says a name on the way is no directory (not "File exists",
    not "make it writable"), and the queue is as it was."""
    q, root, env = world
    shutil.rmtree(q / "patches", ignore_errors=True)
    (q / "patches").write_text("not a directory")
    series = (q / "series").read_bytes()
    r = imgquilt("new", "0001-x.patch", cwd=q, env=env, check=6)
    assert "a name on its way is not a directory" in r.err and "'patches'" in r.err, r.err
    assert (q / "series").read_bytes() == series and (q / "patches").read_text() == "not a directory"


def test_fold_a_plain_diff_into_the_top_patch(world) -> None:
    q, root, env = world
    run(q, env, "new", "0001-fold.patch")
    diff = (b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -1,2 +1,2 @@\n [server]\r\n-workers = 2\r\n+workers = 8\r\n"
            b"--- /dev/null\n+++ b/etc/svc.d/extra.conf\n@@ -0,0 +1 @@\n+x = 1\n")
    (q.parent / "fix.diff").write_bytes(diff)
    r = run(q, env, "fold", str(q.parent / "fix.diff"), "--image", f"rootfs:{root}")
    assert "patched etc/svc.conf" in r.out and "refresh" in r.out
    assert (q / ".imgquilt/work/etc/svc.conf").read_bytes() == CONF_8
    run(q, env, "refresh")
    p = parse_patch((q / "patches/0001-fold.patch").read_bytes())
    assert [s.raw for s in p.sections] == [make_section("etc/svc.conf", CONF, CONF_8).raw, make_section("etc/svc.d/extra.conf", None, b"x = 1\n").raw]
    # a diff that does not fit is refused, nothing changes
    bad = b"--- a/etc/svc.conf\n+++ b/etc/svc.conf\n@@ -1,2 +1,2 @@\n [server]\r\n-workers = 3\r\n+workers = 4\r\n"
    p2 = subprocess.run([sys.executable, "-m", "imgquilt", "fold", "-"], cwd=q, env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "tool")},
                        input=bad, capture_output=True)
    assert p2.returncode == 3, p2.stderr
    assert b"hunk 1 (header line 1) matches nowhere" in p2.stderr
    assert (q / ".imgquilt/work/etc/svc.conf").read_bytes() == CONF_8


def test_import_into_a_session_then_push(world) -> None:
    q, root, env = world
    run(q, env, "new", "0001-port.patch")
    run(q, env, "add", "lib/svc/server.py", "--image", f"rootfs:{root}")
    (q / ".imgquilt/work/lib/svc/server.py").write_bytes(SERVER_9000)
    run(q, env, "refresh")
    # a hand-written pinned fix, made against the file as it is after 0001
    pinned = (q.parent / "hotfix.diff")
    pinned.write_bytes(
        b"# TARGET: /usr/lib/svc/server.py\n"
        + f"# base sha256: {sha256_hex(SERVER_9000)}\n# patched sha256: {sha256_hex(SERVER_FINAL)}\n".encode()
        + b"--- server.py.orig\n+++ server.py\n@@ -6,2 +6,2 @@\n def serve():\n-    return PORT\n+    return PORT  # from the environment\n"
    )
    r = run(q, env, "import", str(pinned), "-P", "0002-hotfix.patch", "--author", "Ops <ops@example.org>")
    assert "Imported 0002-hotfix.patch" in r.out
    raw = (q / "patches/0002-hotfix.patch").read_bytes()
    # the pin lines became the section's hashes; the path is the TARGET (no symlink games: as written);
    # the imported hunk text is kept as it came (it applies at the line it names)
    assert raw == b"Author: Ops <ops@example.org>\n\n" + (
        f"Index: usr/lib/svc/server.py\nBase-SHA256: {sha256_hex(SERVER_9000)}\nPatched-SHA256: {sha256_hex(SERVER_FINAL)}\n".encode()
        + b"--- a/usr/lib/svc/server.py\n+++ b/usr/lib/svc/server.py\n"
        + pinned.read_bytes().split(b"+++ server.py\n", 1)[1]
    )
    assert run(q, env, "series").out == "0001-port.patch\n0002-hotfix.patch\n"
    # a pin that does not match is refused with both hashes
    wrong = q.parent / "wrong.diff"
    wrong.write_bytes(pinned.read_bytes().replace(sha256_hex(SERVER_9000).encode(), b"0" * 64))
    r = run(q, env, "import", str(wrong), "-P", "0003-wrong.patch", code=3)
    assert "0" * 64 in r.err and sha256_hex(SERVER_9000) in r.err
    assert not (q / "patches/0003-wrong.patch").exists()


def test_new_outside_a_queue_refuses_and_points_at_init(tmp_path: Path, cli_env) -> None:
    r = imgquilt("new", "0001-x.patch", cwd=tmp_path, env=cli_env, check=2)
    assert "No queue found" in r.err and "imgquilt init" in r.err
    assert not (tmp_path / "series").exists() and not (tmp_path / "patches").exists()
    doc = json.loads(imgquilt("new", "0001-x.patch", "--json", cwd=tmp_path, env=cli_env, check=2).out)
    assert doc["error"]["code"] == 2 and doc["error"]["kind"] == "queue-not-found" and "imgquilt init" in doc["error"]["hint"]


def test_init_keeps_what_exists_and_adds_to_a_gitignore(tmp_path: Path, cli_env) -> None:
    (tmp_path / ".gitignore").write_bytes(b"*.pyc")  # no final newline
    (tmp_path / "series").write_bytes(b"0001-a.patch\n")
    doc = json.loads(imgquilt("init", "--json", cwd=tmp_path, env=cli_env, check=0).out)
    assert doc == {"queue": str(tmp_path.resolve()), "created": ["patches/", ".gitignore"]}
    assert (tmp_path / ".gitignore").read_bytes() == b"*.pyc\n.imgquilt/\n"
    assert (tmp_path / "series").read_bytes() == b"0001-a.patch\n"
    r = imgquilt("init", cwd=tmp_path, env=cli_env, check=0)
    assert "already a queue" in r.out
    assert (tmp_path / ".gitignore").read_bytes() == b"*.pyc\n.imgquilt/\n"


def test_init_refuses_a_file_where_the_queue_or_its_parts_should_be(tmp_path: Path, cli_env) -> None:
    (tmp_path / "a-file").write_bytes(b"keep")
    r = imgquilt("--queue", str(tmp_path / "a-file"), "init", cwd=tmp_path, env=cli_env, check=6)
    assert "Cannot make a queue" in r.err and (tmp_path / "a-file").read_bytes() == b"keep"
    q = tmp_path / "q"
    q.mkdir()
    (q / "patches").write_bytes(b"not a dir")
    r = imgquilt("--queue", str(q), "init", cwd=tmp_path, env=cli_env, check=6)
    assert "is not a directory" in r.err
    assert sorted(p.name for p in q.iterdir()) == ["patches"]  # checked before anything was made


def test_remove_from_the_top_restores_what_the_patch_below_left(tmp_path: Path, cli_env) -> None:
    """0005 and 0006 both change demosvc/config.py: removing it from 0006 gives back 0005's result."""
    from support.qtools import copy_demo_queue

    q = copy_demo_queue(tmp_path / "q")
    cfg = "usr/local/lib/python3.11/site-packages/demosvc/config.py"
    work = q / ".imgquilt/work" / cfg
    imgquilt("push", "5", cwd=q, env=cli_env, check=0)
    after_0005 = work.read_bytes()
    imgquilt("push", cwd=q, env=cli_env, check=0)
    assert work.read_bytes() != after_0005
    imgquilt("remove", cfg, cwd=q, env=cli_env, check=0)
    assert work.read_bytes() == after_0005
    assert cfg not in imgquilt("files", cwd=q, env=cli_env, check=0).out.split()
    assert f"Index: {cfg}" not in (q / "patches/0006-moe-shared-expert.patch").read_text()
    assert imgquilt("diff", "-z", cwd=q, env=cli_env, check=0).out == ""
    imgquilt("pop", cwd=q, env=cli_env, check=0)  # nothing unrefreshed: pop needs no -f
    assert work.read_bytes() == after_0005
