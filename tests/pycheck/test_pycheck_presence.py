"""Issue 35, point 3: the cross-module check asks an image only whether an extension module (or a
sourceless pyc) is there, through the layer index: its bytes are never kept as a layer is scanned,
read in a second pass, spooled or stored in the shared cache's files/. A lazy answer is the one a full
read gives (whiteouts, opaque directories, symlinks resolved inside the root): the same findings as
the check over the same tree on disk.

No input here may exit 1 (qtools.imgquilt asserts it for every run)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.imagetools import build_oci, dir_, file, opaque, symlink, whiteout
from imgquilt.image.layers import tarwalk
from imgquilt.sources import open_source
from imgquilt.pycheck import check
from imgquilt.pycheck.pysearch import SourceModules
from imgquilt.rootfs.source import RootfsSource
from support.qtools import imgquilt, write_patch

SITE = "usr/local/lib/python3.11/site-packages"
CUDA = f"{SITE}/vllm/platforms/cuda.py"
SO = f"{SITE}/vllm/_C.abi3.so"
BIG = 9 << 20  # over the default IMGQUILT_SPOOL_AT (8 MiB): a read of it would be spooled
CUDA_BASE = b'"""vllm.platforms.cuda"""\nimport os\n\n\ndef device():\n    return "cuda"\n'
CUDA_NATIVE = b"from vllm._C import ops\n" + CUDA_BASE + b"\n\ndef run():\n    return ops\n"
CUDA_IMPORT = b"import vllm._C\n" + CUDA_BASE


def _extension(size: int = BIG) -> bytes:
    return b"\x7fELF\x02\x01\x01" + os.urandom(size - 7)  # random: no compression makes it small


def _package() -> list[dict]:
    return [dir_(f"{SITE}/vllm/platforms"), file(f"{SITE}/vllm/__init__.py", b""),
            file(f"{SITE}/vllm/platforms/__init__.py", b""), file(CUDA, CUDA_BASE)]


# each shape: the image's layers (bottom first) and the same filesystem as a tree
def _shapes(ext: bytes) -> dict[str, tuple[list[list[dict]], dict[str, bytes | str]]]:
    pkg = {f"{SITE}/vllm/__init__.py": b"", f"{SITE}/vllm/platforms/__init__.py": b"", CUDA: CUDA_BASE}
    return {
        # the extension in the lowest layer, the package's source in a layer above it
        "present": ([[file(SO, ext)], _package()], {**pkg, SO: ext}),
        # deleted by a whiteout in a later layer: the import does not resolve
        "whiteout": ([[file(SO, ext)], _package() + [whiteout(SO)]], pkg),
        # the package directory made opaque above: the extension below no longer shows
        "opaque": ([[file(SO, ext)], _package() + [opaque(f"{SITE}/vllm")]], pkg),
        # a symlink (relative, inside the root) to the real file in another directory
        "symlink": ([[file(f"{SITE}/vllm.libs/_C.real.so", ext)], _package() + [symlink(SO, "../vllm.libs/_C.real.so")]],
                    {**pkg, f"{SITE}/vllm.libs/_C.real.so": ext, SO: "../vllm.libs/_C.real.so"}),
        # a symlink to nothing: no module there
        "dangling": ([[file(f"{SITE}/other.so", ext)], _package() + [symlink(SO, "../vllm.libs/gone.so")]],
                     {**pkg, f"{SITE}/other.so": ext, SO: "../vllm.libs/gone.so"}),
    }


def _tree(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            p.symlink_to(data)
        else:
            p.write_bytes(data)
    return root


def _findings(files: SourceModules, final: bytes) -> list[str]:
    got = check([(CUDA, CUDA, CUDA_BASE, final)], files.view({CUDA: final}), files.view())
    return sorted(x for ff in got for f in ff.findings + ff.notes for x in f.located(CUDA))


class _Counted:
    """Every member whose bytes a layer walk reads (a scan keeping it, or a second pass)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = tarwalk.TarWalker.read_content

        def read_content(walker, *a, **kw):
            data = real(walker, *a, **kw)
            self.sizes.append(len(data))
            return data

        monkeypatch.setattr(tarwalk.TarWalker, "read_content", read_content)


def _large_files(top: Path) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size >= BIG]


@pytest.mark.parametrize("shape", ["present", "whiteout", "opaque", "symlink", "dangling"])
@pytest.mark.parametrize("final", ["native", "import"])
def test_an_image_answers_as_a_full_read_without_reading_the_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        shape: str, final: str) -> None:
    ext = _extension()
    layers, tree = _shapes(ext)[shape]
    layout = build_oci(tmp_path / "img", layers)
    patched = CUDA_NATIVE if final == "native" else CUDA_IMPORT
    full = _findings(SourceModules(RootfsSource(_tree(tmp_path / "root", tree))), patched)
    counted = _Counted(monkeypatch)
    src = open_source(f"oci:{layout}:latest")
    lazy = _findings(SourceModules(src), patched)
    assert lazy == full
    if shape in ("present", "symlink"):  # there: `import vllm._C` is fine, a name from it cannot be told
        assert lazy == [] if final == "import" else any("cannot tell" in x and "native extension" in x for x in lazy), lazy
    else:
        assert any("No module named 'vllm._C'" in x for x in lazy), lazy
    assert len(ext) not in counted.sizes  # never kept by a scan nor read in a second pass
    assert src.stats.second_passes == []
    assert _large_files(Path(os.environ["IMGQUILT_CACHE_DIR"])) == []  # nor stored in files/


def test_a_settled_lookup_locates_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups the check settles (a warm run looks every path up again, as deep as it takes) locate
    the extension the same way: nothing of it read on a second run either."""
    ext = _extension()
    layout = build_oci(tmp_path / "img", _shapes(ext)["present"][0])
    counted = _Counted(monkeypatch)
    for _ in range(2):  # cold, then warm (the answer from the memo after every path was looked up again)
        files = SourceModules(open_source(f"oci:{layout}:latest"))
        look = files.view().look([SO], settle=True)[SO]
        assert (look.kind, look.data, look.resolved) == ("file", None, SO)
        assert any("cannot tell" in x for x in _findings(files, CUDA_NATIVE))
    assert len(ext) not in counted.sizes
    assert _large_files(Path(os.environ["IMGQUILT_CACHE_DIR"])) == []


def test_a_pyc_is_located_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pyc = b"\x6f\x0d\x0d\x0a" + os.urandom(BIG - 4)
    layout = build_oci(tmp_path / "img", [[file(f"{SITE}/vllm/compiled.pyc", pyc)], _package()])
    counted = _Counted(monkeypatch)
    src = open_source(f"oci:{layout}:latest")
    said = _findings(SourceModules(src), b"from vllm.compiled import cdiv\n" + CUDA_BASE)
    assert any("cannot tell" in x and "vllm.compiled" in x for x in said), said
    assert len(pyc) not in counted.sizes
    assert _large_files(Path(os.environ["IMGQUILT_CACHE_DIR"])) == []


def test_cold_apply_and_refresh_never_store_the_extension(tmp_path: Path, cli_env) -> None:
    """The user's session on an image with a large extension module: `apply --layer` and `refresh`,
    each with a cold shared cache of its own, reach "cannot tell ... native extension"; the cache's
    files/ never holds the extension."""
    layout = build_oci(tmp_path / "img", _shapes(_extension())["present"][0])
    image = f"oci:{layout}:latest"
    for verb in ("apply", "refresh"):
        cache = tmp_path / f"cache-{verb}"
        env = {**cli_env, "IMGQUILT_CACHE_DIR": str(cache)}
        env.pop("IMGQUILT_SPOOL_AT", None)  # the default: a read of the extension would be spooled
        q = tmp_path / verb
        q.mkdir()
        if verb == "apply":
            (q / "series").write_text("")
            write_patch(q, "0001-cuda.patch", [(CUDA, CUDA_BASE, CUDA_NATIVE)])
            r = imgquilt("apply", "--image", image, "--layer", str(tmp_path / "fix.tar"), cwd=q, env=env, check=0)
        else:
            imgquilt("init", cwd=q, env=env, check=0)
            imgquilt("new", "0001-cuda.patch", cwd=q, env=env, check=0)
            imgquilt("add", "--image", image, CUDA, cwd=q, env=env, check=0)
            (q / ".imgquilt/work" / CUDA).write_bytes(CUDA_IMPORT)
            imgquilt("refresh", cwd=q, env=env, check=0)
            imgquilt("lock", "--image", image, cwd=q, env=env, check=0)
            # a refresh keeps the lock fresh: its check runs again on the bases the lock pins
            (q / ".imgquilt/work" / CUDA).write_bytes(CUDA_NATIVE)
            r = imgquilt("refresh", cwd=q, env=env, check=0)
            assert "targets.lock" in r.out + r.err and "not updated" not in r.out + r.err, r.out + r.err
        assert f"{CUDA}:1:1: cannot tell: whether vllm._C has 'ops'" in r.out + r.err
        assert "a native extension" in r.out + r.err
        assert cache.is_dir() and _large_files(cache) == [], verb
        assert _large_files(q / ".imgquilt") == [], verb  # nor kept in the queue's object store
    # `lock` again, on the image it pins (its bases from the queue's store), with a cold cache of its own
    env = {**cli_env, "IMGQUILT_CACHE_DIR": str(tmp_path / "cache-lock")}
    env.pop("IMGQUILT_SPOOL_AT", None)
    imgquilt("lock", cwd=tmp_path / "refresh", env=env, check=0)  # its check's notes are not shown
    assert _large_files(tmp_path / "cache-lock") == [] and _large_files(tmp_path / "refresh" / ".imgquilt") == []
    # `refresh --rehash` verifies the series on the bases the lock pins (work.bases.as_source)
    env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache-rehash")
    imgquilt("refresh", "--rehash", "0001-cuda.patch", cwd=tmp_path / "refresh", env=env, check=0)
    assert _large_files(tmp_path / "cache-rehash") == [] and _large_files(tmp_path / "refresh" / ".imgquilt") == []


def test_an_uncompressed_layer_is_not_copied_out_either(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An uncompressed layer's member is read by offset in a second pass (copied to a spool file when
    large): a located extension never is."""
    from imgquilt.image import image_source

    ext = _extension()
    layout = build_oci(tmp_path / "img", _shapes(ext)["present"][0], compression=None)
    copied: list[int | None] = []
    real = image_source.copy_to_spool

    def copy_to_spool(fd, **kw):
        copied.append(kw.get("size"))
        return real(fd, **kw)

    monkeypatch.setattr(image_source, "copy_to_spool", copy_to_spool)
    counted = _Counted(monkeypatch)
    src = open_source(f"oci:{layout}:latest")
    said = _findings(SourceModules(src), CUDA_NATIVE)
    assert any("cannot tell" in x and "native extension" in x for x in said), said
    assert len(ext) not in counted.sizes + copied
    assert _large_files(Path(os.environ["IMGQUILT_CACHE_DIR"])) == []


def test_a_zstd_chunked_layer_fetches_nothing_of_it_by_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seekable layer (skopeo's zstd:chunked) is decided from its TOC and a file's bytes fetched by
    range when needed: a located extension's never are (its layer's frames stay where they are)."""
    from support.seekable_tools import zstd_chunked_copy

    monkeypatch.setenv("IMGQUILT_LOCAL_TOC", "walk")  # a small local layer: `auto` would read it whole
    ext = _extension()
    gz = build_oci(tmp_path / "img", _shapes(ext)["present"][0])
    ref = zstd_chunked_copy(f"oci:{gz}:latest", tmp_path / "zc", "v1")
    src = open_source(ref)
    said = _findings(SourceModules(src), CUDA_NATIVE)
    assert any("cannot tell" in x and "native extension" in x for x in said), said
    assert len(src.stats.layers_from_toc) >= 1  # the layer holding the extension was read from its TOC
    assert src.stats.range_bytes < len(ext) // 4, src.stats  # its data was never fetched
    assert _large_files(Path(os.environ["IMGQUILT_CACHE_DIR"])) == []


def test_a_site_s_top_modules_are_kept_as_the_targets_layer_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The patched file's own layer also holds the packages it imports: their top modules (`dep/__init__.py`,
    `single.py`) are kept as the targets' read walks the layer, so the check's lookups of them need no
    second pass over it; the inner modules of a package never looked up are not kept."""
    monkeypatch.setenv("IMGQUILT_NO_CACHE", "1")
    site = "usr/local/lib/python3.11/site-packages"
    app, base = f"{site}/app/mod.py", b"import dep\nimport single\n"
    layout = build_oci(tmp_path / "img", [[
        file(app, base), file(f"{site}/app/__init__.py", b""),
        file(f"{site}/dep/__init__.py", b"def f(a):\n    pass\n"), file(f"{site}/dep/inner.py", b"X = 1\n"),
        file(f"{site}/single.py", b"def g():\n    pass\n"),
    ]])
    source = open_source(f"oci:{layout}:latest")
    files = SourceModules(source)
    source.read_targets([app])
    final = base + b"dep.f()\nsingle.g(1)\n"
    got = check([(app, app, base, final)], files.view({app: final}), files.view())
    assert sorted(x for ff in got for f in ff.findings + ff.notes for x in f.located(app)) == [
        f"{app}:3:1: TypeError: f() missing 1 required positional argument: 'a' ({site}/dep/__init__.py: line 1: def f(a))",
        f"{app}:4:1: TypeError: g() takes 0 positional arguments but 1 was given ({site}/single.py: line 1: def g())"]
    assert source.stats.second_passes == []
    assert files._wanted_module(f"{site}/dep/__init__.py") and files._wanted_module(f"{site}/single.py")
    assert not files._wanted_module(f"{site}/other/inner.py") and not files._wanted_module(f"{site}/other/data.txt")
