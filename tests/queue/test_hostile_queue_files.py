"""Hostile queue files: patches that mean two things, FIFOs and directories in series, mode values,
over-long names and targets.lock garbage. Each is exit 6 with a clear message (never exit 1, never
a hang), before anything is written: the root and a canary beside it hash the same afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.hostile import CONF, NEW_CONF, canary_dir, refused, run, small_root, unchanged
from support.qtools import TOOL, imgquilt, write_patch


def _world(tmp: Path) -> tuple[Path, Path, Path]:
    root = small_root(tmp / "root")
    q = tmp / "q"
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    return q, root, canary_dir(tmp)


def _edit_patch(q: Path, old: bytes, new: bytes) -> None:
    p = q / "patches/0001-conf.patch"
    raw = p.read_bytes()
    assert old in raw
    p.write_bytes(raw.replace(old, new))


DISAGREE = {
    "other-file": (b"+++ b/etc/app.conf", b"+++ b/usr/bin/tool"),
    "both-other": (b"--- a/etc/app.conf\n+++ b/etc/app.conf", b"--- a/usr/bin/tool\n+++ b/usr/bin/tool"),
    "dotdot": (b"+++ b/etc/app.conf", b"+++ b/../../etc/app.conf"),
    "dotdot-inside": (b"--- a/etc/app.conf", b"--- a/etc/../etc/app.conf"),
    "absolute": (b"--- a/etc/app.conf", b"--- /etc/app.conf"),
    "backslash": (b"+++ b/etc/app.conf", b"+++ b/etc\\app.conf"),
    "no-prefix": (b"+++ b/etc/app.conf", b"+++ app.conf"),
    "new-not-devnull": (b"--- a/etc/app.conf", b"--- /dev/null"),
}


@pytest.mark.parametrize("case", sorted(DISAGREE))
def test_diff_names_must_agree_with_index(tmp_path: Path, cli_env: dict[str, str], case: str) -> None:
    q, root, home = _world(tmp_path)
    _edit_patch(q, *DISAGREE[case])
    with unchanged(root, home):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "0001-conf.patch")
        r = run(q, "check", env=cli_env)
        refused(r, 6, "0001-conf.patch")
        assert "etc/app.conf" in r.out + r.err


def test_index_itself_is_checked(tmp_path: Path, cli_env: dict[str, str]) -> None:
    q, root, home = _world(tmp_path)
    _edit_patch(q, b"Index: etc/app.conf", b"Index: ../etc/app.conf")
    with unchanged(root, home):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "..")


@pytest.mark.parametrize("kind", ["fifo", "directory", "series-fifo", "series-directory"])
def test_fifo_or_directory_in_the_queue_is_refused_without_hanging(tmp_path: Path, cli_env: dict[str, str], kind: str) -> None:
    q, root, home = _world(tmp_path)
    target = q / ("series" if kind.startswith("series") else "patches/0001-conf.patch")
    target.unlink()
    if kind.endswith("fifo"):
        os.mkfifo(target)
    else:
        target.mkdir()
    with unchanged(root, home):
        for args in (["apply", "--root", str(root)], ["check"]):
            r = imgquilt("--queue", str(q), *args, cwd=q, env=cli_env)
            refused(r, 6, "not a regular file")


def test_a_nul_byte_in_a_series_name_is_malformed_series(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A series line whose name holds a NUL byte (a bad merge, a binary paste) is no path any system can
    open: MalformedSeries naming the line, never the `embedded null byte` of an open() (exit 1)."""
    q, root, home = _world(tmp_path)
    with open(q / "series", "ab") as f:
        f.write(b"0002-we\x00ird.patch\n")
    with unchanged(root, home):
        for args in (["apply", "--root", str(root)], ["check"], ["lock", "--image", f"rootfs:{root}"]):
            refused(run(q, *args, env=cli_env), 6, "series line 2", "unsafe patch name")


def test_an_oversized_patch_file_streams_in_bounded_memory(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A patch file far larger than memory allows (1 GiB, sparse: NULs after its hunks, which every
    reader takes as trailing text) is read as it streams: applied under an address-space limit of
    768 MiB, which holding it whole would break."""
    import resource

    q, root, home = _world(tmp_path)
    with open(q / "patches/0001-conf.patch", "r+b") as f:
        f.truncate(1 << 30)  # sparse: costs no disk

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (768 << 20, 768 << 20))

    env = {**cli_env, "PYTHONPATH": str(TOOL)}
    p = subprocess.run([sys.executable, "-m", "imgquilt", "--queue", str(q), "apply", "--no-python-check", "--root", str(root)],
                       cwd=q, env=env, capture_output=True, text=True, preexec_fn=limit)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("mode", ["77777777777777777777", "-1", "4755", "2755", "1777", "0o755", "7777", "100644", "", "0x1ff"])
def test_mode_is_permission_bits_only(tmp_path: Path, cli_env: dict[str, str], mode: str) -> None:
    root = small_root(tmp_path / "root")
    q = tmp_path / "q"
    write_patch(q, "0001-tool.patch", [("usr/bin/tool", None, b"#!/bin/sh\n")], modes={"usr/bin/tool": 0o755})
    _edit = q / "patches/0001-tool.patch"
    _edit.write_bytes(_edit.read_bytes().replace(b"Mode: 0755", f"Mode: {mode}".encode()))
    with unchanged(root):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "Mode")


@pytest.mark.parametrize("mode,want", [("0755", 0o755), ("644", 0o644), ("0600", 0o600), ("750", 0o750)])
def test_plain_modes_still_apply(tmp_path: Path, cli_env: dict[str, str], mode: str, want: int) -> None:
    root = small_root(tmp_path / "root")
    q = tmp_path / "q"
    # an executable one is written with git's `new file mode 100755` too (which its `Mode:` must agree with)
    write_patch(q, "0001-tool.patch", [("usr/bin/tool", None, b"#!/bin/sh\n")], modes={"usr/bin/tool": want})
    _edit = q / "patches/0001-tool.patch"
    _edit.write_bytes(_edit.read_bytes().replace(f"Mode: {want:04o}".encode(), f"Mode: {mode}".encode()))
    r = run(q, "apply", "--root", str(root), env=cli_env)
    assert r.code == 0, r.out + r.err
    assert (root / "usr/bin/tool").stat().st_mode & 0o7777 == want


@pytest.mark.parametrize("written,edited", [(0o755, "0644"), (0o755, "0600"), (0o644, "0755")])
def test_mode_against_git_new_file_mode_on_the_executable_bit_is_refused(
        tmp_path: Path, cli_env: dict[str, str], written: int, edited: str) -> None:
    """`Mode:` gives the exact bits, git's `new file mode` only 100644 or 100755: when they disagree on
    the executable bit, git apply and patch would make another file than imgquilt: bad input (exit 6)."""
    root = small_root(tmp_path / "root")
    q = tmp_path / "q"
    raw = write_patch(q, "0001-tool.patch", [("usr/bin/tool", None, b"")], modes={"usr/bin/tool": written})
    assert b"new file mode 100" in raw  # an empty new file: git's form, whatever its mode
    _edit = q / "patches/0001-tool.patch"
    _edit.write_bytes(raw.replace(f"Mode: {written:04o}".encode(), f"Mode: {edited}".encode()))
    with unchanged(root):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "disagree on the executable bit")


LONG = "x" * 300


@pytest.mark.parametrize("verb", ["apply", "audit", "lock"])
def test_over_long_name_is_bad_input(tmp_path: Path, cli_env: dict[str, str], verb: str) -> None:
    root = small_root(tmp_path / "root")
    q = tmp_path / "q"
    write_patch(q, "0001-long.patch", [(f"etc/{LONG}/conf", CONF, NEW_CONF), (f"etc/{LONG}", None, b"new\n")])
    home = canary_dir(tmp_path)
    args = {"apply": ["apply", "--root", str(root)], "audit": ["audit", "--root", str(root)],
            "lock": ["lock", "--image", f"rootfs:{root}"]}[verb]
    with unchanged(root, home):
        r = run(q, *args, env=cli_env)
        if verb == "audit":  # audit reports, it does not refuse: the file is missing, the reason in detail
            refused(r, 5, "missing")
            r = run(q, "audit", "--root", str(root), "--json", env=cli_env)
            doc = json.loads(r.out)
            files = doc["patches"][0]["files"]
            assert files[0]["state"] == "missing" and "too long" in files[0]["detail"].lower(), files[0]
        else:
            refused(r, 6)
            assert "too long" in (r.out + r.err).lower(), r.out + r.err


LOCK_GARBAGE = {
    "uid-inf": ("uid = 0", "uid = inf"),
    "uid-float": ("uid = 0", "uid = 1.5"),
    "uid-string": ("uid = 0", 'uid = "root"'),
    "uid-negative": ("uid = 0", "uid = -1"),
    "uid-huge": ("uid = 0", "uid = 99999999999999999"),
    "mode-int": ('mode = "0644"', "mode = 420"),
    "mode-huge": ('mode = "0644"', 'mode = "77777777777777777777"'),
    "target-string": (None, 'version = 1\nseries_sha256 = "x"\ntarget = ["a"]\n[image]\nref = "rootfs:/"\n'),
    "image-string": (None, 'version = 1\nseries_sha256 = "x"\nimage = "x"\n'),
    "not-toml": (None, "\x00\xff[[["),
}


@pytest.mark.parametrize("case", sorted(LOCK_GARBAGE))
def test_lock_garbage_is_bad_input(tmp_path: Path, cli_env: dict[str, str], case: str) -> None:
    q, root, home = _world(tmp_path)
    run(q, "lock", "--image", f"rootfs:{root}", env=cli_env)
    old, new = LOCK_GARBAGE[case]
    lock = q / "targets.lock"
    text = lock.read_text()
    if old is None:
        lock.write_bytes(new.encode("latin-1"))
    else:
        assert old in text, text
        lock.write_text(text.replace(old, new))
    with unchanged(root, home):
        refused(run(q, "apply", "--root", str(root), env=cli_env), 6, "targets.lock")
        refused(run(q, "check", env=cli_env), 6, "targets.lock")


PROFILE_GARBAGE = {
    "env-int": ('A = "1"', "A = 1"),
    "select-string": ('select = [\n    "gpu",\n]', 'select = "gpu"'),
    "name-slash": ("[profile.gpu", '[profile."g/pu"'),
}


@pytest.mark.parametrize("case", sorted(PROFILE_GARBAGE))
def test_a_profile_section_that_cannot_be_read_is_bad_input_not_a_patch_no_pin_selects(
    tmp_path: Path, cli_env: dict[str, str], case: str
) -> None:
    q, root, home = _world(tmp_path)
    write_patch(q, "0002-gpu.patch", [("etc/gpu.conf", None, b"gpu = 1\n")])
    (q / "series").write_bytes(b"0001-conf.patch\n0002-gpu.patch #+gpu\n")
    run(q, "lock", "--image", f"rootfs:{root}", env=cli_env)
    run(q, "lock", "--new", "--profile", "gpu", "--image", f"rootfs:{root}", "--env", "A=1", env=cli_env)
    assert run(q, "check", env=cli_env).code == 0
    old, new = PROFILE_GARBAGE[case]
    lock = q / "targets.lock"
    text = lock.read_text()
    assert old in text, text
    lock.write_text(text.replace(old, new))
    with unchanged(root, home, q):
        # its profiles are unknown, not absent: 0002-gpu.patch (+gpu) is not "selected by no pin" (exit 3)
        r = run(q, "check", env=cli_env)
        refused(r, 6, "targets.lock cannot be read")
        assert "no pin selects" not in r.out + r.err
        refused(run(q, "apply", "--profile", "gpu", "--root", str(root), env=cli_env), 6, "targets.lock")
