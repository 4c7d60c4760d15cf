"""A queue with profiles over images per profile, for the profile tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support.imagetools import build_oci, file, umoci_edit
from support.imagetools import run as tool
from support.qtools import imgquilt, write_patch

SHARED = [b"import os\n\n\ndef prep(x):\n    return x\n\n\nFUSED = os.environ.get('VLLM_GLM53_PREP_FUSED', '1')\n"]
SHARED.append(SHARED[0].replace(b"return x\n", b"return x if x is not None else 0\n"))
SHARED.append(SHARED[1] + b"\n\ndef prep_fused(x):\n    return prep(x)\n")


CONFIG = [b"[server]\ntimeout = 30\nworkers = 2\n", b"[server]\ntimeout = 90\nworkers = 2\n"]


ROCM = [b"KERNEL = 'hip'\n\n\ndef launch():\n    return KERNEL\n" + b"".join(b"# line %d\n" % i for i in range(20)),
        b"KERNEL = 'hip-fixed'\n\n\ndef launch():\n    return KERNEL\n" + b"".join(b"# line %d\n" % i for i in range(20))]


EXTRA_A = [b"extra v1\n", b"extra v1, patched\n"]


EXTRA_B = [b"extra v2\n", b"extra v2, patched\n"]


ENV = {"glm53": {"VLLM_GLM53_PREP_FUSED": "0"}, "rocm": {"HIP_FORCE": "1"}, "qwen": {"QWEN_MODE": "fast", "PATH": "/opt/qwen/bin:/usr/bin"}}


SELECTS = {"glm53": ["0001-shared.patch", "0002-cuda-timeouts.patch", "0004-extra-a.patch", "0006-glm-prep.patch"],
           "rocm": ["0001-shared.patch", "0003-rocm-kernel.patch", "0004-extra-a.patch"],
           "qwen": ["0001-shared.patch", "0002-cuda-timeouts.patch", "0005-extra-b.patch"]}


RECORD = "var/lib/imgquilt/applied.json"


def base_files(extra: bytes = EXTRA_A[0], rocm: bytes = ROCM[0], shared: bytes = SHARED[0]) -> list[dict]:
    return [file("app/shared.py", shared), file("app/config.toml", CONFIG[0]), file("app/rocm.py", rocm),
            file("app/extra.txt", extra), file("app/README", b"not a target\n")]


def set_env(layout: Path, tag: str) -> None:
    tool("umoci", "config", "--image", f"{layout}:{tag}", "--config.env", "PATH=/usr/bin", "--config.env", "LANG=C.UTF-8")


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict[str, Path]:
    """Two OCI layouts built by umoci: `a`, and `b` = `a` plus a layer that changes app/extra.txt."""
    work = tmp_path_factory.mktemp("images")
    a = build_oci(work / "a", [base_files()])
    set_env(a, "latest")
    shutil.copytree(a, work / "b")
    umoci_edit(work / "b", "latest", lambda root: (root / "app/extra.txt").write_bytes(EXTRA_B[0]))
    return {"a": a, "b": work / "b"}


def env_of(tmp: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("IMGQUILT_QUEUE", None)
    e.update(HOME=str(tmp / "home"), SOURCE_DATE_EPOCH="0")
    return e


def guard(q: Path, env: dict, name: str, *guards: str) -> None:
    # the profiles are declared after the guards: --new-guard says these names are meant
    imgquilt("guard", "--new-guard", name, *guards, cwd=q, env=env, check=0)


def make_queue(tmp_path: Path, images) -> tuple[Path, dict]:
    env = env_of(tmp_path)
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("# fixes carried for three deployments\n")
    write_patch(q, "0001-shared.patch", [("app/shared.py", SHARED[0], SHARED[1])])
    write_patch(q, "0002-cuda-timeouts.patch", [("app/config.toml", CONFIG[0], CONFIG[1])])
    write_patch(q, "0003-rocm-kernel.patch", [("app/rocm.py", ROCM[0], ROCM[1])])
    write_patch(q, "0004-extra-a.patch", [("app/extra.txt", EXTRA_A[0], EXTRA_A[1])])
    write_patch(q, "0005-extra-b.patch", [("app/extra.txt", EXTRA_B[0], EXTRA_B[1])])
    write_patch(q, "0006-glm-prep.patch", [("app/shared.py", SHARED[1], SHARED[2])])
    guard(q, env, "0002-cuda-timeouts.patch", "-rocm")
    guard(q, env, "0003-rocm-kernel.patch", "+rocm")
    guard(q, env, "0004-extra-a.patch", "-qwen")
    guard(q, env, "0005-extra-b.patch", "+qwen")
    guard(q, env, "0006-glm-prep.patch", "+glm53")
    for name, image in (("glm53", "a"), ("rocm", "a"), ("qwen", "b")):
        envs = [x for k, v in ENV[name].items() for x in ("--env", f"{k}={v}")]
        imgquilt("lock", "--profile", name, "--image", f"oci:{images[image]}:latest", *envs, cwd=q, env=env, check=0)
    return q, env


def snapshot(q: Path) -> dict[str, bytes]:
    return {str(p.relative_to(q)): p.read_bytes() for p in sorted(q.rglob("*"))
            if p.is_file() and ".imgquilt" not in p.relative_to(q).parts}


def unpack(layout: Path, tag: str, dest: Path) -> Path:
    tool("umoci", "unpack", "--image", f"{layout}:{tag}", dest)
    return dest / "rootfs"


def files_of(root: Path) -> dict[str, bytes]:
    """Every regular file under root (path -> bytes), the apply record left out."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_file() and not p.is_symlink() and rel != RECORD:
                out[rel] = p.read_bytes()
    return out
