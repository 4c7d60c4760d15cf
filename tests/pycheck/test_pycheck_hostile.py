"""Issue 35, points 3 and 4: the cross-module check on what real images hold.

- a module it reads may be spooled (larger than IMGQUILT_SPOOL_AT): it is read as the rest of the code
  reads contents, never hashed or parsed as if it were bytes in memory;
- an extension module (`vllm/_C.abi3.so`) is "cannot tell" and is never read whole, whatever its size;
- a cycle of star imports ends the walk with "cannot tell", never a RecursionError.

No input here may exit 1 (qtools.imgquilt asserts it for every run)."""
from __future__ import annotations

from pathlib import Path

import pytest

from imgquilt.fs import content
from imgquilt.pycheck import check
from imgquilt.pycheck.pysearch import SourceModules
from imgquilt.rootfs.source import RootfsSource
from support.qtools import imgquilt, write_patch

SITE = "usr/local/lib/python3.11/site-packages"
CUDA = f"{SITE}/vllm/platforms/cuda.py"
# a module of 6 kB: spooled with IMGQUILT_SPOOL_AT=1000
UTILS = b"def cdiv(a, b):\n    return -(a // -b)\n\n" + b"".join(b"# padding line %04d of a module that is large\n" % i
                                                          for i in range(130))
CUDA_BASE = (b'"""vllm.platforms.cuda"""\nimport vllm._C  # noqa: F401\n\n\ndef device():\n    return "cuda"\n'
             + b"# comment\n" * 120)  # 1.3 kB: spooled too with IMGQUILT_SPOOL_AT=1000
CUDA_FIX = b"from vllm.utils import cdiv\n" + CUDA_BASE + b"\n\ndef blocks(n):\n    return cdiv(n, 16)\n"
CUDA_TYPO = b"from vllm.utils import cdivv\n" + CUDA_BASE + b"\n\ndef blocks(n):\n    return cdivv(n, 16)\n"
CUDA_NATIVE = b"from vllm._C import ops\n" + CUDA_BASE + b"\n\ndef run():\n    return ops\n"


def _vllm_root(root: Path, so_size: int = 20_000) -> Path:
    files = {f"{SITE}/vllm/__init__.py": b"", f"{SITE}/vllm/utils.py": UTILS, f"{SITE}/vllm/platforms/__init__.py": b"",
             CUDA: CUDA_BASE}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    with open(root / SITE / "vllm/_C.abi3.so", "wb") as f:  # an ELF-looking extension module
        f.write(b"\x7fELF\x02\x01\x01" + b"\0" * 9)
        f.truncate(so_size)
    return root


def _queue(q: Path, patched: bytes) -> Path:
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-cuda.patch", [(CUDA, CUDA_BASE, patched)])
    return q


def _findings(root: Path, final: bytes) -> list[str]:
    files = SourceModules(RootfsSource(root))
    got = check([(CUDA, CUDA, CUDA_BASE, final)], files.view({CUDA: final}), files.view())
    return [x for ff in got for f in ff.findings + ff.notes for x in f.located(CUDA)]


@pytest.fixture
def spool_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMGQUILT_SPOOL_AT", "1000")


def test_a_spooled_module_is_read_as_contents_are(tmp_path: Path, spool_small) -> None:
    root = _vllm_root(tmp_path / "root")
    assert _findings(root, CUDA_FIX) == []
    assert any("cannot import name 'cdivv' from 'vllm.utils'" in x for x in _findings(root, CUDA_TYPO))


def test_an_extension_module_is_cannot_tell_and_never_read(tmp_path: Path, spool_small,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = _vllm_root(tmp_path / "root", so_size=300_000)
    read: list[int] = []
    real_pread, real_chunks = content.Spooled.pread, content.Spooled.chunks

    def pread(self, n, pos):
        read.append(self.size)
        return real_pread(self, n, pos)

    def chunks(self, *a, **kw):
        read.append(self.size)
        return real_chunks(self, *a, **kw)

    monkeypatch.setattr(content.Spooled, "pread", pread)
    monkeypatch.setattr(content.Spooled, "chunks", chunks)
    said = _findings(root, CUDA_NATIVE)
    assert any("cannot tell" in x and "vllm._C" in x for x in said), said
    assert 300_000 not in read  # the extension module: not hashed, not held, not parsed


@pytest.mark.parametrize("spool_at", ["1000", None])
def test_apply_check_and_lock_run_the_check_to_its_end(tmp_path: Path, cli_env, spool_at) -> None:
    """With a 6 kB module spooled (IMGQUILT_SPOOL_AT=1000), and with a 9 MiB extension module spooled by
    the default setting: a finding or "cannot tell", never exit 1."""
    env = dict(cli_env)
    if spool_at is not None:
        env["IMGQUILT_SPOOL_AT"] = spool_at
    root = _vllm_root(tmp_path / "root", so_size=9 << 20)
    q = _queue(tmp_path / "q", CUDA_FIX)
    imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "fix.tar"), cwd=q, env=env, check=0)
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=env, check=0)
    imgquilt("check", "--image", f"rootfs:{root}", cwd=q, env=env, check=0)
    bad = _queue(tmp_path / "bad", CUDA_TYPO)
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "typo.tar"), cwd=bad, env=env, check=3)
    assert f"{CUDA}:1:1: ImportError: cannot import name 'cdivv' from 'vllm.utils'" in r.err
    assert not (tmp_path / "typo.tar").exists()
    native = _queue(tmp_path / "native", CUDA_NATIVE)
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "n.tar"), cwd=native, env=env, check=0)
    assert f"{CUDA}:1:1: cannot tell" in r.out + r.err


def test_refresh_of_a_fix_importing_beside_an_extension_module(tmp_path: Path, cli_env) -> None:
    env = {**cli_env, "IMGQUILT_SPOOL_AT": "1000"}
    root = _vllm_root(tmp_path / "root", so_size=9 << 20)
    q = tmp_path / "q"
    q.mkdir()
    imgquilt("init", cwd=q, env=env, check=0)
    imgquilt("new", "0001-cuda.patch", cwd=q, env=env, check=0)
    imgquilt("add", "--image", f"rootfs:{root}", CUDA, cwd=q, env=env, check=0)
    work = q / ".imgquilt/work" / CUDA
    work.write_bytes(CUDA_TYPO)
    r = imgquilt("refresh", cwd=q, env=env, check=3)
    assert f"{CUDA}:1:1: ImportError: cannot import name 'cdivv' from 'vllm.utils'" in r.err
    work.write_bytes(CUDA_FIX)
    imgquilt("refresh", cwd=q, env=env, check=0)
    assert b"+from vllm.utils import cdiv" in (q / "patches/0001-cuda.patch").read_bytes()
    work.write_bytes(CUDA_NATIVE)
    r = imgquilt("refresh", cwd=q, env=env, check=0)
    assert f"{CUDA}:1:1: cannot tell" in r.out + r.err


# --- point 4: a cycle of star imports ------------------------------------------------------------
RING = {f"{SITE}/ring/__init__.py": b"", f"{SITE}/ring/m.py": b"VALUE = 1\nfrom ring.m import *\n",
        f"{SITE}/ring/a.py": b"from ring.b import *\n", f"{SITE}/ring/b.py": b"from ring.c import *\n",
        f"{SITE}/ring/c.py": b"from ring.a import *\n"}
APP = f"{SITE}/app.py"
APP_BASE = b"x = 1\n"
RING_USES = {
    "itself": b"from ring.m import thing\nx = thing\n",
    "ring": b"from ring.a import thing\nx = thing\n",
    "attribute": b"import ring.b\nx = ring.b.thing\n",
}


def _ring_root(root: Path) -> Path:
    for rel, data in {**RING, APP: APP_BASE}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


@pytest.mark.parametrize("use", sorted(RING_USES))
def test_a_star_import_cycle_is_cannot_tell(tmp_path: Path, use: str) -> None:
    root = _ring_root(tmp_path / "root")
    files = SourceModules(RootfsSource(root))
    final = RING_USES[use]
    got = check([(APP, APP, APP_BASE, final)], files.view({APP: final}), files.view())
    assert [f.kind for ff in got for f in ff.findings] == []
    said = [x for ff in got for f in ff.notes for x in f.located(APP)]
    assert len(said) == 1 and "cannot tell" in said[0] and "a cycle of star imports" in said[0], said


def test_apply_lock_and_refresh_end_the_walk_of_a_star_import_cycle(tmp_path: Path, cli_env) -> None:
    root = _ring_root(tmp_path / "root")
    for use, final in sorted(RING_USES.items()):
        q = tmp_path / f"q-{use}"
        q.mkdir()
        (q / "series").write_text("")
        write_patch(q, "0001-app.patch", [(APP, APP_BASE, final)])
        r = imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / f"{use}.tar"), cwd=q, env=cli_env,
                     check=0)
        assert "cycle of star imports" in r.out + r.err
        imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)  # lock prints no notes
        assert (q / "targets.lock").is_file()
    q = tmp_path / "work"
    q.mkdir()
    imgquilt("init", cwd=q, env=cli_env, check=0)
    imgquilt("new", "0001-app.patch", cwd=q, env=cli_env, check=0)
    imgquilt("add", "--image", f"rootfs:{root}", APP, cwd=q, env=cli_env, check=0)
    for final in RING_USES.values():
        (q / ".imgquilt/work" / APP).write_bytes(final)
        r = imgquilt("refresh", cwd=q, env=cli_env, check=0)
        assert f"{APP}:" in r.err and "cycle of star imports" in r.err


def test_rebase_and_continue_onto_an_image_with_spooled_modules(tmp_path: Path, cli_env) -> None:
    """vLLM's shape: upstream renamed `cdiv`; the rebase's boot check reads the spooled modules and the
    extension module beside them, stops on the finding, and `rebase --continue` takes the fix."""
    import subprocess

    env = {**cli_env, "IMGQUILT_SPOOL_AT": "1000"}
    old = _vllm_root(tmp_path / "old", so_size=9 << 20)
    new = _vllm_root(tmp_path / "new", so_size=9 << 20)
    (new / SITE / "vllm/utils.py").write_bytes(UTILS.replace(b"def cdiv(", b"def ceil_div("))
    (new / CUDA).write_bytes(CUDA_BASE.replace(b'return "cuda"', b'return "cuda"  # upstream'))
    q = _queue(tmp_path / "q", CUDA_FIX)
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=env, check=0)
    r = imgquilt("rebase", "--image", f"rootfs:{new}", "--from", f"rootfs:{old}", cwd=q, env=env, check=4)
    assert f"{CUDA}:1:1: ImportError: cannot import name 'cdiv' from 'vllm.utils'" in r.err
    work = q / ".imgquilt/work" / CUDA
    work.write_bytes(work.read_bytes().replace(b"import cdiv", b"import ceil_div as cdiv"))
    r = imgquilt("rebase", "--continue", cwd=q, env=env, check=0)
    assert "Rebased 1 patch(es)" in r.out
    imgquilt("apply", "--image", f"rootfs:{new}", "--locked", "--layer", str(tmp_path / "l.tar"), cwd=q, env=env, check=0)


# --- point 3, more shapes at the default IMGQUILT_SPOOL_AT: a module over it that is source, and
# sourceless bytecode of that size: both "cannot tell", through apply, lock and refresh ---------------
BIG = {
    # a 9 MiB .py module (spooled; larger than the check parses): "too large"
    "large-source": (f"{SITE}/vllm/big.py", b"def cdiv(a, b):\n    return -(a // -b)\n", b"from vllm.big import cdiv\n"),
    # sourceless bytecode (spooled too): "cannot tell", never read
    "sourceless": (f"{SITE}/vllm/compiled.pyc", b"\x6f\x0d\x0d\x0a" + b"\0" * 12, b"from vllm.compiled import cdiv\n"),
}


@pytest.mark.parametrize("shape", sorted(BIG))
def test_a_large_imported_module_at_the_default_spool_setting(tmp_path: Path, cli_env, shape: str) -> None:
    env = {k: v for k, v in cli_env.items() if k != "IMGQUILT_SPOOL_AT"}
    rel, head, line = BIG[shape]
    root = _vllm_root(tmp_path / "root")
    with open(root / rel, "wb") as f:
        f.write(head)
        f.write(b"# padding\n" * ((9 << 20) // 10))
    fix = line + CUDA_BASE
    q = _queue(tmp_path / "q", fix)
    r = imgquilt("apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "l.tar"), cwd=q, env=env, check=0)
    assert f"{CUDA}:1:1: cannot tell" in r.out + r.err
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=env, check=0)
    w = tmp_path / "w"
    w.mkdir()
    imgquilt("init", cwd=w, env=env, check=0)
    imgquilt("new", "0001-cuda.patch", cwd=w, env=env, check=0)
    imgquilt("add", "--image", f"rootfs:{root}", CUDA, cwd=w, env=env, check=0)
    (w / ".imgquilt/work" / CUDA).write_bytes(fix)
    r = imgquilt("refresh", cwd=w, env=env, check=0)
    assert f"{CUDA}:1:1: cannot tell" in r.err
