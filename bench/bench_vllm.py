#!/usr/bin/env python3
"""Cold reads and image outputs on a vLLM 0.10.1 image (issue 28), side by side in one run:

- the floor: decompressing every layer blob to nowhere with isal, in a process of its own (CPU and wall);
- `imgquilt audit` cold from the local OCI layout, and cold from a registry (Debian's docker-registry on
  127.0.0.1) serving the same image, against `skopeo copy docker://... dir:` of it;
- warm `apply --layer` against warm `apply --output-image oci:` (base blobs linked, not copied or hashed).

    python3 bench/bench_vllm.py [--workdir /tmp/imgquilt-vllm] [--repeat 3] [--json] [--tool DIR]
        [--baseline DIR] [--only SUBSTRINGS]

--baseline runs each cold audit a second time per round with another checkout's tool/ (e.g. main's), the
two taking turns, and prints the ratio of each to its baseline twin.

The image is bench/build_vllm.py's (built first when missing). The queue patches one file in each layer
(the Python standard library in the base, transformers in the dependencies, vllm itself), so a cold
read goes through every layer. Steps take turns in every round; the least and the median of --repeat
rounds are printed, CPU (user + system of the child, all its threads) beside wall time, with the load
average: the machine is shared, and CPU is the steadier figure. Goals (issue 28): warm --output-image
within 0.2 s of warm --layer; cold registry audit <= skopeo copy and <= 1.1x the local cold audit;
cold CPU <= 1.2x the isal floor.
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
sys.path.insert(0, str(REPO / "tests"))

from bench_apply import cli_env  # noqa: E402
from build_vllm import SITE, build  # noqa: E402
from inner_loop import run_child  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

TARGETS = ["usr/lib/python3.11/textwrap.py", f"{SITE}/transformers/__init__.py", f"{SITE}/vllm/envs.py"]
FLOOR = r"""
import sys
from isal import igzip
for path in sys.argv[1:]:
    with igzip.open(path, "rb") as f:
        while f.read(4 << 20):
            pass
"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def layer_blobs(layout: Path, tag: str) -> list[Path]:
    index = json.loads((layout / "index.json").read_text())
    (m,) = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    manifest = json.loads((layout / "blobs/sha256" / m["digest"].split(":")[1]).read_text())
    return [layout / "blobs/sha256" / l["digest"].split(":")[1] for l in manifest["layers"]]


def read_in_image(layout: Path, tag: str, rel: str) -> bytes:
    import tarfile

    found = None
    for blob in layer_blobs(layout, tag):
        with tarfile.open(blob, "r:gz") as tar:
            for mem in tar:
                if mem.name.lstrip("./") == rel and mem.isfile():
                    found = tar.extractfile(mem).read()  # type: ignore[union-attr]
    if found is None:
        raise SystemExit(f"{rel} is not in the image")
    return found


def write_queue(q: Path, layout: Path, tag: str) -> None:
    if (q / "series").is_file():
        return
    (q / "patches").mkdir(parents=True)
    names = []
    for i, rel in enumerate(TARGETS, start=1):
        old = read_in_image(layout, tag, rel)
        new = old + b"# imgquilt bench: patched\n"
        name = f"{i:04d}-{Path(rel).name.replace('.', '-')}.patch"
        (q / "patches" / name).write_bytes(build_patch(name, Header(b"Description: bench\n\n"), [make_section(rel, old, new)]).raw)
        names.append(name)
    (q / "series").write_text("".join(n + "\n" for n in names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tool", type=Path, help="run another checkout's tool/ directory (e.g. before this change)")
    ap.add_argument("--baseline", type=Path, help="also run each cold audit with this checkout's tool/ (side by side)")
    ap.add_argument("--only", help="comma-separated substrings: run only the steps whose label has one")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    local_ref = build(work)
    layout, tag = work / "image", "vllm"
    blobs = layer_blobs(layout, tag)
    size = sum(b.stat().st_size for b in blobs)
    say(f"image {local_ref}: {len(blobs)} layers, {size / 1e6:,.0f} MB gzip")
    q = work / "queue"
    write_queue(q, layout, tag)
    env = cli_env(work / "pycache", work / "shared-cache")
    if args.tool is not None:
        env["PYTHONPATH"] = str(args.tool.resolve())
    from support.registry_server import start_registry

    def chosen(label: str) -> bool:
        return not args.only or any(w in label for w in args.only.split(","))

    server = None
    if chosen("registry docker://") or chosen("skopeo copy docker:// -> dir:"):
        shutil.rmtree(work / "registry", ignore_errors=True)
        server = start_registry(work / "registry")
    results: dict[str, list[tuple[float, float]]] = {}
    loads = [os.getloadavg()[0]]
    try:
        reg_ref = server.ref("vllm:v1") if server is not None else ""
        if server is not None:
            run = run_child(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", local_ref, reg_ref], env)
            if run.code:
                raise SystemExit(run.err.decode(errors="replace"))
        cache = Path(env["IMGQUILT_CACHE_DIR"])
        base_env = dict(env, PYTHONPATH=str(args.baseline.resolve())) if args.baseline is not None else None

        def cold(ref: str, with_env: dict[str, str] | None = None):
            def go():
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(q / ".imgquilt", ignore_errors=True)
                os.sync()
                return run_child([sys.executable, "-m", "imgquilt", "audit", "--image", ref, "--expect", "pending"],
                                 with_env or env, q)
            return go

        def skopeo():
            shutil.rmtree(work / "copy", ignore_errors=True)
            os.sync()
            return run_child(["skopeo", "copy", "--quiet", "--src-tls-verify=false", reg_ref, f"dir:{work / 'copy'}"], env)

        def floor():
            os.sync()
            return run_child([sys.executable, "-c", FLOOR, *map(str, blobs)], env)

        rounds = iter(range(1 << 30))
        warm_env = dict(env, IMGQUILT_CACHE_DIR=str(work / "warm-cache"))  # the cold steps wipe theirs

        def warm(*out: str):
            # every output in a directory of its own, all removed at the end: removing a layout that
            # hard-links the base blobs changes their ctime, and the next read would hash them again
            def go():
                where = work / "out" / str(next(rounds))
                where.mkdir(parents=True)
                os.sync()
                args = [a.replace("{OUT}", str(where)) for a in out]
                return run_child([sys.executable, "-m", "imgquilt", "apply", "--image", local_ref, *args], warm_env, q)
            return go

        steps = [
            ("floor: isal decompress of every layer", floor),
            ("audit, cold, local oci:", cold(local_ref)),
            ("audit, cold, registry docker://", cold(reg_ref)),
            ("skopeo copy docker:// -> dir:", skopeo),
            ("apply --layer, warm", warm("--layer", "{OUT}/fix.tar.gz")),
            ("apply --output-image oci:, warm", warm("--output-image", "oci:{OUT}/image:patched")),
        ]
        if base_env is not None:  # each cold audit's baseline twin runs right after it
            steps = [t for label, fn in steps for t in [(label, fn)] + (
                [(label + " (baseline)", cold(local_ref if "local" in label else reg_ref, base_env))]
                if label.startswith("audit, cold") else [])]
        steps = [s for s in steps if chosen(s[0]) and (server is not None or "docker://" not in s[0])]
        for r in range(args.repeat):
            for label, fn in steps:
                if label.endswith("warm") and not (q / "targets.lock").is_file():
                    lock = run_child([sys.executable, "-m", "imgquilt", "lock", "--image", local_ref], warm_env, q)
                    if lock.code:
                        raise SystemExit(lock.err.decode(errors="replace"))
                    warm("--layer", "{OUT}/fix.tar.gz")()  # the cache warm for both
                say(f"round {r + 1}/{args.repeat}: {label}")
                got = fn()
                if got.code != 0:
                    raise SystemExit(f"{label} exited {got.code}:\n{got.err.decode(errors='replace')[-2000:]}")
                results.setdefault(label, []).append((got.seconds, got.cpu_seconds))
                loads.append(os.getloadavg()[0])
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work / "copy", ignore_errors=True)
        shutil.rmtree(work / "out", ignore_errors=True)
    summary = {}
    print(f"{'step':40} {'wall min':>9} {'wall med':>9} {'CPU min':>8} {'CPU med':>8}")
    for label, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        summary[label] = {"wall_min": min(walls), "wall_median": statistics.median(walls), "cpu_min": min(cpus),
                          "cpu_median": statistics.median(cpus)}
        s = summary[label]
        print(f"{label:40} {s['wall_min']:9.2f} {s['wall_median']:9.2f} {s['cpu_min']:8.2f} {s['cpu_median']:8.2f}")
    for label in list(summary):
        twin = summary.get(label + " (baseline)")
        if twin is not None:
            s = summary[label]
            print(f"{label} / its baseline: wall min {s['wall_min'] / twin['wall_min']:.3f}x, "
                  f"CPU min {s['cpu_min'] / twin['cpu_min']:.3f}x")
    if len(summary) < len(steps) or args.only:
        print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
        return 0
    f, lc, rc, sk = (summary[k] for k in ("floor: isal decompress of every layer", "audit, cold, local oci:",
                                          "audit, cold, registry docker://", "skopeo copy docker:// -> dir:"))
    wl, wi = summary["apply --layer, warm"], summary["apply --output-image oci:, warm"]
    goals = [
        ("warm --output-image - warm --layer <= 0.2 s", wi["wall_min"] - wl["wall_min"], 0.2, "s"),
        ("cold registry audit / skopeo copy <= 1.0", rc["wall_min"] / sk["wall_min"], 1.0, "x"),
        ("cold registry audit / local cold audit <= 1.1", rc["wall_min"] / lc["wall_min"], 1.1, "x"),
        ("local cold audit CPU / floor CPU <= 1.2", lc["cpu_min"] / f["cpu_min"], 1.2, "x"),
        ("registry cold audit CPU / floor CPU (for reference)", rc["cpu_min"] / f["cpu_min"], None, "x"),
    ]
    print()
    for text, value, goal, unit in goals:
        verdict = "" if goal is None else (" met" if value <= goal else " NOT met")
        print(f"{text}: {value:.2f}{unit}{verdict}")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    if args.json:
        print(json.dumps({"image_gzip_bytes": size, "steps": summary, "load": [min(loads), max(loads)]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
