#!/usr/bin/env python3
"""Benchmark imgquilt against a real registry (Debian's docker-registry on 127.0.0.1): audit of the
large bench image read natively, cold and warm, against `skopeo copy` of the same image (what
imgquilt did before: copy the whole image, then read it); and the bytes a push sends,
`apply --output-image docker://` against writing the image locally and `skopeo copy`-ing it up.
Not a test: run it by hand.

    python3 bench/bench_registry.py [--workdir /tmp/imgquilt-bench-registry] [--reuse] [--json]

The image is bench_apply.py's (built by build_image.py from this machine's files, >= 1 GB of tar).
Bytes downloaded are summed from the registry's access log (response sizes of blob GETs); bytes a
push stored are the growth of the registry's blob storage.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from bench_apply import LAYERS, pick_targets, sh, write_queue  # noqa: E402
from build_image import build_image  # noqa: E402
from support.registry_server import start_registry  # noqa: E402


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def imgquilt(queue: Path, env: dict, *args: str, ok=(0,)) -> tuple[float, dict]:
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "imgquilt", "--queue", str(queue), "--json", *args], env=env,
                       capture_output=True)
    took = time.perf_counter() - start
    if p.returncode not in ok:
        raise SystemExit(f"imgquilt {' '.join(args)} exited {p.returncode}:\n{p.stderr.decode(errors='replace')}")
    return took, json.loads(p.stdout)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def blob_bytes(server, since: int) -> int:
    return sum(r.size for r in server.requests()[since:] if r.method == "GET" and "/blobs/" in r.path)


def storage(server) -> int:
    return sum(p.stat().st_size for p in (server.root / "docker/registry/v2/blobs").rglob("data"))


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-registry"))
    ap.add_argument("--reuse", action="store_true", help="reuse the image an earlier run built in --workdir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.workdir
    image = work / "image"
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        say("building the image (bench/build_image.py)")
        build_image(image, list(LAYERS), progress=say)
    built_ref = f"oci:{image}:bench"
    for d in ("registry", "queue", "cache", "copy", "local-out"):
        shutil.rmtree(work / d, ignore_errors=True)
    server = start_registry(work / "registry")
    try:
        say("seeding the registry (skopeo copy)")
        sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", built_ref, server.ref("bench:v1"))
        manifest = json.loads(sh("skopeo", "inspect", "--raw", "--tls-verify=false", server.ref("bench:v1")).stdout)
        total = sum(l["size"] for l in manifest["layers"])
        queue = work / "queue"
        queue.mkdir()
        class _Built:  # what pick_targets needs: the layer names that were built
            layers = tuple(type("L", (), {"name": p.name}) for p in LAYERS)

        patches = write_queue(queue, pick_targets(Path("/"), _Built()))  # type: ignore[arg-type]
        env = dict(os.environ, PYTHONPATH=str(REPO / "tool"), IMGQUILT_CACHE_DIR=str(work / "cache"))
        ref = server.ref("bench:v1")
        rows = []

        say("timing: skopeo copy docker:// -> dir: (the whole image, as imgquilt did before)")
        t = timed(lambda: sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", ref, f"dir:{work / 'copy'}"))
        rows.append(("skopeo copy of the image (docker:// -> dir:)", t, total))
        shutil.rmtree(work / "copy")

        n = len(server.requests())
        t, _ = imgquilt(queue, env, "audit", "--image", ref, "--expect", "pending")
        rows.append(("imgquilt audit, cold (empty cache)", t, blob_bytes(server, n)))
        n = len(server.requests())
        t, _ = imgquilt(queue, env, "audit", "--image", ref, "--expect", "pending")
        rows.append(("imgquilt audit, warm (same digest again)", t, blob_bytes(server, n)))

        # push: native against writing locally and `skopeo copy`-ing it up (both into the same repository)
        before = storage(server)
        t, doc = imgquilt(queue, env, "apply", "--image", ref, "--output-image", server.ref("bench:fixed"))
        pushed_native = storage(server) - before
        rows_push = [("imgquilt apply --output-image docker:// (push)", t, pushed_native, 0)]
        out = work / "local-out"
        t1, _ = imgquilt(queue, env, "apply", "--image", built_ref, "--output-image", f"oci:{out}:fixed")
        local = du(out)  # base blobs hard-linked where they can be: the bytes a copy elsewhere would write
        before = storage(server)
        t2 = timed(lambda: sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{out}:fixed",
                              server.ref("bench:fixed-skopeo")))
        rows_push.append(("imgquilt apply --output-image oci: + skopeo copy to the registry", t1 + t2,
                          storage(server) - before, local))
    finally:
        server.stop()

    print(f"image: {len(manifest['layers'])} layers, {total / 1e6:,.0f} MB compressed; queue: {len(patches)} patches")
    print()
    print("| audit from the registry | seconds | blob bytes downloaded |")
    print("|---|---|---|")
    for label, secs, got in rows:
        print(f"| {label} | {secs:.2f} | {got / 1e6:,.1f} MB |")
    print()
    print("| publish the patched image | seconds | new bytes in the registry | written locally first |")
    print("|---|---|---|---|")
    for label, secs, stored, local in rows_push:
        print(f"| {label} | {secs:.2f} | {stored / 1e3:,.1f} kB | {local / 1e6:,.0f} MB |")
    if args.json:
        print(json.dumps({"compressed_bytes": total, "audit": [{"step": l, "seconds": round(s, 3), "downloaded": g} for l, s, g in rows],
                          "push": [{"step": l, "seconds": round(s, 3), "stored": st, "local": lo} for l, s, st, lo in rows_push]},
                         indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
