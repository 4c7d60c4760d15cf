#!/usr/bin/env python3
"""Benchmark cold reads of seekable layers (issue 19): the bench image as gzip, as zstd:chunked
(`skopeo copy --dest-compress-format zstd:chunked`) and as eStargz (`ctr-remote image convert --estargz`,
when containerd and ctr-remote are installed), each served by Debian's docker-registry on 127.0.0.1
and read from a local OCI layout. Side by side in one run, the steps taking turns for --repeat rounds
(best of each):
  - `skopeo copy docker://... dir:` of the image (the reference: a plain copy of every blob);
  - `imgquilt audit --image docker://...`, cold (empty shared cache);
  - `imgquilt audit --image oci:...`, cold.
Bytes fetched are summed from the registry's access log (blob GETs, ranges included). Not a test: run
it by hand or with `make bench`.

    python3 bench/bench_seekable.py [--workdir /tmp/imgquilt-bench-seekable] [--reuse] [--repeat 3] [--json]

The image is bench_apply.py's (>= 1 GB of tar from this machine's files); the queue patches files in
several layers and adds one (so every layer must answer for its absence).
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
sys.path.insert(0, str(REPO / "tool"))

from bench_apply import LAYERS, cli_env, pick_targets, sh, write_queue  # noqa: E402
from build_image import build_image  # noqa: E402
from support.registry_server import start_registry  # noqa: E402


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def blob_bytes(server, since: int) -> int:
    return sum(r.size for r in server.requests()[since:] if r.method == "GET" and "/blobs/" in r.path)


def layer_bytes(layout: Path, tag: str) -> int:
    index = json.loads((layout / "index.json").read_text())
    entry = next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
    m = json.loads((layout / "blobs" / "sha256" / entry["digest"].split(":")[1]).read_bytes())
    return sum(l["size"] for l in m["layers"]) + m["config"]["size"]


def produce(work: Path, image: Path, *, estargz: bool) -> dict[str, Path]:
    """The image in each format, as an OCI layout (made once; --reuse keeps them)."""
    from support.seekable_tools import containerd, ctr_remote_convert, zstd_chunked_copy

    layouts = {"gzip": image}
    zc = work / "zstd-chunked"
    if not (zc / "index.json").exists():
        say("making zstd:chunked (skopeo copy --dest-compress-format zstd:chunked)")
        zstd_chunked_copy(f"oci:{image}:bench", zc, "bench")
    layouts["zstd:chunked"] = zc
    if estargz:
        esgz = work / "estargz"
        if not (esgz / "index.json").exists():
            say("making eStargz (ctr-remote image convert --estargz, on a containerd of our own)")
            with containerd(work / "containerd") as address:
                ctr_remote_convert(address, f"oci:{image}:bench", esgz, "bench", work / "ctr")
            shutil.rmtree(work / "ctr", ignore_errors=True)
            shutil.rmtree(work / "containerd", ignore_errors=True)
        layouts["eStargz"] = esgz
    return layouts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-seekable"))
    ap.add_argument("--reuse", action="store_true", help="reuse the images an earlier run made in --workdir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.workdir
    image = work / "image"
    if not args.reuse or not (image / "index.json").exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        say("building the image (bench/build_image.py)")
        build_image(image, list(LAYERS), progress=say)
    estargz = all(shutil.which(t) for t in ("containerd", "ctr", "ctr-remote")) and os.geteuid() == 0
    layouts = produce(work, image, estargz=estargz)
    queue = work / "queue"
    shutil.rmtree(queue, ignore_errors=True)
    queue.mkdir()

    class _Built:  # what pick_targets needs: the layer names that were built
        layers = tuple(type("L", (), {"name": p.name}) for p in LAYERS)

    patches = write_queue(queue, pick_targets(Path("/"), _Built()))  # type: ignore[arg-type]
    cache = work / "shared-cache"
    env = cli_env(work / "pycache", cache)
    shutil.rmtree(work / "registry", ignore_errors=True)
    server = start_registry(work / "registry")
    best: dict[tuple[str, str], float] = {}
    fetched: dict[tuple[str, str], int] = {}
    sizes = {kind: layer_bytes(layout, "bench") for kind, layout in layouts.items()}
    try:
        for kind, layout in layouts.items():
            say(f"seeding the registry: {kind}")
            sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:bench",
               server.ref(f"bench:{kind.replace(':', '-')}"))

        def audit(ref: str) -> None:
            shutil.rmtree(cache, ignore_errors=True)  # cold: nothing cached from an earlier step
            shutil.rmtree(queue / ".imgquilt", ignore_errors=True)
            p = subprocess.run([sys.executable, "-m", "imgquilt", "--queue", str(queue), "--json", "audit", "--image", ref],
                               env=env, capture_output=True)
            if p.returncode not in (0, 5):
                raise SystemExit(f"audit of {ref} exited {p.returncode}: {p.stderr.decode(errors='replace')}")

        steps = []
        for kind, layout in layouts.items():
            remote = server.ref(f"bench:{kind.replace(':', '-')}")
            copy_dir = work / "copy"
            steps.append((kind, "skopeo copy docker:// -> dir:", lambda r=remote, d=copy_dir: (
                shutil.rmtree(d, ignore_errors=True),
                sh("skopeo", "copy", "--quiet", "--src-tls-verify=false", r, f"dir:{d}"))))
            steps.append((kind, "imgquilt audit docker://, cold", lambda r=remote: audit(r)))
            steps.append((kind, "imgquilt audit oci: (local), cold", lambda l=layout: audit(f"oci:{l}:bench")))
        for round_ in range(args.repeat):
            for kind, label, fn in steps:
                say(f"timing ({round_ + 1}/{args.repeat}): {kind}: {label}")
                os.sync()
                n = len(server.requests())
                t0 = time.perf_counter()
                fn()
                took = time.perf_counter() - t0
                key = (kind, label)
                best[key] = min(best.get(key, float("inf")), took)
                fetched[key] = blob_bytes(server, n)
        shutil.rmtree(work / "copy", ignore_errors=True)
    finally:
        server.stop()

    print(f"queue: {len(patches)} patches ({', '.join(patches)}); image {sizes['gzip'] / 1e6:,.0f} MB as gzip")
    print()
    print("| format | step | seconds | blob bytes from the registry |")
    print("|---|---|---|---|")
    for (kind, label), secs in best.items():
        got = fetched[(kind, label)]
        share = f" ({100 * got / sizes[kind]:.1f}% of {sizes[kind] / 1e6:,.0f} MB)" if got else ""
        print(f"| {kind} | {label} | {secs:.2f} | {got / 1e6:,.1f} MB{share} |" if "docker" in label or "skopeo" in label
              else f"| {kind} | {label} | {secs:.2f} | - |")
    gz_remote = best[("gzip", "imgquilt audit docker://, cold")]
    gz_copy = best[("gzip", "skopeo copy docker:// -> dir:")]
    zc_local = best[("zstd:chunked", "imgquilt audit oci: (local), cold")]
    gz_local = best[("gzip", "imgquilt audit oci: (local), cold")]
    zc_share = fetched[("zstd:chunked", "imgquilt audit docker://, cold")] / sizes["zstd:chunked"]
    print()
    print(f"gzip cold registry audit / skopeo copy:        {gz_remote / gz_copy:.2f}x  goal <= 1: "
          f"{'met' if gz_remote <= gz_copy else 'NOT met'}")
    print(f"zstd:chunked local cold audit / gzip local:    {zc_local / gz_local:.2f}x  goal <= 0.25: "
          f"{'met' if zc_local <= 0.25 * gz_local else 'NOT met'}")
    print(f"zstd:chunked cold registry audit fetched:      {100 * zc_share:.2f}% of the image  goal < 5%: "
          f"{'met' if zc_share < 0.05 else 'NOT met'}")
    if not estargz:
        print("eStargz: not measured (containerd and ctr-remote, as root, make it)")
    if args.json:
        print(json.dumps({"sizes": sizes, "rows": [{"format": k, "step": l, "seconds": round(s, 3),
                                                    "registry_bytes": fetched[(k, l)]} for (k, l), s in best.items()]},
                         indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
