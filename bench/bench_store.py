#!/usr/bin/env python3
"""`audit --image containers-storage:` on the vLLM 0.10.1 image (issue 37, point 6), side by side in one run:

- warm `imgquilt audit --image oci:` of the image's OCI layout (the shared cache holding its layer
  indexes and the target files' bytes), the reference;
- warm `imgquilt audit --image containers-storage:localhost/vllm:bench`, the same image in a private
  containers-storage store (its own storage.conf; the machine's store is never touched): resolved to
  its image ID, found copied in the shared cache, nothing copied;
- once, the cold one (the copy into the shared cache), and what the queue directory holds after it.

    python3 bench/bench_store.py [--workdir /tmp/imgquilt-vllm-store] [--image /tmp/imgquilt-vllm/image]
        [--queue DIR] [--driver overlay|vfs] [--repeat 3] [--tool DIR]

The queue is bench_vllm.py's (3 patches, one file in each layer). The least wall of --repeat rounds is
printed with its CPU and the load average (the machine is shared). Goal: warm containers-storage <= 1.5x
warm oci:.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from bench_apply import cli_env  # noqa: E402
from bench_vllm import write_queue  # noqa: E402
from inner_loop import run_child  # noqa: E402

TAG = "vllm"
NAME = "localhost/vllm:bench"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> int:
    from support.imagetools import drop_store, private_store

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm-store"))
    ap.add_argument("--image", type=Path, default=Path("/tmp/imgquilt-vllm/image"))
    ap.add_argument("--queue", type=Path, help="bench_vllm.py's queue (written into --workdir when not given)")
    ap.add_argument("--driver", default="overlay")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep-store", action="store_true", help="leave the private store for another run")
    ap.add_argument("--tool", type=Path, help="run another checkout's tool/ directory")
    ap.add_argument("--baseline", type=Path, help="also run the warm audits with this checkout's tool/ (side by side)")
    ap.add_argument("--seed-only", action="store_true", help="only put the image in the private store")
    ap.add_argument("--warm-only", action="store_true", help="keep the shared cache of an earlier run: no cold step")
    args = ap.parse_args()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    image = args.image.resolve()
    q = args.queue.resolve() if args.queue else work / "queue"
    write_queue(q, image, TAG)
    env = cli_env(work / "pycache", work / "shared-cache", args.tool.resolve() if args.tool else REPO / "tool")
    store_dir = work / "store"
    env.update(private_store(store_dir, driver=args.driver))
    if subprocess.run(["podman", "image", "exists", NAME], env=env).returncode != 0:
        say(f"copying the image into the private store ({args.driver}; minutes)")
        subprocess.run(["skopeo", "copy", "--quiet", f"oci:{image}:{TAG}", f"containers-storage:{NAME}"], env=env, check=True)
    if args.seed_only:
        return 0
    base_env = None
    if args.baseline:
        base_env = dict(env, **cli_env(work / "pycache-base", work / "shared-cache", args.baseline.resolve()))
        base_env.update(private_store(store_dir, driver=args.driver))
    loads = [os.getloadavg()[0]]
    below = None
    rows: dict[str, list[tuple[float, float]]] = {}

    def audit(ref: str, label: str, tool_env: dict[str, str] | None = None) -> None:
        shutil.rmtree(q / ".imgquilt", ignore_errors=True)
        got = run_child([sys.executable, "-m", "imgquilt", "audit", "--image", ref, "--expect", "pending"], tool_env or env, q)
        if got.code != 0:
            raise SystemExit(f"{label} exited {got.code}:\n{got.err.decode(errors='replace')[-2000:]}")
        rows.setdefault(label, []).append((got.seconds, got.cpu_seconds))
        loads.append(os.getloadavg()[0])

    try:
        if not args.warm_only:
            shutil.rmtree(work / "shared-cache", ignore_errors=True)
            say("cold containers-storage: (the copy into the shared cache)")
            audit(f"containers-storage:{NAME}", "audit containers-storage:, cold (copied once)")
            below = sum(p.stat().st_size for p in q.rglob("*") if p.is_file())
        say("warming")
        audit(f"oci:{image}:{TAG}", "audit oci:, first (warming)")
        audit(f"containers-storage:{NAME}", "audit containers-storage:, first (warming)")
        steps = [("audit oci:, warm", f"oci:{image}:{TAG}", None),
                 ("audit containers-storage:, warm", f"containers-storage:{NAME}", None)]
        if base_env is not None:
            steps += [("baseline: audit oci:, warm", f"oci:{image}:{TAG}", base_env),
                      ("baseline: audit containers-storage:, warm", f"containers-storage:{NAME}", base_env)]
        for r in range(args.repeat):
            for label, ref, tool_env in steps:
                say(f"round {r + 1}/{args.repeat}: {label}")
                audit(ref, label, tool_env)
    finally:
        if not args.keep_store:
            drop_store(store_dir, env)
    print(f"| step | wall (best of {args.repeat}) | CPU |")
    print("|---|---|---|")
    for label, runs in rows.items():
        wall, cpu = min(runs)
        print(f"| {label} | {wall:.2f} s | {cpu:.2f} s |")
    cs, oci = min(rows["audit containers-storage:, warm"])[0], min(rows["audit oci:, warm"])[0]
    print(f"\nwarm containers-storage: / warm oci: = {cs / oci:.2f}x (goal <= 1.5x)")
    if below is not None:
        print(f"bytes below the queue directory after the cold run: {below:,}")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
