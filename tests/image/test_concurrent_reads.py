"""Cold reads from a registry fetch the layers a run needs concurrently (IMGQUILT_LAYER_READS, default 3):
the same answers as one layer at a time; a layer that turns out not to be needed is cancelled after
what was in flight."""
from __future__ import annotations

import json
import os

import pytest

from support.imagetools import build_oci, file, layer_digests
from support.qtools import empty_queue, imgquilt, write_patch
from support.registry_server import seed, start_registry

LOWER_MB = 40


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Two 40 MB layers of incompressible data under a small top layer that holds the targets."""
    work = tmp_path_factory.mktemp("concurrent")
    noise = [file(f"opt/data{i}/part{j}.bin", os.urandom(4 << 20)) for i in range(2) for j in range(LOWER_MB // 4)]
    layers = [noise[:LOWER_MB // 4] + [file("etc/base.conf", "base\n")], noise[LOWER_MB // 4:],
              [file("etc/app.conf", "workers = 2\r\n"), file("usr/lib/app/main.py", "print('v1')\n")]]
    layout = build_oci(work / "img", layers, tag="v1")
    server = start_registry(work / "registry")
    try:
        seed(server, f"oci:{layout}:v1", "conc:v1")
        yield server, layout
    finally:
        server.stop()


def _queue(tmp_path, *, new_file: bool):
    q = empty_queue(tmp_path / ("q-new" if new_file else "q"))
    write_patch(q, "0001-conf.patch", [("etc/app.conf", b"workers = 2\r\n", b"workers = 4\r\n")])
    if new_file:  # every layer must answer for its absence
        write_patch(q, "0002-new.patch", [("usr/local/bin/tool", None, b"#!/bin/sh\n")])
    return q


def _blob_gets(server, since, digests):
    return {d: sum(r.size for r in server.requests()[since:] if r.method == "GET" and d in r.path) for d in digests}


@pytest.mark.parametrize("reads", ["1", "2", "3", "8"])
def test_answers_do_not_depend_on_how_many_layers_are_read_at_once(served, tmp_path, cli_env, reads):
    server, layout = served
    q = _queue(tmp_path, new_file=True)
    env = dict(cli_env, IMGQUILT_LAYER_READS=reads)
    r = imgquilt("--json", "audit", "--image", server.ref("conc:v1"), "--expect", "pending", cwd=q, env=env, check=0)
    doc = json.loads(r.out)
    assert [(p["name"], p["state"]) for p in doc["patches"]] == [("0001-conf.patch", "pending"), ("0002-new.patch", "pending")]
    assert [f["state"] for p in doc["patches"] for f in p["files"]] == ["pending", "pending"]


def test_layers_not_needed_are_cancelled_after_what_was_in_flight(served, tmp_path, cli_env):
    server, layout = served
    lower = layer_digests(layout, "v1")[:2]
    sizes = {d: (layout / "blobs" / "sha256" / d.split(":")[1]).stat().st_size for d in lower}
    q = _queue(tmp_path, new_file=False)  # decided in the top layer
    since = len(server.requests())
    imgquilt("audit", "--image", server.ref("conc:v1"), "--expect", "pending", cwd=q, env=cli_env, check=0)
    got = _blob_gets(server, since, lower)
    assert sum(got.values()) < 0.8 * sum(sizes.values()), (got, sizes)  # started ahead, then cut off
    since = len(server.requests())
    env = dict(cli_env, IMGQUILT_CACHE_DIR=str(tmp_path / "fresh"), IMGQUILT_LAYER_READS="1")
    imgquilt("audit", "--image", server.ref("conc:v1"), "--expect", "pending", cwd=q, env=env, check=0)
    assert _blob_gets(server, since, lower) == {d: 0 for d in lower}  # one at a time: never requested


def test_a_bad_layer_reads_setting_is_a_usage_error(served, tmp_path, cli_env):
    server, _ = served
    q = _queue(tmp_path, new_file=False)
    r = imgquilt("audit", "--image", server.ref("conc:v1"), cwd=q, env=dict(cli_env, IMGQUILT_LAYER_READS="0"), check=2)
    assert "IMGQUILT_LAYER_READS" in r.err
