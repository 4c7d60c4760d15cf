#!/usr/bin/env python3
"""Regenerate the top-level demo queue (`series`, `patches/*.patch`) from real before/after bytes.

    cd /work/main && PYTHONPATH=tool python3 examples/make_demo_queue.py [--queue DIR] [--lock]

The "before" bytes are read from the demo filesystem (examples/build_demo.py, the same layers as
examples/demo-image); each patch is a list of exact text edits, applied in series order, so a
chain (two patches on one file) starts from the previous patch's result. `--lock` then pins the
queue to the demo image with `imgquilt lock --image oci:examples/demo-image:latest`.

The queue shows what imgquilt handles: a path through a directory symlink (`bin/which`, with
`bin -> usr/bin`), a path through an absolute symlink (`etc/alternatives/demo-tool`), a file owned
by uid 1000 (`home/app/config.toml`), a new file with `Mode: 0755`, a two-patch chain on one file
(`demosvc/config.py`, which layer 3 overwrites), `Requires:` and DEP-3 headers.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tool"))
sys.path.insert(0, str(HERE))

import build_demo  # noqa: E402
from imgquilt.queue.patchfile import Header, build_patch, make_section  # noqa: E402

PKG = f"{build_demo.SITE}/demosvc"
# how the patches name a file -> where it really is in the image (symlinks resolved)
RESOLVED = {
    "bin/which": "usr/bin/which",
    "etc/alternatives/demo-tool": "usr/lib/demo-tool/tool.py",
}


@dataclass(frozen=True)
class Edit:
    """Replace `old` by `new`, exactly once, in the file (or create it when `old` is None)."""

    path: str
    old: str | None
    new: str
    mode: int | None = None


@dataclass(frozen=True)
class PatchSpec:
    name: str
    header: str
    edits: tuple[Edit, ...]


HEALTHCHECK = '''#!/usr/bin/env python3
"""Container health check for demosvc: exit 0 when /healthz answers 200 within 2 seconds."""
import os
import sys
import urllib.request

PORT = int(os.environ.get("DEMOSVC_PORT", "8080"))

try:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=2) as resp:
        sys.exit(0 if resp.status == 200 else 1)
except OSError as exc:
    print(f"demosvc unhealthy: {exc}", file=sys.stderr)
    sys.exit(1)
'''

PATCHES: tuple[PatchSpec, ...] = (
    PatchSpec(
        "0001-which-skip-empty-path-elements.patch",
        """Description: which: never search the current directory
 An empty element in $PATH means "the current directory" to the shell. In a
 container the working directory is often a writable volume, so `which` must
 not report programs found there.
Author: Platform Team <platform@example.org>
Origin: vendor
Forwarded: not-needed
Last-Update: 2025-05-12
""",
        (
            Edit(
                "bin/which",
                '\t\t[ -n "$ELEMENT" ] || ELEMENT=.\n',
                '\t\t# an empty element means the current directory: never search it\n'
                '\t\t[ -n "$ELEMENT" ] || continue\n',
            ),
        ),
    ),
    PatchSpec(
        "0002-demo-tool-honour-no-color.patch",
        """Description: demo-tool: honour NO_COLOR and plain pipes
 Colour codes end up in log collectors when the tool runs in a probe.
 Follow https://no-color.org and only colour a terminal.
Author: Platform Team <platform@example.org>
Bug: https://example.org/demo-linux/bugs/311
Forwarded: https://example.org/demo-linux/merge/77
Last-Update: 2025-05-14
""",
        (
            Edit("etc/alternatives/demo-tool", "import json\nimport sys\n", "import json\nimport os\nimport sys\n"),
            Edit(
                "etc/alternatives/demo-tool",
                'def colour(text: str, code: str) -> str:\n    return f"\\033[{code}m{text}\\033[0m"\n',
                'def colour(text: str, code: str) -> str:\n'
                '    if os.environ.get("NO_COLOR") or not sys.stdout.isatty():\n'
                '        return text\n'
                '    return f"\\033[{code}m{text}\\033[0m"\n',
            ),
        ),
    ),
    PatchSpec(
        "0003-app-config-longer-timeouts.patch",
        """Description: app config: longer request and keep-alive timeouts
 Long generations take more than 30 s; the load balancer keeps idle
 connections for 60 s, so keep-alive must outlive it.
Author: Serving Team <serving@example.org>
Forwarded: not-needed
Status: deployed
""",
        (
            Edit(
                "home/app/config.toml",
                "request_timeout_s = 30\nkeepalive_timeout_s = 5\n",
                "request_timeout_s = 120\nkeepalive_timeout_s = 75\n",
            ),
        ),
    ),
    PatchSpec(
        "0004-demosvc-healthcheck.patch",
        """Description: demosvc: add /healthz and a container health check
 /status does work on every call; /healthz only says the server loop is
 alive. demosvc-healthcheck is meant for HEALTHCHECK and probes.
Author: Serving Team <serving@example.org>
Origin: upstream, https://example.org/demosvc/commit/4be1c0d
Applied-Upstream: 1.5.0
""",
        (
            Edit(
                f"{PKG}/server.py",
                '        def do_GET(self) -> None:  # noqa: N802 (http.server\'s naming)\n'
                '            if self.path == "/status":\n',
                '        def do_GET(self) -> None:  # noqa: N802 (http.server\'s naming)\n'
                '            if self.path == "/healthz":\n'
                '                self._send(200, {"ok": True})\n'
                '            elif self.path == "/status":\n',
            ),
            Edit("usr/local/bin/demosvc-healthcheck", None, HEALTHCHECK, mode=0o755),
        ),
    ),
    PatchSpec(
        "0005-config-shared-expert-knob.patch",
        """Description: config: add the shared_expert knob, parse booleans from the environment
 DEMOSVC_SHARED_EXPERT=false used to turn the knob on: bool("false") is
 True. Parse the usual spellings instead.
Author: Serving Team <serving@example.org>
Forwarded: https://example.org/demosvc/merge/212
Status: wip
""",
        (
            Edit(
                f"{PKG}/config.py",
                "    capacity_factor: float = 1.25\n    workers: int = 1\n",
                "    capacity_factor: float = 1.25\n    workers: int = 1\n    shared_expert: bool = False\n",
            ),
            Edit(
                f"{PKG}/config.py",
                "        kind = type(getattr(Settings, f.name))\n        out[f.name] = kind(raw)\n",
                "        kind = type(getattr(Settings, f.name))\n"
                "        if kind is bool:\n"
                '            out[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")\n'
                "        else:\n"
                "            out[f.name] = kind(raw)\n",
            ),
        ),
    ),
    PatchSpec(
        "0006-moe-shared-expert.patch",
        """Description: moe: route every token to the shared expert too
 With shared_expert on, the router adds expert `num_experts` (the shared
 one) to every token's plan at a fixed weight; the routed experts share
 the rest.
Author: Serving Team <serving@example.org>
Requires: 0005-config-shared-expert-knob.patch
Status: wip
""",
        (
            Edit(
                f"{PKG}/config.py",
                "    shared_expert: bool = False\n",
                "    shared_expert: bool = False\n    shared_expert_weight: float = 0.25\n",
            ),
            Edit(
                f"{PKG}/moe.py",
                "    capacity_factor: float = 1.25\n\n    def capacity",
                "    capacity_factor: float = 1.25\n"
                "    shared_expert: bool = False\n"
                "    shared_expert_weight: float = 0.25\n\n"
                "    def capacity",
            ),
            Edit(
                f"{PKG}/moe.py",
                "            total = sum(w for _, w in chosen) or 1.0\n"
                "            plan.append([(e, round(w / total, 6)) for e, w in chosen])\n",
                "            total = sum(w for _, w in chosen) or 1.0\n"
                "            routed = 1.0 - self.shared_expert_weight if self.shared_expert else 1.0\n"
                "            row_plan = [(e, round(routed * w / total, 6)) for e, w in chosen]\n"
                "            if self.shared_expert:\n"
                "                row_plan.append((self.num_experts, self.shared_expert_weight))\n"
                "            plan.append(row_plan)\n",
            ),
            Edit(
                f"{PKG}/__init__.py",
                "        capacity_factor=settings.capacity_factor,\n    )\n",
                "        capacity_factor=settings.capacity_factor,\n"
                "        shared_expert=settings.shared_expert,\n"
                "        shared_expert_weight=settings.shared_expert_weight,\n"
                "    )\n",
            ),
        ),
    ),
)


def base_files() -> dict[str, bytes]:
    """Every regular file of the demo filesystem, by resolved path."""
    return {p: e.data for p, (e, _) in build_demo.flatten().items() if e.kind == "file"}


def render_queue() -> tuple[bytes, dict[str, bytes]]:
    """(series bytes, patch name -> patch bytes), built from the demo filesystem."""
    files: dict[str, bytes | None] = dict(base_files())
    patches: dict[str, bytes] = {}
    for spec in PATCHES:
        order: list[str] = []
        before: dict[str, bytes | None] = {}
        modes: dict[str, int | None] = {}
        for edit in spec.edits:
            real = RESOLVED.get(edit.path, edit.path)
            if edit.path not in before:
                order.append(edit.path)
                before[edit.path] = files.get(real)
            cur = files.get(real)
            if edit.old is None:
                if cur is not None:
                    raise SystemExit(f"{spec.name}: {edit.path} already exists")
                files[real] = edit.new.encode()
                modes[edit.path] = edit.mode
                continue
            text = (cur or b"").decode()
            if text.count(edit.old) != 1:
                raise SystemExit(f"{spec.name}: the edit of {edit.path} does not match exactly once:\n{edit.old}")
            files[real] = text.replace(edit.old, edit.new).encode()
        sections = [
            make_section(path, before[path], files[RESOLVED.get(path, path)], modes.get(path))
            for path in order
        ]
        patch = build_patch(spec.name, Header((spec.header + "\n").encode()), sections)
        patches[spec.name] = patch.raw
    series = "".join(f"{spec.name}\n" for spec in PATCHES).encode()
    return series, patches


def write_queue(queue: Path) -> None:
    series, patches = render_queue()
    (queue / "patches").mkdir(parents=True, exist_ok=True)
    for name, data in patches.items():
        (queue / "patches" / name).write_bytes(data)
    (queue / "series").write_bytes(series)


def lock(queue: Path) -> None:
    image = f"oci:{(HERE / 'demo-image').relative_to(queue) if HERE.is_relative_to(queue) else HERE / 'demo-image'}:latest"
    subprocess.run(
        [sys.executable, "-m", "imgquilt", "--queue", str(queue), "lock", "--image", image],
        check=True,
        cwd=queue,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO / "tool")},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the demo queue.")
    parser.add_argument("--queue", type=Path, default=REPO, help="queue directory (default: the repository root)")
    parser.add_argument("--lock", action="store_true", help="then run `imgquilt lock` against the demo image")
    args = parser.parse_args(argv)
    write_queue(args.queue)
    print(f"wrote {args.queue / 'series'} and {len(PATCHES)} patches in {args.queue / 'patches'}")
    if args.lock:
        lock(args.queue.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
