#!/usr/bin/env python3
"""Per-patch costs (issue 28): a queue of 1000 one-file patches against one of 8, on the bench image,
side by side: cold `lock` (empty shared cache, no queue state) and warm `apply --layer` (the cache
the lock left). Goals: warm apply --layer at most 3x the 8-patch queue's, cold lock at most 2x.
Not a test: run it by hand (bench/README.md).

    python3 bench/bench_patches.py [--workdir /tmp/imgquilt-bench] [--reuse] [--repeat 3] [--json]

The image is bench_apply.py's (built the same way, reused from the same --workdir). The patches
change text files spread over its layers (one line added at the end of each; no .py files, so the
Python check, measured on its own by bench_apply, does not blur the per-patch costs). Every step is a
process of its own, start-up included; the rounds interleave the steps, the least (and the median)
of --repeat rounds is reported, with the load average.
"""
from __future__ import annotations

import argparse
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

from bench_apply import LAYERS, cli_env  # noqa: E402
from build_image import build_image  # noqa: E402
from inner_loop import run_child  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

SIZES = (8, 1000)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def image_in(work: Path) -> str:
    layout = work / "image"
    if not (layout / "index.json").is_file():
        say("building the bench image (bench_apply.py's layers) ...")
        shutil.rmtree(layout, ignore_errors=True)
        build_image(layout, list(LAYERS), progress=say)
    return f"oci:{layout}:bench"


def text_files(want: int) -> list[tuple[str, bytes]]:
    """`want` UTF-8 text files of the image's paths (no .py), spread over its layers, reached without links."""
    found: dict[str, list[tuple[str, bytes]]] = {}
    for plan in LAYERS:
        got: list[tuple[str, bytes]] = []
        for top in plan.paths:
            base = Path("/") / top
            if base.is_symlink() or not base.is_dir():
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
                for name in sorted(filenames):
                    p = Path(dirpath) / name
                    if p.suffix in (".py", ".pyc", ".gz") or p.is_symlink() or not p.is_file():
                        continue
                    try:
                        if p.stat().st_size > 200_000:
                            continue
                        data = p.read_bytes()
                        data.decode("utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
                    if data.endswith(b"\n") and data.count(b"\n") >= 3 and b"\0" not in data:
                        got.append((str(p.relative_to("/")), data))
                if len(got) > want:
                    break
            if len(got) > want:
                break
        found[plan.name] = got
    out: list[tuple[str, bytes]] = []
    while len(out) < want and any(found.values()):
        for name in list(found):
            if found[name] and len(out) < want:
                out.append(found[name].pop(0))
    return out


def write_queue(q: Path, files: list[tuple[str, bytes]]) -> None:
    shutil.rmtree(q, ignore_errors=True)
    (q / "patches").mkdir(parents=True)
    names = []
    for i, (path, old) in enumerate(files, start=1):
        new = old + f"# imgquilt-bench: patch {i}\n".encode()
        name = f"{i:04d}-bench.patch"
        (q / "patches" / name).write_bytes(build_patch(name, Header(b"Description: bench\n\n"), [make_section(path, old, new)]).raw)
        names.append(name)
    (q / "series").write_text("".join(n + "\n" for n in names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench"))
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    ref = image_in(work)
    pick = text_files(max(SIZES))
    if len(pick) < max(SIZES):
        raise SystemExit(f"only {len(pick)} text files found on this machine; {max(SIZES)} are needed")
    queues = {}
    for n in SIZES:
        q = work / f"patches-{n}"
        if not (args.reuse and (q / "series").is_file()):
            say(f"writing the {n}-patch queue ...")
            write_queue(q, pick[:n])
        queues[n] = q
    env = cli_env(work / "pycache", work / "shared-cache")
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    for r in range(args.repeat):
        for n, q in queues.items():
            cache = work / f"cache-{n}"
            env_n = dict(env, IMGQUILT_CACHE_DIR=str(cache))
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(q / ".imgquilt", ignore_errors=True)
            (q / "targets.lock").unlink(missing_ok=True)
            os.sync()
            say(f"round {r + 1}/{args.repeat}: cold lock, {n} patches")
            run = run_child([sys.executable, "-m", "imgquilt", "lock", "--image", ref], env_n, q)
            if run.code != 0:
                raise SystemExit(run.err.decode(errors="replace"))
            times.setdefault(f"cold lock {n}", []).append(run.seconds)
            cpu.setdefault(f"cold lock {n}", []).append(run.cpu_seconds)
            (work / "out.tar.gz").unlink(missing_ok=True)
            os.sync()
            say(f"round {r + 1}/{args.repeat}: warm apply --layer, {n} patches")
            run = run_child([sys.executable, "-m", "imgquilt", "apply", "--layer", str(work / "out.tar.gz")], env_n, q)
            if run.code != 0:
                raise SystemExit(run.err.decode(errors="replace"))
            times.setdefault(f"warm apply --layer {n}", []).append(run.seconds)
            cpu.setdefault(f"warm apply --layer {n}", []).append(run.cpu_seconds)
            loads.append(os.getloadavg()[0])
    rows = {k: {"min_s": round(min(v), 3), "median_s": round(statistics.median(v), 3), "cpu_min_s": round(min(cpu[k]), 3)}
            for k, v in times.items()}
    print(f"{'step':28} {'min s':>8} {'median s':>9} {'CPU min s':>10}")
    for k, v in rows.items():
        print(f"{k:28} {v['min_s']:8.2f} {v['median_s']:9.2f} {v['cpu_min_s']:10.2f}")
    lo, hi = SIZES
    ratios = {}
    for step, goal in (("cold lock", 2.0), ("warm apply --layer", 3.0)):
        a, b = rows[f"{step} {lo}"], rows[f"{step} {hi}"]
        ratio = b["min_s"] / a["min_s"]
        ratio_med = b["median_s"] / a["median_s"]
        ratios[step] = {"min": round(ratio, 2), "median": round(ratio_med, 2), "goal": goal}
        print(f"{step}: {hi} patches / {lo} patches = {ratio:.2f}x (medians {ratio_med:.2f}x); goal <= {goal}x: "
              f"{'met' if ratio <= goal else 'NOT met'}")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    if args.json:
        print(json.dumps({"rows": rows, "ratios": ratios, "load": [min(loads), max(loads)]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
