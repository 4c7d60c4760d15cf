"""The shared cache's size, cap (least recently used first out) and `imgquilt cache` / `cache prune`."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from imgquilt.cache import DigestStore
from imgquilt.cache.metadata import configs, manifests
from imgquilt.cache.usage import DEFAULT_CAP, report, size_cap, trim
from imgquilt.errors import UsageError
from support.qtools import imgquilt


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IMGQUILT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IMGQUILT_CACHE_MAX", raising=False)
    return tmp_path / "cache"


def test_the_cap_evicts_the_least_recently_used(cache, monkeypatch):
    store = DigestStore("manifests")
    names = [store.put(bytes([i]) * 1000) for i in range(4)]
    for i, name in enumerate(names):  # ages: 0 oldest ... 3 newest
        os.utime(store.path(name), (1e9 + i * 1000, 1e9 + i * 1000))
    assert store.get(names[0]) is not None  # a read makes it the most recently used
    evicted = trim(cap=2500)
    assert (evicted.entries, evicted.bytes) == (2, 2000)
    assert [store.get(n) is not None for n in names] == [True, False, False, True]


def test_a_read_marks_an_entry_used_at_most_once_an_hour(cache):
    """Eviction's order is kept to the hour: a read of an entry marked used within the hour writes
    nothing (1000 metadata writes in a warm 1000-patch apply otherwise); an older one is marked."""
    import time

    from imgquilt.cache.trust import TOUCH_AFTER

    store = DigestStore("manifests")
    fresh, old = store.put(b"f" * 1000), store.put(b"o" * 1000)
    now = time.time()
    recent = now - TOUCH_AFTER / 2
    os.utime(store.path(fresh), (recent, recent))
    os.utime(store.path(old), (now - 2 * TOUCH_AFTER, now - 2 * TOUCH_AFTER))
    assert store.get(fresh) is not None and store.get(old) is not None
    assert os.stat(store.path(fresh)).st_mtime == recent  # not written
    assert os.stat(store.path(old)).st_mtime >= now - 5  # marked used now
    assert store.get(old, spool=True) is not None


def test_cap_from_the_environment(cache, monkeypatch):
    assert size_cap() == DEFAULT_CAP == 20 << 30
    for raw, want in (("500M", 500 << 20), ("1G", 1 << 30), ("2048", 2048), ("0", 0), ("3GiB", 3 << 30)):
        monkeypatch.setenv("IMGQUILT_CACHE_MAX", raw)
        assert size_cap() == want
    monkeypatch.setenv("IMGQUILT_CACHE_MAX", "lots")
    with pytest.raises(UsageError):
        size_cap()


def test_a_put_keeps_the_cache_under_its_cap(cache, monkeypatch):
    monkeypatch.setenv("IMGQUILT_CACHE_MAX", "1500")
    first = b"a" * 1000
    manifests().put("sha256:" + hashlib.sha256(first).hexdigest(), first)
    second = b"b" * 1000
    configs().put("sha256:" + hashlib.sha256(second).hexdigest(), second)
    assert report().total.bytes <= 1500
    assert report().parts["configs"].entries == 1  # the newest stays


def test_cache_and_prune_on_the_command_line(cache, tmp_path, cli_env):
    cli_env["IMGQUILT_CACHE_DIR"] = str(cache)
    DigestStore("configs").put(b"{}")
    doc = json.loads(imgquilt("cache", "--json", cwd=tmp_path, env=cli_env, check=0).out)["cache"]
    assert doc["path"] == str(cache) and doc["entries"] == 1 and doc["bytes"] == 2
    assert doc["parts"] == {"configs": {"entries": 1, "bytes": 2}} and doc["cap_bytes"] == DEFAULT_CAP
    assert "1 entries" in imgquilt("cache", cwd=tmp_path, env=cli_env, check=0).out
    r = imgquilt("cache", "prune", cwd=tmp_path, env=cli_env, check=0)
    assert "Removed 1 entries" in r.out
    assert json.loads(imgquilt("--json", "cache", cwd=tmp_path, env=cli_env, check=0).out)["cache"]["entries"] == 0
