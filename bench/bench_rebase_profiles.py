#!/usr/bin/env python3
"""A bump of two deployments on the vLLM 0.10.1-sized image (issue 34), side by side in one run:

- one:  `rebase --profile cuda --image v2` of a queue that declares only cuda (the one-profile engine);
- both: `rebase --profile all --image cuda=v2 --image rocm=v2r` of the same queue with a rocm profile too.

The images are bench/build_vllm.py's (read only; the variants share its blobs by hard link and add one
layer each, made with `umoci raw add-layer`): v1 = the image, v1r = v1 + a vendor file, v2 = v1 + a
layer where upstream appended a line to each patched module, v2r = v1r + the same layer. The queue: N
patches, each changing the first lines of a vllm module, shared by both profiles, so every patch is
carried by a 3-way merge (with the Python checks on). The ratio both/one is what carrying a second
deployment costs: the shared patches are merged once, the second image is read and checked.

    python3 bench/bench_rebase_profiles.py [--workdir /tmp/imgquilt-vllm] [--patches 20] [--repeat 3]
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

from bench_apply import cli_env  # noqa: E402
from build_vllm import SITE  # noqa: E402
from inner_loop import run_child  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402


def _variant(base: Path, dest: Path, files: dict[str, bytes]) -> None:
    """dest: base's layout (blobs hard-linked, index copied) plus one layer holding `files`."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(base / "blobs"), str(dest / "blobs")], check=True)
    for name in ("index.json", "oci-layout"):
        shutil.copy2(base / name, dest / name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    layer = dest.parent / f".{dest.name}.tar"
    layer.write_bytes(buf.getvalue())
    tag = next(m["annotations"]["org.opencontainers.image.ref.name"] for m in __import__("json").loads(
        (dest / "index.json").read_text())["manifests"])
    subprocess.run(["umoci", "raw", "add-layer", "--image", f"{dest}:{tag}", str(layer)], check=True, capture_output=True)
    layer.unlink()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/imgquilt-bench-rebase-profiles"))
    ap.add_argument("--patches", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    image = args.workdir / "image"
    stage = args.workdir / "stage-vllm"
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    mods = sorted(p for p in (stage / SITE / "vllm").rglob("*.py") if p.stat().st_size > 2000)[: args.patches]
    rel = {str(p.relative_to(stage)): p.read_bytes() for p in mods}
    upstream = {p: d + b"\n# upstream 0.10.2\n" for p, d in rel.items()}
    vendor = {"opt/rocm/VERSION": b"6.1\n"}
    tag = "vllm"
    _variant(image, out / "v1r", vendor)
    _variant(image, out / "v2", upstream)
    _variant(image, out / "v2r", {**vendor, **upstream})
    refs = {"v1": f"oci:{image}:{tag}", "v1r": f"oci:{out / 'v1r'}:{tag}", "v2": f"oci:{out / 'v2'}:{tag}", "v2r": f"oci:{out / 'v2r'}:{tag}"}
    env = cli_env(out / "pycache", out / "cache")
    env["HOME"] = str(out / "home")
    py = [sys.executable, "-m", "imgquilt"]

    def queue(name: str, profiles: list[tuple[str, str]]) -> Path:
        q = out / name
        shutil.rmtree(q, ignore_errors=True)
        (q / "patches").mkdir(parents=True)
        series = []
        for i, (path, data) in enumerate(sorted(rel.items()), 1):
            new = data.replace(b"\n", b"\n# carried fix\n", 1)
            patch = build_patch(f"{i:04d}.patch", Header(b"Description: fix\n\n"), [make_section(path, data, new)])
            (q / "patches" / f"{i:04d}.patch").write_bytes(patch.raw)
            series.append(f"{i:04d}.patch")
        (q / "series").write_text("\n".join(series) + "\n")
        for prof, ref in profiles:
            r = subprocess.run([*py, "lock", "--profile", prof, "--image", ref], cwd=q, env=env, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        return q

    one = queue("q-one", [("cuda", refs["v1"])])
    both = queue("q-both", [("cuda", refs["v1"]), ("rocm", refs["v1r"])])
    runs = {
        "one": (one, ["rebase", "--profile", "cuda", "--image", refs["v2"]]),
        "both": (both, ["rebase", "--profile", "all", "--image", f"cuda={refs['v2']}", "--image", f"rocm={refs['v2r']}"]),
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for name, (q, cmd) in runs.items():
            work = out / f"w-{name}"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(q, work, symlinks=True)
            r = run_child([*py, *cmd], env, cwd=work)
            assert r.code == 0, r.err.decode()[-2000:]
            times[name].append((r.seconds, r.cpu_seconds))
    load = os.getloadavg()
    for name, t in times.items():
        walls, cpus = [w for w, _ in t], [c for _, c in t]
        print(f"{name:5} wall min {min(walls):6.2f} s  median {statistics.median(walls):6.2f} s   "
              f"cpu min {min(cpus):6.2f} s  median {statistics.median(cpus):6.2f} s")
    ratio = statistics.median(c for _, c in times["both"]) / statistics.median(c for _, c in times["one"])
    print(f"both/one (median CPU): {ratio:.2f}x for {len(rel)} shared patches; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
