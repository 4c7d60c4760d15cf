"""Patches as they exist in the field: hand-pinned artifacts, package-relative paths, hand-edited bodies."""
from __future__ import annotations

import shutil
from pathlib import Path

from imgquilt.queue.hunks import sha256_hex
from support.qtools import CONF, SERVER, empty_queue, imgquilt, svc_root, write_patch

LIB = b"import os\n\n\ndef probe(x):\n    return x\n"
OTHER = b"# another module that happens to share the path tail\n"
APPENDED = b"_FROZEN = {}\n\n\ndef frozen(key):\n    return _FROZEN.get(key)\n"


def _image(tmp_path: Path) -> Path:
    root = tmp_path / "image"
    site = root / "usr/local/lib/python3.11/site-packages/pkg/kernels"
    site.mkdir(parents=True)
    (site / "lib.py").write_bytes(LIB)
    vendored = root / "opt/vendor/pkg/kernels"  # same tail, other bytes: must not be taken
    vendored.mkdir(parents=True)
    (vendored / "lib.py").write_bytes(OTHER)
    return root


def _artifact(base: bytes, patched: bytes) -> bytes:
    return (
        "# fix-probe-cache.patch \u2014 probes must not do I/O inside a compiled region\n"
        "# STATUS: WIP \u2014 inert without 01.\n"
        "# TARGET: pkg/kernels/lib.py (inside the pinned image)\n"
        f"# base sha256 {sha256_hex(base)}\n"
        f"# patched sha256 {sha256_hex(patched)}\n"
        "# APPLY: append the block below to the module.\n"
        "--- a/pkg/kernels/lib.py\n"
        "+++ b/pkg/kernels/lib.py\n"
        "@@ append: frozen probes (env): FREEZE=0 disables @@\n"
    ).encode() + b"".join(b"+" + ln for ln in APPENDED.splitlines(keepends=True))


def test_a_hand_pinned_artifact_imports_with_no_flags_onto_the_right_file(tmp_path: Path) -> None:
    image = _image(tmp_path)
    q = empty_queue(tmp_path / "q")
    (tmp_path / "fix-probe-cache.patch").write_bytes(_artifact(LIB, LIB + APPENDED))
    r = imgquilt("import", str(tmp_path / "fix-probe-cache.patch"), "--image", f"rootfs:{image}", cwd=q, check=0)
    real = "usr/local/lib/python3.11/site-packages/pkg/kernels/lib.py"
    assert f"took {real}" in r.err + r.out
    patch = (q / "patches/fix-probe-cache.patch").read_bytes()
    assert patch.startswith(
        "Description: fix-probe-cache.patch \u2014 probes must not do I/O inside a compiled region\n"
        " APPLY: append the block below to the module.\nStatus: WIP \u2014 inert without 01.\n\n".encode()
    )
    assert f"Index: {real}\nBase-SHA256: {sha256_hex(LIB)}\nPatched-SHA256: {sha256_hex(LIB + APPENDED)}\n".encode() in patch
    out = tmp_path / "out"
    shutil.copytree(image, out)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert (out / real).read_bytes() == LIB + APPENDED
    assert (out / "opt/vendor/pkg/kernels/lib.py").read_bytes() == OTHER


def test_a_path_tail_is_never_guessed_without_a_unique_hash_match(tmp_path: Path) -> None:
    image = _image(tmp_path)
    (image / "opt/vendor/pkg/kernels/lib.py").write_bytes(LIB)  # now two files have the pinned bytes
    q = empty_queue(tmp_path / "q")
    (tmp_path / "a.patch").write_bytes(_artifact(LIB, LIB + APPENDED))
    r = imgquilt("import", str(tmp_path / "a.patch"), "--image", f"rootfs:{image}", cwd=q, check=6)
    assert "opt/vendor/pkg/kernels/lib.py" in r.err and "site-packages/pkg/kernels/lib.py" in r.err and "--prefix" in r.err
    # --prefix says where the paths start, as `patch -d`
    imgquilt("import", str(tmp_path / "a.patch"), "--prefix", "opt/vendor", "--image", f"rootfs:{image}", cwd=q, check=0)
    assert b"Index: opt/vendor/pkg/kernels/lib.py\n" in (q / "patches/a.patch").read_bytes()
    # no pin, no search: a plain diff naming a missing path is missing
    (tmp_path / "b.diff").write_bytes(b"--- a/pkg/kernels/lib.py\n+++ b/pkg/kernels/lib.py\n@@ -1 +1 @@\n-import os\n+import sys\n")
    r = imgquilt("import", str(tmp_path / "b.diff"), "--image", f"rootfs:{image}", cwd=q, check=6)
    assert "does not exist" in r.err


def test_a_hand_edited_patch_goes_stale_and_one_command_re_pins_it(tmp_path: Path) -> None:
    image = svc_root(tmp_path / "image")
    q = empty_queue(tmp_path / "q")
    new = SERVER.replace(b"'8000'", b"'8080'")
    write_patch(q, "01-port.patch", [("lib/svc/server.py", SERVER, new)])
    write_patch(q, "02-conf.patch", [("etc/svc.conf", CONF, CONF.replace(b"2", b"4"))])
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)
    imgquilt("check", cwd=q, check=0)
    p = q / "patches/01-port.patch"
    edited = p.read_bytes().replace(b"+PORT = int(os.environ.get('PORT', '8080'))", b"+PORT = int(os.environ.get('PORT', '9090'))")
    p.write_bytes(edited)
    r = imgquilt("check", cwd=q, check=6)
    assert "01-port.patch: lib/svc/server.py: Patched-SHA256 is stale" in r.err and "imgquilt refresh --rehash 01-port.patch" in r.err
    r = imgquilt("refresh", "--rehash", "01-port.patch", cwd=q, check=0)
    want = sha256_hex(SERVER.replace(b"'8000'", b"'9090'"))
    assert f"Patched-SHA256 {sha256_hex(new)} -> {want}" in r.out
    # only the hash line changed
    assert p.read_bytes() == edited.replace(sha256_hex(new).encode(), want.encode())
    imgquilt("check", cwd=q, check=0)
    out = tmp_path / "out"
    shutil.copytree(image, out, symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    assert (out / "usr/lib/svc/server.py").read_bytes() == SERVER.replace(b"'8000'", b"'9090'")
    # a base claim that is not what the queue pins is drift, still refused
    p2 = q / "patches/02-conf.patch"
    p2.write_bytes(p2.read_bytes().replace(sha256_hex(CONF).encode(), b"e" * 64))
    r = imgquilt("refresh", "--rehash", "02-conf.patch", cwd=q, check=3)
    assert f"the queue pins {sha256_hex(CONF)}" in r.err
