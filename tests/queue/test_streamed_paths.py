"""Large files take the streamed paths (spooled contents, patch files read as they stream, hunks applied in
pieces), and those paths give exactly what the in-memory ones give: the same output bytes, hashes and
records. IMGQUILT_SPOOL_AT=1 sends every content and every patch section of these small files down the
streamed paths, so the comparison runs in a second, not on gigabytes (bench/bench_large.py does that)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.imagetools import build_oci, file, whiteout
from imgquilt.engine.apply import HunkError, apply_hunks, apply_section
from imgquilt.errors import ImgquiltError
from imgquilt.fs.content import Spooled, SpoolWriter, spool_from
from imgquilt.queue.binarypatch import BinaryPatchError, apply_delta, apply_delta_streaming
from imgquilt.queue.hunks import sha256_hex, show_line, split_lines
from imgquilt.queue.patchfile import parse_patch, read_patch
from imgquilt.queue.streamed import b85decode
from support.qtools import imgquilt, tree_hash, write_patch

pytestmark = pytest.mark.filterwarnings("ignore")

PY = b"import os\n\n\ndef main():\n    return os.getcwd()\n"
PY_NEW = b"import os\nimport sys\n\n\ndef main():\n    return os.getcwd() + sys.prefix\n"
CONF = b"[a]\r\nx = 1\r\ny = 2"  # CRLF, no final newline
CONF_NEW = b"[a]\r\nx = 5\r\ny = 2\r\nz = 3"
TEXT = b"".join(b"line %d of the data\n" % i for i in range(3000))
TEXT_NEW = TEXT.replace(b"line 10 of", b"LINE 10 of").replace(b"line 2500 of", b"line 2500 (edited) of") + b"tail\n"
BIN = bytes(range(256)) * 40
BIN_NEW = BIN[:5000] + b"\0patched\0" + BIN[5000:]
NEW_TEXT = b"".join(b"new %d\n" % i for i in range(2000)) + b"no newline at the end"
NEW_BIN = b"\0\x01\x02" * 3000
LONG_LINE = b"x" * 50000 + b"\n"


@pytest.fixture
def setup(tmp_path: Path):
    image = build_oci(tmp_path / "img", [
        [file("usr/lib/app/main.py", PY), file("etc/app.conf", CONF), file("etc/gone", b"bye\n"),
         file("usr/share/data.txt", TEXT)],
        [file("usr/share/model.bin", BIN), file("usr/share/long.txt", LONG_LINE), whiteout("etc/nothing")],
    ])
    q = tmp_path / "queue"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-text.patch", [("usr/lib/app/main.py", PY, PY_NEW), ("etc/app.conf", CONF, CONF_NEW),
                                      ("usr/share/data.txt", TEXT, TEXT_NEW)])
    write_patch(q, "0002-binary.patch", [("usr/share/model.bin", BIN, BIN_NEW), ("usr/share/new.bin", None, NEW_BIN)])
    write_patch(q, "0003-new-and-gone.patch", [("usr/share/new.txt", None, NEW_TEXT), ("etc/gone", b"bye\n", None),
                                              ("usr/share/long.txt", LONG_LINE, LONG_LINE[:-1] + b"y\n")],
                modes={"usr/share/new.txt": 0o755})
    write_patch(q, "0004-again.patch", [("usr/share/data.txt", TEXT_NEW, TEXT_NEW + b"more\n")])
    root = tmp_path / "root"
    for rel, data in {"usr/lib/app/main.py": PY, "etc/app.conf": CONF, "etc/gone": b"bye\n", "usr/share/data.txt": TEXT,
                      "usr/share/model.bin": BIN, "usr/share/long.txt": LONG_LINE}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return image, q, root


def _run(env: dict[str, str], tmp: Path, image: Path, queue: Path, root: Path, registry=None) -> dict:
    """Every verb over a copy of the queue, with what each wrote."""
    q = tmp / "q"
    shutil.copytree(queue, q)
    r = tmp / "root"
    shutil.copytree(root, r)
    ref = f"oci:{image}:latest"
    out: dict = {}
    imgquilt("lock", "--image", ref, cwd=q, env=env, check=0)
    out["lock"] = (q / "targets.lock").read_bytes()
    out["check"] = imgquilt("check", "--image", ref, cwd=q, env=env, check=0).out
    applied = imgquilt("--json", "apply", "--layer", str(tmp / "fix.tar.gz"), "--output-image", f"oci:{tmp / 'out'}:fixed",
                       cwd=q, env=env, check=0)
    doc = json.loads(applied.out)
    out["apply"] = {k: v for k, v in doc.items() if k != "outputs"}
    out["outputs"] = {k: {x: y for x, y in v.items() if x not in ("path", "mounts", "ref")} for k, v in doc["outputs"].items()}
    out["layer"] = (tmp / "fix.tar.gz").read_bytes()
    chunked = imgquilt("--json", "apply", "--output-image", f"oci:{tmp / 'chunked'}:fixed", "--compression", "zstd:chunked",
                       cwd=q, env=env, check=0)
    out["zstd:chunked"] = json.loads(chunked.out)["outputs"]["image"]["layer_digest"]
    imgquilt("apply", "--layer", str(tmp / "fix.tar.zst"), "--compression-level", "7", cwd=q, env=env, check=0)
    out["zstd-7"] = (tmp / "fix.tar.zst").read_bytes()
    if registry is not None:  # the push streams the new layer up; the registry answers the manifest digest
        pushed = imgquilt("--json", "apply", "--output-image", registry.ref(f"streamed:{tmp.name}"), cwd=q, env=env, check=0)
        out["pushed"] = json.loads(pushed.out)["outputs"]["image"]["digest"]
    out["blobs"] = sorted(p.name for p in (tmp / "out" / "blobs" / "sha256").iterdir())
    q2 = tmp / "q2"  # an overlay cannot delete a file: the patches that delete none
    shutil.copytree(queue, q2)
    (q2 / "series").write_text("0001-text.patch\n0002-binary.patch\n")
    imgquilt("apply", "--image", ref, "--overlay", str(tmp / "ov"), cwd=q2, env=env, check=0)
    out["overlay"] = {str(p.relative_to(tmp / "ov")): (p.read_bytes(), p.stat().st_mode) for p in (tmp / "ov").rglob("*")
                      if p.is_file() and p.name != "mounts.tsv"}
    out["mounts"] = (tmp / "ov" / "mounts.tsv").read_text().replace(str(tmp), "TMP")
    imgquilt("apply", "--root", str(r), cwd=q, env=env, check=0)
    out["root"] = tree_hash(r)
    out["record"] = (r / "var/lib/imgquilt/applied.json").read_bytes()
    audit = imgquilt("--json", "audit", "--image", f"oci:{tmp / 'out'}:fixed", cwd=q, env=env, check=0)
    out["audit"] = audit.out.replace(str(tmp), "TMP")
    out["audit-root"] = imgquilt("--json", "audit", "--root", str(r), cwd=q, env=env, check=0).out.replace(str(r), "ROOT")
    objects = q / ".imgquilt" / "objects"
    out["objects"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in objects.rglob("*") if p.is_file()}
    return out


def test_streamed_paths_give_the_same_bytes_hashes_and_records(setup, tmp_path: Path, cli_env: dict[str, str]) -> None:
    from support.registry_server import start_registry

    image, queue, root = setup
    registry = start_registry(tmp_path / "registry")
    try:
        plain = _run(cli_env, tmp_path / "plain", image, queue, root, registry)
        streamed_env = {**cli_env, "IMGQUILT_SPOOL_AT": "1", "IMGQUILT_CACHE_DIR": str(tmp_path / "cache2")}
        streamed = _run(streamed_env, tmp_path / "streamed", image, queue, root, registry)
    finally:
        registry.stop()
    for key in plain:
        assert streamed[key] == plain[key], key
    # every base and result is kept, whichever way it was carried (the streamed ones by a link)
    wanted = {sha256_hex(x) for x in (PY, PY_NEW, CONF, CONF_NEW, TEXT, TEXT_NEW + b"more\n", BIN, BIN_NEW, NEW_BIN, NEW_TEXT)}
    assert wanted <= set(streamed["objects"])
    # the patched files are what GNU patch (text) and git apply (binary) make of the same patch files
    r = tmp_path / "gnu"
    shutil.copytree(root, r)
    for name in ("0001-text.patch", "0003-new-and-gone.patch", "0004-again.patch"):
        subprocess.run(["patch", "-s", "-p1", "-d", str(r), "-i", str(queue / "patches" / name)], check=True)
    subprocess.run(["git", "apply", "--binary", "--unsafe-paths", "--directory=", str(queue / "patches" / "0002-binary.patch")],
                   cwd=r, check=True, capture_output=True)
    got = tmp_path / "streamed" / "root"
    for rel in ("usr/lib/app/main.py", "etc/app.conf", "usr/share/data.txt", "usr/share/new.txt", "usr/share/long.txt",
                "usr/share/model.bin", "usr/share/new.bin"):
        assert (got / rel).read_bytes() == (r / rel).read_bytes(), rel
    assert not (got / "etc/gone").exists() and not (r / "etc/gone").exists()


# --- the pieces, on many inputs --------------------------------------------------------------------
def _spooled(data: bytes) -> Spooled | bytes:
    if not data:
        return data
    w = SpoolWriter(at=0)
    w.write(data)
    out = w.finish()
    assert isinstance(out, Spooled)
    return out


def _outcome(fn):
    try:
        return "ok", fn()
    except (HunkError, BinaryPatchError, ImgquiltError) as exc:
        return type(exc).__name__, str(exc)


def _reference_apply(old: bytes, hunks) -> bytes:
    """The rule, line by line on a list (the in-memory applier before the one applier): the oracle."""
    src = split_lines(old)
    out: list[bytes] = []
    pos = 0
    for i, h in enumerate(hunks):
        start = h.old_start if h.old_len == 0 else h.old_start - 1
        if start < pos or start > len(src):
            raise HunkError(i, h.old_start, f"start is outside the file or overlaps the previous hunk ({len(src)} lines)")
        out.extend(src[pos:start])
        pos = start
        for ln in h.lines:
            if ln.kind == "+":
                out.append(ln.text)
                continue
            if pos >= len(src):
                raise HunkError(i, pos + 1, "the file ends before the hunk does")
            if src[pos] != ln.text:
                raise HunkError(i, pos + 1, f"expected {show_line(ln.text)}, found {show_line(src[pos])}")
            if ln.kind == " ":
                out.append(src[pos])
            pos += 1
    out.extend(src[pos:])
    return b"".join(out)


def test_hunks_applied_in_pieces_give_the_same_bytes_and_errors(monkeypatch) -> None:
    """The one applier, on a held base (lines) and a spooled one (chunks), with the hunks as values and
    as a StreamedHunks read in pieces (lines longer than a read): the reference rule's bytes and errors."""
    import imgquilt.engine.apply as engine_apply
    import imgquilt.queue.streamed as streamed

    monkeypatch.setattr(streamed, "BUF", 64)  # lines longer than a read, runs cut at every read
    monkeypatch.setattr(engine_apply, "CHUNK", 7)
    monkeypatch.setattr(engine_apply, "_BLOCK", 16)  # newlines counted in small blocks, the last one searched
    monkeypatch.setattr(streamed, "CHUNK", 5)
    from imgquilt.queue.difftext import diff_hunks, format_hunks
    from imgquilt.queue.streamed import StreamedHunks

    rng = random.Random(28)
    words = [b"a\n", b"b\n", b"c\r\n", b"\n", b"x" * 150 + b"\n", b"tail", b" lead\n", b"-minus\n", b"+plus\n",
             b"\xff\xfe latin\n", b"y" * 150]
    for _ in range(200):
        old = b"".join(rng.choice(words) for _ in range(rng.randrange(0, 40)))
        new = b"".join(rng.choice(words) for _ in range(rng.randrange(0, 40)))
        hunks = tuple(diff_hunks(old, new, context=rng.choice([0, 1, 3])))
        base = old if rng.random() < 0.7 else b"".join(rng.choice(words) for _ in range(rng.randrange(0, 40)))
        want = _outcome(lambda: _reference_apply(base, hunks))
        text = format_hunks(hunks)
        pieces = StreamedHunks(_spooled(text), 0, len(text), len(hunks), 1) if text else hunks
        for carried in (base, _spooled(base)):
            for given_hunks in (hunks, pieces):
                got = _outcome(lambda: apply_hunks(carried, given_hunks))
                if got[0] == "ok":
                    got = ("ok", got[1] if isinstance(got[1], bytes) else got[1].to_bytes())
                assert got == want, (old, new, base, type(carried), type(given_hunks))


PATCH_TEXTS = [
    b"",
    b"Index: a\nBase-SHA256: absent\nPatched-SHA256: " + b"0" * 64 + b"\n--- /dev/null\n+++ b/a\n@@ -0,0 +1,2 @@\n+x\n+y\n",
]


def _sections(p):
    out = []
    for s in p.sections:
        b = s.binary
        out.append((s.path, s.base_sha256, s.patched_sha256, s.mode, s.extra, tuple(s.hunks),
                    None if b is None else (b.forward.kind, sha256_hex(b.forward.data),
                                            None if b.reverse is None else (b.reverse.kind, sha256_hex(b.reverse.data)))))
    return out


def _both_ways(tmp: Path, data: bytes, monkeypatch):
    path = tmp / "p.patch"
    path.write_bytes(data)
    mem = _outcome(lambda: _sections(parse_patch(data, "p.patch")))
    monkeypatch.setenv("IMGQUILT_SPOOL_AT", "1")
    try:
        streamed = _outcome(lambda: _sections(read_patch(path, "p.patch")))
    finally:
        monkeypatch.delenv("IMGQUILT_SPOOL_AT")
    return mem, streamed


def _mutations(raw: bytes, rng: random.Random) -> list[bytes]:
    lines = split_lines(raw)
    out = []
    for _ in range(12):
        ls = list(lines)
        k = rng.randrange(len(ls))
        op = rng.randrange(6)
        if op == 0:
            del ls[k]
        elif op == 1:
            ls.insert(k, rng.choice([b"+extra\n", b"-gone\n", b" ctx\n", b"\\ No newline at end of file\n", b"\n",
                                     b"@@ -1 +1 @@\n", b"--- a/x\n", b"+++ b/x\n", b"junk\n", b"\\ other marker\n"]))
        elif op == 2:
            ls[k] = ls[k].rstrip(b"\n")
        elif op == 3:
            ls[k] = ls[k][:1] + ls[k][1:].replace(b"1", b"9", 1)
        elif op == 4:
            ls = ls[:k]
        else:
            ls.append(rng.choice([b"-- \n", b"2.39.2\n", b"trailing\n", b"@@ stray\n"]))
        out.append(b"".join(ls))
    return out


def test_patch_files_read_as_they_stream_parse_as_in_memory(tmp_path: Path, monkeypatch) -> None:
    import imgquilt.queue.streamed as streamed
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    monkeypatch.setattr(streamed, "BUF", 64)
    monkeypatch.setattr(streamed, "CHUNK", 5)
    rng = random.Random(2028)
    sections = [
        make_section("etc/app.conf", CONF, CONF_NEW),
        make_section("usr/lib/app/main.py", PY, PY_NEW),
        make_section("usr/share/new.txt", None, NEW_TEXT, 0o755),
        make_section("usr/share/gone", b"bye\n", None),
        make_section("usr/share/model.bin", BIN, BIN_NEW),
        make_section("usr/share/long.txt", LONG_LINE[:300], LONG_LINE[:299] + b"y\n"),
        make_section("usr/share/data.txt", TEXT[:2000], TEXT[:2000].replace(b"line 3 ", b"LINE 3 ") + b"x"),
        # git's form: an executable file deleted, an empty file created and deleted
        make_section("usr/bin/gone-tool", b"#!/bin/sh\nexit 0\n", None, deleted_mode=0o755),
        make_section("etc/empty-new", None, b""),
        make_section("etc/empty-old", b"", None),
    ]
    corpus = list(PATCH_TEXTS)
    for k in range(1, len(sections) + 1):
        corpus.append(build_patch("p", Header(b"Description: t\n\n"), sections[:k]).raw)
    for raw in list(corpus):
        corpus += _mutations(raw, rng) if raw else []
    for data in corpus:
        mem, got = _both_ways(tmp_path, data, monkeypatch)
        assert got == mem, data[:2000]


def test_a_streamed_section_applies_as_its_values() -> None:
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    raw = build_patch("p", Header(b""), [make_section("a", TEXT, TEXT_NEW), make_section("b", None, NEW_TEXT)]).raw
    path_mem = parse_patch(raw, "p")
    os.environ["IMGQUILT_SPOOL_AT"] = "1"
    try:
        import tempfile

        with tempfile.NamedTemporaryFile() as f:
            f.write(raw)
            f.flush()
            streamed = read_patch(Path(f.name), "p")
            for s, m in zip(streamed.sections, path_mem.sections):
                base = TEXT if s.path == "a" else None
                got = apply_section(_spooled(base) if base else None, s)
                assert sha256_hex(got) == m.patched_sha256 == s.patched_sha256
    finally:
        del os.environ["IMGQUILT_SPOOL_AT"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.lists(st.one_of(
    st.tuples(st.just("copy"), st.integers(0, 400), st.integers(0, 300)),
    st.tuples(st.just("insert"), st.binary(min_size=1, max_size=127))), max_size=12))
def test_binary_deltas_applied_as_they_stream_give_the_same_bytes_and_errors(base: bytes, ops) -> None:
    body = bytearray()
    size = 0
    for op in ops:
        if op[0] == "copy":
            _, off, n = op
            body += bytes([0x80 | 0x01 | 0x02 | 0x10 | 0x20]) + off.to_bytes(2, "little") + n.to_bytes(2, "little")
            size += n or 0x10000
        else:
            body += bytes([len(op[1])]) + op[1]
            size += len(op[1])

    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    delta = varint(len(base)) + varint(size) + bytes(body)
    want = _outcome(lambda: apply_delta(base, delta))
    got = _outcome(lambda: apply_delta_streaming(_spooled(base) if base else base, _spooled(delta)))
    if got[0] == "ok":
        got = ("ok", got[1] if isinstance(got[1], bytes) else got[1].to_bytes())
    assert got == want


def test_base85_in_bulk_is_base85() -> None:
    import base64

    rng = random.Random(85)
    for n in (0, 4, 8, 52, 4000):
        data = rng.randbytes(n)
        assert b85decode(base64.b85encode(data)) == data
    with pytest.raises(ValueError):
        b85decode(b"~~~~~")  # over 2**32 - 1
    with pytest.raises(ValueError):
        b85decode(b"abc\"e")


def test_spooled_contents_compare_and_copy_as_bytes(tmp_path: Path) -> None:
    data = os.urandom(10000)
    s = spool_from([data[:3000], data[3000:]], at=0)
    assert isinstance(s, Spooled) and s == data and data == s and s != data + b"x" and len(s) == 10000
    assert s[:4] == data[:4] and s[9998:] == data[9998:] and s.sha256 == hashlib.sha256(data).hexdigest()
    assert hash(s) == hash(data) and {s} == {data}
    dest = tmp_path / "copy"
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT, 0o644)
    s.copy_to_fd(fd)
    os.close(fd)
    assert dest.read_bytes() == data
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert s.link_at(dfd, "linked")  # our own temp, same filesystem: a link, not a copy
    finally:
        os.close(dfd)
    assert (tmp_path / "linked").read_bytes() == data


def test_kill_at_every_changing_syscall_of_a_streamed_in_place_apply(tmp_path: Path, monkeypatch) -> None:
    """test_inplace_crash's sweep on the streamed path: every content spooled (the result written into its
    temp beside the target by copy_file_range), kill -9 at every call that may change the filesystem;
    after recovery the root is exactly old or exactly new, and a second apply reaches new."""
    from support import inplace_crash as crash  # its driver (_run), which traces crash.CHANGING
    from support import killpoints
    from imgquilt.engine.plan import plan_apply
    from imgquilt.queue.queue import load_queue
    from imgquilt.rootfs.inplace import recover, write_in_place
    from imgquilt.rootfs.source import RootfsSource

    assert os.access(killpoints.STRACE, os.X_OK), "strace is needed (.ci/install-tools installs it)"
    monkeypatch.setenv("IMGQUILT_SPOOL_AT", "1")
    monkeypatch.setattr(crash, "CHANGING", [*crash.CHANGING, "copy_file_range", "sendfile"])
    old = tmp_path / "old"
    (old / "d").mkdir(parents=True)
    (old / "d/big.txt").write_bytes(TEXT)
    (old / "d/gone.bin").write_bytes(BIN)
    q = tmp_path / "q"
    write_patch(q, "0001-streamed.patch", [("d/big.txt", TEXT, TEXT_NEW), ("d/gone.bin", BIN, None),
                                          ("e/new.bin", None, NEW_BIN)])
    root = tmp_path / "root"
    killpoints.fresh(old, root)
    done = crash._run(q, root, log=tmp_path / "trace.log")
    assert done.returncode == 0, done.stderr
    old_hash, new_hash = tree_hash(old), tree_hash(root)
    assert (root / "d/big.txt").read_bytes() == TEXT_NEW and (root / "e/new.bin").read_bytes() == NEW_BIN
    points = killpoints.kill_points(tmp_path / "trace.log")
    assert any(name == "copy_file_range" for name, _, _ in points), "the results were not copied by the kernel"
    bad = []
    for name, n, _ in points:
        killpoints.fresh(old, root)
        p = crash._run(q, root, inject=f"{name}:signal=SIGKILL:when={n}")
        if p.returncode != -9:
            bad.append(f"{name}#{n}: not killed ({p.returncode})")
            continue
        recover(root)
        if tree_hash(root) not in (old_hash, new_hash):
            bad.append(f"{name}#{n}: neither old nor new")
            continue
        write_in_place(root, plan_apply(load_queue(q), RootfsSource(root), None))
        if tree_hash(root) != new_hash:
            bad.append(f"{name}#{n}: a second apply did not reach new")
    assert not bad, bad


def test_the_memory_limit_bounds_what_is_held_not_what_applies(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """With IMGQUILT_IN_MEMORY_MAX far below the patch (the 64 MiB cap scaled down), a text file and a
    binary file are still added (streamed), byte-exact; the one step that needs a file whole (the Python
    check of a .py) refuses it with exit 6 naming the setting, and --no-python-check goes through."""
    env = {**cli_env, "IMGQUILT_IN_MEMORY_MAX": "16K"}
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    big_text = b"".join(b"row %d of a large text file\n" % i for i in range(20000))  # 500 KB
    write_patch(q, "0001-big.patch", [("srv/big.txt", None, big_text), ("srv/big.bin", None, NEW_BIN * 20)])
    assert (q / "patches/0001-big.patch").stat().st_size > 30 * 16384
    root = tmp_path / "root"
    root.mkdir()
    imgquilt("apply", "--root", str(root), cwd=q, env=env, check=0)
    assert (root / "srv/big.txt").read_bytes() == big_text and (root / "srv/big.bin").read_bytes() == NEW_BIN * 20
    write_patch(q, "0002-module.patch", [("srv/mod.py", None, b"X = 1\n" * 5000)])
    (tmp_path / "root2").mkdir()
    r = imgquilt("apply", "--root", str(tmp_path / "root2"), cwd=q, env=env, check=6)
    assert "IMGQUILT_IN_MEMORY_MAX" in r.err and "srv/mod.py" in r.err
    imgquilt("apply", "--no-python-check", "--root", str(tmp_path / "root2"), cwd=q, env=env, check=0)
    assert (tmp_path / "root2/srv/mod.py").read_bytes() == b"X = 1\n" * 5000


def test_a_patch_file_that_changes_while_it_streams_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A large patch file is read in place: one changed after it was checked is refused (exit 6),
    never applied as other bytes."""
    from imgquilt.errors import BadInput
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    monkeypatch.setenv("IMGQUILT_SPOOL_AT", "1")
    path = tmp_path / "p.patch"
    path.write_bytes(build_patch("p", Header(b""), [make_section("a", None, NEW_TEXT)]).raw)
    patch = read_patch(path, "p")
    (section,) = patch.sections
    with open(path, "ab") as f:
        f.write(b"\n")
    with pytest.raises(BadInput, match="changed while imgquilt read it"):
        apply_section(None, section)


def test_the_one_hunk_reader_reads_as_unidiff_framed_by_headers_did() -> None:
    """One hunk reader (queue.streamed.scan_hunks) serves the patch format's sections, held or streamed,
    git diff's output and import (hunkread.read_hunks, anchored hunks on). The reader before it (unidiff
    framed by @@ headers, kept in tests/support as the oracle) is the reference: on diffs and
    hand-damaged diffs (lines dropped, added, counts changed, markers, CRLF, trailers, anchored hunks)
    both read the same hunks and stop at the same line, or both refuse with the same words."""
    from support import hunkread_reference as reference

    from imgquilt.queue.difftext import diff_hunks, format_hunks
    from imgquilt.queue.hunkread import HunkTextError, read_hunks
    from imgquilt.queue.streamed import Lines, StreamError, hunk_values, scan_hunks

    def section_reader(text: bytes):
        rd = Lines(text)
        try:
            hunks = hunk_values(scan_hunks(rd))
        except StreamError as exc:
            return "refused", exc.message
        return "read", hunks, rd.offset

    def import_reader(text: bytes, reader):
        lines = split_lines(text)
        try:
            hunks, end = reader(lines, 0)
        except (HunkTextError, reference.HunkTextError) as exc:
            return "refused", exc.message
        return "read", tuple(hunks), sum(map(len, lines[:end]))

    rng = random.Random(33)
    words = [b"a\n", b"b\n", b"c\r\n", b"\n", b"tail", b" lead\n", b"-minus\n", b"+plus\n", b"\xff\xfe\n", b"\\ x\n"]
    extra = [b"-- \n", b"---\n", b"+x\n", b"-y\n", b" z\n", b"\\ No newline at end of file\n", b"\n", b"@@ -1 +1 @@\n",
             b"--- a/f\n+++ b/f\n", b"junk\n", b"@@ append @@\n+added\n", b"@@ prepend here @@\n+p1\n+p2\n\\ No newline\n"]
    compared = refused = anchored = 0
    for _ in range(500):
        old = b"".join(rng.choice(words) for _ in range(rng.randrange(0, 30)))
        new = b"".join(rng.choice(words) for _ in range(rng.randrange(0, 30)))
        text = format_hunks(tuple(diff_hunks(old, new, context=rng.choice([0, 1, 3]))))
        if not text:
            continue
        lines = split_lines(text)
        if rng.random() < 0.15:  # import's dialect: an anchored hunk after the numbered ones
            lines += split_lines(rng.choice(extra[-2:]))
        for _ in range(rng.choice([0, 0, 1, 2])):
            k = rng.randrange(1, len(lines) + 1)
            what = rng.random()
            if what < 0.35 and k < len(lines):
                del lines[k]
            elif what < 0.7:
                lines.insert(k, rng.choice(extra))
            else:
                lines[0] = lines[0].replace(b",", b",1", 1)
        damaged = b"".join(lines)
        want = import_reader(damaged, reference.read_hunks)
        assert import_reader(damaged, read_hunks) == want, damaged
        has_anchor = want[0] == "read" and any(h.anchor for h in want[1])
        anchored += has_anchor
        if not has_anchor:  # the patch format's reader refuses anchored hunks (tested in test_patchfile)
            assert section_reader(damaged) == want, damaged
        compared += 1
        refused += want[0] == "refused"
    assert compared > 400 and 20 < refused < compared - 100 and anchored > 5  # every kind was met
