"""git's extended headers, made by real git, imported as `git apply` reads them; names and paths as the
field writes them; cover letters.

Each diff is written by `git diff` / `git format-patch` in a scratch repository, applied with `git apply`
to a copy of the tree, and imported + applied with imgquilt to another copy: the trees must agree
(contents, exec bits, symlinks).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from imgquilt.queue.patchfile import parse_patch
from support.qtools import imgquilt
from support.import_trees import LINK, make_tree, refused_with_hint, tree_state
from support.import_git import git


def repo_with(tmp: Path, spec: dict[str, object], exe: tuple[str, ...] = ()) -> Path:
    r = make_tree(tmp / "repo", spec)
    for p in exe:
        os.chmod(r / p, 0o755)
    git(r, "init", "-q")
    git(r, "add", "-A")
    git(r, "commit", "-qm", "base")
    return r


def snapshot(repo: Path, dest: Path) -> Path:
    """The repository's committed tree as a plain directory (no .git)."""
    shutil.copytree(repo, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    git(repo, "diff", "--quiet", "HEAD")  # the work tree is the commit: nothing left over
    return dest


def both_ways(tmp: Path, base: Path, diff: bytes, *extra: str) -> tuple[dict, dict, Path]:
    """(git apply's tree, imgquilt's tree, the queue) for `diff` on `base`."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "x.diff").write_bytes(diff)
    ref = shutil.copytree(base, tmp / "ref", symlinks=True)
    subprocess.run(["git", "apply", str(tmp / "x.diff")], cwd=ref, check=True, capture_output=True,
                   env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp)))
    q = tmp / "q"
    q.mkdir()
    (q / "series").write_text("")
    imgquilt("import", str(tmp / "x.diff"), "-P", "x.patch", *extra, "--image", f"rootfs:{base}", cwd=q, check=0)
    out = shutil.copytree(base, tmp / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    return tree_state(ref), tree_state(out), q


def _content(word: str) -> str:
    return f"{word}\n" * 101  # git t4130's files: 101 equal lines, so -B breaks and -M pairs them


def test_criss_cross_renames_swap_as_git_apply_swaps(tmp_path: Path) -> None:
    """git's t4130: two files renamed onto each other, then three in a cycle; a renamed file keeps its exec bit."""
    r = repo_with(tmp_path, {"file1": _content("some content"), "file2": _content("some other content"),
                             "file3": _content("again something else")}, exe=("file1",))
    base = snapshot(r, tmp_path / "base")
    os.rename(r / "file1", r / "tmp")
    os.rename(r / "file2", r / "file1")
    os.rename(r / "tmp", r / "file2")
    diff = git(r, "diff", "-M", "-B").encode()
    assert b"rename from file2\nrename to file1" in diff and b"rename from file1\nrename to file2" in diff
    want, got, q = both_ways(tmp_path / "two", base, diff)
    assert got == want and want["file2"] == ("file", _content("some content").encode(), True)
    # imgquilt writes the swap as two whole-content sections and the mode changes git's headers say
    sections = parse_patch((q / "patches/x.patch").read_bytes()).sections
    assert {(s.path, s.mode_change) for s in sections} == {("file1", (0o755, 0o644)), ("file2", (0o644, 0o755))}
    git(r, "checkout", "-q", "--", ".")
    os.rename(r / "file1", r / "tmp")
    os.rename(r / "file2", r / "file1")
    os.rename(r / "file3", r / "file2")
    os.rename(r / "tmp", r / "file3")
    diff = git(r, "diff", "-M", "-B").encode()
    assert diff.count(b"rename from") == 3
    want, got, _ = both_ways(tmp_path / "three", base, diff)
    assert got == want


def test_mode_changes_copies_and_renamed_symlinks_as_git_apply(tmp_path: Path) -> None:
    r = repo_with(tmp_path, {"bin/tool": "#!/bin/sh\necho hi\n", "lib/a.py": "A = 1\n" * 30, "etc/link": (LINK, "../lib/a.py"),
                             "etc/doc": "docs\n"}, exe=("bin/tool",))
    base = snapshot(r, tmp_path / "base")
    os.chmod(r / "bin/tool", 0o644)  # mode only
    os.chmod(r / "etc/doc", 0o755)
    shutil.copy(r / "lib/a.py", r / "lib/b.py")  # a copy, changed
    with open(r / "lib/b.py", "a") as f:
        f.write("B = 2\n")
    os.rename(r / "etc/link", r / "etc/link2")  # a symlink renamed
    git(r, "add", "-A")
    diff = git(r, "diff", "--cached", "-C", "-C", "-M", "HEAD").encode()
    assert b"old mode 100755\nnew mode 100644" in diff and b"copy from lib/a.py" in diff and b"rename from etc/link" in diff
    want, got, q = both_ways(tmp_path / "t", base, diff)
    assert got == want
    assert got["bin/tool"][2] is False and got["etc/doc"][2] is True and got["etc/link2"] == ("link", "../lib/a.py")
    # the queue's patch itself still applies with both tools (git's headers kept for modes and links)
    for tool in (["git", "apply"], ["patch", "-p1", "--batch", "-F0", "-i"]):
        t = shutil.copytree(base, tmp_path / f"again-{tool[0]}", symlinks=True)
        subprocess.run([*tool, str(q / "patches/x.patch")], cwd=t, check=True, capture_output=True,
                       env=dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path)))
        assert tree_state(t) == want, tool[0]


def two_config_commits(tmp_path: Path, first: str, second: str) -> tuple[Path, Path]:
    """A repository whose app/config.toml gets two commits (the port, then the workers), and a
    snapshot of its files before them."""
    r = repo_with(tmp_path, {"app/config.toml": "port = 80\nworkers = 2\n"})
    base = snapshot(r, tmp_path / "base")
    (r / "app/config.toml").write_text("port = 8080\nworkers = 2\n")
    git(r, "commit", "-qam", first)
    (r / "app/config.toml").write_text("port = 8080\nworkers = 8\n")
    git(r, "commit", "-qam", second)
    return r, base


def test_a_cover_letter_is_skipped_and_named(tmp_path: Path) -> None:
    """`git format-patch --cover-letter --stdout`: `git am` skips the cover letter; so does import, and says so."""
    r, base = two_config_commits(tmp_path, "Listen on 8080", "Eight workers")
    mbox = git(r, "format-patch", "--cover-letter", "--stdout", "HEAD~2").encode()
    assert b"[PATCH 0/2]" in mbox
    (tmp_path / "series.mbox").write_bytes(mbox)
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    res = imgquilt("import", str(tmp_path / "series.mbox"), "--image", f"rootfs:{base}", cwd=q, check=0)
    assert "skipped" in res.err and "(mail 1): a cover letter ('[PATCH 0/2] *** SUBJECT HERE ***')" in res.err
    assert (q / "series").read_text() == "0001-Listen-on-8080.patch\n0002-Eight-workers.patch\n"
    out = shutil.copytree(base, tmp_path / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert (out / "app/config.toml").read_text() == "port = 8080\nworkers = 8\n"
    # --json names it too
    q2 = tmp_path / "q2"
    q2.mkdir()
    (q2 / "series").write_text("")
    res = imgquilt("--json", "import", str(tmp_path / "series.mbox"), "--image", f"rootfs:{base}", cwd=q2, check=0)
    import json

    doc = json.loads(res.out)
    assert doc["skipped"] == [{"source": f"{tmp_path / 'series.mbox'} (mail 1)", "subject": "[PATCH 0/2] *** SUBJECT HERE ***",
                               "why": "cover letter"}]
    # a file holding the cover letter alone is bad input, with a hint
    cover = mbox[: mbox.index(b"\nFrom ", 10) + 1]
    (tmp_path / "cover.mbox").write_bytes(cover)
    refused_with_hint(imgquilt("import", str(tmp_path / "cover.mbox"), "--image", f"rootfs:{base}", cwd=q2), (6,))


def test_mails_are_named_from_their_decoded_subject_as_git_format_patch_names_them(tmp_path: Path) -> None:
    """A subject with a non-ASCII letter is RFC 2047-encoded in the mail (`=?UTF-8?q?...?=`), a long one
    folded over two lines: the names are the ones `git format-patch -o` gives the same commits, not
    `0001-UTF-8-q-caf-C3-A9-20...`."""
    r, base = two_config_commits(tmp_path, "Listen on 8080 for the café",
                                 "Eight workers, as the résumé of a very long discussion that git folds in the mail says")
    mbox = git(r, "format-patch", "--stdout", "HEAD~2").encode()
    assert b"=?UTF-8?q?" in mbox
    (tmp_path / "x.mbox").write_bytes(mbox)
    names = git(r, "format-patch", "-o", str(tmp_path / "fp"), "HEAD~2").split()
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    imgquilt("import", str(tmp_path / "x.mbox"), "--image", f"rootfs:{base}", cwd=q, check=0)
    assert (q / "series").read_text().split() == [Path(n).name for n in names]
    assert names[0].endswith("/0001-Listen-on-8080-for-the-caf.patch")


def test_a_subject_in_a_charset_python_does_not_know_is_shown_not_an_internal_error(tmp_path: Path) -> None:
    """`Subject: =?x-bogus?q?...?=` (a charset without a codec) or encoded bytes that are not UTF-8 made
    import exit 1 (LookupError, UnicodeDecodeError); the subject is decoded as far as it can be, for the
    patch's name and its Description."""
    r, base = two_config_commits(tmp_path, "Listen on 8080", "Eight workers")
    mbox = git(r, "format-patch", "--stdout", "HEAD~2").encode()
    mbox = mbox.replace(b"Subject: [PATCH 1/2] Listen on 8080", b"Subject: [PATCH 1/2] =?x-bogus?q?Listen_on_8080?=")
    mbox = mbox.replace(b"Subject: [PATCH 2/2] Eight workers", b"Subject: [PATCH 2/2] =?utf-8?q?Eight_workers_=C3?=")
    (tmp_path / "x.mbox").write_bytes(mbox)
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    imgquilt("import", str(tmp_path / "x.mbox"), "--image", f"rootfs:{base}", cwd=q, check=0)
    assert (q / "series").read_text().split() == ["0001-Listen-on-8080.patch", "0002-Eight-workers.patch"]
    assert (q / "patches/0001-Listen-on-8080.patch").read_bytes().startswith(b"Description: Listen on 8080\n")


SITE = "usr/local/lib/python3.11/site-packages"
SP = b"class SamplingParams:\n    n: int = 1\n    best_of: int = 1\n"


def test_package_relative_paths_are_found_by_their_tail(tmp_path: Path) -> None:
    """A plain diff and a git format-patch written against the package, not the image: the one file ending
    in the path is taken and the note names --prefix; a new file of the patch goes there too; two
    candidates are refused (exit 6) with a hint naming --prefix for each."""
    image = make_tree(tmp_path / "image", {f"{SITE}/vllm/sampling_params.py": SP, "opt/other/readme": "x\n"})
    plain = (b"--- a/vllm/sampling_params.py\n+++ b/vllm/sampling_params.py\n@@ -1,3 +1,3 @@\n class SamplingParams:\n"
             b"     n: int = 1\n-    best_of: int = 1\n+    best_of: int = 2\n"
             b"--- /dev/null\n+++ b/vllm/extra.py\n@@ -0,0 +1 @@\n+EXTRA = True\n")
    (tmp_path / "plain.diff").write_bytes(plain)
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    r = imgquilt("import", str(tmp_path / "plain.diff"), "--image", f"rootfs:{image}", cwd=q, check=0)
    assert f"so the patch's paths start at {SITE} (say so with --prefix {SITE})" in r.err
    out = shutil.copytree(image, tmp_path / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert (out / SITE / "vllm/sampling_params.py").read_bytes() == SP.replace(b"best_of: int = 1", b"best_of: int = 2")
    assert (out / SITE / "vllm/extra.py").read_bytes() == b"EXTRA = True\n" and not (out / "vllm").exists()
    # the same change as a git format-patch: its blob matches, only the path is package-relative
    repo = repo_with(tmp_path / "g", {"vllm/sampling_params.py": SP})
    (repo / "vllm/sampling_params.py").write_bytes(SP.replace(b"best_of: int = 1", b"best_of: int = 2"))
    git(repo, "commit", "-qam", "best_of 2")
    (tmp_path / "g.patch").write_text(git(repo, "format-patch", "--stdout", "-1"))
    q2 = tmp_path / "q2"
    q2.mkdir()
    (q2 / "series").write_text("")
    r = imgquilt("import", str(tmp_path / "g.patch"), "--image", f"rootfs:{image}", cwd=q2, check=0)
    assert "with the diff's git blob" in r.err and f"--prefix {SITE}" in r.err
    # two files with that tail: refused, the hint offers both prefixes
    make_tree(image, {"opt/vendored/vllm/sampling_params.py": SP})
    q3 = tmp_path / "q3"
    q3.mkdir()
    (q3 / "series").write_text("")
    r = imgquilt("import", str(tmp_path / "plain.diff"), "--image", f"rootfs:{image}", cwd=q3)
    refused_with_hint(r, (6,))
    assert f"--prefix {SITE}" in r.err and "--prefix opt/vendored" in r.err


def test_a_mode_change_goes_through_the_work_tree(tmp_path: Path) -> None:
    """push sets the new mode on the work copy, refresh keeps the mode change (and records one made with
    chmod), pop puts the old mode back; a symlink patch cannot be pushed (the work tree holds regular files)."""
    image = make_tree(tmp_path / "image", {"bin/tool": "#!/bin/sh\n", "etc/conf": "x\n", "etc/link": (LINK, "conf")})
    (tmp_path / "x.diff").write_bytes(b"diff --git a/bin/tool b/bin/tool\nold mode 100644\nnew mode 100755\n")
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    imgquilt("import", str(tmp_path / "x.diff"), "-P", "x.patch", "--image", f"rootfs:{image}", cwd=q, check=0)
    written = (q / "patches/x.patch").read_bytes()
    assert b"old mode 100644\nnew mode 100755\n" in written
    imgquilt("push", cwd=q, check=0)
    assert os.stat(q / ".imgquilt/work/bin/tool").st_mode & 0o777 == 0o755
    imgquilt("refresh", cwd=q, check=0)
    assert (q / "patches/x.patch").read_bytes() == written
    imgquilt("add", "etc/conf", cwd=q, check=0)
    os.chmod(q / ".imgquilt/work/etc/conf", 0o755)
    imgquilt("refresh", cwd=q, check=0)
    sections = parse_patch((q / "patches/x.patch").read_bytes()).sections
    assert {s.path: s.mode_change for s in sections} == {"bin/tool": (0o644, 0o755), "etc/conf": (0o644, 0o755)}
    imgquilt("pop", cwd=q, check=0)
    out = shutil.copytree(image, tmp_path / "out", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert os.stat(out / "bin/tool").st_mode & 0o777 == 0o755 and os.stat(out / "etc/conf").st_mode & 0o777 == 0o755
    (tmp_path / "l.diff").write_bytes(b"diff --git a/etc/link b/etc/link\nindex 1..2 120000\n--- a/etc/link\n+++ b/etc/link\n"
                                      b"@@ -1 +1 @@\n-conf\n\\ No newline at end of file\n+other\n\\ No newline at end of file\n")
    imgquilt("import", str(tmp_path / "l.diff"), "-P", "l.patch", "--ignore-git-index", "--image", f"rootfs:{image}", cwd=q, check=0)
    r = imgquilt("push", "-a", cwd=q, check=2)
    assert "changes symlinks (etc/link)" in r.err and "imgquilt apply" in r.err.splitlines()[-1]
