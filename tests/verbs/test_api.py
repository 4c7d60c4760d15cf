"""imgquilt.api: the worked example of docs/api.md runs as written; the API's values are frozen and the CLI says the same."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.qtools import REPO, TOOL, copy_demo_queue, imgquilt


def test_the_worked_example_in_docs_api_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "docs/api.md").read_text(), re.S | re.M)
    assert len(blocks) == 1
    copy_demo_queue(tmp_path / "queue")
    env = {**os.environ, "PYTHONPATH": str(TOOL)}
    env.pop("IMGQUILT_QUEUE", None)
    r = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (printed,) = re.findall(r"^It prints.*?^```text\n(.*?)^```", (REPO / "docs/api.md").read_text(), re.S | re.M)
    assert r.stdout == printed  # the page shows what the example prints, line for line
    assert (tmp_path / "fix.tar.gz").is_file() and (tmp_path / "out/index.json").is_file()
    assert not (tmp_path / "drifted/var/lib/imgquilt").exists()  # nothing written on refusal


def test_values_are_frozen_and_match_the_cli(tmp_path: Path, monkeypatch, cli_env) -> None:
    from imgquilt import api

    q = copy_demo_queue(tmp_path / "queue")
    monkeypatch.chdir(q)
    monkeypatch.delenv("IMGQUILT_QUEUE", raising=False)
    locked = api.lock(image="oci:examples/demo-image:latest")
    with pytest.raises(dataclasses.FrozenInstanceError):
        locked.targets = 0  # type: ignore[misc]
    doc = json.loads(imgquilt("--json", "lock", cwd=q, env=cli_env, check=0).out)
    assert (doc["image"]["digest"], doc["targets"], doc["series_sha256"]) == (locked.digest, locked.targets, locked.series_sha256)
    applied = api.apply(layer=tmp_path / "a.tar.gz")
    cli = json.loads(imgquilt("--json", "apply", "--layer", str(tmp_path / "b.tar.gz"), cwd=q, env=cli_env, check=0).out)
    assert cli["outputs"]["layer"]["digest"] == applied.outputs["layer"]["digest"]
    assert cli["patches"] == list(applied.result.patches)
    checked = api.check()
    assert checked.ok and checked.patches == tuple(cli["patches"])
    made = api.init(tmp_path / "fresh")
    assert made.created == ("series", "patches/", ".gitignore") and api.load_queue(made.root).names == []
    assert api.init(tmp_path / "fresh").created == ()
