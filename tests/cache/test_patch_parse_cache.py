"""A large queue's patch parses are kept in the shared cache (verbs.refs.remembered_parses, through
cache/parsed.py), sealed, named by every patch's name, -p level and bytes: a warm load reads one entry
instead of parsing every patch, and gives exactly what a parse gives (CRLF, no final newline, non-UTF-8,
a binary section, a symlink); an edited patch is parsed afresh; a forged, unsealed or foreign entry is
never believed, and an entry that names any other global than the patch format's values is refused
even when its seal verifies."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from imgquilt.cache import parsed
from imgquilt.errors import MalformedPatch
from imgquilt.queue import patchfile
from imgquilt.queue.queue import load_queue as load_uncached
from imgquilt.verbs.refs import load_queue
from support.qtools import empty_queue, imgquilt, write_patch

SITE = "usr/lib/python3/dist-packages"


def _entries() -> list[Path]:
    d = Path(os.environ["IMGQUILT_CACHE_DIR"]) / "parsed"
    return sorted(p for p in d.rglob("*") if p.is_file()) if d.is_dir() else []


def _old(i: int) -> bytes:
    return b"".join(b"line %d of file %d, long enough to make the queue large\r\n" % (k, i) for k in range(40))


def _queue(tmp_path: Path, n: int = 60) -> Path:
    """n patches of varied shapes, above parsed.MIN_SIZE together."""
    q = empty_queue(tmp_path / "q")
    for i in range(n):
        old = _old(i)
        new = old.replace(b"line 7 ", b"LINE 7 ").replace(b"line 30 ", b"LINE 30 ") + (b"tail without newline" if i % 3 == 0 else b"")
        changes = [(f"{SITE}/m{i:03d}.py", old, new)]
        if i % 7 == 0:
            changes.append((f"usr/share/bin{i}.dat", bytes(range(256)) * 4, bytes(reversed(range(256))) * 4))
        if i % 11 == 0:
            changes.append((f"etc/latin1-{i}.conf", "caf\xe9 = 1\n".encode("latin-1"), "caf\xe9 = 2\n".encode("latin-1")))
        write_patch(q, f"{i:04d}-p.patch", changes)
    assert sum(p.stat().st_size for p in (q / "patches").iterdir()) > parsed.MIN_SIZE
    return q


def test_a_warm_load_reads_the_parses_back_equal_to_a_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = _queue(tmp_path)
    cold = load_queue(q)
    assert len(_entries()) == 1
    fresh = load_uncached(q)
    assert cold.patches == fresh.patches
    assert any(s.binary is not None for p in fresh.patches for s in p.sections)

    def no_parse(*a, **k):
        raise AssertionError("parsed although the cache holds the parses")

    with monkeypatch.context() as m:
        m.setattr(patchfile, "parse_patch", no_parse)
        warm = load_queue(q)
    assert warm.patches == fresh.patches and [p.raw for p in warm.patches] == [p.raw for p in fresh.patches]
    # an edit is a new entry: parsed afresh, the edit seen
    p = q / "patches" / "0005-p.patch"
    p.write_bytes(p.read_bytes().replace(b"Description: 0005-p.patch", b"Description: edited"))
    edited = load_queue(q)
    assert edited.patches[5].header.raw.startswith(b"Description: edited") and len(_entries()) == 2
    assert edited.patches == load_uncached(q).patches


@pytest.mark.parametrize("how", ["unsealed", "seal-kept", "garbage"])
def test_a_forged_entry_is_not_believed(tmp_path: Path, how: str) -> None:
    q = _queue(tmp_path)
    load_queue(q)
    (entry,) = _entries()
    seal, _, body = entry.read_bytes().partition(b"\n")
    forged = pickle.loads(body)[:-1]  # a patch dropped
    forged_body = pickle.dumps(forged)
    entry.chmod(0o644)
    entry.write_bytes({"unsealed": forged_body, "seal-kept": seal + b"\n" + forged_body, "garbage": b"\x00\xff"}[how])
    assert load_queue(q).patches == load_uncached(q).patches


def test_a_sealed_entry_naming_another_global_is_refused(tmp_path: Path) -> None:
    """Defence in depth: even an entry sealed with this user's key (a stolen key) builds nothing but
    the patch format's values; os.system is never called."""
    from imgquilt.cache.seal import entry_seal

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    q = _queue(tmp_path)
    load_queue(q)
    (entry,) = _entries()
    name = entry.name
    body = pickle.dumps([Evil()])
    entry.chmod(0o644)
    entry.write_bytes(entry_seal(parsed.KIND, "patches", name, body).encode() + b"\n" + body)
    assert load_queue(q).patches == load_uncached(q).patches
    assert not (tmp_path / "pwned").exists()


def test_errors_come_in_series_order_with_the_cache(tmp_path: Path) -> None:
    q = _queue(tmp_path)
    bad = q / "patches" / "0003-p.patch"
    bad.write_bytes(bad.read_bytes().replace(b"\n+LINE 7", b"\n*LINE 7", 1))
    (q / "series").write_text((q / "series").read_text() + "9999-missing.patch\n")
    for load in (load_queue, load_uncached):
        with pytest.raises(MalformedPatch) as exc:
            load(q)
        assert "0003-p.patch" in str(exc.value), load
    bad.write_bytes(bad.read_bytes().replace(b"\n*LINE 7", b"\n+LINE 7", 1))
    for load in (load_queue, load_uncached):
        with pytest.raises(MalformedPatch) as exc:
            load(q)
        assert "9999-missing.patch" in str(exc.value) and "does not exist" in str(exc.value)
    assert len(_entries()) == 1  # the parses of the patches that load (a malformed one stores nothing)


def test_the_cli_applies_the_same_bytes_cold_and_warm(tmp_path: Path, cli_env) -> None:
    from support.imagetools import build_oci, file

    q = _queue(tmp_path, 50)
    layer = [file(f"{SITE}/m{i:03d}.py", _old(i)) for i in range(50)]
    layer += [file(f"usr/share/bin{i}.dat", bytes(range(256)) * 4) for i in range(0, 50, 7)]
    layer += [file(f"etc/latin1-{i}.conf", "caf\xe9 = 1\n".encode("latin-1")) for i in range(0, 50, 11)]
    img = build_oci(tmp_path / "img", [layer])
    imgquilt("lock", "--image", f"oci:{img}:latest", cwd=q, env=cli_env)
    cold = imgquilt("apply", "--layer", str(tmp_path / "cold.tar"), cwd=q, env=cli_env)
    assert [p for p in (Path(cli_env["IMGQUILT_CACHE_DIR"]) / "parsed").rglob("*") if p.is_file()]
    warm = imgquilt("apply", "--layer", str(tmp_path / "warm.tar"), cwd=q, env=cli_env)
    assert (tmp_path / "cold.tar").read_bytes() == (tmp_path / "warm.tar").read_bytes()
    assert cold.out == warm.out.replace("warm.tar", "cold.tar")
