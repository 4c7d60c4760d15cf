"""Real Debian quilt series imported with `imgquilt import --series`, checked against `quilt push -a`.

The source packages come from Debian's archive (`apt-get source --download-only`, deb-src set up by
.ci/install-tools) into a cache directory ($IMGQUILT_TEST_CACHE, else ~/.cache/imgquilt-tests); when
the candidate version cannot be downloaded (deb-src lines with a pocket whose pool no longer has it),
the newest version the mirror lists that can be (`apt-cache showsrc`, `apt-get source PKG=VERSION`). A
series built with `quilt` itself, with its base moved so every hunk lands at an offset, runs too.
"""
from __future__ import annotations

import filecmp
import os
import resource
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.qtools import imgquilt

CACHE = Path(os.environ.get("IMGQUILT_TEST_CACHE") or Path.home() / ".cache/imgquilt-tests") / "debian"


def _source(package: str, version_glob: str, cache: Path = CACHE) -> tuple[Path, Path]:
    """(orig tarball, debian tarball) of a Debian source package, downloaded once into the cache."""
    cache.mkdir(parents=True, exist_ok=True)

    def found() -> tuple[Path, Path] | None:
        orig = sorted(cache.glob(f"{package}_{version_glob}.orig.tar.*"))
        deb = sorted(cache.glob(f"{package}_{version_glob}.debian.tar.*"))
        orig = [o for o in orig if not o.name.endswith(".asc")]
        return (orig[-1], deb[-1]) if orig and deb else None

    if found() is None:
        fetch_source(package, version_glob, found, cache)
    return found()  # type: ignore[return-value]


def served_versions(package: str) -> list[str]:
    """The versions of a source package the machine's deb-src lines list (`apt-cache showsrc`), newest first."""
    import functools

    out = subprocess.run(["apt-cache", "showsrc", package], capture_output=True, text=True).stdout
    found, current = [], None
    for line in out.splitlines():  # one stanza per version and pocket; a stanza may be another package's binary
        if line.startswith("Package: "):
            current = line.split(": ", 1)[1].strip()
        elif line.startswith("Version: ") and current == package:
            v = line.split(": ", 1)[1].strip()
            if v not in found:
                found.append(v)

    def cmp(a: str, b: str) -> int:
        return 0 if a == b else (1 if subprocess.run(["dpkg", "--compare-versions", a, "gt", b]).returncode == 0 else -1)

    return sorted(found, key=functools.cmp_to_key(cmp), reverse=True)


def fetch_source(package: str, version_glob: str, found, cache: Path) -> None:
    """`apt-get source --download-only PACKAGE`, then, when that fails (a pocket that lists a version its
    pool no longer has: 404), each version the mirror lists that fits `version_glob`, newest first. A
    skip naming the package only when no such version can be downloaded."""
    import fnmatch

    p = subprocess.run(["apt-get", "source", "--download-only", package], cwd=cache, capture_output=True, text=True)
    if found() is not None:
        return
    tried = [f"{package} (the candidate): {_apt_error(p)}"]
    versions = [v for v in served_versions(package) if fnmatch.fnmatch(v.split(":")[-1], version_glob)]
    for version in versions:
        p = subprocess.run(["apt-get", "source", "--download-only", f"{package}={version}"], cwd=cache, capture_output=True, text=True)
        if found() is not None:
            return
        tried.append(f"{package}={version}: {_apt_error(p)}")
    pytest.skip(f"no source of {package} {version_glob} can be downloaded from the mirror (deb-src lines: see "
                f".ci/install-tools); tried " + "; ".join(tried))


def _apt_error(p: subprocess.CompletedProcess) -> str:
    if p.returncode == 0:
        return "downloaded, but not the files of this version"
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("E: ")] or p.stderr.strip().splitlines()[-1:]
    return said[0] if said else f"exit status {p.returncode}"


def _unpack(orig: Path, deb: Path, dest: Path) -> tuple[Path, Path]:
    """The pristine upstream tree and the package's debian/patches directory."""
    with tarfile.open(orig) as t:
        t.extractall(dest / "u", filter="tar")
    (top,) = list((dest / "u").iterdir())
    with tarfile.open(deb) as t:
        t.extractall(dest / "d", filter="tar")
    return top, dest / "d/debian/patches"


def _quilt_tree(pristine: Path, patches: Path, dest: Path) -> Path:
    shutil.copytree(pristine, dest, symlinks=True)
    env = dict(os.environ, QUILT_PATCHES=str(patches), QUILT_PC=str(dest.parent / (dest.name + ".pc")))
    subprocess.run(["quilt", "push", "-a", "-q"], cwd=dest, env=env, check=True, capture_output=True)
    return dest


def _same_trees(a: Path, b: Path) -> list[str]:
    """Paths whose bytes differ, or that exist on one side only (imgquilt's own record excluded)."""
    out: list[str] = []

    def walk(c: filecmp.dircmp, rel: str) -> None:
        out.extend(f"{rel}{n}" for n in c.left_only + c.right_only if f"{rel}{n}" != "var")
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        out.extend(f"{rel}{n}" for n in mismatch + errors)
        for name, sub in c.subdirs.items():
            walk(sub, f"{rel}{name}/")

    walk(filecmp.dircmp(a, b), "")
    return out


def _import_and_compare(tmp_path: Path, pristine: Path, patches: Path, env: dict[str, str] | None = None) -> tuple[str, float]:
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = imgquilt("import", "--series", str(patches / "series"), "--image", f"rootfs:{pristine}", cwd=q, env=env, check=0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = shutil.copytree(pristine, tmp_path / "imgquilt-tree", symlinks=True)
    imgquilt("apply", "--root", str(out), cwd=q, check=0)
    ref = _quilt_tree(pristine, patches, tmp_path / "quilt-tree")
    assert _same_trees(ref, out) == []
    # every imported patch applies with GNU patch at exactly the lines it names: no offset, no fuzz
    plain = shutil.copytree(pristine, tmp_path / "patch-tree", symlinks=True)
    names = [ln.split()[0] for ln in (q / "series").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    for name in names:
        p = subprocess.run(["patch", "-p1", "-F0", "--no-backup-if-mismatch", "-i", str(q / "patches" / name)], cwd=plain, capture_output=True, text=True)
        assert p.returncode == 0 and "offset" not in p.stdout and "fuzz" not in p.stdout, (name, p.stdout, p.stderr)
    assert _same_trees(ref, plain) == []
    # and with `git apply` (-v names any hunk applied at an offset)
    viagit = shutil.copytree(pristine, tmp_path / "git-tree", symlinks=True)
    for name in names:
        g = subprocess.run(["git", "apply", "-p1", "-v", str(q / "patches" / name)], cwd=viagit, capture_output=True, text=True)
        assert g.returncode == 0 and "offset" not in g.stderr, (name, g.stderr)
    assert _same_trees(ref, viagit) == []
    return r.err + r.out, cpu


def test_bash_series_with_offset_hunks_gives_the_tree_quilt_gives(tmp_path: Path) -> None:
    pristine, patches = _unpack(*_source("bash", "5.2*"), tmp_path / "src")
    report, _ = _import_and_compare(tmp_path, pristine, patches)
    assert "man-arithmetic.diff: doc/bash.1 hunk 1 at line 3592, 12 lines below its header" in report
    assert report.count("lines below its header") + report.count("lines above its header") >= 7


def test_openssh_series_imports_in_under_a_second_of_cpu(tmp_path: Path) -> None:
    pristine, patches = _unpack(*_source("openssh", "9.2p1*"), tmp_path / "src")
    # as installed: byte-compiled modules (kept under tmp_path, never in the source tree)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pyc")
    warm = tmp_path / "warm-up"
    warm.mkdir()
    (warm / "series").write_text("")  # a first run writes the bytecode of every module it loads
    imgquilt("import", "--series", str(patches / "series"), "--image", f"rootfs:{pristine}", cwd=warm, env=env, check=0)
    report, cpu = _import_and_compare(tmp_path, pristine, patches, env)
    assert report.count("Imported ") == 53
    print(f"openssh import (53 patches): {cpu:.2f} s CPU")
    # the whole `python -m imgquilt import` process, interpreter start-up included
    assert cpu < 1.0


def test_a_quilt_made_series_whose_base_moved_imports_at_offsets(tmp_path: Path) -> None:
    """Fallback without the archive: a series made with quilt, then lines added above every hunk."""
    src = tmp_path / "made"
    (src / "doc").mkdir(parents=True)
    body = "".join(f"line {i}\n" for i in range(1, 200))
    (src / "doc/manual.txt").write_text(body)
    (src / "main.c").write_bytes(b"int main(void)\r\n{\r\n\treturn 0;\r\n}\r\n")
    env = dict(os.environ, QUILT_PATCHES="patches", QUILT_PC=".pc", EDITOR="true")

    def quilt(*args: str) -> None:
        subprocess.run(["quilt", *args], cwd=src, env=env, check=True, capture_output=True)

    quilt("new", "one.diff")
    quilt("add", "doc/manual.txt")
    (src / "doc/manual.txt").write_text(body.replace("line 50\n", "line fifty\n").replace("line 150\n", "line 150\nextra\n"))
    quilt("refresh")
    quilt("new", "two.diff")
    quilt("add", "main.c", "doc/manual.txt")
    (src / "main.c").write_bytes(b"int main(void)\r\n{\r\n\treturn 1;\r\n}\r\n")
    (src / "doc/manual.txt").write_text((src / "doc/manual.txt").read_text().replace("line 100\n", "line hundred\n"))
    quilt("refresh")
    quilt("pop", "-a")
    shutil.rmtree(src / ".pc")
    patches = tmp_path / "patches"
    shutil.move(src / "patches", patches)
    # the upstream moved on: 7 lines above everything; the hunks now land 7 lines below their headers
    (src / "doc/manual.txt").write_text("new\n" * 7 + body)
    report, _ = _import_and_compare(tmp_path, src, patches)
    assert "one.diff: doc/manual.txt hunk 1 at line 54, 7 lines below its header" in report
    assert "two.diff: doc/manual.txt hunk 1 at line 104, 7 lines below its header" in report


# --- whole Debian series, with no flag --------------------------------------------------------------
# glibc (109 patches: a topgit trailer, a content-less binary file), samba, python3.11, and shadow and curl,
# whose patches carry git `index` lines naming upstream's blobs. Downloaded once per session (one
# `apt-get source --download-only` for all); only the upstream files the patches name are unpacked.
FIELD = {"glibc": "2.36*", "samba": "4.17*", "python3.11": "3.11*", "shadow": "1:4.13*", "curl": "7.88*"}


def _series_paths(patches: Path) -> set[str]:
    """Every path a series' patches name (after their -p level): the upstream files to unpack."""
    from imgquilt.importer import parse_foreign, strip_path
    from imgquilt.queue.series import parse_series

    out: set[str] = set()
    for e in parse_series((patches / "series").read_bytes()):
        for f in parse_foreign((patches / e.name).read_bytes(), e.name).files:
            for name in (f.old_name, f.new_name):
                if name is not None:
                    try:
                        out.add(strip_path(name, e.strip))
                    except Exception:
                        pass
            out.update(n for n in (f.moved_names or ()) if n)
    return out


@pytest.fixture(scope="session")
def debian_sources() -> None:
    """One download for every package missing from the cache; each test then takes its own (_source falls
    back to another version, or skips, for its package alone)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    missing = [p for p, v in FIELD.items() if not list(CACHE.glob(f"{p}_{v.split(':')[-1]}.debian.tar.*"))]
    if missing:
        subprocess.run(["apt-get", "source", "--download-only", *missing], cwd=CACHE, capture_output=True, text=True)


def _trimmed(orig: Path, deb: Path, dest: Path) -> tuple[Path, Path]:
    """The upstream tree reduced to the files the series names (byte for byte, modes and links kept)."""
    with tarfile.open(deb) as t:
        t.extractall(dest / "d", filter="tar")
    patches = dest / "d/debian/patches"
    want = _series_paths(patches)
    pristine = dest / "u"
    pristine.mkdir(parents=True)
    top = subprocess.run(f"tar -tf '{orig}' | head -1", shell=True, capture_output=True, text=True).stdout.strip().split("/")[0]
    (dest / "names").write_text("".join(f"{top}/{p}\n" for p in sorted(want)))
    # GNU tar reads the (large) tarball once at C speed; names the tarball lacks (new files) are skipped
    subprocess.run(["tar", "-x", "-f", str(orig), "-C", str(pristine), "--strip-components=1", "--no-same-owner",
                    "-T", str(dest / "names")], capture_output=True)
    assert any(pristine.iterdir()), f"nothing of {orig.name} was unpacked"
    return pristine, patches


@pytest.mark.parametrize("package", list(FIELD))
def test_a_whole_debian_series_imports_with_no_flag_and_applies_as_quilt_does(tmp_path: Path, debian_sources, package: str) -> None:
    from support.import_trees import tree_state

    pristine, patches = _trimmed(*_source(package, FIELD[package].split(":")[-1]), tmp_path / "src")
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("")
    r = imgquilt("import", "--series", str(patches / "series"), "--image", f"rootfs:{pristine}", cwd=q, check=0)
    report = r.err + r.out
    names = [ln.split()[0] for ln in (q / "series").read_text().splitlines() if ln.strip()]
    assert names == [e.split()[0] for e in (patches / "series").read_text().splitlines() if e.strip() and not e.startswith("#")]
    out = shutil.copytree(pristine, tmp_path / "imgquilt-tree", symlinks=True)
    if package == "python3.11":
        # a real finding: Debian's distutils patch uses DistutilsOptionError in install_egg_info.py without importing it
        r = imgquilt("apply", "--root", str(out), cwd=q, check=3)
        assert "distutils-install-layout.diff" in r.err and "undefined name 'DistutilsOptionError'" in r.err
        imgquilt("apply", "--root", str(out), "--no-python-check", cwd=q, check=0)
    else:
        imgquilt("apply", "--root", str(out), cwd=q, check=0)
    ref = _quilt_tree(pristine, patches, tmp_path / "quilt-tree")
    got, want = tree_state(out), tree_state(ref)
    assert got == want, sorted(set(got.items()) ^ set(want.items()))[:6]
    if package in ("samba", "shadow", "curl"):  # upstream's blob ids: recorded per patch, named in the report
        flagged = [n for n in names if b"Git-Index-Ignored:" in (q / "patches" / n).read_bytes()]
        assert flagged and all(f"note: {n}: warning: its git `index` lines do not name these bases" in report for n in flagged)
    if package == "glibc":
        tg = (q / "patches/hurd-i386/tg-thread-cancel.diff").read_bytes()
        assert tg.endswith(b"---\ntg: (9a079e2..) t/thread-cancel (depends on: baseline)\n")  # the trailer, kept
        assert "timezone/testdata/XT6: the diff carries no bytes for this new binary file; created it empty" in report
        assert (out / "timezone/testdata/XT6").read_bytes() == b""


# --- deb-src lines with the security pocket (issue 38) -------------------------------------------
def _codename() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"') or None
    except OSError:
        return None
    return None


def test_sources_come_with_deb_src_lines_that_include_the_security_pocket(tmp_path: Path, monkeypatch) -> None:
    """The security pocket lists a newer python3.11 than the main one; its pool may no longer have it
    (a 404 for `apt-get source python3.11`): the newest version the mirror serves is taken instead."""
    codename = _codename()
    if codename is None or shutil.which("apt-get") is None:
        pytest.skip("a Debian system (apt-get, VERSION_CODENAME in /etc/os-release)")
    apt = tmp_path / "apt"
    for d in ("lists/partial", "cache/archives/partial", "parts"):
        (apt / d).mkdir(parents=True)
    (apt / "sources.list").write_text(f"deb-src http://deb.debian.org/debian {codename} main\n"
                                      f"deb-src http://deb.debian.org/debian-security {codename}-security main\n")
    (apt / "apt.conf").write_text(f'Dir::Etc::SourceList "{apt}/sources.list";\nDir::Etc::SourceParts "{apt}/parts";\n'
                                  f'Dir::State::Lists "{apt}/lists";\nDir::Cache "{apt}/cache";\n')
    monkeypatch.setenv("APT_CONFIG", str(apt / "apt.conf"))  # apt-get and apt-cache, here and in _source
    update = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
    if update.returncode != 0:
        pytest.skip(f"the mirror cannot be reached: {update.stderr.strip()[-300:]}")
    versions = served_versions("python3.11")
    assert len(versions) >= 2, versions  # the main pocket's and the security pocket's
    cache = tmp_path / "debian"
    cache.mkdir()
    for orig in CACHE.glob("python3.11_3.11*.orig.tar.*"):  # the upstream tarball, if the suite has it: not fetched again
        shutil.copy(orig, cache / orig.name)
    plain = subprocess.run(["apt-get", "source", "--download-only", "python3.11"], cwd=cache, capture_output=True, text=True)
    orig, deb = _source("python3.11", "3.11*", cache)
    got = deb.name.removeprefix("python3.11_").split(".debian.tar")[0]
    assert got in versions
    if plain.returncode != 0:  # the candidate is not served: a version below it was taken, the newest that is
        assert "404" in plain.stderr and got != versions[0]
    with tarfile.open(deb) as t:
        assert "debian/patches/series" in t.getnames()
