"""A cache is data, not a trust root: verdict-bearing entries (layer indexes, verified-blob markers,
Python findings) are believed only when sealed under the cache key. Forged inside the user's own 0700
cache (what a cache restored from another CI job is), they change no verdict; sealed under another
key they are recomputed, never an error; a team that shares a cache on purpose passes IMGQUILT_CACHE_KEY.
"""
from __future__ import annotations

import hashlib
import json
import marshal
import os
import sqlite3
from pathlib import Path

import pytest

from support.imagetools import blob_path, build_oci, file, manifest
from imgquilt.sources import open_source
from support.qtools import empty_queue, imgquilt, write_patch
from support.cache_rows import BROKEN, GOOD, _images, _layer

TEAM_KEY = "f" * 16 + "0123456789abcdef" * 3


@pytest.fixture
def env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    return cli_env


def _relabel(cache: Path, from_digest: str, to_digest: str, *, keep_seal: bool) -> None:
    """A's index re-dumped under B's digest, stored by its sha256, B's pointer aimed at it (with A's
    pointer's seal copied, or none)."""
    words = (cache / "layers" / from_digest.replace(":", "-")).read_bytes().split()
    pointer = words[0].decode()
    payload = (cache / "layer-index" / pointer[:2] / pointer).read_bytes()
    fields = list(marshal.loads(payload))
    assert fields[1] == from_digest
    fields[1] = to_digest
    forged = marshal.dumps(tuple(fields), 4)
    hexdigest = hashlib.sha256(forged).hexdigest()
    (cache / "layer-index" / hexdigest[:2]).mkdir(exist_ok=True)
    (cache / "layer-index" / hexdigest[:2] / hexdigest).write_bytes(forged)
    seal = b" " + words[1] if keep_seal and len(words) > 1 else b""
    (cache / "layers" / to_digest.replace(":", "-")).write_bytes(hexdigest.encode() + seal + b"\n")


@pytest.mark.parametrize("keep_seal", [False, True], ids=["unsealed", "seal-copied"])
def test_an_index_relabelled_in_the_users_own_cache_changes_no_verdict(tmp_path: Path, env, keep_seal) -> None:
    a, b = _images(tmp_path)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-workers.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    imgquilt("apply", "--image", f"oci:{a}:latest", "--layer", str(tmp_path / "a.tar"), cwd=q, env=env, check=0)
    _relabel(tmp_path / "cache", _layer(a), _layer(b), keep_seal=keep_seal)  # the cache stays 0700, the user's
    r = imgquilt("apply", "--image", f"oci:{b}:latest", "--layer", str(tmp_path / "b.tar"), cwd=q, env=env, check=3)
    assert "etc/app.conf" in r.err  # B's own base: drift, as without a cache
    assert not (tmp_path / "b.tar").exists()
    imgquilt("audit", "--image", f"oci:{b}:latest", cwd=q, env=env, check=5)


def test_a_forged_clean_row_in_the_users_own_cache_lets_no_syntax_error_through(tmp_path: Path, env) -> None:
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app/server.py").write_bytes(GOOD)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-broken.patch", [("app/server.py", GOOD, BROKEN)])
    imgquilt("apply", "--root", str(root), cwd=q, env=env, check=3)  # the finding is now cached
    db = sqlite3.connect(tmp_path / "cache/pycheck/findings.sqlite")
    rows = db.execute("SELECT version, key FROM findings").fetchall()
    assert rows
    for version, key in rows:  # "no finding", with the unkeyed checksum an attacker can compute
        db.execute("UPDATE findings SET errors = ?, sum = ? WHERE version = ? AND key = ?",
                   ("[]", hashlib.sha256(json.dumps([key, version, []]).encode()).hexdigest(), version, key))
    db.commit()
    db.close()
    r = imgquilt("apply", "--root", str(root), cwd=q, env=env, check=3)
    assert "SyntaxError" in r.err and (root / "app/server.py").read_bytes() == GOOD


def test_a_forged_verified_marker_makes_no_damaged_blob_pass(tmp_path: Path, env) -> None:
    """An uncompressed layer whose bytes were changed after a verified read: a marker claiming the new
    file is verified (its fingerprint forged to match) is not believed; the digest check fails, exit 6."""
    base, new = b"workers = 2\n", b"workers = 8\n"
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", base)]], compression=None)
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-workers.patch", [("etc/app.conf", base, new)])
    imgquilt("audit", "--image", f"oci:{layout}:latest", cwd=q, env=env, check=5)  # pending; verified and marked
    blob = blob_path(layout, manifest(layout, "latest")[1]["layers"][0]["digest"])
    data = blob.read_bytes()
    blob.write_bytes(data.replace(base, new))  # the blob no longer matches its digest
    st = os.stat(blob)
    cache = tmp_path / "cache"
    for part in ("layers", "layer-index", "files"):  # no index: the layer is read, trusting the marker or not
        for dirpath, _, names in os.walk(cache / part):
            for n in names:
                os.unlink(os.path.join(dirpath, n))
    markers = [m for m in (cache / "verified").iterdir()]
    assert markers
    for m in markers:
        doc = json.loads(m.read_bytes())
        doc["fingerprint"] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        doc.pop("seal", None)
        m.write_text(json.dumps(doc))
    r = imgquilt("audit", "--image", f"oci:{layout}:latest", cwd=q, env=env, check=6)
    assert "does not match its digest" in r.err


# --- sealed by another key: recomputed, never an error; a team key shares it on purpose --------------
def _read(ref: str):
    src = open_source(ref)
    got = src.read_targets(["etc/app.conf"])
    return got["etc/app.conf"].data, src.stats


def _other_key(monkeypatch, tmp_path: Path, name: str) -> None:
    """Another machine or CI job: a user key of its own."""
    state = tmp_path / f"state-{name}"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("IMGQUILT_STATE_DIR", str(state))


def test_an_index_of_another_key_is_recomputed_and_a_team_key_shares_it(tmp_path: Path, monkeypatch) -> None:
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", b"workers = 2\n")]])
    ref = f"oci:{layout}:latest"
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "restored-cache"))
    _other_key(monkeypatch, tmp_path, "job-1")
    data, stats = _read(ref)
    assert data == b"workers = 2\n" and stats.layers_scanned and not stats.layers_from_cache
    data, stats = _read(ref)
    assert data == b"workers = 2\n" and stats.layers_from_cache and not stats.layers_scanned  # warm for its writer
    _other_key(monkeypatch, tmp_path, "job-2")  # the cache restored into another job
    data, stats = _read(ref)
    assert data == b"workers = 2\n" and stats.layers_scanned and not stats.layers_from_cache  # recomputed, no error
    monkeypatch.setenv("IMGQUILT_CACHE_KEY", TEAM_KEY)  # a team key: every job that has it shares the cache
    _read(ref)
    _other_key(monkeypatch, tmp_path, "job-3")
    data, stats = _read(ref)
    assert data == b"workers = 2\n" and stats.layers_from_cache and not stats.layers_scanned


def test_a_short_team_key_is_refused(tmp_path: Path, env) -> None:
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-workers.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    layout = build_oci(tmp_path / "img", [[file("etc/app.conf", b"workers = 2\n")]])
    r = imgquilt("audit", "--image", f"oci:{layout}:latest", cwd=q, env={**env, "IMGQUILT_CACHE_KEY": "short"}, check=6)
    assert "IMGQUILT_CACHE_KEY" in r.err and "32" in r.err
