"""The cross-module Python check (issue 26) on a real vLLM image: `apply` with and without the check,
cold (empty shared cache) and warm. Not a test: a script whose figures go in docs/boot-checks.md.

    python3 bench/bench_boot.py --wheels DIR [--workdir /tmp/imgquilt-bench-boot] [--reuse] [--repeat 3] [--json]

DIR holds the wheels from PyPI (`pip download vllm==0.10.1 torch==2.7.1 --no-deps -d DIR`: vLLM 0.10.1
pins torch 2.7.1). The image is built with bench/build_image.py (one gzip layer each, bottom first):
this machine's Python standard library (`usr/lib/python3.11`), torch 2.7.1 unpacked into
`usr/local/lib/python3.11/dist-packages` (the Debian layout vLLM's own images use), then vllm 0.10.1
there: about 2.9 GB of tar, the CUDA libraries of a real image left out (they are no Python modules:
the check never reads them; a cold apply that reads the layers they are in pays their decompression).

Two queues, each timed with `--no-python-check` and with the check, cold and warm, every run a
process of its own (start-up included), interleaved, best of `--repeat`:
- `edit`: a patch of `determine_expert_map` in vllm/model_executor/layers/fused_moe/layer.py (no new
  import or call: the check parses the file and reads nothing more);
- `imports`: the same file also gains imports and calls into vLLM and torch (`from
  vllm.distributed import get_ep_group`, `import torch` and `torch.zeros(...)`, a call of
  `determine_expert_map`): the check reads vllm modules from the top layer and torch's `__init__.py`
  from the layer below.
The output is `apply --layer` (a layer tar). Each run's own CPU time and peak RSS come from wait4.
Also printed, from one in-process run per queue: the layers each mode scanned and the files the check
looked up.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO / "tool"), str(HERE)]

from build_image import LayerPlan, build_image  # noqa: E402
from inner_loop import Run, run_child  # noqa: E402

SITE = "usr/local/lib/python3.11/dist-packages"
LAYER = f"{SITE}/vllm/model_executor/layers/fused_moe/layer.py"
OLD_CHECK = b"    assert ep_size > 0\n"
NEW_CHECK = b'    if ep_size <= 0:\n        raise ValueError(f"ep_size must be positive, got {ep_size}")\n'
IMPORTS = b"""
from vllm.distributed import get_ep_group
import torch as _torch_for_the_fix


def _ep_plan_for_fix(ep_size: int, ep_rank: int, num_experts: int):
    local, expert_map = determine_expert_map(ep_size, ep_rank, num_experts)
    counts = _torch_for_the_fix.zeros(ep_size, dtype=_torch_for_the_fix.int32)
    return local, expert_map, counts, get_ep_group
"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stage(wheels: Path, work: Path) -> Path:
    """A root with the standard library, torch and vllm laid out where the image has them."""
    root = work / "stage"
    if (root / ".done").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    stdlib = Path("/usr/lib/python3.11")
    shutil.copytree(stdlib, root / "usr/lib/python3.11", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for pattern in ("torch-2.7.1-*.whl", "vllm-0.10.1-*.whl"):
        found = sorted(wheels.glob(pattern))
        if not found:
            raise SystemExit(f"no {pattern} in {wheels}: pip download vllm==0.10.1 torch==2.7.1 --no-deps -d {wheels}")
        say(f"unpacking {found[0].name}")
        with zipfile.ZipFile(found[0]) as z:
            z.extractall(root / SITE)
    (root / ".done").write_text("")
    return root


def build(work: Path, root: Path):
    site = root / SITE
    torch_paths = tuple(f"{SITE}/{p.name}" for p in sorted(site.iterdir()) if not p.name.startswith("vllm"))
    vllm_paths = tuple(f"{SITE}/{p.name}" for p in sorted(site.iterdir()) if p.name.startswith("vllm"))
    plans = [LayerPlan("python3.11 stdlib", ("usr/lib/python3.11",)), LayerPlan("torch 2.7.1", torch_paths),
             LayerPlan("vllm 0.10.1", vllm_paths)]
    shutil.rmtree(work / "image", ignore_errors=True)
    return build_image(work / "image", plans, root=root, tag="0.10.1", progress=say)


def make_queue(work: Path, root: Path, name: str, extra: bytes) -> Path:
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    q = work / f"queue-{name}"
    shutil.rmtree(q, ignore_errors=True)
    (q / "patches").mkdir(parents=True)
    old = (root / LAYER).read_bytes()
    new = old.replace(OLD_CHECK, NEW_CHECK) + extra
    patch = build_patch("0001-ep.patch", Header(b"Description: bench\n\n"), [make_section(LAYER, old, new)])
    (q / "patches" / "0001-ep.patch").write_bytes(patch.raw)
    (q / "series").write_text("0001-ep.patch\n")
    return q


def imgquilt(env: dict[str, str], *args: str) -> Run:
    r = run_child([sys.executable, "-m", "imgquilt", *args], env)
    if r.code != 0:
        raise SystemExit(f"imgquilt {' '.join(args)} exited {r.code}:\n{r.err.decode()[-3000:]}")
    return r


def reads(image_ref: str, q: Path, check: bool) -> dict:
    """One in-process plan: the layers the source scanned, and the files the check asked for."""
    os.environ["IMGQUILT_NO_CACHE"] = "1"
    from imgquilt.engine.plan import plan_apply
    from imgquilt.pycheck import Checks
    from imgquilt.pycheck.pysearch import SourceModules
    from imgquilt.queue.queue import load_queue
    from imgquilt.sources import open_source

    src = open_source(image_ref)
    seen: list[SourceModules] = []

    class Counting(Checks):  # the check as apply runs it, counting the modules it looks up
        def modules(self, source):
            m = super().modules(source)
            seen.append(m)
            return m

    try:
        plan_apply(load_queue(q), src, None, python=Counting() if check else None)
    finally:
        os.environ.pop("IMGQUILT_NO_CACHE", None)
    return {"layers_scanned": len(src.stats.layers_scanned), "layers": len(src.image.layers),
            "module_lookups": sum(m.reads for m in seen)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheels", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-boot"))
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    root = stage(args.wheels, work)
    marker = work / "image.json"
    if args.reuse and marker.exists():
        ref = json.loads(marker.read_text())["ref"]
    else:
        say("building the image (gzip, isal)")
        img = build(work, root)
        ref = img.ref
        marker.write_text(json.dumps({"ref": ref, "layers": [[x.name, x.tar_size, x.size] for x in img.layers]}))
    layers = json.loads(marker.read_text())["layers"]
    say(f"image {ref}: " + ", ".join(f"{n} {t / 1e9:.2f} GB tar" for n, t, _ in layers))
    queues = {"edit": make_queue(work, root, "edit", b""), "imports": make_queue(work, root, "imports", IMPORTS)}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "tool")
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # bytecode cached as an installed package has it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("IMGQUILT_NO_CACHE", None)
    cache = work / "shared-cache"
    env["IMGQUILT_CACHE_DIR"] = str(cache)
    results: dict[str, list[Run]] = {}
    for r in range(args.repeat):
        for qname, q in queues.items():
            for mode in ("no-check", "check"):
                extra = ["--no-python-check"] if mode == "no-check" else []
                for temp in ("cold", "warm"):
                    if temp == "cold":
                        shutil.rmtree(cache, ignore_errors=True)
                        shutil.rmtree(q / ".imgquilt", ignore_errors=True)
                    os.sync()
                    out = work / "out.tar"
                    out.unlink(missing_ok=True)
                    run = imgquilt(env, "--queue", str(q), "apply", "--image", ref, "--layer", str(out), *extra)
                    key = f"{qname} {mode} {temp}"
                    results.setdefault(key, []).append(run)
                    say(f"round {r + 1}: {key}: {run.seconds:.2f} s wall, {run.cpu_seconds:.2f} s CPU, {run.max_rss_kb // 1024} MB")
    best = {k: min(v, key=lambda x: x.seconds) for k, v in results.items()}
    probe = {q: {m: reads(ref, queues[q], m == "check") for m in ("no-check", "check")} for q in queues}
    rows = []
    for k, run in best.items():
        qname, mode, temp = k.split()
        base = best[f"{qname} no-check {temp}"]
        rows.append({"queue": qname, "mode": mode, "cache": temp, "seconds": round(run.seconds, 2),
                     "cpu_seconds": round(run.cpu_seconds, 2), "max_rss_mb": run.max_rss_kb // 1024,
                     "vs_no_check": round(run.seconds / base.seconds, 2)})
    print(f"{'queue':8} {'mode':9} {'cache':5} {'wall s':>7} {'CPU s':>7} {'RSS MB':>7} {'vs no check':>12}")
    for row in rows:
        print(f"{row['queue']:8} {row['mode']:9} {row['cache']:5} {row['seconds']:7.2f} {row['cpu_seconds']:7.2f} "
              f"{row['max_rss_mb']:7d} {row['vs_no_check']:11.2f}x")
    for q, modes in probe.items():
        for m, got in modes.items():
            print(f"{q:8} {m:9} cold: {got['layers_scanned']} of {got['layers']} layers scanned, {got['module_lookups']} module file lookups")
    if args.json:
        print(json.dumps({"image": ref, "layers": layers, "rows": rows, "reads": probe}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
