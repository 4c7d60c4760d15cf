"""Differential fuzzing of imgquilt's tar header walker (image/layers/tarwalk.py) against Python's
tarfile, and its caps on hostile headers.

Random member sets (GNU and PAX long names and links, hard links, whiteouts, directories, FIFOs,
big ids, non-UTF-8 names) must walk to the same members with the same bytes; mutated and truncated
archives must give an exit-6 error (BadInput) or walk, never another exception. A PAX record or a
GNU long name larger than 1 MiB is refused before it is read into memory.
"""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imgquilt.errors import ImgquiltError
from imgquilt.image.layers.tarwalk import META_CAP, TarWalker
from support.qtools import imgquilt, write_patch

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class _Stream:
    """A non-seekable stream over bytes that counts what was read (as a decompressor hands it over)."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self.read_bytes += len(b)
        return b

    def skip(self, n: int) -> int:
        here = self._f.tell()
        self._f.seek(0, io.SEEK_END)
        end = self._f.tell()
        self._f.seek(min(here + n, end))
        return min(n, end - here)


COMPONENT = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="/"), min_size=1, max_size=12),
    st.sampled_from(["ünï", "x" * 90, "y" * 160, ".wh.gone", ".wh..wh..opq", "sp ace", "a\\b"]),
).filter(lambda c: c not in (".", ".."))
NAME = st.lists(COMPONENT, min_size=1, max_size=4).map("/".join)


@st.composite
def members(draw) -> list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]:
    out: list = []
    files: list[str] = []
    for name in draw(st.lists(NAME, min_size=1, max_size=8, unique=True)):
        kind = draw(st.sampled_from(["file", "file", "dir", "symlink", "hardlink", "fifo"]))
        ti = tarfile.TarInfo(name)
        ti.mode = draw(st.sampled_from([0o644, 0o755, 0o4755, 0o1777, 0o600]))
        ti.uid = draw(st.sampled_from([0, 1000, 3_000_000]))
        ti.gid = draw(st.sampled_from([0, 100, 4_000_000]))
        ti.mtime = 0
        data = b""
        if kind == "file" or (kind == "hardlink" and not files):
            ti.type = tarfile.REGTYPE
            data = draw(st.binary(max_size=1500))
            ti.size = len(data)
            files.append(name)
        elif kind == "dir":
            ti.type = tarfile.DIRTYPE
        elif kind == "symlink":
            ti.type = tarfile.SYMTYPE
            ti.linkname = draw(st.one_of(NAME, st.just("/" + "z" * 150), st.just("../../etc/passwd")))
        elif kind == "hardlink":
            ti.type = tarfile.LNKTYPE
            ti.linkname = draw(st.sampled_from(files))
        else:
            ti.type = tarfile.FIFOTYPE
        out.append((ti, data))
    return out


def _build(ms, fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as t:
        for ti, data in ms:
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return buf.getvalue()


def _ours(data: bytes) -> list[tuple]:
    w = TarWalker(_Stream(data), what="fuzzed tar")
    return [(e.name.rstrip("/"), e.type, e.mode, e.uid, e.gid, e.linkname, w.read_data() if e.is_file else None) for e in w]


def _theirs(data: bytes) -> list[tuple]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as t:
        for m in t:
            out.append((m.name.rstrip("/"), m.type.decode(), m.mode & 0o7777, m.uid, m.gid, m.linkname,
                        t.extractfile(m).read() if m.isreg() else None))
    return out


@FUZZ
@given(members(), st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
def test_same_members_same_bytes_as_tarfile(ms, fmt: int) -> None:
    data = _build(ms, fmt)
    assert _ours(data) == _theirs(data)


@FUZZ
@given(members(), st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
       st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=6),
       st.one_of(st.none(), st.integers(0, 1 << 16)))
def test_malformed_archives_are_bad_input_or_walk(ms, fmt: int, flips, cut) -> None:
    data = bytearray(_build(ms, fmt))
    for at, value in flips:
        data[at % len(data)] = value
    if cut is not None:
        del data[cut % len(data):]
    try:
        _ours(bytes(data))
    except ImgquiltError as exc:
        assert exc.exit_code == 6, exc


def _huge_header(typeflag: bytes, size: int) -> bytes:
    ti = tarfile.TarInfo("x")
    ti.type = typeflag
    ti.size = size
    return ti.tobuf(tarfile.GNU_FORMAT)


def test_huge_pax_or_long_name_is_refused_unread() -> None:
    for flag in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
        s = _Stream(_huge_header(flag, 1 << 30) + b"\0" * (4 << 20))
        try:
            list(TarWalker(s, what="hostile tar"))
        except ImgquiltError as exc:
            assert exc.exit_code == 6 and "more than imgquilt reads" in exc.message
        else:
            raise AssertionError("a 1 GiB header was accepted")
        assert s.read_bytes <= 5 << 20  # the first chunk only: never the claimed gigabyte


def test_a_header_at_the_cap_is_still_read() -> None:
    name = "n" * (META_CAP - 1)
    ti = tarfile.TarInfo(name)
    ti.size = 2
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        t.addfile(ti, io.BytesIO(b"ok"))
    assert [(n, d) for n, *_, d in _ours(buf.getvalue())] == [(name, b"ok")]


def test_cli_refuses_a_hostile_flat_tar_with_exit_6(tmp_path: Path, cli_env: dict[str, str]) -> None:
    tar = tmp_path / "fs.tar"
    with open(tar, "wb") as f:
        f.write(_huge_header(tarfile.GNUTYPE_LONGNAME, 3 << 30))
        f.truncate(3 << 30)  # sparse: the claimed 3 GiB cost no disk
    q = tmp_path / "q"
    write_patch(q, "0001-x.patch", [("etc/app.conf", b"a\n", b"b\n")])
    r = imgquilt("--queue", str(q), "apply", "--image", f"tar:{tar}", cwd=q, env=cli_env)
    assert r.code == 6 and "more than imgquilt reads" in r.err and "Traceback" not in r.err, r.out + r.err
    os.unlink(tar)
