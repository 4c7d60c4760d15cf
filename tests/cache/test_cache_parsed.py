"""A large targets.lock's TOML parse is kept in the shared cache (cache/parsed.py), sealed, by the
digest of the exact bytes: a warm run reads it back instead of parsing 0.6 MB of TOML, an edited lock
is parsed afresh, and a forged, unsealed or foreign-key entry is never believed."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from support.imagetools import build_oci, file
from imgquilt.cache import parsed
from imgquilt.cache.parsed import remembered
from imgquilt.queue.lock import toml_doc
from support.qtools import empty_queue, imgquilt, write_patch

BIG = b"# padding\n" * 8000  # ~80 KB of comment: a lock above parsed.MIN_SIZE


def _count(fn):
    calls = []

    def parse(data: bytes):
        calls.append(len(data))
        return fn(data)

    return parse, calls


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "parsed").rglob("*") if p.is_file()) if (cache / "parsed").is_dir() else []


def _cache() -> Path:
    return Path(os.environ["IMGQUILT_CACHE_DIR"])


def test_a_large_input_is_parsed_once_then_read_back_equal() -> None:
    data = b'version = 1\nname = "x"\nlist = [1, 2.5, true, "s\\u00e9"]\n[t]\na = {b = 3}\n' + BIG
    parse, calls = _count(toml_doc)
    first = remembered("targets.lock", data, parse)
    second = remembered("targets.lock", data, parse)
    assert first == second == toml_doc(data) and len(calls) == 1
    assert len(_entries(_cache())) == 1
    # an edit is a new name: parsed afresh
    third = remembered("targets.lock", data.replace(b'"x"', b'"y"'), parse)
    assert third["name"] == "y" and len(calls) == 2


def test_a_small_input_is_always_parsed_and_nothing_stored() -> None:
    parse, calls = _count(toml_doc)
    for _ in range(2):
        remembered("targets.lock", b"version = 1\n", parse)
    assert len(calls) == 2 and not _entries(_cache())


@pytest.mark.parametrize("how", ["unsealed", "seal-kept", "garbage"])
def test_a_forged_entry_is_not_believed(how: str) -> None:
    data = b'version = 1\nname = "real"\n' + BIG
    parse, calls = _count(toml_doc)
    remembered("targets.lock", data, parse)
    (entry,) = _entries(_cache())
    seal, _, body = entry.read_bytes().partition(b"\n")
    forged = body.replace(b'"real"', b'"forged"')
    entry.chmod(0o644)
    entry.write_bytes({"unsealed": forged, "seal-kept": seal + b"\n" + forged, "garbage": b"\x00\xff"}[how])
    assert remembered("targets.lock", data, parse)["name"] == "real" and len(calls) == 2
    assert remembered("targets.lock", data, parse)["name"] == "real" and len(calls) == 2  # stored sealed again


def test_an_entry_of_another_key_is_parsed_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = b'version = 1\nname = "real"\n' + BIG
    parse, calls = _count(toml_doc)
    remembered("targets.lock", data, parse)
    state = tmp_path / "state-other"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("IMGQUILT_STATE_DIR", str(state))  # the cache restored on another machine or job
    assert remembered("targets.lock", data, parse)["name"] == "real" and len(calls) == 2


def test_what_json_cannot_give_back_is_not_stored() -> None:
    data = b"version = 1\nwhen = 1979-05-27T07:32:00Z\n" + BIG
    parse, calls = _count(toml_doc)
    for _ in range(2):
        assert remembered("targets.lock", data, parse)["when"].year == 1979
    assert len(calls) == 2 and not _entries(_cache())


def test_no_cache_means_parsed_and_a_bad_input_raises_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMGQUILT_NO_CACHE", "1")
    parse, calls = _count(toml_doc)
    remembered("targets.lock", b"version = 1\n" + BIG, parse)
    assert len(calls) == 1 and not _entries(_cache())
    monkeypatch.delenv("IMGQUILT_NO_CACHE")
    import tomllib

    with pytest.raises(tomllib.TOMLDecodeError):
        remembered("targets.lock", b"version = = 1\n" + BIG, parse)
    assert not _entries(_cache())


def test_a_large_lock_applies_the_same_warm_and_a_forged_parse_changes_no_pin(tmp_path: Path, cli_env) -> None:
    img = build_oci(tmp_path / "img", [[file("etc/app.conf", b"workers = 2\n")]])
    other = build_oci(tmp_path / "other", [[file("etc/app.conf", b"workers = 3\n")]])
    q = empty_queue(tmp_path / "q")
    write_patch(q, "0001-workers.patch", [("etc/app.conf", b"workers = 2\n", b"workers = 8\n")])
    imgquilt("lock", "--image", f"oci:{img}:latest", cwd=q, env=cli_env)
    lock = q / "targets.lock"
    lock.write_bytes(lock.read_bytes() + BIG)  # large: its parse goes through the cache
    cache = Path(cli_env["IMGQUILT_CACHE_DIR"])
    cold = imgquilt("apply", "--layer", str(tmp_path / "cold.tar"), cwd=q, env=cli_env)
    (entry,) = _entries(cache)
    warm = imgquilt("apply", "--layer", str(tmp_path / "warm.tar"), cwd=q, env=cli_env)
    assert (tmp_path / "cold.tar").read_bytes() == (tmp_path / "warm.tar").read_bytes()
    assert cold.out == warm.out.replace("warm.tar", "cold.tar")
    # the entry rewritten to pin another image, its seal kept: not believed, the lock's own pin is used
    seal, _, body = entry.read_bytes().partition(b"\n")
    doc = json.loads(body)
    other_digest = re.search(r'sha256:[0-9a-f]{64}', (other / "index.json").read_text()).group(0)
    doc["image"]["ref"], doc["image"]["digest"] = f"oci:{other}:latest", other_digest
    entry.chmod(0o644)
    entry.write_bytes(seal + b"\n" + json.dumps(doc).encode())
    again = imgquilt("apply", "--layer", str(tmp_path / "again.tar"), cwd=q, env=cli_env)
    assert (tmp_path / "again.tar").read_bytes() == (tmp_path / "cold.tar").read_bytes()
    assert str(img) in again.out and str(other) not in again.out
    assert parsed.MIN_SIZE < lock.stat().st_size
