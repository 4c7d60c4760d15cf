"""Start-up time of the quick commands (issue 11): best of N wall seconds of `imgquilt --version`,
`top`, `applied`, `series`, `check` (no image) and `header` on a 50-patch queue with every patch
applied (bytecode cached as bench_apply.py does), against the 0.12 s goal, with `quilt top` etc. on the same patches as the baseline.

    python3 bench/bench_startup.py [DEST] [--repeat N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tool"))
sys.path.insert(0, str(HERE))

from bench_apply import cli_env  # noqa: E402
from inner_loop import build_synthetic, run_child  # noqa: E402

GOAL = 0.12
COMMANDS = [["--version"], ["top"], ["applied"], ["series"], ["check"], ["header"]]
QUILT = {"top": ["top"], "applied": ["applied"], "series": ["series"], "header": ["header"]}


def best_wall(cmd: list[str], env: dict[str, str], cwd: Path, repeat: int) -> float:
    runs = [run_child(cmd, env, cwd) for _ in range(repeat)]
    bad = [r for r in runs if r.code != 0]
    if bad:
        raise SystemExit(f"{' '.join(cmd)} exited {bad[0].code}: {bad[0].err.decode(errors='replace')}")
    return min(r.seconds for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dest", nargs="?", default="/tmp/imgquilt-startup")
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    dest = Path(a.dest)
    queue, root = build_synthetic(dest, files=50, patches=50)
    env = cli_env(dest / "pycache", dest / "cache")  # bytecode cached, as an installed package has it
    imgquilt = [sys.executable, "-m", "imgquilt"]
    subprocess.run([*imgquilt, "push", "-a", "--image", f"rootfs:{root}"], cwd=queue, env=env, check=True, capture_output=True)
    # quilt's side: a copy of the rootfs as its tree, the same patches, all applied
    qtree = dest / "quilt"
    shutil.rmtree(qtree, ignore_errors=True)
    shutil.copytree(root, qtree)
    shutil.copytree(queue / "patches", qtree / "patches")
    shutil.copy(queue / "series", qtree / "patches" / "series")
    quilt_env = {**os.environ, "QUILT_PATCHES": "patches", "QUILTRC": "/dev/null"}
    subprocess.run(["quilt", "push", "-a", "-q"], cwd=qtree, env=quilt_env, check=True, capture_output=True)
    print(f"{'command':<22}{'imgquilt s':>12}{'/ goal':>9}{'quilt s':>10}")
    worst = 0.0
    for args in COMMANDS:
        t = best_wall([*imgquilt, *args], env, queue, a.repeat)
        worst = max(worst, t)
        q = QUILT.get(args[0])
        qt = f"{best_wall(['quilt', *q], quilt_env, qtree, a.repeat):10.3f}" if q else f"{'-':>10}"
        print(f"{'imgquilt ' + ' '.join(args):<22}{t:12.3f}{t / GOAL:9.2f}{qt}")
    print(f"worst {worst:.3f} s = {worst / GOAL:.2f} x the {GOAL} s goal (best of {a.repeat} wall each)")


if __name__ == "__main__":
    main()
