#!/usr/bin/env python3
"""Seekable layers on the vLLM 0.10.1 image (issue 37, point 4), side by side in one run:

- the image as gzip (bench/build_vllm.py's), as zstd:chunked made by this machine's skopeo
  (`skopeo copy --dest-compress-format zstd:chunked`: Debian's skopeo 1.9 writes a TOC and no
  tar-split, so imgquilt walks the tar stream by range) and as zstd:chunked with a tar-split (each
  layer rewritten by imgquilt's own zstd:chunked writer, which writes the TOC and tar-split as
  containers/storage 1.47+ does; the TOC is checked against the tar-split, no walk);
- `imgquilt audit` of bench_vllm.py's 3-patch queue (one file in each layer), cold (empty shared cache),
  from the local OCI layout and from Debian's docker-registry on 127.0.0.1, whose access log counts the
  blob bytes fetched (ranges included); `skopeo copy docker:// dir:` of the gzip image for reference.

    python3 bench/bench_vllm_seekable.py [--workdir /tmp/imgquilt-vllm-seekable] [--image /tmp/imgquilt-vllm/image]
        [--repeat 3] [--tool DIR] [--json]

The vLLM image is used read-only; the converted layouts, queue and caches are made in --workdir (kept:
the conversions take minutes). Steps take turns each round; the least wall of --repeat rounds and its
CPU are printed, with the load average (the machine is shared).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
# the physical floor of a cold read of a gzip image: inflating every layer (isal) and hashing its blob
FLOOR = r"""
import hashlib, sys
from isal import igzip
for path in sys.argv[1:]:
    h = hashlib.sha256()
    with open(path, "rb") as raw:
        while chunk := raw.read(4 << 20):
            h.update(chunk)
    with igzip.open(path, "rb") as f:
        while f.read(4 << 20):
            pass
"""
CRC_C = r"""
#include <stdint.h>
#include <stddef.h>
static uint64_t table[256];
void crc64_init(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xD800000000000000ULL : c >> 1;
        table[i] = c;
    }
}
uint64_t crc64_update(uint64_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fast_crc64(work: Path):
    """CRC-64/ISO in C (gcc, ctypes), for converting 2 GB of layers: the writer's Python CRC is for the
    small layers apply writes. Checked against the Python one."""
    so = work / "crc64.so"
    if not so.exists():
        src = work / "crc64.c"
        src.write_text(CRC_C)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.crc64_init()
    lib.crc64_update.restype = ctypes.c_uint64
    lib.crc64_update.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]

    def crc64(chunks) -> bytes:
        crc = 0
        for chunk in chunks:
            b = bytes(chunk)
            crc = lib.crc64_update(crc, b, len(b))
        return crc.to_bytes(8, "big")

    from imgquilt.image.layers.tar_split import crc64_iso

    assert crc64([b"1234", b"56789"]) == crc64_iso([b"123456789"])
    return crc64


def manifest_of(layout: Path, tag: str) -> dict:
    index = json.loads((layout / "index.json").read_text())
    (m,) = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    return json.loads((layout / "blobs/sha256" / m["digest"].split(":")[1]).read_bytes())


def blob_size(layout: Path) -> int:
    return sum(layer["size"] for layer in manifest_of(layout, TAG)["layers"])


def convert_with_tar_split(src: Path, dst: Path, work: Path) -> None:
    """Every layer of `src` (gzip) rewritten by imgquilt's zstd:chunked writer, members' own mtimes
    kept: same tar (so the same diff_ids and config), a TOC and a tar-split each."""
    import hashlib

    from isal import igzip

    from imgquilt.fs.content import SpoolWriter
    from imgquilt.image.sinks.zstd_chunked import zstd_chunked

    if (dst / "index.json").exists():
        return
    crc64 = fast_crc64(work)
    tmp = dst.with_name(dst.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "blobs/sha256").mkdir(parents=True)
    m = manifest_of(src, TAG)

    def put(data) -> str:
        h = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=tmp, delete=False) as f:
            for chunk in (data.chunks() if hasattr(data, "chunks") else (data,)):
                h.update(chunk)
                f.write(chunk)
        digest = h.hexdigest()
        os.replace(f.name, tmp / "blobs/sha256" / digest)
        return "sha256:" + digest

    for i, layer in enumerate(m["layers"]):
        say(f"converting layer {i + 1}/{len(m['layers'])} ({layer['size'] / 1e6:,.0f} MB gzip)")
        spool = SpoolWriter(at=0)
        with igzip.open(src / "blobs/sha256" / layer["digest"].split(":")[1], "rb") as f:
            while chunk := f.read(4 << 20):
                spool.write(chunk)
        tar = spool.finish()
        blob, annotations = zstd_chunked(tar, level=3, mtime=None, crc64=crc64, split_max=1 << 62)
        layer.update(mediaType="application/vnd.oci.image.layer.v1.tar+zstd", digest=put(blob), size=len(blob),
                     annotations=annotations)
    config = (src / "blobs/sha256" / m["config"]["digest"].split(":")[1]).read_bytes()
    assert put(config) == m["config"]["digest"]
    raw = json.dumps(m).encode()
    digest = put(raw)
    (tmp / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (tmp / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": m["mediaType"], "digest": digest, "size": len(raw),
         "annotations": {"org.opencontainers.image.ref.name": TAG}}]}))
    os.replace(tmp, dst)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm-seekable"))
    ap.add_argument("--image", type=Path, default=Path("/tmp/imgquilt-vllm/image"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tool", type=Path, help="run another checkout's tool/ directory (e.g. before this change)")
    ap.add_argument("--baseline", type=Path, help="also run every audit with this checkout's tool/ (side by side)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    gzip = args.image.resolve()
    skopeo_zc = work / "zstd-chunked-skopeo"
    if not (skopeo_zc / "index.json").exists():
        say("skopeo copy --dest-compress-format zstd:chunked (minutes)")
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-compress-format", "zstd:chunked", f"oci:{gzip}:{TAG}",
                        f"oci:{skopeo_zc}:{TAG}"], check=True)
    split_zc = work / "zstd-chunked-tar-split"
    convert_with_tar_split(gzip, split_zc, work)
    layouts = {"gzip": gzip, "zstd:chunked (skopeo 1.9: TOC, walked)": skopeo_zc,
               "zstd:chunked + tar-split": split_zc}
    q = work / "queue"
    write_queue(q, gzip, TAG)
    cache = work / "shared-cache"
    env = cli_env(work / "pycache", cache, args.tool.resolve() if args.tool else REPO / "tool")
    from support.registry_server import start_registry

    shutil.rmtree(work / "registry", ignore_errors=True)
    server = start_registry(work / "registry")
    rows: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    loads = [os.getloadavg()[0]]
    try:
        remote = {}
        for kind, layout in layouts.items():
            remote[kind] = server.ref(f"vllm:{len(remote)}")
            say(f"seeding the registry: {kind}")
            subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{TAG}", remote[kind]],
                           check=True)

        def audit(ref: str, tool_env: dict[str, str] = env):
            def go():
                shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(q / ".imgquilt", ignore_errors=True)
                os.sync()
                return run_child([sys.executable, "-m", "imgquilt", "audit", "--image", ref, "--expect", "pending"], tool_env, q)
            return go

        base_env = cli_env(work / "pycache-base", cache, args.baseline.resolve()) if args.baseline else None

        def skopeo():
            shutil.rmtree(work / "copy", ignore_errors=True)
            os.sync()
            return run_child(["skopeo", "copy", "--quiet", "--src-tls-verify=false", remote["gzip"], f"dir:{work / 'copy'}"],
                             env)

        blobs = [gzip / "blobs/sha256" / layer["digest"].split(":")[1] for layer in manifest_of(gzip, TAG)["layers"]]

        def floor():
            os.sync()
            return run_child([sys.executable, "-c", FLOOR, *map(str, blobs)], env)

        steps = [("gzip", "floor: isal inflate + sha256 of every blob", floor),
                 ("gzip", "skopeo copy docker:// -> dir:", skopeo)]
        for kind, layout in layouts.items():
            steps.append((kind, "audit oci:, cold", audit(f"oci:{layout}:{TAG}")))
            steps.append((kind, "audit docker://, cold", audit(remote[kind])))
            if base_env is not None:
                steps.append((kind, "baseline: audit oci:, cold", audit(f"oci:{layout}:{TAG}", base_env)))
                steps.append((kind, "baseline: audit docker://, cold", audit(remote[kind], base_env)))
        for r in range(args.repeat):
            for kind, label, fn in steps:
                say(f"round {r + 1}/{args.repeat}: {kind}: {label}")
                n = len(server.requests())
                got = fn()
                if got.code != 0:
                    raise SystemExit(f"{kind} {label} exited {got.code}:\n{got.err.decode(errors='replace')[-2000:]}")
                fetched = sum(x.size for x in server.requests()[n:] if x.method == "GET" and "/blobs/" in x.path)
                rows.setdefault((kind, label), []).append((got.seconds, got.cpu_seconds, fetched))
                loads.append(os.getloadavg()[0])
    finally:
        server.stop()
        shutil.rmtree(work / "copy", ignore_errors=True)
    sizes = {kind: blob_size(layout) for kind, layout in layouts.items()}
    print(f"| format | step | wall (best of {args.repeat}) | CPU | blob bytes from the registry |")
    print("|---|---|---|---|---|")
    best = {}
    for (kind, label), runs in rows.items():
        wall, cpu, fetched = min(runs)
        best[(kind, label)] = (wall, cpu, fetched)
        share = f"{fetched / 2**20:,.1f} MiB of {sizes[kind] / 2**20:,.0f} MiB ({100 * fetched / sizes[kind]:.2f}%)" \
            if "docker://" in label or "skopeo" in label else "-"
        print(f"| {kind} | {label} | {wall:.2f} s | {cpu:.2f} s | {share} |")
    print()
    g = best[("gzip", "audit oci:, cold")][0]
    for kind in layouts:
        if kind != "gzip":
            print(f"{kind}: local cold / gzip local cold = {best[(kind, 'audit oci:, cold')][0] / g:.2f}x (goal <= 0.25x); "
                  f"registry bytes {100 * best[(kind, 'audit docker://, cold')][2] / sizes[kind]:.2f}% (goal < 5%)")
    fl = best[("gzip", "floor: isal inflate + sha256 of every blob")][1]
    print(f"gzip: local cold audit CPU / (inflate + sha256) CPU = {best[('gzip', 'audit oci:, cold')][1] / fl:.2f}x (goal <= 1.2x)")
    sk = best[("gzip", "skopeo copy docker:// -> dir:")][0]
    print(f"gzip: cold registry audit / skopeo copy = {best[('gzip', 'audit docker://, cold')][0] / sk:.2f}x (goal <= 1.0x)")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    if args.json:
        print(json.dumps({"sizes": sizes, "best": {f"{k} | {l}": v for (k, l), v in best.items()},
                          "load": [min(loads), max(loads)]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
