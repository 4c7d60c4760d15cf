"""A root's apply record (var/lib/imgquilt/applied.json) is a hint, never a source of bytes or deletions.

A root is input: an image layer or a tarball can ship any record. `apply --reverse --root` and
`restore --root` take every base from the queue (its sections' pins, targets.lock, the object store
keyed by those pins, or --image), delete only files the queue's own sections create, and refuse
(exit 6, nothing written) a record whose series is not a version of this queue (the current one, a
profile's selection, or one in the queue's git history), naming the reason.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from support.hostile import canary_dir, refused, run, unchanged
from imgquilt.queue.hunks import sha256_hex
from imgquilt.store import ObjectStore
from support.qtools import empty_queue, tree_hash, write_patch

RECORD = "var/lib/imgquilt/applied.json"
CONF, NEW_CONF = b"workers = 2\n", b"workers = 8\n"
SECRET, SECRET2 = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n", b"-----BEGIN PRIVATE KEY-----\nrotated\n"
PASSWD = b"root:x:0:0:root:/root:/bin/sh\n"
MINE = b"the attacker's own file\n"
GIT = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")


def _setup(tmp: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """A root with an image file the queue edits (etc/app.conf), one it never names (etc/passwd), a 0640
    secret the queue edits (so its bytes sit in the object store), an attacker's 0644 file and an empty
    image directory; a queue (in git) that edits the two and creates etc/new.conf; applied in place."""
    root = tmp / "root"
    for rel, data, mode in (("etc/app.conf", CONF, 0o644), ("etc/passwd", PASSWD, 0o644), ("etc/secret.key", SECRET, 0o640),
                            ("home/mallory/notes.txt", MINE, 0o644)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        os.chmod(root / rel, mode)
    (root / "srv/empty").mkdir(parents=True)
    q = empty_queue(tmp / "q")
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF), ("etc/secret.key", SECRET, SECRET2),
                                        ("etc/new.conf", None, b"new\n")])
    subprocess.run("git init -q && git add -A && git commit -qm queue", shell=True, cwd=q, env={**env, **GIT}, check=True)
    store = ObjectStore(q)
    store.put(CONF)
    store.put(SECRET)
    assert run(q, "apply", "--root", str(root), "--no-python-check", env=env).code == 0
    return root, q


def _plant(root: Path, *files: dict, series: str | None = None, dirs: list[str] | None = None) -> None:
    """Rewrite the root's record: `files` added to its last patch, its series and created_dirs set."""
    doc = json.loads((root / RECORD).read_bytes())
    doc["patches"][-1]["files"].extend(files)
    if series is not None:
        doc["series_sha256"] = series
    if dirs is not None:
        doc["created_dirs"] = dirs
    (root / RECORD).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _entry(path: str, base: str, patched: str) -> dict:
    return {"path": path, "resolved": path, "base_sha256": base, "patched_sha256": patched}


def test_planted_record_cannot_make_reverse_delete_an_image_file(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    _plant(root, _entry("etc/passwd", "absent", sha256_hex(PASSWD)))  # this queue's series, a file it never creates
    home = canary_dir(tmp_path)
    with unchanged(root, q / "patches", home):
        r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    refused(r, 6, "etc/passwd", "does not match this queue", "Nothing was written")
    assert (root / "etc/passwd").read_bytes() == PASSWD
    # nor with a series no version of the queue ever had
    _plant(root, series="ab" * 32)
    with unchanged(root):
        r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    refused(r, 6, "abababab", "not a version of this queue", "git history")


def test_planted_record_cannot_copy_a_secret_into_an_attackers_file(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    assert ObjectStore(q).get_or_absent(sha256_hex(SECRET)) == (True, SECRET)
    mine = _entry("home/mallory/notes.txt", sha256_hex(SECRET), sha256_hex(MINE))
    for series in (None, "cd" * 32):  # this queue's series and a foreign one
        _plant(root, mine, series=series)
        with unchanged(root):
            r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
        refused(r, 6, "home/mallory/notes.txt" if series is None else "not a version of this queue")
        assert (root / "home/mallory/notes.txt").read_bytes() == MINE


def test_restore_of_a_path_no_pin_names_is_refused_whatever_the_record_says(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    _plant(root, _entry("home/mallory/notes.txt", sha256_hex(SECRET), sha256_hex(MINE)))
    with unchanged(root):
        r = run(q, "restore", "home/mallory/notes.txt", "--root", str(root), env=cli_env)
    refused(r, 2, "home/mallory/notes.txt", "no pin of this queue", "--image")
    assert (root / "home/mallory/notes.txt").read_bytes() == MINE
    # a path the queue pins is restored from its pin, not from what a record says the base was
    _plant(root, _entry("etc/app.conf", sha256_hex(SECRET), sha256_hex(NEW_CONF)))
    assert run(q, "restore", "etc/app.conf", "--root", str(root), env=cli_env).code == 0
    assert (root / "etc/app.conf").read_bytes() == CONF


def test_planted_created_dirs_cannot_make_reverse_remove_an_image_directory(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    _plant(root, dirs=["var", "var/lib", "var/lib/imgquilt", "srv", "srv/empty"])
    with unchanged(root):
        r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    refused(r, 6, "srv/empty", "does not match this queue")
    assert (root / "srv/empty").is_dir()


def test_planted_base_that_is_not_the_queues_pin_is_refused(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """The record names the queue's own file, but another base (the secret's bytes): not written."""
    root, q = _setup(tmp_path, cli_env)
    doc = json.loads((root / RECORD).read_bytes())
    doc["patches"][0]["files"][0]["base_sha256"] = sha256_hex(SECRET)
    (root / RECORD).write_text(json.dumps(doc))
    with unchanged(root):
        r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    refused(r, 6, "etc/app.conf", "does not match this queue")
    assert (root / "etc/app.conf").read_bytes() == NEW_CONF


def test_reverse_takes_off_this_queue_and_an_older_version_from_its_history(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    before = tmp_path / "before"
    subprocess.run(["cp", "-a", str(root), str(before)], check=True)
    # the queue moves on (a second patch, committed): the root runs the older version
    write_patch(q, "0002-more.patch", [("etc/app.conf", NEW_CONF, b"workers = 16\n")])
    subprocess.run("git add -A && git commit -qm more", shell=True, cwd=q, env={**cli_env, **GIT}, check=True)
    r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    assert r.code == 0, r.err
    assert (root / "etc/app.conf").read_bytes() == CONF and (root / "etc/secret.key").read_bytes() == SECRET
    assert not (root / "etc/new.conf").exists() and not (root / "var").exists()
    assert (root / "srv/empty").is_dir() and (root / "etc/passwd").read_bytes() == PASSWD
    assert oct((root / "etc/secret.key").stat().st_mode & 0o777) == oct(0o640)
    # an older version this queue neither committed nor applied in place (another clone did): refused, naming why
    subprocess.run(["rm", "-rf", str(root)], check=True)
    subprocess.run(["cp", "-a", str(before), str(root)], check=True)
    subprocess.run(["rm", "-rf", str(q / ".git"), str(q / ".imgquilt/state/applied-series.json")], check=True)
    with unchanged(root):
        r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    refused(r, 6, "not a version of this queue")
    assert tree_hash(root) == tree_hash(before)


def test_an_uncommitted_version_this_queue_applied_in_place_is_known_by_its_sealed_ledger(tmp_path: Path,
                                                                                          cli_env: dict[str, str]) -> None:
    """Applied in place, then the queue changed (not committed, no git at all): the version the root runs
    is in the queue's sealed ledger, so it comes off; a ledger the queue was cloned with is not believed."""
    root, q = _setup(tmp_path, cli_env)
    subprocess.run(["rm", "-rf", str(q / ".git")], check=True)
    ledger = q / ".imgquilt/state/applied-series.json"
    assert json.loads(ledger.read_text())["series"] == [json.loads((root / RECORD).read_text())["series_sha256"]]
    write_patch(q, "0002-more.patch", [("etc/app.conf", NEW_CONF, b"workers = 16\n")])
    before = tree_hash(root)
    # a ledger that is not sealed with the user's key names the same series: not believed
    doc = json.loads(ledger.read_text())
    doc["seal"] = "0" * 64
    good = ledger.read_text()
    ledger.write_text(json.dumps(doc))
    with unchanged(root):
        refused(run(q, "apply", "--reverse", "--root", str(root), env=cli_env), 6, "not a version of this queue")
    ledger.write_text(good)
    r = run(q, "apply", "--reverse", "--root", str(root), env=cli_env)
    assert r.code == 0, r.err
    assert tree_hash(root) != before and (root / "etc/app.conf").read_bytes() == CONF and not (root / "var").exists()


def test_image_given_vouches_only_for_the_bytes_it_has_never_for_a_deletion(tmp_path: Path, cli_env: dict[str, str]) -> None:
    root, q = _setup(tmp_path, cli_env)
    image = tmp_path / "image"
    for rel, data in (("etc/app.conf", CONF), ("etc/passwd", PASSWD), ("etc/secret.key", SECRET), ("home/mallory/notes.txt", MINE)):
        (image / rel).parent.mkdir(parents=True, exist_ok=True)
        (image / rel).write_bytes(data)
    for planted in (_entry("etc/passwd", "absent", sha256_hex(PASSWD)),  # --image has it: still never deleted
                    _entry("home/mallory/notes.txt", sha256_hex(SECRET), sha256_hex(MINE))):  # not what --image has there
        _plant(root, planted)
        with unchanged(root):
            r = run(q, "apply", "--reverse", "--root", str(root), "--image", f"rootfs:{image}", env=cli_env)
        refused(r, 6, planted["path"], "does not match this queue")
        doc = json.loads((root / RECORD).read_bytes())
        doc["patches"][-1]["files"].pop()
        (root / RECORD).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    # nor does --image make a foreign record a version of this queue
    (root / "etc/passwd").write_bytes(b"edited\n")
    _plant(root, _entry("etc/passwd", sha256_hex(PASSWD), sha256_hex(b"edited\n")), series="ef" * 32)
    refused(run(q, "apply", "--reverse", "--root", str(root), "--image", f"rootfs:{image}", env=cli_env), 6,
            "not a version of this queue")
