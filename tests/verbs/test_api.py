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


def test_api_functions_are_one_line_wrappers_over_the_verbs() -> None:
    """api.py is the public face: each function is its docstring, an import of the verb and one call
    (at most three statements, no branch or loop); the work lives in the verbs' modules."""
    import ast

    tree = ast.parse((TOOL / "imgquilt/api.py").read_text())
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert {"rebase", "boot", "import_patches", "restore", "reverse", "port", "diff_upstream"} <= {d.name for d in defs}
    fat = []
    for d in defs:
        if d.name == "__getattr__":  # PEP 562: the lazy re-export of the verbs' values, not a verb
            continue
        body = d.body[1:] if d.body and isinstance(d.body[0], ast.Expr) and isinstance(d.body[0].value, ast.Constant) else d.body
        flow = [n for s in body for n in ast.walk(s) if isinstance(n, (ast.If, ast.For, ast.While, ast.Try, ast.With, ast.Raise))]
        if len(body) > 3 or flow:
            fat.append(f"{d.name}: {len(body)} statements{', with ' + type(flow[0]).__name__ if flow else ''}")
    assert not fat, "api.py functions with a body of their own (move it into the verb's module):\n" + "\n".join(fat)


def test_api_re_exports_the_verbs_values() -> None:
    """The values and helpers moved out of api.py are the verbs' own, re-exported under their old names."""
    from imgquilt import api
    from imgquilt.rebase import verbs as rebase_verbs
    from imgquilt.verbs import rebase_guard, refs
    from imgquilt.work import import_verb

    assert api.RebaseAborted is rebase_verbs.RebaseAborted
    assert (api.load_queue, api.queue_root, api.refuse_during_rebase) == (refs.load_queue, refs.queue_root, rebase_guard.refuse_during_rebase)
    assert (api.signing_key, api.public_key) == (refs.signing_key, refs.public_key)
    assert api.ImportItems is import_verb.ImportItems


def test_the_requests_are_frozen_and_the_wrappers_keep_the_refusals(tmp_path: Path) -> None:
    """api.rebase/boot/import_patches build one frozen request; the verb behind says what api said."""
    from imgquilt import api
    from imgquilt.errors import UsageError
    from imgquilt.rebase.verbs import RebaseRequest
    from imgquilt.verbs.boot import BootRequest
    from imgquilt.work.import_verb import ImportRequest

    for request in (RebaseRequest(), BootRequest(), ImportRequest()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            request.queue = "elsewhere"  # type: ignore[misc]
    q = api.init(tmp_path / "q").root
    with pytest.raises(UsageError, match=r"^Which image\? Pass --image NEWREF\.$"):
        api.rebase(q)
    with pytest.raises(UsageError, match="--conflict-style 'zdiff3'"):
        api.rebase(q, image="oci:x:1", conflict_style="zdiff3")
    with pytest.raises(UsageError, match="^Name a patch FILE to import"):
        api.import_patches((), queue=q)
    with pytest.raises(UsageError, match="^Unknown format 'lxc'"):
        api.overlay_args(tmp_path, "lxc")
    assert api.rebase_in_progress(q) is False and api.rebase_forget(q) == 0
