#!/usr/bin/env python3
"""Benchmark `imgquilt apply --layer` on a layered image of real files, against its floor and the
baseline a user would script. Not a test: run it by hand (see bench/README.md).

    python3 bench/bench_apply.py [--workdir /tmp/imgquilt-bench] [--reuse] [--json]

1. builds an OCI image (>= 1 GB) from directories of this machine: one large layer of system
   libraries, /usr/share, the Python standard library, /etc; gzip layers (bench/build_image.py);
2. writes a queue of patches against real files spread over those layers, plus one new file;
3. times, in this one run:
   - the floor: decompressing every layer to nowhere with isal, the fastest gzip here: its C gzip
     reader and its `igzip.open`, the faster of the two being the floor (and `gzip -dc` for reference);
   - the real CLI, `python3 -m imgquilt apply --image oci:IMG --layer fix.tar.gz`, in a process of
     its own (start-up and imports included, bytecode cached as an install has it), without
     imgquilt's cache and with the cache of verified blobs it keeps in the queue's .imgquilt/;
   - the baseline: `umoci unpack` + `patch -p1` for each patch + `umoci repack`;
   and prints them side by side with ratios. The floor and the two apply runs take turns, --repeat
   rounds (default 5), and the best time of each is reported, since the machine may be busy with
   other work; taking turns keeps a drift in its speed from favouring one step. The files the baseline
   patched are checked against the hashes imgquilt reported, so both did the same work.
The page cache is warm for every step (the image was just built): the figures compare CPU and
I/O paths, not cold disks.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))

from build_image import BuiltImage, LayerPlan, build_image  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

LAYERS = (
    LayerPlan("system-libs", ("usr/lib/x86_64-linux-gnu", "usr/lib/jvm", "usr/lib/llvm-14", "usr/lib/gcc")),
    LayerPlan("share", ("usr/share",)),
    LayerPlan("python", ("usr/lib/python3.11", "usr/lib/python3")),
    LayerPlan("etc", ("etc",)),
)
# preferred targets per layer; the first regular text files that exist are used
TARGETS = {
    "python": ["usr/lib/python3.11/textwrap.py", "usr/lib/python3.11/json/encoder.py", "usr/lib/python3.11/shlex.py"],
    "system-libs": ["usr/lib/x86_64-linux-gnu/pkgconfig/zlib.pc", "usr/lib/x86_64-linux-gnu/pkgconfig/expat.pc"],
    "share": ["usr/share/common-licenses/Apache-2.0", "usr/share/common-licenses/MIT"],
    "etc": ["etc/debian_version", "etc/hostname", "etc/os-release"],
}
PER_LAYER = {"python": 2, "system-libs": 1, "share": 1, "etc": 0}
NEW_FILE = "usr/local/bin/imgquilt-bench-hello"


@dataclass
class Timing:
    label: str
    seconds: float
    note: str = ""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def timed(label: str, fn, note: str = "", *, repeat: int = 1, setup=None) -> Timing:
    """The best of `repeat` runs (the machine may be shared: the minimum is the least noisy)."""
    best = float("inf")
    for _ in range(repeat):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return Timing(label, best, note if repeat == 1 else (note + "; " if note else "") + f"best of {repeat}")


def interleaved(steps: list[tuple[str, object, object, str]], repeat: int) -> list[Timing]:
    """The best of `repeat` rounds of each (label, fn, setup, note), the steps taking turns in every
    round: a machine whose speed drifts (other jobs) then weighs on all steps alike."""
    best = {label: float("inf") for label, *_ in steps}
    for round_ in range(repeat):
        for label, fn, setup, _ in steps:
            say(f"timing ({round_ + 1}/{repeat}): {label}")
            if setup:
                setup()
            t0 = time.perf_counter()
            fn()
            best[label] = min(best[label], time.perf_counter() - t0)
    tail = f"best of {repeat}, interleaved"
    return [Timing(label, best[label], f"{note}; {tail}" if note else tail) for label, _, _, note in steps]


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout.decode(errors='replace')}\n{p.stderr.decode(errors='replace')}")
    return p


# --- the queue --------------------------------------------------------------------------------
def _usable(root: Path, rel: str) -> bytes | None:
    """The file's bytes when it is a regular UTF-8 text file reached without symlinks."""
    p = root
    for part in rel.split("/"):
        p = p / part
        if p.is_symlink():
            return None
    if not p.is_file():
        return None
    data = p.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data if data.endswith(b"\n") and data.count(b"\n") >= 3 else None


def pick_targets(root: Path, built: BuiltImage) -> list[tuple[str, str, bytes]]:
    """(layer, path, bytes) of the files to patch, spread over the layers that were built."""
    out = []
    names = {l.name for l in built.layers}
    for layer, candidates in TARGETS.items():
        if layer not in names:
            continue
        found = [(layer, c, d) for c in candidates if (d := _usable(root, c)) is not None]
        out.extend(found[: PER_LAYER[layer]])
    return out


def write_queue(queue: Path, targets: list[tuple[str, str, bytes]]) -> list[str]:
    """One patch per target (a line at the top and at the end), and one adding a new file."""
    (queue / "patches").mkdir(parents=True)
    names = []
    for i, (layer, path, old) in enumerate(targets, start=1):
        mark = "//" if path.endswith((".c", ".h")) else "#"
        new = f"{mark} imgquilt-bench: patched ({layer} layer)\n".encode() + old + f"{mark} imgquilt-bench: end\n".encode()
        name = f"{i:04d}-{Path(path).name.replace('.', '-')}.patch"
        header = Header(f"Description: bench patch of {path}\nAuthor: imgquilt bench <bench@example.org>\n\n".encode())
        (queue / "patches" / name).write_bytes(build_patch(name, header, [make_section(path, old, new)]).raw)
        names.append(name)
    name = f"{len(targets) + 1:04d}-new-tool.patch"
    body = b"#!/bin/sh\necho 'hello from a patched image'\n"
    header = Header(b"Description: bench: add a small tool\n\n")
    (queue / "patches" / name).write_bytes(build_patch(name, header, [make_section(NEW_FILE, None, body, 0o755)]).raw)
    names.append(name)
    (queue / "series").write_text("".join(n + "\n" for n in names))
    return names


# --- the steps --------------------------------------------------------------------------------
def imgquilt(queue: Path, pycache: Path, *args: str) -> dict:
    """The real CLI, `python3 -m imgquilt ...`, as installed: with its bytecode cached (an install
    compiles it; this environment may set PYTHONDONTWRITEBYTECODE, which would add the compile of
    every module to every run)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "tool") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    p = sh(sys.executable, "-m", "imgquilt", "--queue", str(queue), "--json", *args, env=env)
    return json.loads(p.stdout)


def decompress_isal(blobs: list[Path]) -> None:
    """isal's C gzip reader (multi-member, CRC-checked), 4 MiB reads: the fastest gzip here."""
    from isal.isal_zlib import _GzipReader

    for b in blobs:
        with open(b, "rb", buffering=0) as raw:
            reader = _GzipReader(raw, 4 << 20)
            while reader.read(4 << 20):
                pass


def decompress_igzip(blobs: list[Path]) -> None:
    """isal's file API (the same reader behind an io.BufferedReader)."""
    from isal import igzip

    for b in blobs:
        with igzip.open(b, "rb") as f:
            while f.read(4 << 20):
                pass


def decompress_gzip(blobs: list[Path]) -> None:
    for b in blobs:
        with open(b, "rb") as f:
            subprocess.run(["gzip", "-dc"], stdin=f, stdout=subprocess.DEVNULL, check=True)


def check_same_result(rootfs: Path, files: list[dict]) -> list[str]:
    """Files where the baseline's rootfs differs from what imgquilt reported."""
    bad = []
    for f in files:
        if f["resolved"].startswith("var/lib/imgquilt/"):
            continue
        p = rootfs / f["resolved"]
        got = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "absent"
        if got != f["final_sha256"]:
            bad.append(f["resolved"])
    return bad


def fmt_size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def _goal(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(built: BuiltImage, patches: list[str], rows: list[Timing], floor: float, first: float, second: float,
           baseline_s: float, agree: bool) -> str:
    largest = max(built.layers, key=lambda l: l.tar_size)
    lines = [
        f"image    {built.ref}",
        f"         {len(built.layers)} layers: {fmt_size(built.tar_size)} of tar, {fmt_size(built.size)} gzip; "
        f"largest '{largest.name}' {fmt_size(largest.tar_size)} tar / {fmt_size(largest.size)} gzip",
        f"queue    {len(patches)} patches: {', '.join(patches)}",
        "",
        f"{'step':<52}{'seconds':>9}{'x floor':>10}",
        "-" * 71,
    ]
    for r in rows:
        ratio = f"{r.seconds / floor:.2f}x" if floor else "-"
        lines.append(f"{r.label:<52}{r.seconds:>9.2f}{ratio:>10}" + (f"   {r.note}" if r.note else ""))
    lines += [
        "-" * 71,
        f"{'':<34}{'no cache':>10}{'cache':>10}",
        f"{'imgquilt apply / floor':<34}{first / floor:>9.2f}x{second / floor:>9.2f}x"
        f"   goal <= 1.5x: {_goal(max(first, second) <= 1.5 * floor)}",
    ]
    if baseline_s == baseline_s:  # not NaN: the baseline ran
        lines.append(f"{'baseline / imgquilt apply':<34}{baseline_s / first:>9.1f}x{baseline_s / second:>9.1f}x"
                     f"   goal >= 10x: {_goal(baseline_s >= 10 * max(first, second))}")
    else:
        lines.append(f"{'baseline / imgquilt apply':<34}{'-':>10}{'-':>10}   (--skip-baseline)")
    lines.append(f"baseline and imgquilt patched the same bytes: {'yes' if agree else 'NO'}"
                 if baseline_s == baseline_s else "baseline not run: results not cross-checked")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench"))
    ap.add_argument("--root", type=Path, default=Path("/"), help="where the layer directories are taken from")
    ap.add_argument("--reuse", action="store_true", help="reuse an image built by an earlier run in --workdir")
    ap.add_argument("--min-gb", type=float, default=1.0, help="refuse an image smaller than this (uncompressed)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run umoci unpack/patch/repack")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the floor and apply runs; the best is reported")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args(argv)

    work = args.workdir
    image_dir = work / "image"
    saved = work / "image.json"
    if args.reuse and saved.exists() and image_dir.exists():
        from build_image import BuiltLayer

        doc = json.loads(saved.read_text())
        built = BuiltImage(image_dir, doc["tag"], doc["manifest_digest"],
                           tuple(BuiltLayer(**{**l, "blob": Path(l["blob"]), "paths": tuple(l["paths"])}) for l in doc["layers"]))
        say(f"reusing {built.ref}")
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        t0 = time.perf_counter()
        built = build_image(image_dir, list(LAYERS), root=args.root, progress=say)
        say(f"built {built.ref} in {time.perf_counter() - t0:.0f}s")
        saved.write_text(json.dumps({"tag": built.tag, "manifest_digest": built.manifest_digest,
                                     "layers": [{**l.__dict__, "blob": str(l.blob)} for l in built.layers]}))
    if built.tar_size < args.min_gb * 1e9:
        raise SystemExit(f"the image holds only {fmt_size(built.tar_size)}; add directories to LAYERS or lower --min-gb")

    queue = work / "queue"
    shutil.rmtree(queue, ignore_errors=True)
    queue.mkdir()
    targets = pick_targets(args.root, built)
    patches = write_queue(queue, targets)
    say(f"queue: {len(patches)} patches in {queue}")

    blobs = [l.blob for l in built.layers]
    pycache = work / "pycache"
    rows: list[Timing] = []
    say("timing: decompress (gzip -dc)")
    gzip_dc = timed("decompress every layer, gzip -dc", lambda: decompress_gzip(blobs))
    say("timing: imgquilt lock")
    lock = timed("imgquilt lock", lambda: imgquilt(queue, pycache, "lock", "--image", built.ref), "pins image and targets")
    out = work / "fix.tar.gz"
    result: dict = {}

    def apply() -> None:
        result.update(imgquilt(queue, pycache, "apply", "--image", built.ref, "--layer", str(out)))

    def no_cache() -> None:
        shutil.rmtree(queue / ".imgquilt", ignore_errors=True)

    # the floor and imgquilt take turns, so that both are measured on the machine as it is then
    c_reader, igzip_open, first, second = interleaved([
        ("decompress every layer, isal C gzip reader", lambda: decompress_isal(blobs), None, ""),
        ("decompress every layer, isal igzip.open", lambda: decompress_igzip(blobs), None, ""),
        ("imgquilt apply --layer (no imgquilt cache)", apply, no_cache, ""),
        ("imgquilt apply --layer (cache of verified blobs)", apply, None, ""),
    ], args.repeat)
    floor = min(c_reader, igzip_open, key=lambda t: t.seconds)  # the faster isal way is the floor
    floor.note = "the floor; " + floor.note
    rows += [c_reader, igzip_open, gzip_dc, lock, first, second]

    agree = True
    baseline_s = float("nan")
    if not args.skip_baseline:
        base = work / "baseline"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        sh("cp", "-al", str(image_dir), str(base / "image"))  # repack writes into the layout: not into ours
        bundle = base / "bundle"
        say("timing: umoci unpack")
        unpack = timed("umoci unpack", lambda: sh("umoci", "unpack", "--image", f"{base / 'image'}:{built.tag}", str(bundle)))
        say("timing: patch -p1")
        patch = timed(f"patch -p1 ({len(patches)} patches)", lambda: [
            sh("patch", "-p1", "-s", "-d", str(bundle / "rootfs"), "-i", str(queue / "patches" / n)) for n in patches])
        say("timing: umoci repack")
        repack = timed("umoci repack", lambda: sh("umoci", "repack", "--image", f"{base / 'image'}:{built.tag}", str(bundle)))
        baseline_s = unpack.seconds + patch.seconds + repack.seconds
        rows += [unpack, patch, repack, Timing("baseline: unpack + patch + repack", baseline_s)]
        agree = not check_same_result(bundle / "rootfs", result["files"])
        shutil.rmtree(base, ignore_errors=True)

    text = report(built, patches, rows, floor.seconds, first.seconds, second.seconds, baseline_s, agree)
    print(text)
    if args.json:
        print(json.dumps({
            "image": {"ref": built.ref, "layers": len(built.layers), "tar_bytes": built.tar_size, "gzip_bytes": built.size},
            "patches": patches,
            "seconds": {r.label: round(r.seconds, 3) for r in rows},
            "imgquilt_vs_floor": {"no_cache": round(first.seconds / floor.seconds, 3),
                                  "cache": round(second.seconds / floor.seconds, 3)},
            "baseline_vs_imgquilt": None if args.skip_baseline else {
                "no_cache": round(baseline_s / first.seconds, 2), "cache": round(baseline_s / second.seconds, 2)},
            "same_result": agree,
        }, indent=2))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
