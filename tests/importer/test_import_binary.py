"""Binary files: `git diff --binary` sections (delta and literal) import, apply, layer, audit; what
imgquilt writes (import and refresh) is accepted by `git apply`; rebase treats them as whole files."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tarfile
from pathlib import Path

from imgquilt.queue.hunks import sha256_hex
from imgquilt.queue.patchfile import parse_patch
from support.qtools import empty_queue, imgquilt

rng = random.Random(10)
LOGO = bytes(rng.randrange(256) for _ in range(6000)) + b"\0"
LOGO2 = LOGO[:1000] + b"\0patched\0" + LOGO[1009:]
PLUGIN = b"\x7fELF\x02\x01\x01\0" + bytes(rng.randrange(256) for _ in range(3000))
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]


def _git_binary_diff(tmp_path: Path) -> bytes:
    """A real `git diff --binary`: the logo changed (a delta block), a plugin added (a literal block)."""
    repo = tmp_path / "repo"
    (repo / "usr/share/app").mkdir(parents=True)
    (repo / "usr/share/app/logo.png").write_bytes(LOGO)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*GIT, "add", "."], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=repo, check=True)
    (repo / "usr/share/app/logo.png").write_bytes(LOGO2)
    (repo / "usr/lib/app").mkdir(parents=True)
    (repo / "usr/lib/app/plugin.so").write_bytes(PLUGIN)
    subprocess.run([*GIT, "add", "."], cwd=repo, check=True)
    return subprocess.run([*GIT, "diff", "--cached", "--binary"], cwd=repo, check=True, capture_output=True).stdout


def _image(tmp_path: Path) -> Path:
    root = tmp_path / "image"
    (root / "usr/share/app").mkdir(parents=True)
    (root / "usr/share/app/logo.png").write_bytes(LOGO)
    (root / "usr/lib").mkdir(parents=True)
    return root


def _git_apply(tree: Path, patch: Path) -> None:
    p = subprocess.run(["git", "apply", "-p1", "--verbose", str(patch)], cwd=tree, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_a_binary_file_patched_and_one_added_apply_layer_audit_and_git_apply(tmp_path: Path) -> None:
    diff = _git_binary_diff(tmp_path)
    assert b"\ndelta " in diff and b"\nliteral " in diff
    (tmp_path / "bin.patch").write_bytes(diff)
    image = _image(tmp_path)
    q = empty_queue(tmp_path / "q")
    imgquilt("import", str(tmp_path / "bin.patch"), "--image", f"rootfs:{image}", cwd=q, check=0)
    raw = (q / "patches/bin.patch").read_bytes()
    by_path = {s.path: s for s in parse_patch(raw).sections}
    logo, plugin = by_path["usr/share/app/logo.png"], by_path["usr/lib/app/plugin.so"]
    assert (logo.path, logo.base_sha256, logo.patched_sha256) == ("usr/share/app/logo.png", sha256_hex(LOGO), sha256_hex(LOGO2))
    assert (plugin.path, plugin.base_sha256, plugin.patched_sha256) == ("usr/lib/app/plugin.so", "absent", sha256_hex(PLUGIN))
    assert logo.binary is not None and plugin.binary is not None
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)
    # apply: in place and as a layer
    out = shutil.copytree(image, tmp_path / "out")
    layer = tmp_path / "layer.tar"
    imgquilt("apply", "--root", str(out), "--layer", str(layer), cwd=q, check=0)
    assert (out / "usr/share/app/logo.png").read_bytes() == LOGO2 and (out / "usr/lib/app/plugin.so").read_bytes() == PLUGIN
    with tarfile.open(layer) as t:
        assert t.extractfile("usr/share/app/logo.png").read() == LOGO2  # type: ignore[union-attr]
        assert t.extractfile("usr/lib/app/plugin.so").read() == PLUGIN  # type: ignore[union-attr]
    # audit: live on the patched tree, pending on the image; a changed binary is drifted (never "drifted-live")
    imgquilt("audit", "--root", str(out), cwd=q, check=0)
    imgquilt("audit", "--root", str(image), cwd=q, check=5)
    (out / "usr/share/app/logo.png").write_bytes(LOGO2 + b"x")
    r = imgquilt("audit", "--root", str(out), "--json", cwd=q, check=5)
    states = {f["path"]: f["state"] for p in json.loads(r.out)["patches"] for f in p["files"]}
    assert states == {"usr/share/app/logo.png": "drifted", "usr/lib/app/plugin.so": "live"}
    # git apply takes what imgquilt wrote, on an extracted tree
    plain = shutil.copytree(image, tmp_path / "plain")
    _git_apply(plain, q / "patches/bin.patch")
    assert (plain / "usr/share/app/logo.png").read_bytes() == LOGO2 and (plain / "usr/lib/app/plugin.so").read_bytes() == PLUGIN


def test_refresh_writes_a_binary_section_git_apply_accepts(tmp_path: Path) -> None:
    image = _image(tmp_path)
    q = empty_queue(tmp_path / "q")
    env = dict(os.environ, IMGQUILT_EDITOR="true")
    imgquilt("new", "logo.patch", cwd=q, env=env, check=0)
    imgquilt("add", "--new", "usr/share/app/logo.png", "usr/lib/app/plugin.so", "--image", f"rootfs:{image}", cwd=q, env=env, check=0)
    (q / ".imgquilt/work/usr/share/app/logo.png").write_bytes(LOGO2)
    (q / ".imgquilt/work/usr/lib/app").mkdir(parents=True, exist_ok=True)
    (q / ".imgquilt/work/usr/lib/app/plugin.so").write_bytes(PLUGIN)
    imgquilt("refresh", cwd=q, check=0)
    raw = (q / "patches/logo.patch").read_bytes()
    assert raw.count(b"GIT binary patch\n") == 2
    plain = shutil.copytree(image, tmp_path / "plain")
    _git_apply(plain, q / "patches/logo.patch")
    assert (plain / "usr/share/app/logo.png").read_bytes() == LOGO2 and (plain / "usr/lib/app/plugin.so").read_bytes() == PLUGIN
    imgquilt("pop", "-a", cwd=q, check=0)
    imgquilt("push", "-a", cwd=q, check=0)
    assert (q / ".imgquilt/work/usr/share/app/logo.png").read_bytes() == LOGO2


def test_rebase_a_binary_changed_upstream_is_a_binary_conflict_unless_upstream_made_the_result(tmp_path: Path) -> None:
    image = _image(tmp_path)
    q = empty_queue(tmp_path / "q")
    (tmp_path / "bin.patch").write_bytes(_git_binary_diff(tmp_path))
    imgquilt("import", str(tmp_path / "bin.patch"), "--image", f"rootfs:{image}", cwd=q, check=0)
    imgquilt("lock", "--image", f"rootfs:{image}", cwd=q, check=0)
    same = shutil.copytree(image, tmp_path / "upstream-same")
    (same / "usr/share/app/logo.png").write_bytes(LOGO2)  # upstream shipped exactly our result
    other = shutil.copytree(image, tmp_path / "upstream-other")
    (other / "usr/share/app/logo.png").write_bytes(LOGO + b"\1")
    q2 = shutil.copytree(q, tmp_path / "q2")
    r = imgquilt("rebase", "--image", f"rootfs:{other}", "--json", cwd=q, check=4)
    assert '"kind": "binary"' in r.out
    r = imgquilt("rebase", "--image", f"rootfs:{same}", cwd=q2, check=0)
    assert "merged-upstream" in r.out + r.err
