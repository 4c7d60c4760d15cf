"""Every patch imgquilt writes is a real patch: GNU `patch -p1` and `git apply` accept it; quilt series import as quilt applies them.

The patches come from the real workflows (new + add + edit + refresh, import of `diff -urN`, of
`git diff`, of a quilt series made by the real `quilt`), on files that break naive tools: CRLF
lines, no final newline, non-UTF-8 bytes, a new file (with a mode), a deleted file.
"""
from __future__ import annotations

import json

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imgquilt.engine.apply import apply_section
from imgquilt.importer import Base, apply_foreign, parse_foreign
from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import Header, build_patch, make_section, parse_patch
from support.qtools import imgquilt

BASE = {
    "etc/app.ini": b"[server]\r\nworkers = 2\r\nport = 80\r\n",
    "usr/lib/app/main.py": b"import os\n\n\ndef main():\n    return os.getcwd()\n\n\nif __name__ == '__main__':\n    main()",  # no final newline
    "usr/share/app/latin1.txt": b"caf\xe9 cr\xe8me\n\xff\xfe binary-ish \x00 line\nlast\n",
    "usr/share/app/old.txt": b"this file goes away\nsecond line\n",
}
PATCHED = {
    "etc/app.ini": b"[server]\r\nworkers = 8\r\nport = 80\r\n",
    "usr/lib/app/main.py": b"import os\n\n\ndef main():\n    return os.getcwd() + '/'\n\n\nif __name__ == '__main__':\n    main()\n",
    "usr/share/app/latin1.txt": b"caf\xe9 cr\xe8me br\xfbl\xe9e\n\xff\xfe binary-ish \x00 line\nlast",
    "usr/bin/app-helper": b"#!/bin/sh\r\nexec app \"$@\"\n",  # new, executable, mixed line ends
    "usr/share/app/old.txt": None,  # deleted
}
# GNU patch and git apply refuse NUL bytes in a "text" patch; keep them for the pure engine, out of the tool runs
TOOL_BASE = {k: v.replace(b"\x00", b"\x01") for k, v in BASE.items()}
TOOL_PATCHED = {k: (v.replace(b"\x00", b"\x01") if v is not None else None) for k, v in PATCHED.items()}


def make_tree(root: Path, files: dict[str, bytes | None]) -> Path:
    for rel, data in files.items():
        if data is None:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def tree_files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".pc", "patches", ".imgquilt")]
        for name in filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def expected_files(base: dict, patched: dict) -> dict[str, bytes]:
    files = {k: v for k, v in base.items()}
    files.update(patched)
    return {k: v for k, v in files.items() if v is not None}


def assert_applies_with_patch_and_git(patch_file: Path, base: dict, patched: dict, tmp: Path) -> None:
    want = expected_files(base, patched)
    # GNU patch: -p1, never fuzz (imgquilt hunks are exact), refuse anything odd
    t1 = make_tree(tmp / "gnu", base)
    r = subprocess.run(["patch", "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(patch_file)], cwd=t1, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "offset" not in r.stdout and "fuzz" not in r.stdout, r.stdout
    assert tree_files(t1) == want
    # git apply (outside any repository, as a user would on a rootfs copy)
    t2 = make_tree(tmp / "git", base)
    r = subprocess.run(["git", "apply", "--verbose", str(patch_file)], cwd=t2, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree_files(t2) == want


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "rootfs", TOOL_BASE)


def test_refresh_writes_a_patch_that_patch_and_git_apply_accept(rootfs: Path, queue: Path, tmp_path: Path, cli_env) -> None:
    imgquilt("new", "0001-everything.patch", "-d", "Touch every awkward kind of file", "--author", "QA <qa@example.org>", cwd=queue, env=cli_env, check=0)
    imgquilt("add", "--new", *TOOL_PATCHED, "--image", f"rootfs:{rootfs}", cwd=queue, env=cli_env, check=0)  # app-helper is new
    work = queue / ".imgquilt/work"
    for rel, data in TOOL_PATCHED.items():
        if data is None:
            (work / rel).unlink()
        else:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
    os.chmod(work / "usr/bin/app-helper", 0o755)
    imgquilt("refresh", cwd=queue, env=cli_env, check=0)
    patch_file = queue / "patches/0001-everything.patch"
    raw = patch_file.read_bytes()
    assert raw.startswith(b"Description: Touch every awkward kind of file\nAuthor: QA <qa@example.org>\n\nIndex: ")
    p = parse_patch(raw, "0001-everything.patch")
    assert {s.path for s in p.sections} == set(TOOL_PATCHED)
    helper = next(s for s in p.sections if s.path == "usr/bin/app-helper")
    assert helper.is_new and helper.mode == 0o755
    assert next(s for s in p.sections if s.path == "usr/share/app/old.txt").is_delete
    for s in p.sections:
        assert s.base_sha256 == sha256_hex(TOOL_BASE.get(s.path)) and s.patched_sha256 == sha256_hex(TOOL_PATCHED[s.path])
    assert_applies_with_patch_and_git(patch_file, TOOL_BASE, TOOL_PATCHED, tmp_path)
    # and imgquilt's own apply agrees, byte for byte
    out = tmp_path / "applied"
    shutil.copytree(rootfs, out)
    imgquilt("apply", "--root", str(out), cwd=queue, env=cli_env, check=0)
    got = tree_files(out)
    got.pop("var/lib/imgquilt/applied.json")
    assert got == expected_files(TOOL_BASE, TOOL_PATCHED)
    assert os.stat(out / "usr/bin/app-helper").st_mode & 0o777 == 0o755


GIT_ENV = {"GIT_AUTHOR_NAME": "Dev One", "GIT_AUTHOR_EMAIL": "dev@example.org", "GIT_COMMITTER_NAME": "Dev One",
           "GIT_COMMITTER_EMAIL": "dev@example.org", "GIT_AUTHOR_DATE": "2024-05-02T10:00:00+00:00",
           "GIT_COMMITTER_DATE": "2024-05-02T10:00:00+00:00", "GIT_CONFIG_NOSYSTEM": "1"}


def git(*args: str, cwd: Path, env: dict) -> bytes:
    r = subprocess.run(["git", "-c", "core.autocrlf=false", *args], cwd=cwd, env={**env, **GIT_ENV}, capture_output=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def foreign_patch(maker: str, tmp_path: Path, env: dict) -> bytes:
    """The same change as `diff -urN`, `git diff` and `git format-patch` write it."""
    if maker == "diff":
        make_tree(tmp_path / "src/a", TOOL_BASE)
        b = make_tree(tmp_path / "src/b", expected_files(TOOL_BASE, TOOL_PATCHED))
        os.chmod(b / "usr/bin/app-helper", 0o755)
        r = subprocess.run(["diff", "-urN", "a", "b"], cwd=tmp_path / "src", capture_output=True)
        assert r.returncode == 1, r.stderr
        return r.stdout
    repo = make_tree(tmp_path / "repo", TOOL_BASE)
    git("init", "-q", ".", cwd=repo, env=env)
    git("add", "-A", cwd=repo, env=env)
    git("commit", "-q", "-m", "base", cwd=repo, env=env)
    (repo / "usr/share/app/old.txt").unlink()
    make_tree(repo, TOOL_PATCHED)
    os.chmod(repo / "usr/bin/app-helper", 0o755)
    git("add", "-A", cwd=repo, env=env)
    git("commit", "-q", "-m", "Tune the app\n\nMore workers, a helper script.\n\nSigned-off-by: Dev One <dev@example.org>", cwd=repo, env=env)
    if maker == "git-diff":
        return git("diff", "--no-color", "HEAD~1", "HEAD", cwd=repo, env=env)
    return git("format-patch", "-1", "--stdout", "HEAD", cwd=repo, env=env)


@pytest.mark.parametrize("maker", ["diff", "git-diff", "format-patch"])
def test_imported_patches_apply_with_patch_and_git_apply(maker: str, rootfs: Path, queue: Path, tmp_path: Path, cli_env) -> None:
    foreign = tmp_path / f"fix.{maker}"
    foreign.write_bytes(foreign_patch(maker, tmp_path, cli_env))
    imgquilt("import", str(foreign), "-P", "0001-imported.patch", "--image", f"rootfs:{rootfs}", cwd=queue, env=cli_env, check=0)
    patch_file = queue / "patches/0001-imported.patch"
    raw = patch_file.read_bytes()
    p = parse_patch(raw, "0001-imported.patch")
    assert {s.path for s in p.sections} == set(TOOL_PATCHED)
    helper = next(s for s in p.sections if s.path == "usr/bin/app-helper")
    assert helper.mode == (None if maker == "diff" else 0o755)  # only git records a new file's mode
    if maker == "format-patch":
        assert raw.startswith(
            b"Description: Tune the app\n More workers, a helper script.\n .\n Signed-off-by: Dev One <dev@example.org>\n"
            b"Author: Dev One <dev@example.org>\nLast-Update: 2024-05-02\n\nIndex: "
        )
    assert_applies_with_patch_and_git(patch_file, TOOL_BASE, TOOL_PATCHED, tmp_path)


def quilt_env(home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "QUILT_PATCHES": "patches", "QUILT_PC": ".pc", "LC_ALL": "C"}


def quilt(*args: str, cwd: Path, env: dict, stdin: bytes | None = None) -> str:
    r = subprocess.run(["quilt", *args], cwd=cwd, env=env, input=stdin, capture_output=True)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


def test_quilt_series_imports_to_the_same_files_as_quilt_push(tmp_path: Path, queue: Path, cli_env) -> None:
    src = make_tree(tmp_path / "pkg", TOOL_BASE)
    env = quilt_env(tmp_path / "quilt-home")
    # patch 1: edits, a new file, a deletion; a DEP-3 header set with `quilt header`
    quilt("new", "01-workers.patch", cwd=src, env=env)
    quilt("add", "etc/app.ini", "usr/share/app/old.txt", "usr/bin/app-helper", cwd=src, env=env)
    (src / "etc/app.ini").write_bytes(TOOL_PATCHED["etc/app.ini"])
    (src / "usr/share/app/old.txt").unlink()
    (src / "usr/bin").mkdir()
    (src / "usr/bin/app-helper").write_bytes(TOOL_PATCHED["usr/bin/app-helper"])
    quilt("refresh", cwd=src, env=env)
    dep3 = b"Description: More workers\n Two are not enough under load.\nAuthor: Ops <ops@example.org>\nOrigin: vendor\nX-Unknown-Field: kept as is\n\n"
    quilt("header", "-r", cwd=src, env=env, stdin=dep3)
    # patch 2: touches a file patch 1 touched, and the awkward ones
    quilt("new", "02-rest.patch", cwd=src, env=env)
    quilt("add", "etc/app.ini", "usr/lib/app/main.py", "usr/share/app/latin1.txt", cwd=src, env=env)
    (src / "etc/app.ini").write_bytes(TOOL_PATCHED["etc/app.ini"].replace(b"port = 80", b"port = 8080"))
    (src / "usr/lib/app/main.py").write_bytes(TOOL_PATCHED["usr/lib/app/main.py"])
    (src / "usr/share/app/latin1.txt").write_bytes(TOOL_PATCHED["usr/share/app/latin1.txt"])
    quilt("refresh", cwd=src, env=env)
    pushed = tree_files(src)  # what `quilt push -a` leaves
    quilt("pop", "-a", cwd=src, env=env)
    assert tree_files(src) == TOOL_BASE
    quilt("push", "-a", cwd=src, env=env)
    assert tree_files(src) == pushed

    image = make_tree(tmp_path / "image", TOOL_BASE)
    r = imgquilt("import", "--series", str(src / "patches/series"), "--image", f"rootfs:{image}", cwd=queue, env=cli_env, check=0)
    assert "Imported 01-workers.patch" in r.out and "Imported 02-rest.patch" in r.out
    assert (queue / "series").read_text() == "01-workers.patch\n02-rest.patch\n"
    first = (queue / "patches/01-workers.patch").read_bytes()
    assert first.startswith(dep3 + b"Index: ")  # DEP-3 header verbatim, unknown field included
    imgquilt("push", "-a", cwd=queue, env=cli_env, check=0)
    assert tree_files(queue / ".imgquilt/work") == {k: v for k, v in pushed.items() if k in ("etc/app.ini", "usr/lib/app/main.py", "usr/share/app/latin1.txt", "usr/bin/app-helper")}
    assert not (queue / ".imgquilt/work/usr/share/app/old.txt").exists()
    imgquilt("check", cwd=queue, env=cli_env, check=0)
    # the whole series on a rootfs copy gives exactly quilt's tree
    out = tmp_path / "applied"
    shutil.copytree(image, out)
    imgquilt("apply", "--root", str(out), cwd=queue, env=cli_env, check=0)
    got = tree_files(out)
    got.pop("var/lib/imgquilt/applied.json")
    assert got == pushed
    # and each imported patch still applies with patch -p1 and git apply, in order
    for tool in (["patch", "-p1", "--batch", "--fuzz=0", "-i"], ["git", "apply"]):
        t = make_tree(tmp_path / f"again-{tool[0]}", TOOL_BASE)
        for name in ("01-workers.patch", "02-rest.patch"):
            r = subprocess.run([*tool, str(queue / "patches" / name)], cwd=t, capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
        assert tree_files(t) == pushed


def test_quilt_series_that_fills_an_empty_file_imports_as_quilt_push_applies_it(tmp_path: Path, queue: Path, cli_env) -> None:
    """quilt writes `--- /dev/null` for a file that was empty (an `__init__.py`); GNU patch, so `quilt push`,
    fills the empty file and keeps its mode: import does the same, as a change of the empty file."""
    base = {"usr/lib/app/__init__.py": b"", "usr/bin/run": b""}
    src = make_tree(tmp_path / "pkg", base)
    os.chmod(src / "usr/bin/run", 0o755)
    env = quilt_env(tmp_path / "quilt-home")
    quilt("new", "01-fill.patch", cwd=src, env=env)
    quilt("add", *base, cwd=src, env=env)
    (src / "usr/lib/app/__init__.py").write_bytes(b"VERSION = '1'\n")
    (src / "usr/bin/run").write_bytes(b"#!/bin/sh\nexec app")
    quilt("refresh", cwd=src, env=env)
    assert b"--- /dev/null\n" in (src / "patches/01-fill.patch").read_bytes()
    image = make_tree(tmp_path / "image", base)
    os.chmod(image / "usr/bin/run", 0o755)
    fresh = shutil.copytree(image, tmp_path / "fresh")  # quilt's own pop would remove the "new" empty files
    shutil.copytree(src / "patches", fresh / "patches")
    quilt("push", "-a", cwd=fresh, env=env)
    pushed = tree_files(fresh)
    assert os.stat(fresh / "usr/bin/run").st_mode & 0o777 == 0o755
    imgquilt("import", "--series", str(src / "patches/series"), "--image", f"rootfs:{image}", cwd=queue, env=cli_env, check=0)
    p = parse_patch((queue / "patches/01-fill.patch").read_bytes())
    assert {s.path: s.base_sha256 for s in p.sections} == dict.fromkeys(base, sha256_hex(b""))
    out = shutil.copytree(image, tmp_path / "applied")
    imgquilt("apply", "--root", str(out), cwd=queue, env=cli_env, check=0)
    got = tree_files(out)
    got.pop("var/lib/imgquilt/applied.json")
    assert got == pushed and os.stat(out / "usr/bin/run").st_mode & 0o777 == 0o755
    for tool in (["patch", "-p1", "--batch", "--fuzz=0", "-i"], ["git", "apply"]):
        t = shutil.copytree(image, tmp_path / f"again-{tool[0]}")
        r = subprocess.run([*tool, str(queue / "patches/01-fill.patch")], cwd=t, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert tree_files(t) == pushed


def test_an_empty_patch_file_in_a_quilt_series_is_skipped_as_quilt_pushes_it(tmp_path: Path, queue: Path, cli_env) -> None:
    """`quilt push -a` applies a patch file of no bytes as nothing; the import skips it, says so (a
    note; `skipped` in --json, why "empty patch") and gives quilt's tree. A file holding any text but no
    diff is GNU patch's "garbage" to quilt, and stays refused."""
    base = {"etc/app.conf": b"a\n"}
    src = make_tree(tmp_path / "pkg", base)
    env = quilt_env(tmp_path / "quilt-home")
    quilt("new", "01-a.patch", cwd=src, env=env)
    quilt("add", "etc/app.conf", cwd=src, env=env)
    (src / "etc/app.conf").write_bytes(b"b\n")
    quilt("refresh", cwd=src, env=env)
    quilt("new", "02-empty.patch", cwd=src, env=env)
    (src / "patches/02-empty.patch").write_bytes(b"")
    quilt("new", "03-c.patch", cwd=src, env=env)
    quilt("add", "etc/app.conf", cwd=src, env=env)
    (src / "etc/app.conf").write_bytes(b"c\n")
    quilt("refresh", cwd=src, env=env)
    image = make_tree(tmp_path / "image", base)
    fresh = shutil.copytree(image, tmp_path / "fresh")
    shutil.copytree(src / "patches", fresh / "patches")
    quilt("push", "-a", cwd=fresh, env=env)
    pushed = tree_files(fresh)
    r = imgquilt("--json", "import", "--series", str(src / "patches/series"), "--image", f"rootfs:{image}", cwd=queue, env=cli_env, check=0)
    doc = json.loads(r.out)
    assert [(x["subject"], x["why"]) for x in doc["skipped"]] == [("02-empty.patch", "empty patch")]
    assert (queue / "series").read_text().split() == ["01-a.patch", "03-c.patch"]
    out = shutil.copytree(image, tmp_path / "applied")
    imgquilt("apply", "--root", str(out), cwd=queue, env=cli_env, check=0)
    got = tree_files(out)
    got.pop("var/lib/imgquilt/applied.json")
    assert got == pushed

    def again() -> Path:
        q = tmp_path / f"q{len(list(tmp_path.glob('q*')))}"
        shutil.copytree(queue, q, ignore=shutil.ignore_patterns(".imgquilt", "patches", "series", "targets.lock"))
        (q / "patches").mkdir(exist_ok=True)
        (q / "series").write_text("")
        return q

    r = imgquilt("import", "--series", str(src / "patches/series"), "--image", f"rootfs:{image}", cwd=again(), env=cli_env, check=0)
    assert "note: skipped" in r.err and "02-empty.patch" in r.err and "pushes as nothing" in r.err
    (src / "patches/02-empty.patch").write_bytes(b"Just a description\n")  # quilt: "Only garbage", not applied
    r = imgquilt("import", "--series", str(src / "patches/series"), "--image", f"rootfs:{image}", cwd=again(), env=cli_env, check=6)
    assert "no file diff found" in r.err


def test_quilt_series_with_p0_and_timestamps(tmp_path: Path, queue: Path, cli_env) -> None:
    """Older quilt and hand-made series: -p0 entries, epoch timestamps for new and deleted files."""
    image = make_tree(tmp_path / "image", {"a.txt": b"one\ntwo\n", "gone.txt": b"bye\n"})
    qdir = tmp_path / "upstream/patches"
    qdir.mkdir(parents=True)
    (qdir / "p0.diff").write_bytes(
        b"Description: a -p0 patch with timestamps\n\n"
        b"--- a.txt\t2024-05-01 10:00:00.000000000 +0200\n+++ a.txt\t2024-05-02 11:00:00.000000000 +0200\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
        b"--- new.txt\t1970-01-01 00:00:00.000000000 +0000\n+++ new.txt\t2024-05-02 11:00:00.000000000 +0200\n@@ -0,0 +1 @@\n+fresh\n"
        b"--- gone.txt\t2024-05-01 10:00:00.000000000 +0200\n+++ gone.txt\t1970-01-01 01:00:00.000000000 +0100\n@@ -1 +0,0 @@\n-bye\n"
    )
    (qdir / "series").write_text("# upstream fixes\np0.diff -p0\n")
    # quilt itself agrees on the result
    src = make_tree(tmp_path / "upstream", {"a.txt": b"one\ntwo\n", "gone.txt": b"bye\n"})
    quilt("push", "-a", cwd=src, env=quilt_env(tmp_path / "qh"))
    imgquilt("import", "--series", str(qdir), "--image", f"rootfs:{image}", cwd=queue, env=cli_env, check=0)
    p = parse_patch((queue / "patches/p0.diff").read_bytes(), "p0.diff")
    assert [(s.path, s.is_new, s.is_delete) for s in p.sections] == [("a.txt", False, False), ("new.txt", True, False), ("gone.txt", False, True)]
    imgquilt("push", "-a", cwd=queue, env=cli_env, check=0)
    assert tree_files(queue / ".imgquilt/work") == {k: v for k, v in tree_files(src).items() if k in ("a.txt", "new.txt")}
    assert not (src / "gone.txt").exists()


# --- the canonical format, property-tested ---------------------------------------------------
LINE = st.one_of(
    st.binary(min_size=0, max_size=12).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"\r", b"same", b"caf\xe9", b"\xff\xfe\x00", b"  indented", b"-dash", b"+plus", b"\\ back", b"@@ -1 +1 @@"]),
)
ENDING = st.sampled_from([b"\n", b"\r\n", b"\r", b""])


@st.composite
def contents(draw) -> bytes | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    lines = draw(st.lists(st.tuples(LINE, ENDING), max_size=14))
    data = b"".join(t + e for t, e in lines)
    if draw(st.booleans()) and data and not data.endswith(b"\n"):
        data += b"\n"
    return data


@st.composite
def pair(draw) -> tuple[bytes | None, bytes | None]:
    old = draw(contents())
    if old is not None and draw(st.booleans()):
        # a nearby edit, the usual case: change, insert or drop a few lines
        lines = old.split(b"\n")
        for _ in range(draw(st.integers(1, 3))):
            k = draw(st.integers(0, len(lines)))
            op = draw(st.sampled_from(["ins", "del", "mod"]))
            if op == "ins":
                lines.insert(k, draw(LINE))
            elif lines and k < len(lines):
                if op == "del":
                    del lines[k]
                else:
                    lines[k] = lines[k] + b"\r"
        new = b"\n".join(lines)
    else:
        new = draw(contents())
    if old is None and new is None:
        new = b""
    return old, new


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair(), st.sampled_from(["etc/app.ini", "usr/lib/x/caf\u00e9.py", "opt/a b/c.txt"]))
def test_canonical_section_round_trips_and_applies(p, path: str) -> None:
    old, new = p
    section = make_section(path, old, new, 0o755 if old is None and new is not None else None)
    header = Header(b"Description: property\nX-Custom: kept\n\n")
    patch = build_patch("p.patch", header, [section])
    parsed = parse_patch(patch.raw, "p.patch")
    assert parsed.raw == patch.raw
    assert build_patch("p.patch", parsed.header, parsed.sections).raw == patch.raw  # parse + write is byte-identical
    (s,) = parsed.sections
    assert s.raw == section.raw
    assert s.base_sha256 == sha256_hex(old) and s.patched_sha256 == sha256_hex(new)
    result = apply_section(old, s)  # NUL bytes: a GIT binary patch section
    assert result == (new or b"")
    # the importer reads imgquilt's own format too: same change, same pins
    conv = apply_foreign(parse_foreign(patch.raw, "p.patch"), 1, lambda _p, _follow: Base(old, None if old is None else 0o644))
    if old == new:
        assert conv.changes == []
    else:
        (c,) = conv.changes
        assert (c.path, c.base, c.result) == (path, old, new)
        assert make_section(c.path, c.base, c.result, c.mode).raw == section.raw
