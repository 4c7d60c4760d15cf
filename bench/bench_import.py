#!/usr/bin/env python3
"""Time `imgquilt import --series` of Debian's openssh quilt series (53 patches, 162 file sections).

    python3 bench/bench_import.py [--repeat 5] [--json]

Fetches the source package with `apt-get source --download-only openssh` (deb-src lines needed:
see .ci/install-tools) into /tmp/imgquilt-bench-import, unpacks it, then runs the real CLI as a
process of its own (start-up and imports included, bytecode cached as an installed package has it)
`--repeat` times into fresh queues, and reports the best and the median CPU time (user + system).
The goal (issue 10): under 1 s of CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOL = HERE.parent / "tool"
WORK = Path("/tmp/imgquilt-bench-import")


def _source() -> tuple[Path, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    found = lambda kind: sorted(p for p in WORK.glob(f"openssh_*.{kind}.tar.*") if not p.name.endswith(".asc"))  # noqa: E731
    if not found("orig") or not found("debian"):
        subprocess.run(["apt-get", "source", "--download-only", "openssh"], cwd=WORK, check=True, capture_output=True)
    src = WORK / "src"
    if not src.is_dir():
        with tarfile.open(found("orig")[-1]) as t:
            t.extractall(src / "u", filter="tar")
        with tarfile.open(found("debian")[-1]) as t:
            t.extractall(src / "d", filter="tar")
    (tree,) = list((src / "u").iterdir())
    return tree, src / "d/debian/patches/series"


def _run(tree: Path, series: Path, queue: Path, env: dict[str, str]) -> float:
    shutil.rmtree(queue, ignore_errors=True)
    queue.mkdir(parents=True)
    (queue / "series").write_text("")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "imgquilt", "import", "--series", str(series), "--image", f"rootfs:{tree}"],
                   cwd=queue, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tree, series = _source()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(TOOL)
    env["PYTHONPYCACHEPREFIX"] = str(WORK / "pycache")
    _run(tree, series, WORK / "queue", env)  # writes the bytecode
    times = [_run(tree, series, WORK / "queue", env) for _ in range(args.repeat)]
    patches = len([ln for ln in series.read_text().splitlines() if ln.strip() and not ln.startswith("#")])
    result = {"patches": patches, "best_cpu_s": round(min(times), 3), "median_cpu_s": round(statistics.median(times), 3), "goal_s": 1.0}
    print(f"imgquilt import --series (openssh, {patches} patches): best {min(times):.2f} s CPU, median {statistics.median(times):.2f} s "
          f"(goal < 1 s: {'met' if min(times) < 1.0 else 'NOT met'})")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
