"""Hostile `GIT binary patch` blocks: every size they declare is checked before the work it implies.

Each case runs the real CLI (`check` on a queue holding the block, `apply`, `import` of a git diff
holding it) under an address-space limit of 1 GiB (`resource.RLIMIT_AS`, set in the child only), so
a block that would make imgquilt inflate or build more than it declares ends in MemoryError (exit 1)
if the caps do not hold. Every one must be exit 6 with a message naming the binary patch.
Then a hypothesis fuzz of the decoder itself (literal and delta, sizes and bytes drawn at will)
in a subprocess whose memory is capped at the declared size plus a constant.
"""
from __future__ import annotations

import base64
import os
import resource
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from imgquilt.queue.binarypatch import BINARY_CAP, BinaryPatchError, apply_delta, git_blob_sha1, read_binary
from imgquilt.queue.hunks import sha256_hex
from imgquilt.store import ObjectStore
from support.qtools import TOOL, Run, empty_queue

BASE = b"\0base file\0" * 100
MEMORY_CAP = 1 << 30


def _b85_lines(packed: bytes) -> bytes:
    out = []
    for k in range(0, len(packed), 52):
        chunk = packed[k:k + 52]
        n = len(chunk)
        out.append(bytes([n + 64 if n <= 26 else n - 26 + 96]) + base64.b85encode(chunk, pad=True) + b"\n")
    return b"".join(out)


def block(kind: str, declared: int, packed: bytes) -> bytes:
    """A block as git writes it, from already compressed bytes (so they may lie about the size)."""
    return f"{kind} {declared}\n".encode() + _b85_lines(packed) + b"\n"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def zlib_bomb(size: int) -> bytes:
    """zlib data that inflates to `size` zero bytes (a whole number of MiB), made without holding them.

    Each MiB ends with a full flush, which resets the compressor, so every MiB after the first compresses
    to the same bytes: one is made and repeated (compressing 2 GiB took 12 s of every collection), then
    the final empty block and the Adler-32 of `size` zero bytes (a = 1, b = size mod 65521)."""
    c = zlib.compressobj(9)
    zero = bytes(1 << 20)
    first = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    return first + again * ((size >> 20) - 1) + b"\x03\x00" + struct.pack(">I", (size % 65521) << 16 | 1)


def git_diff(blocks: bytes, *, new: bool = False) -> bytes:
    head = b"diff --git a/data.bin b/data.bin\n"
    ours = git_blob_sha1(BASE)[:7].encode()
    head += b"new file mode 100644\nindex 0000000..1111111\n" if new else b"index " + ours + b"..2222222 100644\n"
    return head + b"GIT binary patch\n" + blocks


def queue_patch(blocks: bytes, *, new: bool = False, patched: bytes = b"x" * 64) -> bytes:
    """An imgquilt section holding the blocks (pins that the cap is checked before any hash)."""
    base = "absent" if new else sha256_hex(BASE)
    return (f"Description: hostile\n\nIndex: data.bin\nBase-SHA256: {base}\nPatched-SHA256: {sha256_hex(patched)}\n"
            .encode() + git_diff(blocks, new=new))


def run_capped(*args: str, cwd: Path, timeout: float = 120) -> Run:
    """The CLI in a child with at most MEMORY_CAP bytes of address space."""
    env = dict(os.environ, PYTHONPATH=str(TOOL), IMGQUILT_NO_RUFF="1")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    p = subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       preexec_fn=limit, timeout=timeout)
    return Run(p.returncode, p.stdout, p.stderr)


HOSTILE = {
    # a 2 MB zlib bomb (2 GiB of zeros, twice the child's address space) behind a block that says 100 bytes
    "bomb-literal": block("literal", 100, zlib_bomb(2 << 30)),
    # a block that declares more than imgquilt reads
    "huge-literal": block("literal", 700 << 30, zlib.compress(b"x")),
    # a small delta whose header says its result is 640 GiB
    "huge-target": block("delta", 0, b""),  # filled in below (needs BASE's size)
    # a delta whose copies produce more than its header declares (16 MiB copies of the base, repeated)
    "overlong-delta": block("delta", 0, b""),
    # a copy instruction cut off after its opcode
    "truncated-copy": block("delta", 0, b""),
    # an insert that runs past the end of the delta
    "truncated-insert": block("delta", 0, b""),
    # a 3 KB varint in the delta header (big-integer arithmetic for minutes, before)
    "long-varint": block("delta", 0, b""),
}


def _delta_block(body: bytes) -> bytes:
    return block("delta", len(body), zlib.compress(body))


HOSTILE["huge-target"] = _delta_block(varint(len(BASE)) + varint(640 << 30) + bytes([0x80 | 0x01 | 0x10 | 0x20, 0, 0xFF, 0x03] * 4000))
HOSTILE["overlong-delta"] = _delta_block(varint(len(BASE)) + varint(10) + bytes([0x80 | 0x10, 0x40]) * 10)
HOSTILE["truncated-copy"] = _delta_block(varint(len(BASE)) + varint(10) + bytes([0x80 | 0x0F | 0x70]))
HOSTILE["truncated-insert"] = _delta_block(varint(len(BASE)) + varint(10) + bytes([0x7F]) + b"abc")
HOSTILE["long-varint"] = _delta_block(varint(len(BASE)) + b"\xff" * 3000 + b"\x01")


def _queue(tmp_path: Path, blocks: bytes) -> Path:
    q = empty_queue(tmp_path / "q")
    (q / "patches").mkdir()
    (q / "patches/hostile.patch").write_bytes(queue_patch(blocks))
    (q / "series").write_text("hostile.patch\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "data.bin").write_bytes(BASE)
    ObjectStore(q).put(BASE)  # so `check` tests the body against its base
    return q


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_block_is_bad_input_in_check_apply_and_import(tmp_path: Path, case: str) -> None:
    q = _queue(tmp_path, HOSTILE[case])
    for args in (("check",), ("apply", "--root", str(tmp_path / "root"))):
        r = run_capped(*args, cwd=q)
        assert r.code == 6, f"{args}: exit {r.code}\n{r.err}"
        assert "binary" in r.err and "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert (tmp_path / "root/data.bin").read_bytes() == BASE
    (tmp_path / "foreign.diff").write_bytes(git_diff(HOSTILE[case]))
    q2 = empty_queue(tmp_path / "q2")
    r = run_capped("import", str(tmp_path / "foreign.diff"), "--image", f"rootfs:{tmp_path / 'root'}", cwd=q2)
    assert r.code == 6, f"import: exit {r.code}\n{r.err}"
    assert "binary" in r.err and "Traceback" not in r.err, r.err
    assert not (q2 / "patches").exists() or not any((q2 / "patches").iterdir())


@pytest.mark.parametrize("where", ["queue", "import"])
def test_a_file_ending_at_git_binary_patch_is_bad_input(tmp_path: Path, where: str) -> None:
    if where == "queue":
        q = _queue(tmp_path, b"")
        r = run_capped("check", cwd=q)
    else:
        root = tmp_path / "root"
        root.mkdir()
        (root / "data.bin").write_bytes(BASE)
        q = empty_queue(tmp_path / "q")
        (tmp_path / "cut.diff").write_bytes(git_diff(b""))
        r = run_capped("import", str(tmp_path / "cut.diff"), "--image", f"rootfs:{root}", cwd=q)
    assert r.code == 6 and "literal N" in r.err and "Traceback" not in r.err, r.err


@pytest.mark.parametrize("mode", ["100999", "1007x4", "99999999999999999999999"])
def test_a_bad_git_mode_line_is_bad_input(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/app.conf").write_bytes(b"a\n")
    diff = (f"diff --git a/etc/app.conf b/etc/app.conf\nold mode 100644\nnew mode {mode}\n"
            "--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1 +1 @@\n-a\n+b\n").encode()
    (tmp_path / "mode.diff").write_bytes(diff)
    q = empty_queue(tmp_path / "q")
    r = run_capped("import", str(tmp_path / "mode.diff"), "--image", f"rootfs:{root}", cwd=q)
    assert r.code == 6 and "mode" in r.err and "Traceback" not in r.err, r.err
    new_file = diff.replace(b"old mode 100644\nnew mode", b"new file mode").replace(b"--- a/etc/app.conf", b"--- /dev/null")
    (tmp_path / "mode.diff").write_bytes(new_file.replace(b"@@ -1 +1 @@\n-a\n", b"@@ -0,0 +1 @@\n"))
    r = run_capped("import", str(tmp_path / "mode.diff"), "--image", f"rootfs:{root}", cwd=q)
    assert r.code == 6 and "mode" in r.err and "Traceback" not in r.err, r.err


def test_declared_sizes_are_refused_before_any_inflating() -> None:
    with pytest.raises(BinaryPatchError, match="at most"):
        read_binary([b"literal %d\n" % (BINARY_CAP + 1), b"Zjunk\n"], 0)
    with pytest.raises(BinaryPatchError, match="result is"):
        apply_delta(b"ab", varint(2) + varint(BINARY_CAP + 1))
    with pytest.raises(BinaryPatchError, match="runs past 10 bytes"):
        apply_delta(b"ab", varint(2) + b"\x80" * 11)


# --- the fuzz -------------------------------------------------------------------------------------
FUZZ = textwrap.dedent('''
    import resource, sys, zlib
    from hypothesis import HealthCheck, given, settings, strategies as st
    from imgquilt.queue.binarypatch import BinaryPatchError, apply_binary, read_binary

    CONSTANT = 192 << 20
    # inflates to 256 MiB of zeros (compressed 256 KB), more than the constant; made before the cap
    c = zlib.compressobj(9)
    BOMB = b"".join(c.compress(bytes(1 << 20)) for _ in range(256)) + c.flush()

    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def lines(packed):
        out = []
        for k in range(0, len(packed), 52):
            chunk = packed[k:k + 52]
            n = len(chunk)
            out.append(bytes([n + 64 if n <= 26 else n - 26 + 96]) + __import__("base64").b85encode(chunk, pad=True) + b"\\n")
        return out

    SIZES = st.one_of(st.integers(0, 4096), st.sampled_from([1 << 20, (1 << 30) + 1, 640 << 30, 2 ** 64 - 1]))
    OPS = st.lists(st.one_of(
        st.binary(min_size=1, max_size=8),                                     # raw bytes: any opcode
        st.tuples(st.integers(0, 0x7F), st.binary(max_size=7)).map(lambda t: bytes([0x80 | t[0]]) + t[1]),
        st.integers(1, 0x7F).map(lambda n: bytes([n]) + b"i" * n),             # a whole insert
    ), max_size=40)

    @st.composite
    def blocks(draw):
        kind = draw(st.sampled_from(["literal", "delta"]))
        base = draw(st.binary(max_size=300))
        if draw(st.booleans()):
            payload = BOMB
        elif kind == "delta":
            head = varint(draw(st.sampled_from([len(base), draw(SIZES)]))) + varint(draw(SIZES))
            if draw(st.booleans()):
                head = draw(st.binary(max_size=12)) + head
            payload = zlib.compress(head + b"".join(draw(OPS)))
        else:
            payload = zlib.compress(draw(st.binary(max_size=2000)))
        packed = draw(st.sampled_from([payload, payload[:len(payload) // 2], payload + b"junk"]))
        declared = draw(st.sampled_from([len(zlib.decompress(payload)) if payload is not BOMB else 256 << 20,
                                         draw(SIZES)]))
        text = [("%s %d\\n" % (kind, declared)).encode()] + lines(packed) + [b"\\n"]
        if draw(st.booleans()):
            text = text[:draw(st.integers(0, len(text)))]
        return base, declared, text

    @settings(max_examples=int(sys.argv[1]), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(blocks())
    def fuzz(case):
        base, declared, text = case
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        allowed = used + min(declared, 1 << 30) + CONSTANT
        resource.setrlimit(resource.RLIMIT_AS, (allowed, hard))
        try:
            patch, _ = read_binary(text, 0)
            apply_binary(base, patch)
        except BinaryPatchError:
            pass
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    fuzz()
    print("fuzzed")
''')


def test_fuzz_of_the_binary_decoder_under_a_memory_cap(tmp_path: Path) -> None:
    """No exception but BinaryPatchError, and no memory beyond the declared size (capped at
    BINARY_CAP) plus 192 MiB, for hypothesis' literal and delta blocks: bombs, lying sizes, cut streams,
    random opcodes and varints."""
    script = tmp_path / "fuzz.py"
    script.write_text(FUZZ)
    env = dict(os.environ, PYTHONPATH=str(TOOL))
    p = subprocess.run([sys.executable, "-W", "ignore", str(script), os.environ.get("IMGQUILT_FUZZ_EXAMPLES", "400")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0 and "fuzzed" in p.stdout, p.stdout[-3000:] + p.stderr[-5000:]


def test_the_fuzz_would_catch_an_uncapped_inflate(tmp_path: Path) -> None:
    """The memory cap of the fuzz is real: an inflate without a bound fails under it."""
    code = textwrap.dedent('''
        import resource, zlib
        c = zlib.compressobj(9)
        bomb = b"".join(c.compress(bytes(1 << 20)) for _ in range(1024)) + c.flush()
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + 100 + (192 << 20), resource.RLIM_INFINITY))
        try:
            zlib.decompress(bomb)
        except MemoryError:
            print("capped")
    ''')
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "capped" in p.stdout, p.stderr


def test_check_reads_the_object_store_within_a_memory_limit(tmp_path: Path) -> None:
    """An object-store read reserves what the object holds, not the store's 4 GiB cap: `check`, which
    tests each body against its base from the store, works under a 1 GiB address-space limit."""
    from support.qtools import write_patch

    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-x.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    ObjectStore(q).put(b"workers = 2\n")
    r = run_capped("check", cwd=q)
    assert r.code == 0, r.err


def test_the_bomb_inflates_to_its_size_of_zero_bytes() -> None:
    d = zlib.decompressobj()
    out = d.decompress(zlib_bomb(8 << 20)) + d.flush()
    assert d.eof and out == bytes(8 << 20)
