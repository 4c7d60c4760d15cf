#!/usr/bin/env python3
"""Benchmark `imgquilt apply --layer` and `audit` on a layered image of real files, cold and warm,
against the floor and the baseline a user would script, and the inner loop (issue 11). Not a test:
run it by hand (see bench/README.md).

    python3 bench/bench_apply.py [--workdir /tmp/imgquilt-bench] [--reuse] [--repeat N] [--json]

1. builds an OCI image (>= 1 GB) from directories of this machine: one large layer of system
   libraries, /usr/share, the Python standard library, /etc; gzip layers (bench/build_image.py);
2. writes a queue of patches against real files spread over those layers, plus one new file;
3. times, in this one run, the steps taking turns for --repeat rounds (best of each reported):
   - the floor: decompressing every layer to nowhere with isal (its C gzip reader and `igzip.open`;
     the faster is the floor);
   - the real CLI, `python3 -m imgquilt apply --image oci:IMG --layer fix.tar.gz` and `audit`, each
     in a process of its own (start-up included, bytecode cached as an install has it): cold (empty
     shared cache, no queue state) and warm (the shared cache as the cold run left it); the warm
     and cold outputs are compared byte for byte, and each child's peak RSS is taken from wait4;
   - the baseline: `umoci unpack` + `patch -p1` for each patch + `umoci repack` (--skip-baseline);
4. the inner loop (bench/inner_loop.py): a 400-patch queue replayed from this repository's git
   history, applied in place with and without the Python check; `top` and the other commands that
   need no image on 50 of those patches (best of 10); a 1,000-patch series over 1,000 files verified.
The page cache is warm for every step (the image was just built): the figures compare CPU and
I/O paths, not cold disks. The shared cache lives in --workdir, never in the user's.
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
from inner_loop import Run, best, build_history_queue, build_synthetic, run_child, verify_in_memory  # noqa: E402
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
    round: a machine whose speed drifts (other jobs) then weighs on all steps alike. Dirty pages are
    written back before each step, so an in-place apply's fsyncs wait for its own writes only."""
    best = {label: float("inf") for label, *_ in steps}
    for round_ in range(repeat):
        for label, fn, setup, _ in steps:
            say(f"timing ({round_ + 1}/{repeat}): {label}")
            if setup:
                setup()
            os.sync()  # the writeback of earlier steps and setups is not billed to this one's fsyncs
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
RSS: dict[str, int] = {}  # label -> peak RSS (KB) of the imgquilt child, the highest seen
CPU: dict[str, float] = {}  # label -> CPU seconds (user + system) of the imgquilt child, the least seen


def cli_env(pycache: Path, cache: Path, tool: Path = REPO / "tool") -> dict[str, str]:
    """The real CLI as installed: bytecode cached (an install compiles it; this environment may set
    PYTHONDONTWRITEBYTECODE, which would add the compile of every module to every run), and the
    shared cache in the benchmark's own directory, never the user's. `tool`: whose imgquilt package
    (this checkout's, or --other-tool's)."""
    env = dict(os.environ, PYTHONPATH=str(tool) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONPYCACHEPREFIX=str(pycache), IMGQUILT_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("IMGQUILT_NO_CACHE", None)
    return env


def imgquilt(env: dict[str, str], *args: str, label: str = "", ok: tuple[int, ...] = (0,), cwd: Path | None = None) -> Run:
    """`python3 -m imgquilt ...` in a process of its own; its peak RSS is kept under `label`."""
    r = run_child([sys.executable, "-m", "imgquilt", *args], env, cwd)
    if r.code not in ok:
        raise SystemExit(f"imgquilt {' '.join(args)} exited {r.code}:\n{r.out.decode(errors='replace')}\n{r.err.decode(errors='replace')}")
    if label:
        RSS[label] = max(RSS.get(label, 0), r.max_rss_kb)
        CPU[label] = min(CPU.get(label, float("inf")), r.cpu_seconds)
    return r


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


def report(built: BuiltImage, patches: list[str], rows: list[Timing], floor: float, a_cold: float, a_warm: float,
           u_cold: float, u_warm: float, baseline_s: float, agree: bool, same_bytes: bool, loop: dict) -> str:
    largest = max(built.layers, key=lambda l: l.tar_size)
    lines = [
        f"image    {built.ref}",
        f"         {len(built.layers)} layers: {fmt_size(built.tar_size)} of tar, {fmt_size(built.size)} gzip; "
        f"largest '{largest.name}' {fmt_size(largest.tar_size)} tar / {fmt_size(largest.size)} gzip",
        f"queue    {len(patches)} patches: {', '.join(patches)}",
        "",
        f"{'step':<64}{'seconds':>9}{'x floor':>10}",
        "-" * 83,
    ]
    for r in rows:
        ratio = f"{r.seconds / floor:.2f}x" if floor else "-"
        lines.append(f"{r.label:<64}{r.seconds:>9.2f}{ratio:>10}" + (f"   {r.note}" if r.note else ""))
    lines += ["-" * 83, "inner loop", "-" * 83]
    for r in loop["rows"]:
        lines.append(f"{r.label:<64}{r.seconds:>9.3f}" + (f"   {r.note}" if r.note else ""))
    by = {r.label: r.seconds for r in loop["rows"]}
    h = loop["history"]
    lines += [
        "-" * 83,
        f"cold apply / floor                {a_cold / floor:>6.2f}x   goal <= 1.3x: {_goal(a_cold <= 1.3 * floor)}",
        f"warm apply                        {a_warm:>6.2f}s   goal < 0.5 s and >= 8x faster than cold ({a_cold / a_warm:.1f}x): "
        f"{_goal(a_warm < 0.5 and a_cold >= 8 * a_warm)}",
        f"warm audit                        {u_warm:>6.2f}s   goal < 0.5 s and >= 8x faster than cold ({u_cold / u_warm:.1f}x): "
        f"{_goal(u_warm < 0.5 and u_cold >= 8 * u_warm)}",
        f"warm and cold gave the same bytes (layer, audit JSON): {'yes' if same_bytes else 'NO'}",
        *([] if not h else [
            f"Python check / --no-python-check  {h['check_cold_vs_no_check']:>6.2f}x no cached findings, "
            f"{h['check_warm_vs_no_check']:.2f}x cached   goal <= 1.3x: {_goal(h['check_warm_vs_no_check'] <= 1.3)} (cached), "
            f"{_goal(h['check_cold_vs_no_check'] <= 1.3)} (none cached)",
            f"imgquilt top                      {by['imgquilt top (50-patch queue)']:>6.3f}s  goal < 0.12 s: "
            f"{_goal(by['imgquilt top (50-patch queue)'] < 0.12)}",
            f"1,000-patch series in memory      {by['1,000 patches over 1,000 files: verify in memory']:>6.3f}s  goal < 1 s: "
            f"{_goal(by['1,000 patches over 1,000 files: verify in memory'] < 1)}",
        ]),
        "peak RSS (KB)                     " + ", ".join(f"{k}: {v:,}" for k, v in sorted(RSS.items()) if k.startswith("apply"))
        + f"   goal < 150 MB: {_goal(all(v < 150_000 for k, v in RSS.items() if k.startswith('apply')))}",
        "                                  " + ", ".join(f"{k}: {v:,}" for k, v in sorted(RSS.items()) if k.startswith("audit")),
        "CPU seconds of the child, least seen (user + system; the machine's load does not inflate them as it does wall time):",
        *(f"  {k:<40}{v:>7.3f}" for k, v in CPU.items()),
    ]
    if baseline_s == baseline_s:  # not NaN: the baseline ran
        lines.append(f"baseline / cold apply             {baseline_s / a_cold:>6.1f}x")
        lines.append(f"baseline and imgquilt patched the same bytes: {'yes' if agree else 'NO'}")
    else:
        lines.append("baseline not run (--skip-baseline): results not cross-checked")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench"))
    ap.add_argument("--root", type=Path, default=Path("/"), help="where the layer directories are taken from")
    ap.add_argument("--reuse", action="store_true", help="reuse an image built by an earlier run in --workdir")
    ap.add_argument("--min-gb", type=float, default=1.0, help="refuse an image smaller than this (uncompressed)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run umoci unpack/patch/repack")
    ap.add_argument("--skip-gzip", action="store_true", help="do not time gzip -dc (slow; for reference only)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of the floor and apply runs; the best is reported")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument("--other-tool", type=Path, metavar="DIR",
                    help="another checkout's tool/ directory: its warm apply and warm audit are timed too, taking "
                         "turns with this checkout's (a before/after comparison on a shared machine)")
    ap.add_argument("--skip-inner-loop", action="store_true", help="do not run the inner loop (bench/inner_loop.py)")
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
    cache = work / "shared-cache"
    env = cli_env(pycache, cache)
    rows: list[Timing] = []
    if not args.skip_gzip:
        say("timing: decompress (gzip -dc)")
        rows.append(timed("decompress every layer, gzip -dc", lambda: decompress_gzip(blobs)))
    say("timing: imgquilt lock")
    lock = timed("imgquilt lock", lambda: imgquilt(env, "--queue", str(queue), "lock", "--image", built.ref),
                 "pins image and targets")
    outs = {"cold": work / "fix-cold.tar.gz", "warm": work / "fix-warm.tar.gz"}
    results: dict[str, dict] = {}
    audits: dict[str, bytes] = {}

    def apply(kind: str):
        def go() -> None:
            r = imgquilt(env, "--queue", str(queue), "--json", "apply", "--image", built.ref, "--layer", str(outs[kind]),
                         label=f"apply {kind}")
            results[kind] = json.loads(r.out)
        return go

    def audit(kind: str):
        def go() -> None:
            r = imgquilt(env, "--queue", str(queue), "--json", "audit", "--image", built.ref, label=f"audit {kind}", ok=(0, 5))
            audits[kind] = r.out
        return go

    def cold() -> None:  # no shared cache, no queue state: the image is read as if for the first time
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(queue / ".imgquilt", ignore_errors=True)

    other: list[tuple[str, object, object, str]] = []
    if args.other_tool is not None:  # its own cache and queue copy, warmed once before the timing
        other_env = cli_env(work / "pycache-other", work / "shared-cache-other", args.other_tool.resolve())
        other_queue = work / "queue-other"
        shutil.rmtree(other_queue, ignore_errors=True)
        shutil.copytree(queue, other_queue)
        shutil.rmtree(work / "shared-cache-other", ignore_errors=True)

        def other_run(*more: str, ok: tuple[int, ...] = (0,), label: str = "") -> None:
            imgquilt(other_env, "--queue", str(other_queue), "--json", *more, label=label, ok=ok)

        other_run("lock", "--image", built.ref)
        other_run("apply", "--image", built.ref, "--layer", str(work / "fix-other.tar.gz"))
        other_run("audit", "--image", built.ref, ok=(0, 5))
        other = [
            (f"other tool ({args.other_tool}): apply --layer, warm",
             lambda: other_run("apply", "--image", built.ref, "--layer", str(work / "fix-other.tar.gz"), label="apply other warm"),
             None, ""),
            (f"other tool ({args.other_tool}): audit, warm",
             lambda: other_run("audit", "--image", built.ref, ok=(0, 5), label="audit other warm"), None, ""),
        ]

    # the floor and imgquilt take turns, so that all are measured on the machine as it is then
    c_reader, igzip_open, a_cold, a_warm, u_cold, u_warm, *others = interleaved([
        ("decompress every layer, isal C gzip reader", lambda: decompress_isal(blobs), None, ""),
        ("decompress every layer, isal igzip.open", lambda: decompress_igzip(blobs), None, ""),
        ("imgquilt apply --layer, cold (empty cache)", apply("cold"), cold, ""),
        ("imgquilt apply --layer, warm", apply("warm"), None, ""),
        ("imgquilt audit, cold (empty cache)", audit("cold"), cold, ""),
        ("imgquilt audit, warm", audit("warm"), None, ""),
        *other,
    ], args.repeat)
    floor = min(c_reader, igzip_open, key=lambda t: t.seconds)  # the faster isal way is the floor
    floor.note = "the floor; " + floor.note
    rows = [c_reader, igzip_open, *rows, lock, a_cold, a_warm, u_cold, u_warm, *others]
    same_bytes = outs["cold"].read_bytes() == outs["warm"].read_bytes() and audits["cold"] == audits["warm"]

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
        agree = not check_same_result(bundle / "rootfs", results["cold"]["files"])
        shutil.rmtree(base, ignore_errors=True)

    loop = ({"rows": [], "history": {}} if args.skip_inner_loop else inner_loop(work, env, args.repeat))
    text = report(built, patches, rows, floor.seconds, a_cold.seconds, a_warm.seconds, u_cold.seconds, u_warm.seconds,
                  baseline_s, agree, same_bytes, loop)
    print(text)
    if args.json:
        print(json.dumps({
            "image": {"ref": built.ref, "layers": len(built.layers), "tar_bytes": built.tar_size, "gzip_bytes": built.size},
            "patches": patches,
            "seconds": {r.label: round(r.seconds, 3) for r in rows + loop["rows"]},
            "peak_rss_kb": RSS,
            "cpu_seconds": {k: round(v, 3) for k, v in CPU.items()},
            "apply_cold_vs_floor": round(a_cold.seconds / floor.seconds, 3),
            "apply_cold_vs_warm": round(a_cold.seconds / a_warm.seconds, 1),
            "audit_cold_vs_warm": round(u_cold.seconds / u_warm.seconds, 1),
            "history_queue": loop["history"],
            "baseline_vs_imgquilt": None if args.skip_baseline else round(baseline_s / a_cold.seconds, 2),
            "same_result": agree,
            "same_bytes_warm_and_cold": same_bytes,
        }, indent=2))
    return 0 if agree and same_bytes else 1


def inner_loop(work: Path, env: dict[str, str], repeat: int) -> dict:
    """The history queue with and without the Python check, start-up, and a large synthetic series."""
    rows: list[Timing] = []
    hist = build_history_queue(REPO, work / "history")
    say(f"history queue: {hist.patches} patches over {hist.files} files from {hist.steps} steps of this repository")
    target = work / "history" / "target"
    pycheck_cache = Path(env["IMGQUILT_CACHE_DIR"]) / "pycheck"

    def fresh_root() -> None:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(hist.rootfs, target, symlinks=True)

    def apply_in_place(*extra: str):
        return lambda: imgquilt(env, "--queue", str(hist.queue), "apply", "--root", str(target), *extra)

    def no_findings() -> None:
        fresh_root()
        shutil.rmtree(pycheck_cache, ignore_errors=True)

    no_check, check_cold, check_warm = interleaved([
        (f"history queue ({hist.patches} patches) apply --root, --no-python-check", apply_in_place("--no-python-check"),
         fresh_root, ""),
        ("history queue apply --root, Python check, no cached findings", apply_in_place(), no_findings, ""),
        ("history queue apply --root, Python check, findings cached", apply_in_place(), fresh_root, ""),
    ], repeat)
    rows += [no_check, check_cold, check_warm]

    # start-up: the commands that need no image, on the first 50 patches of the history queue, pushed
    small = work / "history" / "q50"
    shutil.rmtree(small, ignore_errors=True)
    shutil.copytree(hist.queue, small)
    names = (small / "series").read_text().split()
    (small / "series").write_text("".join(n + "\n" for n in names[:50]))
    for n in names[50:]:
        (small / "patches" / n).unlink()
    imgquilt(env, "--queue", str(small), "push", "-a", "--image", f"rootfs:{hist.rootfs}")
    for label, cmd in [("imgquilt --version", ["--version"]), ("imgquilt top (50-patch queue)", ["top"]),
                       ("imgquilt applied", ["applied"]), ("imgquilt series", ["series"]),
                       ("imgquilt check (no image)", ["check"]), ("imgquilt header", ["header"])]:
        say(f"timing (best of 10): {label}")
        seconds = best(lambda: imgquilt(env, "--queue", str(small), *cmd, ok=(0, 2, 6), label=label).seconds, 10)
        rows.append(Timing(label, seconds, "best of 10"))

    synth_q, synth_root = build_synthetic(work / "synthetic")
    say("timing: 1,000-patch synthetic series")
    rows.append(Timing("1,000 patches over 1,000 files: verify in memory", best(lambda: verify_in_memory(synth_q, synth_root), 3),
                       "in process: load the queue, read, apply, verify; best of 3"))
    rows.append(Timing("1,000 patches: imgquilt apply --image rootfs:DIR (verify only)",
                       best(lambda: imgquilt(env, "--queue", str(synth_q), "apply", "--image", f"rootfs:{synth_root}").seconds, 3),
                       "the CLI, start-up included; best of 3"))
    return {"rows": rows, "history": {"patches": hist.patches, "files": hist.files, "steps": hist.steps,
                                      "check_cold_vs_no_check": round(check_cold.seconds / no_check.seconds, 2),
                                      "check_warm_vs_no_check": round(check_warm.seconds / no_check.seconds, 2)}}


if __name__ == "__main__":
    sys.exit(main())
