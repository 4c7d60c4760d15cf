"""`imgquilt boot` on the vLLM-sized image (issue 36's benchmark line): cold and warm `boot` side by
side with a cold `apply --layer` of the same queue, the probes' own time measured apart. Not a test:
a script whose figures go in docs/performance.md.

    python3 bench/bench_boot_vllm.py [--vllm /tmp/imgquilt-vllm] [--workdir /tmp/imgquilt-bench-bootvllm] [--repeat 2]
        [--baseline /work/main/tool] [--fresh] [--json]

The image is bench/build_vllm.py's (read only: its blobs are hard-linked, never changed). Its base
layer holds this machine's standard library but no interpreter, so a variant is built beside it in
WORKDIR: the same three layers and a fourth with this machine's /usr/bin/python3.11, its
lib-dynload and every shared library they link against (tests/support/pyroot.py's way), with
`PYTHONPATH=/usr/local/lib/python3.12/site-packages` in the image's Env (the wheels were unpacked for
3.12; the pure-Python ones import on 3.11). The queue: six patches, one `.py` file each: five pure
dependencies (packaging, idna, h11, filelock, cachetools: they boot) and vllm/envs.py (vllm's
`__init__` imports torch, which the image lacks: it fails on the base too, "cannot tell", so both of
its probes run). The Python checks are on (the default). Every run is a process of its own,
interleaved, best of --repeat:

- `apply cold`: `apply --image REF --layer OUT` with an empty shared cache;
- `boot cold`: `boot --image REF --format json` with an empty shared cache (the base filesystem is
  unpacked into it);
- `boot warm`: the same again (the tree is in the cache);
- `floor`: the same four layer blobs inflated by isal (the inflater imgquilt uses; `python -m
  isal.igzip -d -c BLOB`) piped into GNU tar (C) unpacking them into an empty directory, one after
  the other (`tar -x --no-same-owner -C DIR`, no whiteouts, no hashing): reading the layers and
  writing their files without Python, the floor under a cold boot's unpack. (GNU `tar -xzf` is no
  floor: it inflates with single-threaded zlib, several times slower than isal.)
- with `--baseline TOOL` (another checkout's `tool/` directory, e.g. /work/main/tool): `boot cold
  (baseline)`, the cold boot of that tool, in the same rounds.

The probes' own time is the report's `sandbox_seconds` (the wall time of every sandboxed process)
and `sandbox_cpu_seconds` (their CPU): on a shared machine the CPU column is the steadier one.
The goal: boot cold - probes <= 1.5 x apply cold; boot warm - probes <= 0.5 s.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO / "tool"), str(HERE), str(REPO / "tests")]

from build_image import MEDIA_LAYER, LayerPlan, _json, _sha, build_layer  # noqa: E402
from inner_loop import Run, run_child  # noqa: E402

SITE = "usr/local/lib/python3.12/site-packages"
PATCHED = ["packaging/version.py", "idna/core.py", "h11/_util.py", "filelock/asyncio.py", "cachetools/__init__.py", "vllm/envs.py"]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def variant(vllm: Path, work: Path) -> str:
    """bench/build_vllm.py's image with an interpreter layer on top (see the module docstring)."""
    layout = work / "image"
    if (layout / "index.json").is_file():
        return f"oci:{layout}:vllm-py"
    from support.pyroot import debian_root

    src = vllm / "image"
    staging = work / "python-root"
    shutil.rmtree(staging, ignore_errors=True)
    debian_root(staging)
    shutil.rmtree(layout, ignore_errors=True)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for blob in (src / "blobs" / "sha256").iterdir():
        os.link(blob, blobs / blob.name)  # the source's blobs, never written
    index = json.loads((src / "index.json").read_text())
    manifest = json.loads((src / "blobs" / "sha256" / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    config = json.loads((src / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_bytes())
    keep = ("usr/bin", "usr/lib/x86_64-linux-gnu", "lib", "lib64", "usr/lib64", "usr/lib/python3.11/lib-dynload", "tmp", "root", "dev", "proc")
    layer = build_layer(staging, LayerPlan("python3.11", tuple(p for p in keep if (staging / p).exists())), blobs, level=3)
    assert layer is not None
    config["config"]["Env"] = ["PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH=/{SITE}"]
    config["rootfs"]["diff_ids"].append(layer.diff_id)
    config["history"].append({"created_by": "bench layer python3.11"})
    cfg = _json(config)
    (blobs / _sha(cfg).split(":", 1)[1]).write_bytes(cfg)
    manifest["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(cfg), "size": len(cfg)}
    manifest["layers"].append({"mediaType": MEDIA_LAYER, "digest": layer.digest, "size": layer.size})
    man = _json(manifest)
    (blobs / _sha(man).split(":", 1)[1]).write_bytes(man)
    idx = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _sha(man),
                                               "size": len(man), "annotations": {"org.opencontainers.image.ref.name": "vllm-py"}}]}
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_bytes(_json(idx))
    shutil.rmtree(staging, ignore_errors=True)
    say(f"python layer: {layer.tar_size / 1e6:.0f} MB tar")
    return f"oci:{layout}:vllm-py"


def make_queue(vllm: Path, work: Path) -> Path:
    from imgquilt.queue.patchfile import Header, build_patch, make_section

    q = work / "queue"
    shutil.rmtree(q, ignore_errors=True)
    (q / "patches").mkdir(parents=True)
    names = []
    for i, rel in enumerate(PATCHED, 1):
        stage = vllm / ("stage-vllm" if rel.startswith("vllm/") else "stage-deps")
        path = f"{SITE}/{rel}"
        old = (stage / path).read_bytes()
        new = old + f"\n\n_IMGQUILT_BENCH_{i} = {i}\n".encode()
        name = f"{i:04d}-{rel.split('/')[0]}.patch"
        patch = build_patch(name, Header(b"Description: bench\n\n"), [make_section(path, old, new)])
        (q / "patches" / name).write_bytes(patch.raw)
        names.append(name)
    (q / "series").write_text("".join(n + "\n" for n in names))
    return q


def untar(ref: str, work: Path, dest: Path | None = None) -> Run:
    layout = Path(ref.split(":")[1])
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    keep = dest is not None
    dest = dest or work / "untar"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    isal = f"{sys.executable} -m isal.igzip -d -c"
    script = " && ".join(f"{isal} {blobs / d['digest'].split(':')[1]} | tar -x --no-same-owner -C {dest}"
                         for d in manifest["layers"])
    script = f"set -o pipefail 2>/dev/null; {script}"
    run = run_child(["bash", "-c", script], dict(os.environ))
    if run.code:
        raise SystemExit(f"the floor's unpack failed:\n{run.err.decode()[-3000:]}")
    if not keep:
        shutil.rmtree(dest, ignore_errors=True)
    return run


def fill(tree: Path, dest: Path) -> Run:
    """dd writing as many bytes as `tree` holds into a new file `dest` (see the module docstring)."""
    size = int(run_child(["du", "-sb", str(tree)], dict(os.environ)).out.split()[0])
    run = run_child(["dd", "if=/dev/zero", f"of={dest}", "bs=4M", f"count={-(-size // (4 << 20))}"], dict(os.environ))
    if run.code:
        raise SystemExit(f"dd failed:\n{run.err.decode()[-3000:]}")
    say(f"page-cache fill: {size / 1e9:.2f} GB")
    return run


_CREATES = '''
import os, sys
n, dest = int(sys.argv[1]), sys.argv[2]
flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
os.mkdir(dest)
for d in range(0, n, 100):
    sub = os.path.join(dest, str(d))
    os.mkdir(sub)
    dfd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(min(100, n - d)):
        os.close(os.open(str(i), flags, 0o644, dir_fd=dfd))
    os.close(dfd)
'''


def creates(tree: Path, dest: Path) -> Run:
    """As many empty files as `tree` has entries, made in `dest` (see the module docstring)."""
    count = sum(len(dirs) + len(files) for _, dirs, files in os.walk(tree))
    run = run_child([sys.executable, "-c", _CREATES, str(count), str(dest)], dict(os.environ))
    if run.code:
        raise SystemExit(f"the creation loop failed:\n{run.err.decode()[-3000:]}")
    say(f"inode creation: {count} entries")
    return run


def imgquilt(env: dict[str, str], *args: str, ok: tuple[int, ...] = (0,)) -> Run:
    r = run_child([sys.executable, "-m", "imgquilt", *args], env)
    if r.code not in ok:
        raise SystemExit(f"imgquilt {' '.join(args)} exited {r.code}:\n{r.err.decode()[-3000:]}")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", type=Path, default=Path("/tmp/imgquilt-vllm"))
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-bootvllm"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another checkout's tool/ directory: its cold boot too, in the same rounds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fresh", action="store_true",
                    help="each cold run and floor unpacks into a new directory, none removed until the end and the "
                         "last removal 70 s before the first run (ext4 without a journal makes every new inode "
                         "skip the inodes freed in the last minute, or five while their table block is dirty: "
                         "removing a 57,000-file tree before each cold run measures that, not the unpack; a "
                         "first boot on a machine creates its files on a quiet filesystem)")
    args = ap.parse_args(argv)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    ref = variant(args.vllm, work)
    q = make_queue(args.vllm, work)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "tool")
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("IMGQUILT_NO_CACHE", None)
    cache = work / "shared-cache"
    env["IMGQUILT_CACHE_DIR"] = str(cache)
    rows: dict[str, list[tuple[Run, float, dict]]] = {}
    loads: dict[str, list[float]] = {}
    fresh = work / "fresh"
    if args.fresh:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        os.sync()
        say("--fresh: 70 s for the removed inodes to age ...")
        time.sleep(70)
    for r in range(args.repeat):
        keys = ["apply cold", "boot cold", "boot warm", "floor"] + (["page-cache fill", "inode creation"] if args.fresh else [])
        if args.baseline:
            keys.insert(2, "boot cold (baseline)")
        for key in keys:
            if "cold" in key:
                if args.fresh:
                    cache = fresh / f"{r}-{key.replace(' ', '-').strip('()')}"
                    env["IMGQUILT_CACHE_DIR"] = str(cache)
                else:
                    shutil.rmtree(cache, ignore_errors=True)
                shutil.rmtree(q / ".imgquilt", ignore_errors=True)
            os.sync()
            if key == "inode creation":
                run, probes, doc = creates(fresh / f"{r}-boot-cold", fresh / f"{r}-creates"), 0.0, {}
            elif key == "page-cache fill":
                run, probes, doc = fill(fresh / f"{r}-boot-cold", fresh / f"{r}-fill"), 0.0, {}
            elif key == "floor":
                run, probes, doc = untar(ref, work, fresh / f"{r}-floor" if args.fresh else None), 0.0, {}
            elif key.startswith("apply"):
                out = work / "out.tar"
                out.unlink(missing_ok=True)
                run = imgquilt(env, "--queue", str(q), "apply", "--image", ref, "--layer", str(out))
                probes, doc = 0.0, {}
            else:
                run_env = env if "baseline" not in key else {**env, "PYTHONPATH": str(args.baseline)}
                if key == "boot warm" and args.fresh:
                    run_env = {**env, "IMGQUILT_CACHE_DIR": str(fresh / f"{r}-boot-cold")}
                run = imgquilt(run_env, "--queue", str(q), "boot", "--image", ref, "--format", "json")
                doc = json.loads(run.out)
                probes = float(doc["sandbox_seconds"])
                doc["_cpu_without_probes"] = run.cpu_seconds - float(doc["sandbox_cpu_seconds"])
            rows.setdefault(key, []).append((run, probes, doc))
            loads.setdefault(key, []).append(os.getloadavg()[0])
            cpu = doc.get("_cpu_without_probes", run.cpu_seconds)
            say(f"round {r + 1}: {key}: {run.seconds:.2f} s wall ({probes:.2f} s probes), {run.cpu_seconds:.2f} s CPU "
                f"({cpu:.2f} s without the probes), load {os.getloadavg()[0]:.1f}")
    if args.fresh:
        shutil.rmtree(fresh, ignore_errors=True)
    best = {k: min(v, key=lambda x: x[0].seconds - x[1]) for k, v in rows.items()}
    load = {k: loads[k][rows[k].index(best[k])] for k in rows}  # the 1-minute load when the best run ended
    apply_s = best["apply cold"][0].seconds
    apply_cpu = best["apply cold"][0].cpu_seconds
    out = []
    for k, (run, probes, doc) in best.items():
        cpu = doc.get("_cpu_without_probes", run.cpu_seconds)
        out.append({"run": k, "seconds": round(run.seconds, 2), "probe_seconds": round(probes, 2),
                    "without_probes": round(run.seconds - probes, 2), "cpu_seconds": round(run.cpu_seconds, 2),
                    "cpu_without_probes": round(cpu, 2),
                    "vs_apply_cold": round((run.seconds - probes) / apply_s, 2),
                    "cpu_vs_apply_cold": round(cpu / apply_cpu, 2), "load": round(load[k], 1)})
    verdicts = {p["name"]: p["verdict"] for p in best["boot warm"][2].get("patches", [])}
    print(f"{'run':21} {'wall s':>7} {'probes s':>9} {'w/o probes':>11} {'CPU s':>7} {'CPU w/o probes':>15} "
          f"{'wall vs apply':>14} {'CPU vs apply':>13} {'load':>5}")
    for row in out:
        print(f"{row['run']:21} {row['seconds']:7.2f} {row['probe_seconds']:9.2f} {row['without_probes']:11.2f} "
              f"{row['cpu_seconds']:7.2f} {row['cpu_without_probes']:15.2f} {row['vs_apply_cold']:13.2f}x "
              f"{row['cpu_vs_apply_cold']:12.2f}x {row['load']:5.1f}")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
    print(f"probes: {len(best['boot warm'][2].get('probes', []))}; load average {os.getloadavg()}")
    if args.json:
        print(json.dumps({"image": ref, "rows": out, "verdicts": verdicts,
                          "queue_sha": hashlib.sha256((q / "series").read_bytes()).hexdigest()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
