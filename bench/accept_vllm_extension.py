#!/usr/bin/env python3
"""Issue 35's acceptance on the real vLLM extension: a fix to vLLM's `platforms/cuda.py` that adds an
import, on an image holding the real `vllm/_C.abi3.so` (357 MB), through the quilt workflow.

    python3 bench/accept_vllm_extension.py [--workdir /tmp/imgquilt-vllm] [--out /tmp/imgquilt-vllm-accept]
                                          [--tool OTHER/tool] [--json]

The image is bench/build_vllm.py's (built first when missing), made from the vllm-0.10.1 PyPI wheel, so
it holds the real extension module and the real cuda.py, which does `import vllm._C`. The run uses the
default IMGQUILT_SPOOL_AT (the extension is spooled), a shared cache of its own under --out, and runs
the flow twice: cold (empty cache, new queue) and warm (the cache the cold run left, another new queue):

  init, new, add --image; edit cuda.py four ways and `refresh` each:
    - `from vllm.utils import cdiv` (the fix of the issue): refreshed, exit 0 (cold: the check reads
      what cuda.py imports, `vllm._C` among them);
    - `from vllm.utils import cdivv` (a typo): a finding or "cannot tell" (vllm/utils writes sys.modules);
    - `from vllm._C import cdiv`: "cannot tell" naming vllm._C (a native extension: never read);
    - the fix again: refreshed, exit 0, the patch holds it;
  lock --image, apply --layer, check --image, check --strict;
  pop -a; rebase --image NEXT (an image with one more layer whose cuda.py changed the line above the fix):
    a conflict (exit 4); the file resolved in .imgquilt/work/; rebase --continue (the Python checks on
    NEXT, the extension included), then check --image NEXT.

It asserts: no command exits 1 (or says "internal error"), every exit code is the one expected, the
check says "cannot tell" naming vllm._C for the native import, the fix lands in the patch. The whole
transcript (command, exit code, output) goes to --out/transcript.txt; a summary with wall times, each
command's own bytes read and written (its /proc/self/io at exit), the largest file the shared cache's
files/ holds after each flow, and the load average is printed. `--tool` runs another checkout's tool/ (e.g. one before the fix: it exits 1).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_apply import cli_env  # noqa: E402
from build_image import MEDIA_LAYER, LayerPlan, _json, _sha, build_layer  # noqa: E402
from build_vllm import SITE, build  # noqa: E402
from inner_loop import run_child  # noqa: E402

CUDA = f"{SITE}/vllm/platforms/cuda.py"
LINE = b"from vllm.utils import cuda_device_count_stateless, import_pynvml\n"
UPSTREAM = b"from vllm.utils import cuda_device_count_stateless, import_pynvml, round_up\n"  # NEXT's change
EDITS = {  # the line the edit adds under LINE
    "typo": b"from vllm.utils import cdivv\n",
    "native": b"from vllm._C import cdiv\n",
    "fix": b"from vllm.utils import cdiv\n",
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def next_image(layout: Path, tag: str, out: Path) -> str:
    """The image plus a layer whose cuda.py changed LINE (an upstream bump under the fix). The base
    layout is only read: its blobs are hard-linked (or copied) into a layout of our own."""
    dest = out / "image-next"
    if (dest / "index.json").is_file():
        return f"oci:{dest}:next"
    shutil.rmtree(dest, ignore_errors=True)
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    index = json.loads((layout / "index.json").read_text())
    (m,) = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
    src = layout / "blobs" / "sha256"
    manifest = json.loads((src / m["digest"].split(":")[1]).read_text())
    config = json.loads((src / manifest["config"]["digest"].split(":")[1]).read_text())
    for layer in manifest["layers"]:
        name = layer["digest"].split(":")[1]
        try:
            os.link(src / name, blobs / name)
        except OSError:
            shutil.copyfile(src / name, blobs / name)
    stage = out / "stage-next"
    shutil.rmtree(stage, ignore_errors=True)
    cuda = stage / CUDA
    cuda.parent.mkdir(parents=True)
    base = read_base(layout, tag)
    assert base.count(LINE) == 1, "cuda.py of vllm 0.10.1 has the line the bump changes"
    cuda.write_bytes(base.replace(LINE, UPSTREAM))
    built = build_layer(stage, LayerPlan("next", ("usr",)), blobs, level=3)
    assert built is not None
    config["rootfs"]["diff_ids"].append(built.diff_id)
    config["history"].append({"created_by": "accept: cuda.py imports round_up"})
    cfg = _json(config)
    (blobs / _sha(cfg).split(":", 1)[1]).write_bytes(cfg)
    manifest["config"] = {**manifest["config"], "digest": _sha(cfg), "size": len(cfg)}
    manifest["layers"].append({"mediaType": MEDIA_LAYER, "digest": built.digest, "size": built.size})
    man = _json(manifest)
    (blobs / _sha(man).split(":", 1)[1]).write_bytes(man)
    (dest / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (dest / "index.json").write_bytes(_json({"schemaVersion": 2, "manifests": [{
        "mediaType": manifest["mediaType"], "digest": _sha(man), "size": len(man),
        "annotations": {"org.opencontainers.image.ref.name": "next"}}]}))
    shutil.rmtree(stage)
    return f"oci:{dest}:next"


@functools.cache
def read_base(layout: Path, tag: str) -> bytes:
    """cuda.py as the image holds it (read once: a walk of every layer)."""
    from bench_vllm import read_in_image

    return read_in_image(layout, tag, CUDA)


# the child's own I/O (/proc/self/io at its exit, every thread's included): rchar/wchar are the bytes its
# read/write calls moved (a spool file written counts in wchar), read_bytes/write_bytes what reached storage
_IO_CHILD = """import atexit, os, runpy, sys
def _io():
    with open("/proc/self/io") as f, open(os.environ["ACCEPT_IO_OUT"], "w") as o:
        o.write(f.read())
atexit.register(_io)
sys.argv = ["imgquilt", *sys.argv[1:]]
runpy.run_module("imgquilt", run_name="__main__", alter_sys=True)
"""


def _child_io(path: Path) -> dict[str, int]:
    try:
        pairs = (line.split(":") for line in path.read_text().splitlines())
        return {k.strip(): int(v) for k, v in pairs if k.strip() in ("rchar", "wchar", "read_bytes", "write_bytes")}
    except (OSError, ValueError):
        return {}


def largest_file(top: Path) -> int:
    """The size of the largest file under `top` (the shared cache's files/: a stored extension shows)."""
    return max((p.stat().st_size for p in top.rglob("*") if p.is_file() and not p.is_symlink()), default=0)


class Flow:
    def __init__(self, env: dict[str, str], log, label: str) -> None:
        self.env, self.log, self.label = env, log, label
        self.steps: list[dict[str, object]] = []

    def run(self, cwd: Path, *args: str, want: int, says: tuple[str, ...] = ()) -> str:
        io_out = cwd.parent / f".io-{self.label}"
        io_out.unlink(missing_ok=True)
        r = run_child([sys.executable, "-c", _IO_CHILD, *args], {**self.env, "ACCEPT_IO_OUT": str(io_out)}, cwd)
        io = _child_io(io_out)
        out, err = r.out.decode(errors="replace"), r.err.decode(errors="replace")
        text = out + err
        self.log.write(f"$ imgquilt {' '.join(args)}   # {self.label}, {r.seconds:.1f} s\n{out}{err}[exit {r.code}]\n\n")
        self.log.flush()
        self.steps.append({"flow": self.label, "command": "imgquilt " + " ".join(args), "exit": r.code,
                           "seconds": round(r.seconds, 2), "cpu_seconds": round(r.cpu_seconds, 2), "io": io})
        say(f"  [{self.label}] imgquilt {' '.join(a if len(a) < 60 else '...' + a[-40:] for a in args)}: "
            f"exit {r.code} in {r.seconds:.1f} s ({r.cpu_seconds:.1f} s CPU; read {io.get('rchar', 0) / 1e6:.0f} MB, "
            f"wrote {io.get('wchar', 0) / 1e6:.0f} MB)")
        problems = []
        if r.code == 1 or "internal error" in text:
            problems.append("exit 1 (internal error)")
        if r.code != want:
            problems.append(f"exit {r.code}, expected {want}")
        problems += [f"output lacks {s!r}" for s in says if s not in text]
        if problems:
            raise SystemExit(f"FAILED [{self.label}] imgquilt {' '.join(args)}: {'; '.join(problems)}\n{text}")
        return text


def edit(q: Path, line: bytes | None, *, upstream: bool = False) -> None:
    work = q / ".imgquilt/work" / CUDA
    data = work.read_bytes()
    head = UPSTREAM if upstream else LINE
    at = data.index(head) + len(head)
    rest = data[at:]
    for extra in EDITS.values():  # drop an earlier edit's line
        if rest.startswith(extra):
            rest = rest[len(extra):]
    work.write_bytes(data[:at] + (line or b"") + rest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/imgquilt-vllm-accept"))
    ap.add_argument("--tool", type=Path, help="run another checkout's tool/ directory (e.g. before the fix)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    image = build(args.workdir)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    nxt = next_image(args.workdir / "image", "vllm", out)
    cache = out / "shared-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = cli_env(out / "pycache", cache, (args.tool or REPO / "tool").resolve())
    env.pop("IMGQUILT_SPOOL_AT", None)  # the default: the 357 MB extension is spooled
    load = os.getloadavg()
    t0 = time.perf_counter()
    steps: list[dict[str, object]] = []
    with open(out / "transcript.txt", "w") as log:
        for label in ("cold", "warm"):
            f = Flow(env, log, label)
            try:
                run_flow(f, out / f"queue-{label}", image, nxt, out / f"fix-{label}.tar")
            finally:
                steps += f.steps
            files = largest_file(cache / "files") if (cache / "files").is_dir() else 0
            say(f"  [{label}] the largest file in the shared cache's files/: {files / 1e6:.1f} MB")
            steps.append({"flow": label, "largest_cached_file": files})
    wall = time.perf_counter() - t0
    said = {"image": image, "next": nxt, "steps": steps, "wall_seconds": round(wall, 1),
            "load_average": [round(x, 2) for x in (*load, *os.getloadavg())]}
    say(f"all {sum('command' in s for s in steps)} commands ended with the expected exit code, none with 1; {wall:.0f} s in all; "
        f"load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end; transcript: {out / 'transcript.txt'}")
    if args.json:
        print(json.dumps(said, indent=2))
    return 0


def run_flow(f: Flow, q: Path, image: str, nxt: str, layer: Path) -> None:
    shutil.rmtree(q, ignore_errors=True)
    q.mkdir(parents=True)
    f.run(q, "init", want=0)
    f.run(q, "new", "0001-cuda-cdiv.patch", want=0)
    f.run(q, "add", "--image", image, CUDA, want=0)
    base = (q / ".imgquilt/work" / CUDA).read_bytes()
    edit(q, EDITS["fix"])  # the fix first: cold, the check reads the modules cuda.py imports
    text = f.run(q, "refresh", want=0, says=("Refreshed patch 0001-cuda-cdiv.patch",))
    assert "cannot tell" not in text and "ImportError" not in text, text
    edit(q, EDITS["typo"])
    # vllm/utils/__init__.py writes sys.modules: "cannot tell" whether it has cdivv (exit 0), or, were it
    # readable, the ImportError (exit 3): either is the check's end
    f.run(q, "refresh", want=0, says=("cannot tell: whether vllm.utils has 'cdivv'",))
    edit(q, EDITS["native"])
    f.run(q, "refresh", want=0, says=("cannot tell: whether vllm._C has 'cdiv'", "vllm/_C.abi3.so: a native extension"))
    edit(q, EDITS["fix"])
    text = f.run(q, "refresh", want=0, says=("Refreshed patch 0001-cuda-cdiv.patch",))
    assert "cannot tell" not in text and "ImportError" not in text, text
    assert b"+from vllm.utils import cdiv\n" in (q / "patches/0001-cuda-cdiv.patch").read_bytes()
    f.run(q, "lock", "--image", image, want=0)
    f.run(q, "apply", "--layer", str(layer), want=0, says=("ok  0001-cuda-cdiv.patch",))
    f.run(q, "check", "--image", image, want=0)
    f.run(q, "check", "--strict", want=0)
    f.run(q, "pop", "-a", want=0)
    f.run(q, "rebase", "--image", nxt, want=4, says=("conflict",))
    work = q / ".imgquilt/work" / CUDA
    merged = work.read_bytes()
    assert b"<<<<<<<" in merged, "the conflict's markers are in the work tree"
    work.write_bytes(base.replace(LINE, UPSTREAM + EDITS["fix"]))
    f.run(q, "rebase", "--continue", want=0)
    assert b"+from vllm.utils import cdiv\n" in (q / "patches/0001-cuda-cdiv.patch").read_bytes()
    f.run(q, "check", "--image", nxt, want=0)
    f.run(q, "check", "--strict", want=0)


if __name__ == "__main__":
    sys.exit(main())
