#!/usr/bin/env python3
"""Python queues at the speed of the rest (issue 37, points 1-3), side by side in one run, the Python
check ON, on the vLLM 0.10.1 image (bench/build_vllm.py):

- 1000 one-file patches on vLLM's own `.py` files against 8 of them: cold `lock` (empty shared cache,
  no queue state) and warm `apply --layer` (the cache the lock left); goals <= 2x and <= 3x;
- warm `apply --output-image oci:` against warm `apply --layer` of the 8-patch queue; goal within 0.2 s;
- the history queue (click's first-parent history replayed as ~400 patches, bench/inner_loop.py) applied
  in place with the check against `--no-python-check`, the check cold (no cached findings) and warm;
  goal <= 1.2x each.

    python3 bench/bench_pyqueue.py [--workdir /tmp/imgquilt-pyqueue] [--image-dir /tmp/imgquilt-vllm]
                                   [--history-repo /path/to/click.git] [--repeat 3] [--json]
                                   [--only "cold lock,history"] [--baseline OTHER-CHECKOUT/tool]

The image layout is copied into WORKDIR once (the warm --output-image links its blobs, which changes
their ctime: the build's own copy stays untouched). Each patch adds one module-level line at the end
of its file (a new name: the module's interface changes, so the screen parses it before and after);
one in eight reads an attribute of the first module the file imports (`_x = torch.__name__`), so the
cross-module check has the image's modules to read. The history queue's rootfs holds click's first
commit; its early history is Python 2 code, so PYFLAKES_BUILTINS declares Python 2's builtins (as a
user checking such code would). Every step is a process of its own, start-up included; the rounds interleave the steps and
the least and the median of --repeat rounds are printed, CPU (user + system, all threads) beside wall
time, with the load average (the machine is shared).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))

from bench_apply import cli_env  # noqa: E402
from inner_loop import build_history_queue, run_child  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

SIZES = (8, 1000)
CLICK = Path("/work/.mirror/pallets+click/repo")
PY2_BUILTINS = "unicode,raw_input,xrange,long,basestring,unichr,file,reduce,cmp,execfile,buffer,intern,apply,StandardError"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def py_files(stage: Path, want: int) -> list[tuple[str, bytes]]:
    """`want` .py files of vLLM (then of its dependencies), as the image holds them (the build's stage)."""
    out: list[tuple[str, bytes]] = []
    for top in ("stage-vllm", "stage-deps"):
        root = stage / top
        for p in sorted(root.rglob("*.py")):
            if len(out) >= want:
                return out
            if p.is_symlink() or not p.is_file():
                continue
            data = p.read_bytes()
            if not data.endswith(b"\n") or len(data) > 400_000:
                continue
            try:
                ast.parse(data)
            except (SyntaxError, ValueError):
                continue
            out.append((str(p.relative_to(root)), data))
    return out


def first_import(data: bytes) -> str | None:
    for node in ast.parse(data).body:
        if isinstance(node, ast.Import) and node.names[0].asname is None and "." not in node.names[0].name:
            return node.names[0].name
    return None


def write_queue(q: Path, files: list[tuple[str, bytes]]) -> None:
    shutil.rmtree(q, ignore_errors=True)
    (q / "patches").mkdir(parents=True)
    names = []
    for i, (path, old) in enumerate(files, start=1):
        mod = first_import(old) if i % 8 == 0 else None
        line = f"_imgquilt_bench_{i} = {mod}.__name__\n" if mod else f"_imgquilt_bench_{i} = {i}\n"
        new = old + line.encode()
        name = f"{i:04d}-bench.patch"
        (q / "patches" / name).write_bytes(build_patch(name, Header(b"Description: bench\n\n"), [make_section(path, old, new)]).raw)
        names.append(name)
    (q / "series").write_text("".join(n + "\n" for n in names))


def timed(label: str, cmd: list[str], env: dict[str, str], cwd: Path | None, results: dict, ok=(0,)) -> None:
    run = run_child(cmd, env, cwd)
    if run.code not in ok:
        raise SystemExit(f"{label} exited {run.code}:\n{run.err.decode(errors='replace')[-3000:]}")
    results.setdefault(label, []).append((run.seconds, run.cpu_seconds))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-pyqueue"))
    ap.add_argument("--image-dir", type=Path, default=Path("/tmp/imgquilt-vllm"), help="bench/build_vllm.py's workdir")
    ap.add_argument("--history-repo", type=Path, default=CLICK, help="a git repository whose history becomes the queue")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="comma-separated substrings: run only the steps whose label has one")
    ap.add_argument("--tool", type=Path, help="another checkout's tool/ directory")
    ap.add_argument("--baseline", "--baseline-tool", dest="baseline", type=Path,
                    help="a second checkout's tool/ directory, run side by side (interleaved)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    layout = work / "image"
    if not (layout / "index.json").is_file():
        src = args.image_dir / "image"
        if not (src / "index.json").is_file():
            raise SystemExit(f"no image at {src}: run bench/build_vllm.py first")
        say(f"copying {src} -> {layout} ...")
        shutil.copytree(src, layout)
    ref = f"oci:{layout}:vllm"
    queues = {}
    pick = None
    for n in SIZES:
        q = work / f"py-{n}"
        if not (q / "series").is_file():
            pick = pick or py_files(args.image_dir, max(SIZES))
            if len(pick) < max(SIZES):
                raise SystemExit(f"only {len(pick)} .py files in the image")
            say(f"writing the {n}-patch queue ...")
            write_queue(q, pick[:n])
        queues[n] = q
    hist_dir = work / "history"
    if not (hist_dir / "queue" / "series").is_file():
        say(f"replaying {args.history_repo}'s history as a queue ...")
        build_history_queue(args.history_repo, hist_dir)
    hist_patches = len((hist_dir / "queue" / "series").read_text().split())
    py = [sys.executable, "-m", "imgquilt"]
    results: dict[str, list[tuple[float, float]]] = {}
    loads = [os.getloadavg()[0]]
    steps = []
    # this checkout's tool (or --tool), and with --baseline another checkout's, each with its own queue
    # copies and caches; the two run step by step, interleaved, so both see the same load
    sides = [("", args.tool.resolve() if args.tool else REPO / "tool", work)]
    if args.baseline:
        sides.append((" [baseline]", args.baseline.resolve(), work / "baseline"))
    for tag, tool, side in sides:
        side.mkdir(parents=True, exist_ok=True)
        env = cli_env(work / "pycache", side / "cache", tool)
        for n, q0 in queues.items():
            q = side / f"py-{n}"
            if q != q0 and not (q / "series").is_file():
                shutil.copytree(q0 / "patches", q / "patches")
                shutil.copy2(q0 / "series", q / "series")
            cache = side / f"cache-{n}"
            env_n = dict(env, IMGQUILT_CACHE_DIR=str(cache))
            out = side / "out"

            def cold_lock(n=n, q=q, cache=cache, env_n=env_n, tag=tag):
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(q / ".imgquilt", ignore_errors=True)
                (q / "targets.lock").unlink(missing_ok=True)
                os.sync()
                timed(f"cold lock {n}{tag}", [*py, "lock", "--image", ref], env_n, q, results)

            def warm_layer(n=n, q=q, env_n=env_n, tag=tag, out=out):
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                os.sync()
                timed(f"warm apply --layer {n}{tag}", [*py, "apply", "--layer", str(out / "l.tar.gz")], env_n, q, results)

            def warm_layer_unchecked(n=n, q=q, env_n=env_n, tag=tag, out=out):
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                os.sync()
                timed(f"warm apply --layer {n}, --no-python-check{tag}", [*py, "apply", "--layer", str(out / "l.tar.gz"),
                                                                          "--no-python-check"], env_n, q, results)

            steps += [(f"cold lock {n}{tag}", cold_lock), (f"warm apply --layer {n}{tag}", warm_layer),
                      (f"warm apply --layer {n}, --no-python-check{tag}", warm_layer_unchecked)]
            if n == min(SIZES):
                def warm_image(n=n, q=q, env_n=env_n, tag=tag, out=out):
                    shutil.rmtree(out, ignore_errors=True)  # removing an earlier output: its links' ctime change
                    out.mkdir()
                    # the base blobs' ctime changed when that output was removed: a --layer first, as a user's
                    # earlier run would have, re-records them verified (not timed)
                    run_child([*py, "apply", "--layer", str(out / "l.tar.gz")], env_n, q)
                    os.sync()
                    timed(f"warm apply --output-image {n}{tag}", [*py, "apply", "--output-image", f"oci:{out}/img:p"], env_n, q, results)
                    # and the --layer right after, in the same state, for the side-by-side difference
                    timed(f"warm apply --layer {n} (beside --output-image){tag}", [*py, "apply", "--layer", str(out / "l2.tar.gz")],
                          env_n, q, results)

                steps.append((f"warm apply --output-image {n}{tag}", warm_image))
        hq, hroot = hist_dir / "queue", hist_dir / "rootfs"
        target = side / "history-target"
        hcache = side / "cache-history"
        # click's early history is Python 2 code: its builtins are declared, as a user of such code would
        env_h = dict(env, IMGQUILT_CACHE_DIR=str(hcache), PYFLAKES_BUILTINS=PY2_BUILTINS)

        def history(label: str, *extra: str, wipe: bool = False, target=target, hcache=hcache, env_h=env_h):
            def go():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(hroot, target, symlinks=True)
                if wipe:
                    shutil.rmtree(hcache / "pycheck", ignore_errors=True)
                os.sync()
                timed(label, [*py, "--queue", str(hq), "apply", "--root", str(target), *extra], env_h, None, results)
            return go

        steps += [(f"history, --no-python-check{tag}", history(f"history, --no-python-check{tag}", "--no-python-check")),
                  (f"history, check, cold{tag}", history(f"history, check, cold{tag}", wipe=True)),
                  (f"history, check, warm{tag}", history(f"history, check, warm{tag}"))]
    if len(sides) > 1:  # step by step: this tool's, then the baseline's
        mine = [st for st in steps if not st[0].endswith(sides[1][0])]
        theirs = {st[0]: st for st in steps if st[0].endswith(sides[1][0])}
        steps = [x for st in mine for x in (st, theirs[st[0] + sides[1][0]])]
    if args.only:
        steps = [st for st in steps if any(w in st[0] for w in args.only.split(","))]
    for r in range(args.repeat):
        for label, fn in steps:
            say(f"round {r + 1}/{args.repeat}: {label}")
            fn()
            loads.append(os.getloadavg()[0])
    for _tag, _tool, side in sides:
        shutil.rmtree(side / "out", ignore_errors=True)
    summary = {}
    print(f"{'step':46} {'wall min':>9} {'wall med':>9} {'CPU min':>8} {'CPU med':>8}")
    for label, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        s = summary[label] = {"wall_min": round(min(walls), 3), "wall_median": round(statistics.median(walls), 3),
                              "cpu_min": round(min(cpus), 3), "cpu_median": round(statistics.median(cpus), 3)}
        print(f"{label:46} {s['wall_min']:9.2f} {s['wall_median']:9.2f} {s['cpu_min']:8.2f} {s['cpu_median']:8.2f}")
    lo, hi = SIZES
    goals = []
    for tag, _tool, _side in sides:

        def ratio(text: str, a: str, b: str, goal: float, tag: str = tag) -> None:
            text, a, b = text + tag, a + tag, b + tag
            if a in summary and b in summary:
                x, y = summary[a], summary[b]
                goals.append((text, y["wall_min"] / x["wall_min"], y["wall_median"] / x["wall_median"],
                              y["cpu_min"] / x["cpu_min"], goal, "x"))

        ratio(f"cold lock, {hi} / {lo} .py patches <= 2x", f"cold lock {lo}", f"cold lock {hi}", 2.0)
        ratio(f"warm apply --layer, {hi} / {lo} .py patches <= 3x", f"warm apply --layer {lo}", f"warm apply --layer {hi}", 3.0)
        ratio(f"warm apply --layer --no-python-check, {hi} / {lo} (for reference: the rest of the apply)",
              f"warm apply --layer {lo}, --no-python-check", f"warm apply --layer {hi}, --no-python-check", float("inf"))
        ratio(f"history ({hist_patches} patches), check cold / no check <= 1.2x", "history, --no-python-check", "history, check, cold", 1.2)
        ratio(f"history ({hist_patches} patches), check warm / no check <= 1.2x", "history, --no-python-check", "history, check, warm", 1.2)
        li, ll = f"warm apply --output-image {lo}{tag}", f"warm apply --layer {lo} (beside --output-image){tag}"
        if li in summary and ll in summary:
            x, y = summary[ll], summary[li]
            goals.append((f"warm --output-image - warm --layer ({lo} patches) <= 0.2 s{tag}", y["wall_min"] - x["wall_min"],
                          y["wall_median"] - x["wall_median"], y["cpu_min"] - x["cpu_min"], 0.2, "s"))
    print()
    for text, v, vm, vc, goal, unit in goals:
        verdict = "" if goal == float("inf") else (" met" if v <= goal else " NOT met")
        print(f"{text}: {v:.2f}{unit} (medians {vm:.2f}{unit}, CPU {vc:.2f}{unit}){verdict}")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    if args.json:
        print(json.dumps({"steps": summary, "goals": [g[:4] + ((None if g[4] == float("inf") else g[4]),) for g in goals],
                          "load": [min(loads), max(loads)],
                          "history_patches": hist_patches}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
