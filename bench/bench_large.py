#!/usr/bin/env python3
"""Peak memory of a patch that adds a 1 GiB file (text and binary), issue 28: `check`, `lock`,
`apply --layer`, `apply --output-image`, `audit` of that image and `apply --root`, each a process of
its own (its peak RSS), against the 200 MB goal, and the bytes each writes against GNU `patch -p1` (text) and
`git apply` (binary) on the same patch file. Not a test: run it by hand (bench/README.md).

    python3 bench/bench_large.py [--workdir /tmp/imgquilt-bench-large] [--size-mb 1024] [--reuse]
                                 [--kinds text,binary] [--compare-with OTHER/tool --compare-size-mb 60] [--json]

The text file is real text (this machine's licence texts and Python sources) repeated to the size;
the binary one is pseudo-random (incompressible, as model weights are). Each patch is written as
imgquilt writes one (an `Index:` section with its pins; a `GIT binary patch` literal for the binary),
streamed to disk. `--compare-with` runs the same steps with another checkout's `tool/` directory (the
code before this change) on a smaller file, side by side: that code holds the whole file, so its
peak memory grows with the size.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from build_image import LayerPlan, build_image  # noqa: E402
from inner_loop import run_child  # noqa: E402

MB = 1 << 20
GOAL_MB = 200
GIT_APPLY_MAX = 1023 * MB
TARGET = {"text": "usr/share/big/corpus.txt", "binary": "usr/share/big/weights.bin"}


def say(msg: str) -> None:
    print(msg, flush=True)


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the inputs -----------------------------------------------------------------------------------
def text_seed() -> bytes:
    """Some MiB of real text to repeat (licences, the Python standard library)."""
    parts: list[bytes] = []
    total = 0
    for d in (Path("/usr/share/common-licenses"), Path(sys.prefix) / "lib", Path("/usr/lib/python3")):
        for p in sorted(d.rglob("*")) if d.is_dir() else []:
            if total > 4 * MB:
                break
            if p.is_file() and not p.is_symlink() and p.suffix in ("", ".py", ".txt"):
                try:
                    data = p.read_bytes()
                except OSError:
                    continue
                if b"\0" not in data[:8000] and data.endswith(b"\n"):
                    parts.append(data)
                    total += len(data)
    return b"".join(parts) or b"".join(b"line %d of the fallback text\n" % i for i in range(100000))


def write_content(path: Path, kind: str, size: int) -> tuple[str, int]:
    """The file, streamed to disk; (sha256, line count)."""
    h = hashlib.sha256()
    lines = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        if kind == "text":
            seed = text_seed()
            left = size
            while left > 0:
                piece = seed[:left]
                if len(piece) < len(seed):  # end on a whole line
                    cut = piece.rfind(b"\n") + 1
                    piece = piece[:cut] if cut else piece
                    left = 0
                f.write(piece)
                h.update(piece)
                lines += piece.count(b"\n")
                left -= len(piece)
        else:
            rng = random.Random(28)
            for _ in range(size // MB):
                piece = rng.randbytes(MB)
                f.write(piece)
                h.update(piece)
    return h.hexdigest(), lines


def write_text_patch(content: Path, sha: str, lines: int, rel: str, dest: Path) -> None:
    """A new-file section as imgquilt writes it: `+` before every line, one hunk."""
    with open(dest, "wb") as out, open(content, "rb") as f:
        out.write(b"Description: add a large text file\n\n")
        out.write(f"Index: {rel}\nBase-SHA256: absent\nPatched-SHA256: {sha}\n".encode())
        out.write(f"--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1,{lines} @@\n".encode() if lines != 1 else
                  f"--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1 @@\n".encode())
        tail = b""
        while chunk := f.read(8 * MB):
            chunk = tail + chunk
            cut = chunk.rfind(b"\n") + 1  # whole lines only: the rest starts the next piece
            whole, tail = chunk[:cut], chunk[cut:]
            if whole:
                out.write(b"+" + whole[:-1].replace(b"\n", b"\n+") + b"\n")
        if tail:
            out.write(b"+" + tail + b"\n\\ No newline at end of file\n")


def git_blob_sha1(path: Path) -> str:
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(8 * MB):
            h.update(chunk)
    return h.hexdigest()


def write_binary_patch(content: Path, sha: str, rel: str, dest: Path) -> None:
    """A new-file `GIT binary patch` literal (deflate level 1 here: any level inflates the same), both
    blocks, as imgquilt's render_binary lays them out."""
    size = content.stat().st_size
    with open(dest, "wb") as out, open(content, "rb") as f:
        out.write(b"Description: add a large binary file\n\n")
        out.write(f"Index: {rel}\nBase-SHA256: absent\nPatched-SHA256: {sha}\n".encode())
        out.write(f"diff --git a/{rel} b/{rel}\nnew file mode 100644\n".encode())
        out.write(f"index {'0' * 40}..{git_blob_sha1(content)}\nGIT binary patch\nliteral {size}\n".encode())
        comp = zlib.compressobj(1)
        pending = b""

        def emit(data: bytes, final: bool) -> bytes:
            whole = len(data) - len(data) % 52 if not final else len(data)
            lines = []
            for k in range(0, whole, 52):
                chunk = data[k : k + 52]
                n = len(chunk)
                lines.append(bytes([n + 64 if n <= 26 else n - 26 + 96]) + base64.b85encode(chunk, pad=True) + b"\n")
            out.write(b"".join(lines))
            return data[whole:]

        while chunk := f.read(4 * MB):
            pending = emit(pending + comp.compress(chunk), False)
        emit(pending + comp.flush(), True)
        out.write(b"\nliteral 0\n" + emit_empty() + b"\n")


def emit_empty() -> bytes:
    packed = zlib.compress(b"", 9)
    return bytes([len(packed) + 64]) + base64.b85encode(packed, pad=True) + b"\n"


def reference(kind: str, patch: Path, rel: str, where: Path) -> str:
    """The file GNU patch (text) or git apply (binary) makes of the patch: its sha256."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    if kind == "text":
        subprocess.run(["patch", "-s", "-p1", "-d", str(where), "-i", str(patch)], check=True)
    else:
        subprocess.run(["git", "init", "-q", str(where)], check=True)
        subprocess.run(["git", "apply", "--binary", str(patch)], cwd=where, check=True)
    h = hashlib.sha256()
    with open(where / rel, "rb") as f:
        while chunk := f.read(8 * MB):
            h.update(chunk)
    shutil.rmtree(where, ignore_errors=True)
    return h.hexdigest()


def member_sha(layer: Path, rel: str) -> str | None:
    with tarfile.open(layer, "r:*") as tar:
        for m in tar:
            if m.name == rel:
                f = tar.extractfile(m)
                assert f is not None
                h = hashlib.sha256()
                while chunk := f.read(8 * MB):
                    h.update(chunk)
                return h.hexdigest()
    return None


def file_sha(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MB):
            h.update(chunk)
    return h.hexdigest()


# --- the runs -------------------------------------------------------------------------------------
def child_env(tool: Path, work: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tool), PYTHONPYCACHEPREFIX=str(work / "pycache"),
               IMGQUILT_CACHE_DIR=str(work / "cache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("IMGQUILT_SPOOL_AT", None)
    return env


def steps(kind: str, queue: Path, image_ref: str, base_root: Path, out: Path, env: dict[str, str], rel: str,
          want: str) -> list[dict]:
    """check, lock, apply --layer, --output-image, --root: each run on its own, its peak RSS and output checked."""
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(queue / ".imgquilt", ignore_errors=True)
    (queue / "targets.lock").unlink(missing_ok=True)
    layer = out / "fix.tar.gz"
    image = out / "image"
    root = out / "root"
    plan = [
        ("check", ["check", "--image", image_ref], lambda: True),
        ("lock", ["lock", "--image", image_ref], lambda: (queue / "targets.lock").is_file()),
        ("apply --layer", ["apply", "--no-python-check", "--layer", str(layer)], lambda: member_sha(layer, rel) == want),
        ("apply --output-image", ["apply", "--no-python-check", "--output-image", f"oci:{image}:patched"],
         lambda: _image_layer_sha(image, rel) == want),
        ("audit (of that image)", ["--json", "audit", "--image", f"oci:{image}:patched"], lambda: True),
        ("apply --root", ["apply", "--no-python-check", "--root", str(root)], lambda: file_sha(root / rel) == want),
    ]
    for label, args, check in plan:
        if not label.startswith("audit"):
            shutil.rmtree(image, ignore_errors=True)
            layer.unlink(missing_ok=True)
        if label == "apply --root":
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(base_root, root, symlinks=True)
        r = run_child([sys.executable, "-m", "imgquilt", *args], env, queue)
        ok = r.code == 0 and check()
        rows.append({"kind": kind, "step": label, "wall_s": round(r.seconds, 2), "cpu_s": round(r.cpu_seconds, 2),
                     "peak_rss_mb": round(r.max_rss_kb / 1024, 1), "exit": r.code, "output_ok": ok})
        say(f"  {kind:6} {label:22} {r.seconds:7.1f} s wall {r.cpu_seconds:7.1f} s CPU  peak RSS {r.max_rss_kb / 1024:7.1f} MB"
            f"  {'ok' if ok else 'FAILED: ' + r.err.decode(errors='replace')[-800:]}")
    return rows


def _image_layer_sha(layout: Path, rel: str) -> str | None:
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs/sha256" / index["manifests"][0]["digest"].split(":")[1]).read_text())
    return member_sha(layout / "blobs/sha256" / manifest["layers"][-1]["digest"].split(":")[1], rel)


def prepare(work: Path, kind: str, size: int, reuse: bool) -> tuple[Path, str]:
    """The queue for `kind` (its patch made once), and the file's sha256."""
    rel = TARGET[kind]
    q = work / f"queue-{kind}-{size // MB}m"
    meta = q / "bench.json"
    if reuse and meta.is_file():
        return q, json.loads(meta.read_text())["sha256"]
    shutil.rmtree(q, ignore_errors=True)
    (q / "patches").mkdir(parents=True)
    content = work / f"content-{kind}"
    say(f"writing a {size // MB} MiB {kind} file and its patch ...")
    sha, lines = write_content(content, kind, size)
    name = f"0001-add-{kind}.patch"
    if kind == "text":
        write_text_patch(content, sha, lines, rel, q / "patches" / name)
    else:
        write_binary_patch(content, sha, rel, q / "patches" / name)
    content.unlink()
    (q / "series").write_text(name + "\n")
    say(f"  patch: {(q / 'patches' / name).stat().st_size / MB:,.0f} MiB")
    if kind == "binary" and (q / "patches" / name).stat().st_size > GIT_APPLY_MAX:
        # git apply reads a patch whole and refuses one over 1023 MiB (apply.c, MAX_APPLY_SIZE)
        say(f"  git apply refuses a patch over 1023 MiB; the outputs are checked against the sha256 of the file "
            f"the patch was made from ({sha[:16]}…); run --size-mb 768 for git apply's own bytes")
    else:
        ref = reference(kind, q / "patches" / name, rel, work / "reference")
        if ref != sha:
            raise SystemExit(f"{'GNU patch' if kind == 'text' else 'git apply'} made {ref}, not {sha}")
        say(f"  {'GNU patch -p1' if kind == 'text' else 'git apply'} gives the pinned sha256 {sha[:16]}…")
    meta.write_text(json.dumps({"sha256": sha}))
    return q, sha


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-bench-large"))
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--kinds", default="text,binary")
    ap.add_argument("--reuse", action="store_true", help="keep the patches an earlier run wrote")
    ap.add_argument("--compare-with", type=Path, help="another checkout's tool/ directory, run on --compare-size-mb")
    ap.add_argument("--compare-size-mb", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--clean", action="store_true", help="remove the work directory at the end")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    say(f"load average at start: {load_avg()} (2 cores shared with other work: timings are noisy, memory is not)")
    base = work / "base-root"
    if not (work / "base-image" / "index.json").is_file():
        shutil.rmtree(base, ignore_errors=True)
        (base / "etc").mkdir(parents=True)
        (base / "etc/os-release").write_text('NAME="bench"\n')
        (base / "usr/share/doc").mkdir(parents=True)
        (base / "usr/share/doc/README").write_text("a small base image\n")
        shutil.rmtree(work / "base-image", ignore_errors=True)
        build_image(work / "base-image", [LayerPlan("base", ("etc", "usr"))], root=base)
    image_ref = f"oci:{work / 'base-image'}:bench"
    rows: list[dict] = []
    runs = [(REPO / "tool", args.size_mb, "this checkout")]
    if args.compare_with:
        runs.insert(0, (args.compare_with.resolve(), args.compare_size_mb, f"compare: {args.compare_with}"))
        runs.append((REPO / "tool", args.compare_size_mb, "this checkout"))
    for tool, size_mb, label in runs:
        say(f"\n== {label}: {size_mb} MiB ==")
        env = child_env(tool, work)
        for kind in args.kinds.split(","):
            q, sha = prepare(work, kind, size_mb * MB, args.reuse)
            got = steps(kind, q, image_ref, base, work / "out", env, TARGET[kind], sha)
            for r in got:
                r.update(code=label, size_mb=size_mb)
            rows += got
    say(f"\nload average at end: {load_avg()}")
    mine = [r for r in rows if r["code"] == "this checkout" and r["size_mb"] == args.size_mb]
    worst = max((r["peak_rss_mb"] for r in mine), default=0)
    ok = all(r["output_ok"] for r in mine) and worst < GOAL_MB
    say(f"goal (issue 28): peak RSS under {GOAL_MB} MB for every step on a {args.size_mb} MiB file: "
        f"{'met' if ok else 'NOT met'} (highest {worst} MB); outputs equal GNU patch / git apply: "
        f"{'yes' if all(r['output_ok'] for r in mine) else 'NO'}")
    if args.compare_with:
        for kind in args.kinds.split(","):
            for step in ("check", "lock", "apply --layer", "apply --output-image", "audit (of that image)", "apply --root"):
                a = [r for r in rows if r["kind"] == kind and r["step"] == step and r["size_mb"] == args.compare_size_mb]
                if len(a) == 2:
                    say(f"  {kind:6} {step:22} {args.compare_size_mb} MiB: before {a[0]['peak_rss_mb']:7.1f} MB, "
                        f"now {a[1]['peak_rss_mb']:7.1f} MB")
    if args.json:
        print(json.dumps(rows, indent=2))
    if args.clean:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
