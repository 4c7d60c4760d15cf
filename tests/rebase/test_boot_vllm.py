"""Issue 26, point 2 on real vLLM files (tests/data/vllm: 0.10.1 and 0.11.0 from PyPI, Apache-2.0):
a queue that edits `determine_expert_map` is rebased from an image of 0.10.1 onto one of 0.11.0, whose
function gained the parameter `expert_placement_strategy`; the report names the function and the
parameter, and its JSON lists per patch what upstream changed in the functions it edits."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import build_oci, file
from support.qtools import imgquilt, write_patch
from support.schemas import validator

DATA = Path(__file__).parents[1] / "data" / "vllm"
SITE = "usr/local/lib/python3.12/dist-packages"
LAYER = f"{SITE}/vllm/model_executor/layers/fused_moe/layer.py"
PLAN = f"{SITE}/vllm_epfix/plan.py"

OLD_CHECK = b"    assert ep_size > 0\n"
NEW_CHECK = b'    if ep_size <= 0:\n        raise ValueError(f"ep_size must be positive, got {ep_size}")\n'
PLAN_PY = b'''"""Expert placement for the fleet's EP layout (calls vLLM's own)."""
from vllm.model_executor.layers.fused_moe.layer import determine_expert_map


def plan(ep_size: int, ep_rank: int, num_experts: int):
    return determine_expert_map(ep_size, ep_rank, num_experts)
'''


def _files(version: str) -> dict[str, bytes]:
    root = DATA / version
    return {f"{SITE}/{p.relative_to(root)}": p.read_bytes() for p in sorted(root.rglob("*.py"))}


@pytest.fixture(scope="module")
def vllm_images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("vllm-images")
    base = [file("etc/os-release", "ID=tiny\n")]
    old = build_oci(tmp / "v0101", [base, [file(p, d) for p, d in _files("0.10.1").items()]])
    new = build_oci(tmp / "v0110", [base, [file(p, d) for p, d in _files("0.11.0").items()]])
    return old, new


def test_rebase_names_the_function_and_its_new_parameter(tmp_path: Path, cli_env, vllm_images) -> None:
    old, new = vllm_images
    layer_old = _files("0.10.1")[LAYER]
    assert layer_old.count(OLD_CHECK) == 1
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("")
    write_patch(q, "0001-ep-size-error.patch", [(LAYER, layer_old, layer_old.replace(OLD_CHECK, NEW_CHECK))])
    write_patch(q, "0002-ep-plan.patch", [(PLAN, None, PLAN_PY)])
    subprocess.run(["git", "init", "-q", str(q)], check=True)
    # the cross-module check reads the real layer.py: the call fits its signature in both versions
    imgquilt("lock", "--image", f"oci:{old}:latest", cwd=q, env=cli_env, check=0)
    copies = {}
    for name in ("json", "github"):
        copies[name] = tmp_path / name
        shutil.copytree(q, copies[name], symlinks=True)
    r = imgquilt("rebase", "--image", f"oci:{new}:latest", "-v", cwd=q, env=cli_env, check=0)
    assert "0001-ep-size-error.patch: merged, upstream changed 1 function it edits:" in r.out
    assert f"{LAYER}: function determine_expert_map: new parameter expert_placement_strategy, +" in r.out
    assert "0002-ep-plan.patch:" not in r.out  # nothing changed under it
    # -v: upstream's diff of the function, with the new image's line numbers
    assert '+    expert_placement_strategy: ExpertPlacementStrategy = "linear",' in r.out
    assert '+    elif expert_placement_strategy == "round_robin":' in r.out
    # the JSON lists, per patch, the upstream changes in the functions it edits
    doc = json.loads(imgquilt("--json", "rebase", "--image", f"oci:{new}:latest", cwd=copies["json"], env=cli_env, check=0).out)
    validator("rebase", "result").validate(doc)  # docs/schemas/rebase.schema.json
    first, second = doc["patches"]
    assert first["state"] == "merged" and second["upstream"] == [] and second["findings"] == []
    (change,) = first["upstream"]
    assert (change["kind"], change["name"], change["change"]) == ("function", "determine_expert_map", "changed")
    assert change["params_added"] == ["expert_placement_strategy"] and change["params_removed"] == []
    assert change["old_lines"][0] == layer_old.split(b"\n").index(b"def determine_expert_map(") + 1
    assert change["new_line"] == _files("0.11.0")[LAYER].split(b"\n").index(b"def determine_expert_map(") + 1
    assert change["lines_added"] > 0 and change["lines_removed"] > 0 and change["path"] == LAYER
    assert first["files"][0]["upstream"] == first["upstream"]
    # --format github: a warning on the patch file
    r = imgquilt("rebase", "--image", f"oci:{new}:latest", "--format", "github", cwd=copies["github"], env=cli_env, check=0)
    assert "::warning file=patches/0001-ep-size-error.patch,title=upstream changed determine_expert_map::" in r.out
    # the rebased queue verifies on the new image
    imgquilt("apply", "--image", f"oci:{new}:latest", "--locked", cwd=q, env=cli_env, check=0)
