#!/usr/bin/env python3
"""A large synthetic image (issue 28: 12 GB of tar, 300k files, 8 gzip layers by default): the isal
floor, `imgquilt audit` cold and warm, each a process of its own, CPU and peak RSS beside wall time.
Not a test: run it by hand (docs/performance.md).

    python3 bench/bench_synthetic.py [--workdir /tmp/imgquilt-bench-synthetic] [--gb 12] [--files 300000]
                                     [--layers 8] [--repeat 3] [--reuse] [--clean] [--json]

The files are text-like bytes (slices of a pseudo-random word stream: gzip takes them to about a
third), sizes spread from a few hundred bytes to a few MB, in directories of 500. The queue patches
one file of the lowest layer and adds a new file, so a cold read goes through every layer. The
image is written straight into an OCI layout (tar streamed into isal gzip, both digests on the way):
it needs about GB/3 of disk; --clean removes it at the end.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import shutil
import statistics
import sys
import tarfile
from pathlib import Path

from isal import isal_zlib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))

from bench_apply import cli_env  # noqa: E402
from build_image import MEDIA_LAYER, _json, _sha  # noqa: E402
from inner_loop import run_child  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

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


def word_stream(size: int, seed: int = 12) -> bytes:
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randrange(2, 12))) for _ in range(5000)]
    out = bytearray()
    while len(out) < size:
        line = b" ".join(rng.choice(words) for _ in range(rng.randrange(3, 14)))
        out += line + b"\n"
    return bytes(out[:size])


class _Sink:
    def __init__(self, f) -> None:
        self.f = f
        self.comp = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
        self.tar_hash, self.blob_hash = hashlib.sha256(), hashlib.sha256()
        self.tar_size = self.size = 0

    def write(self, data: bytes) -> int:
        self.tar_hash.update(data)
        self.tar_size += len(data)
        out = self.comp.compress(data)
        self.blob_hash.update(out)
        self.size += len(out)
        self.f.write(out)
        return len(data)

    def tell(self) -> int:
        return self.tar_size

    def close(self) -> None:
        out = self.comp.flush()
        self.blob_hash.update(out)
        self.size += len(out)
        self.f.write(out)


def build(work: Path, gb: float, files: int, layers: int) -> tuple[str, dict]:
    layout = work / "image"
    meta = work / "image.json"
    if (layout / "index.json").is_file() and meta.is_file():
        return f"oci:{layout}:synthetic", json.loads(meta.read_text())
    shutil.rmtree(layout, ignore_errors=True)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    stream = word_stream(64 << 20)
    rng = random.Random(28)
    total = int(gb * 1e9)
    mean = total / files
    built = []
    per_layer = files // layers
    first_file = None
    for k in range(layers):
        say(f"layer {k + 1}/{layers}: {per_layer} files ...")
        tmp = blobs / f".layer{k}"
        with open(tmp, "wb") as f:
            sink = _Sink(f)
            tar = tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT)
            made_dirs: set[str] = set()
            for i in range(per_layer):
                d = f"srv/layer{k}/d{i // 500:04d}"
                if d not in made_dirs:
                    for part in ("srv", f"srv/layer{k}", d):
                        if part not in made_dirs:
                            ti = tarfile.TarInfo(part)
                            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                            tar.addfile(ti)
                            made_dirs.add(part)
                size = min(int(rng.expovariate(1 / mean)), 8 << 20)
                at = rng.randrange(0, len(stream) - size - 1)
                data = stream[at:at + size]
                ti = tarfile.TarInfo(f"{d}/f{i:06d}.txt")
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
                tar.addfile(ti, io.BytesIO(data))
                if first_file is None and len(data) > 64:
                    first_file = (ti.name, data)
            tar.close()
            sink.close()
        digest = "sha256:" + sink.blob_hash.hexdigest()
        os.replace(tmp, blobs / digest.split(":")[1])
        built.append({"digest": digest, "diff_id": "sha256:" + sink.tar_hash.hexdigest(), "size": sink.size,
                      "tar_size": sink.tar_size})
        say(f"  {sink.tar_size / 1e9:.2f} GB tar -> {sink.size / 1e9:.2f} GB gzip")
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [l["diff_id"] for l in built]}}
    cfg = _json(config)
    (blobs / _sha(cfg).split(":")[1]).write_bytes(cfg)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(cfg), "size": len(cfg)},
                "layers": [{"mediaType": MEDIA_LAYER, "digest": l["digest"], "size": l["size"]} for l in built]}
    man = _json(manifest)
    (blobs / _sha(man).split(":")[1]).write_bytes(man)
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_bytes(_json({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _sha(man), "size": len(man),
         "annotations": {"org.opencontainers.image.ref.name": "synthetic"}}]}))
    assert first_file is not None
    info = {"layers": built, "files": per_layer * layers, "target": first_file[0],
            "target_sha256": hashlib.sha256(first_file[1]).hexdigest()}
    (work / "target.bin").write_bytes(first_file[1])
    meta.write_text(json.dumps(info))
    return f"oci:{layout}:synthetic", info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-synthetic"))
    ap.add_argument("--gb", type=float, default=12.0)
    ap.add_argument("--files", type=int, default=300_000)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    ref, info = build(work, args.gb, args.files, args.layers)
    blobs = [work / "image/blobs/sha256" / l["digest"].split(":")[1] for l in info["layers"]]
    say(f"image {ref}: {sum(l['tar_size'] for l in info['layers']) / 1e9:.2f} GB tar, "
        f"{sum(l['size'] for l in info['layers']) / 1e9:.2f} GB gzip, {info['files']} files, {len(blobs)} layers")
    q = work / "queue"
    if not (q / "series").is_file():
        (q / "patches").mkdir(parents=True)
        old = (work / "target.bin").read_bytes()
        sections = [make_section(info["target"], old, old + b"patched\n"), make_section("srv/new.txt", None, b"new\n")]
        (q / "patches/0001-bench.patch").write_bytes(build_patch("0001-bench.patch", Header(b"Description: bench\n\n"), sections).raw)
        (q / "series").write_text("0001-bench.patch\n")
    env = cli_env(work / "pycache", work / "shared-cache")
    cache = Path(env["IMGQUILT_CACHE_DIR"])
    audit = [sys.executable, "-m", "imgquilt", "audit", "--image", ref, "--expect", "pending"]

    def cold():
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(q / ".imgquilt", ignore_errors=True)
        os.sync()
        return run_child(audit, env, q)

    def warm():
        return run_child(audit, env, q)

    steps = [("floor: isal decompress of every layer", lambda: run_child([sys.executable, "-c", FLOOR, *map(str, blobs)], env)),
             ("audit, cold", cold), ("audit, warm", warm)]
    res: dict[str, list] = {}
    loads = [os.getloadavg()[0]]
    for r in range(args.repeat):
        for label, fn in steps:
            say(f"round {r + 1}/{args.repeat}: {label}")
            got = fn()
            if got.code:
                raise SystemExit(got.err.decode(errors="replace")[-2000:])
            res.setdefault(label, []).append((got.seconds, got.cpu_seconds, got.max_rss_kb / 1024))
            loads.append(os.getloadavg()[0])
    print(f"{'step':40} {'wall min':>9} {'wall med':>9} {'CPU min':>8} {'CPU med':>8} {'peak RSS MB':>12}")
    summary = {}
    for label, runs in res.items():
        w, c, m = zip(*runs)
        summary[label] = {"wall_min": min(w), "wall_median": statistics.median(w), "cpu_min": min(c),
                          "cpu_median": statistics.median(c), "rss_mb": max(m)}
        s = summary[label]
        print(f"{label:40} {s['wall_min']:9.2f} {s['wall_median']:9.2f} {s['cpu_min']:8.2f} {s['cpu_median']:8.2f} {s['rss_mb']:12.1f}")
    f, c = summary["floor: isal decompress of every layer"], summary["audit, cold"]
    print(f"cold audit / floor: wall {c['wall_min'] / f['wall_min']:.2f}x, CPU {c['cpu_min'] / f['cpu_min']:.2f}x; "
          f"cold peak RSS {c['rss_mb']:.0f} MB for {info['files']} files")
    print(f"load average (1 min) during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores, shared)")
    if args.json:
        print(json.dumps({"image": info, "steps": summary, "load": [min(loads), max(loads)]}, indent=2))
    if args.clean:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
