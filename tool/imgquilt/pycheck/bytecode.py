"""Python bytecode beside a source: which files CPython could load instead of it, and what they run.

CPython imports `DIR/NAME.py` from `DIR/__pycache__/NAME.TAG[.opt-N].pyc` when that file is valid for
the source (TAG: the interpreter's cache tag; N: the -O level), and a sourceless `DIR/NAME.pyc` when
there is no `NAME.py` at all. A pyc says how it is to be judged in its 16-byte header (PEP 552):

- flags 0, a timestamp pyc: loaded when its mtime and size fields equal the source's (mtime in whole
  seconds); the code inside is whatever was compiled then;
- flags 3, a checked-hash pyc: loaded only when its source hash equals the hash of the source's bytes;
- flags 1, an unchecked-hash pyc: loaded whatever the source holds (its hash is never compared).

The source hash is SipHash, keyed with the pyc's own magic number: SipHash-2-4 in CPython 3.7-3.10,
SipHash-1-3 from 3.11 on (`_Py_KeyedHash`; checked against every interpreter named in the tests).
Nothing here reads a filesystem: bytes and names in, verdicts out. Comparing the code of a timestamp
pyc means unmarshalling it, which is not safe on hostile bytes, so that runs only for pycs of this
interpreter's own magic number, each in a child process of its own with its own bounds (address
space, CPU time, wall time, and the size of what it unmarshals): one hostile pyc (a body that
unmarshals in quadratic time, say) can only make its own verdict "cannot tell", never another's.
"""
from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from typing import Sequence

from ..fs.pycache import PYCACHE, Bytecode
from ..settings import current

HEADER = 16

# verdicts on one bytecode file
IGNORED = "ignored"  # CPython does not load it: the source's bytes run
CURRENT = "current"  # CPython loads it, and it holds the code of the source's bytes
STALE = "stale"  # CPython loads it instead of the source's bytes: other code runs
CANNOT_TELL = "cannot-tell"  # CPython would load it; imgquilt cannot tell what code it holds
UNCHECKED = CANNOT_TELL  # its name before 0.5

# magic-number ranges (the 16-bit number before b"\r\n") of CPython releases, with the source-hash
# function each keys with its magic; pre-releases included (Include/internal/pycore_magic_number.h)
_VERSIONS: tuple[tuple[int, int, str, int | None], ...] = (
    (3230, 3379, "3.3-3.6", None),  # 12-byte header (magic, mtime, size): timestamps only
    (3390, 3394, "3.7", 2),
    (3400, 3413, "3.8", 2),
    (3420, 3425, "3.9", 2),
    (3430, 3439, "3.10", 2),
    (3450, 3495, "3.11", 1),
    (3500, 3531, "3.12", 1),
    (3550, 3571, "3.13", 1),
    (3600, 3627, "3.14", 1),
    (3650, 3699, "3.15", 1),
)
_OWN_MAGIC = importlib.util.MAGIC_NUMBER
# the bounds of the child that unmarshals one untrusted pyc and compiles its source
CODE_CHILD_MEMORY = 2 << 30  # address space
CODE_CHILD_CPU = 10  # seconds of CPU (RLIMIT_CPU: the kernel stops it); IMGQUILT_PYC_CPU_SECONDS overrides
CODE_CPU_ENV = "IMGQUILT_PYC_CPU_SECONDS"
CODE_MAX_BODY = 16 << 20  # bytes of marshalled code: CPython's own pycs of the largest modules are a few MB
CODE_CHILDREN_ENV = "IMGQUILT_PYC_CHILDREN"


@dataclass(frozen=True)
class Verdict:
    """What CPython would do with one bytecode file, and why, in a sentence."""

    bytecode: Bytecode
    verdict: str
    reason: str


# --- the header ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Header:
    magic: int  # the 16-bit magic number
    version: str | None  # the CPython release it belongs to, when known
    flags: int
    mtime: int | None
    size: int | None
    source_hash: bytes | None


def version_of(magic: int) -> tuple[str, int | None] | None:
    """(release, SipHash compression rounds or None) for a CPython magic number; None if unknown."""
    for lo, hi, version, rounds in _VERSIONS:
        if lo <= magic <= hi:
            return version, rounds
    return None


def read_header(data: bytes) -> Header | None:
    """The header, or None when no CPython would take these bytes for a pyc (too short, no magic)."""
    if len(data) < 12 or data[2:4] != b"\r\n":
        return None
    magic = struct.unpack("<H", data[:2])[0]
    known = version_of(magic)
    if known is not None and known[1] is None:  # 3.3-3.6: magic, mtime, size
        mtime, size = struct.unpack("<II", data[4:12])
        return Header(magic, known[0], 0, mtime, size, None)
    if len(data) < HEADER:
        return None
    flags = struct.unpack("<I", data[4:8])[0]
    version = known[0] if known else None
    if flags & 1:
        return Header(magic, version, flags, None, None, data[8:16])
    mtime, size = struct.unpack("<II", data[8:16])
    return Header(magic, version, flags, mtime, size, None)


# --- SipHash, as CPython's _Py_KeyedHash(key, bytes) -------------------------------------------
_MASK = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def siphash(k0: int, k1: int, data: bytes, c_rounds: int, d_rounds: int) -> int:
    """SipHash-c-d of `data` (CPython's variant: 1-3 from 3.11 on, 2-4 before)."""
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    whole = len(data) - len(data) % 8
    for (m,) in struct.iter_unpack("<Q", data[:whole]):
        v3 ^= m
        rounds(c_rounds)
        v0 ^= m
    b = ((len(data) & 0xFF) << 56) | int.from_bytes(data[whole:], "little")
    v3 ^= b
    rounds(c_rounds)
    v0 ^= b
    v2 ^= 0xFF
    rounds(d_rounds)
    return (v0 ^ v1 ^ v2 ^ v3) & _MASK


def source_hash(magic: int, data: bytes) -> bytes | None:
    """The 8-byte source hash the CPython of `magic` keeps in a hash-based pyc of `data`; None for a
    magic number imgquilt does not know (it says so rather than guess)."""
    known = version_of(magic)
    if known is None or known[1] is None:
        return None
    key = int.from_bytes(struct.pack("<H", magic) + b"\r\n", "little")
    c_rounds = known[1]
    if c_rounds == (1 if sys.version_info >= (3, 11) else 2):
        import _imp  # this interpreter's own, in C: the same function

        return _imp.source_hash(key, data)
    return siphash(key, 0, data, c_rounds, c_rounds + 2).to_bytes(8, "little")


# --- verdicts -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """A bytecode file as read, beside its source as read (None: the source is gone)."""

    bytecode: Bytecode
    data: bytes
    source: bytes | None
    source_mtime: int | None


def judge(items: Sequence[Seen]) -> list[Verdict]:
    """What CPython would run for each item: its source's bytes (IGNORED, CURRENT) or other code
    (STALE); CANNOT_TELL where that cannot be known here. The code of every timestamp pyc of this
    interpreter's magic number whose mtime and size match its source is compared in a child process
    of its own (see the module docstring)."""
    out: list[Verdict | None] = []
    compare: list[tuple[int, Seen]] = []
    for i, seen in enumerate(items):
        verdict = _judge_header(seen)
        if verdict is None:
            compare.append((i, seen))
        out.append(verdict)
    if compare:
        for (i, seen), same in zip(compare, _same_code([s for _, s in compare])):
            out[i] = _code_verdict(seen, same)
    return [v for v in out if v is not None]


def _judge_header(seen: Seen) -> Verdict | None:
    """The verdict the header alone gives; None when only the code can tell."""
    b, src = seen.bytecode, seen.source
    h = read_header(seen.data)
    if h is None:
        return Verdict(b, IGNORED, "not bytecode CPython would load (no pyc header)")
    who = f"CPython {h.version}" if h.version else f"the interpreter of magic number {h.magic}"
    if src is None:
        if b.how == "pycache":
            return Verdict(b, IGNORED, f"{PYCACHE} bytecode is never loaded without its source")
        return Verdict(b, STALE, f"a sourceless pyc: {who} imports it although the source is gone")
    if b.how == "sourceless":
        return Verdict(b, IGNORED, "a sourceless pyc is not loaded while the source exists")
    if h.flags & ~0b11:
        return Verdict(b, IGNORED, f"invalid pyc flags {h.flags:#x}: {who} ignores it")
    if h.flags & 1:
        expected = source_hash(h.magic, src)
        checked = bool(h.flags & 2)
        if expected is None:
            if checked:
                return Verdict(b, IGNORED, f"a checked-hash pyc of magic number {h.magic}: recompiled unless its hash matches")
            return Verdict(b, CANNOT_TELL, f"an unchecked-hash pyc of magic number {h.magic}, whose source hash imgquilt "
                                         "cannot compute: it is loaded whatever the source holds")
        if expected == h.source_hash:
            return Verdict(b, CURRENT, f"its source hash matches the file ({'checked' if checked else 'unchecked'}-hash pyc of {who})")
        if checked:
            return Verdict(b, IGNORED, f"a checked-hash pyc whose hash does not match: {who} recompiles the source")
        return Verdict(b, STALE, f"an unchecked-hash pyc of {who} compiled from other bytes (source hash "
                                 f"{h.source_hash.hex() if h.source_hash else '?'}, the file's is {expected.hex()}): "
                                 "it is loaded without looking at the source")
    size_ok = h.size == len(src) & 0xFFFFFFFF
    mtime_ok = seen.source_mtime is not None and h.mtime == seen.source_mtime & 0xFFFFFFFF
    if not (size_ok and mtime_ok):
        why = "size" if not size_ok else "mtime"
        return Verdict(b, IGNORED, f"a timestamp pyc whose {why} does not match the source: {who} recompiles it")
    if seen.data[:4] != _OWN_MAGIC:
        return Verdict(b, CANNOT_TELL, f"a timestamp pyc of {who} whose mtime ({h.mtime}) and size ({h.size}) match the "
                                     f"source, so it is loaded; imgquilt runs on CPython {sys.version_info[0]}."
                                     f"{sys.version_info[1]} and cannot compare that interpreter's code")
    return None


def _code_verdict(seen: Seen, same: str) -> Verdict:
    b = seen.bytecode
    h = read_header(seen.data)
    assert h is not None
    ts = f"a timestamp pyc whose mtime ({h.mtime}) and size ({h.size}) match the source, so CPython {h.version} loads it"
    if same == "same":
        return Verdict(b, CURRENT, f"{ts}; its code is the source's")
    if same == "other":
        return Verdict(b, STALE, f"{ts}, but its code was compiled from other bytes")
    if same == "bad":
        return Verdict(b, STALE, f"{ts}, but it does not hold a code object: the import fails")
    return Verdict(b, CANNOT_TELL, f"{ts}; imgquilt cannot tell which code it holds: {same}")


_CHILD = r"""
import json, marshal, resource, struct, sys
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
data = sys.stdin.buffer.read()
opt, lp, ls, lb = struct.unpack_from("<BIII", data, 0)
at = 13
path = data[at:at + lp].decode("utf-8", "surrogateescape"); at += lp
src = data[at:at + ls]; at += ls
body = data[at:at + lb]
try:
    code = marshal.loads(body)
except Exception:
    code = None
if not isinstance(code, type(compile("", "", "exec"))):
    out = "bad"
else:
    try:
        fresh = compile(src, path, "exec", dont_inherit=True, optimize=opt)
    except Exception:
        out = "other"
    else:
        out = "same" if code == fresh else "other"
sys.stdout.write(json.dumps(out))
"""


def _cpu_seconds() -> int:
    """CPU seconds one pyc's comparison may take (IMGQUILT_PYC_CPU_SECONDS, default CODE_CHILD_CPU)."""
    raw = (current().of(CODE_CPU_ENV) or "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else CODE_CHILD_CPU


def _children() -> int:
    """How many pycs are compared at once (IMGQUILT_PYC_CHILDREN; default: the cores, at most 4)."""
    raw = (current().of(CODE_CHILDREN_ENV) or "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return max(1, min(4, os.cpu_count() or 1))


def _same_code(items: Sequence[Seen]) -> list[str]:
    """Per item, "same" / "other" / "bad" (no code object), or why the comparison could not tell.
    Each item is compared by a child of its own, up to _children() at once; each has its own bounds."""
    if len(items) <= 1:
        return [_compare(s) for s in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(_children(), len(items)), thread_name_prefix="imgquilt-pyc") as pool:
        return list(pool.map(_compare, items))


def _compare(s: Seen) -> str:
    """One pyc's comparison, in a child process bounded in memory, CPU and wall time."""
    path = ("/" + s.bytecode.source).encode("utf-8", "surrogateescape")
    assert s.source is not None
    body = s.data[HEADER:]
    if len(body) > CODE_MAX_BODY:
        return f"its code is {len(body)} bytes, more than imgquilt unmarshals ({CODE_MAX_BODY >> 20} MiB)"
    payload = struct.pack("<BIII", s.bytecode.optimize, len(path), len(s.source), len(body)) + path + s.source + body
    cpu = _cpu_seconds()
    wall = 3 * cpu + 5  # a child that waits rather than computes is stopped too
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _CHILD, str(CODE_CHILD_MEMORY), str(cpu)],
                              input=payload, capture_output=True, timeout=wall)
    except subprocess.TimeoutExpired:
        return f"comparing its code took more than {wall} s"
    except OSError as exc:
        return f"cannot start {sys.executable}: {exc.strerror or exc}"
    if done.returncode == 0:
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            answer = None
        if answer in ("same", "other", "bad"):
            return answer
    if done.returncode in (-9, -24):  # SIGKILL, SIGXCPU: RLIMIT_CPU ran out
        return f"comparing its code took more than {cpu} s of CPU"
    if b"MemoryError" in done.stderr:
        return f"comparing its code needs more than {CODE_CHILD_MEMORY >> 30} GiB of memory"
    return f"the comparing process ended with status {done.returncode}"
