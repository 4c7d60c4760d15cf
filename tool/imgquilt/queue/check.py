"""Lint a queue: series vs patches/, hash chains, Requires order, lock freshness."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..util.regular import read_regular_file
from ..errors import ImgquiltError
from .lock import read_lock, read_note, stale_lock_advice
from .patchfile import Patch, parse_patch, rehash_command
from .queue import series_sha256
from .series import parse_series


def chain_breaks(patches: list[Patch] | tuple[Patch, ...]) -> list[str]:
    """Per named path, each base must be the previous result: every place it is not, with the way back."""
    out: list[str] = []
    last: dict[str, tuple[str, str]] = {}
    for p in patches:
        for s in p.sections:
            if s.path in last and last[s.path][1] != s.base_sha256:
                prev, h = last[s.path]
                out.append(f"{p.name}: {s.path}: Base-SHA256 {s.base_sha256} does not continue the chain: {prev} leaves it at {h}; "
                           f"{rehash_command([p.name])} re-chains it onto {prev}'s result.")
            last[s.path] = (p.name, s.patched_sha256)
    return out


@dataclass(frozen=True)
class Bodies:
    """A verb's test of each section's body against its base bytes (stale Patched-SHA256 lines): the
    problems found (patch, sentence), and the patches with a section whose base was not at hand."""

    problems: tuple[tuple[str, str], ...] = ()
    unchecked: frozenset[str] = frozenset()


BodyCheck = Callable[[Path, list[Patch]], Bodies]


def check_queue(root: Path, bodies: BodyCheck | None = None) -> tuple[list[str], list[Patch]]:
    """Every problem found (empty: the queue is sound) and the patches that parsed, in order.

    First what an interrupted command left is cleaned up where the queue can be written (see
    queue.interrupted); what is left of it is a problem."""
    from .interrupted import leftovers, recover

    problems: list[str] = []
    try:
        recover(root)
    except OSError:
        pass  # a read-only queue: reported below
    except ImgquiltError as exc:  # a journal imgquilt did not write: never acted on
        problems.append(exc.message)
    problems += [p for p in leftovers(root) if not problems or "journal" not in p]
    series_file = root / "series"
    try:
        series_bytes = read_regular_file(series_file) or b""
        entries = parse_series(series_bytes)
    except ImgquiltError as exc:
        return [exc.message], []
    names = [e.name for e in entries]
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"series lists {n!r} {names.count(n)} times.")
    pdir = root / "patches"
    on_disk = sorted(
        str(p.relative_to(pdir)) for p in pdir.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(pdir).parts)
    ) if pdir.is_dir() else []
    for n in on_disk:
        if n not in names and n != "series":
            problems.append(f"patches/{n} is not listed in series.")
    patches: list[Patch] = []
    raw: list[bytes] = []
    unreadable: set[str] = set()  # patch files that do not parse: edited by hand, surely
    for e in entries:
        f = pdir / e.name
        try:
            data = read_regular_file(f)
            if data is None:
                problems.append(f"series line {e.line} lists {e.name!r}, but patches/{e.name} does not exist.")
                continue
            raw.append(data)
            patches.append(parse_patch(data, e.name, strip=e.strip))
        except ImgquiltError as exc:
            unreadable.add(e.name)
            problems.append(f"{exc.message} {exc.hint}" if getattr(exc, "recount", False) else exc.message)
    problems += chain_breaks(patches)
    last = {s.path: (p.name, s.patched_sha256) for p in patches for s in p.sections}
    body = bodies(root, patches) if bodies is not None else None
    if body is not None:
        problems += [text for _, text in body.problems]
    order = {n: i for i, n in enumerate(names)}
    for p in patches:
        for req in p.header.requires:
            if req not in order:
                problems.append(f"{p.name}: Requires {req!r}, which is not in series.")
            elif order[req] >= order[p.name]:
                problems.append(f"{p.name}: Requires {req!r}, which comes after it in series.")
    try:
        lock = read_lock(root / "targets.lock")
    except ImgquiltError as exc:
        problems.append(exc.message)
        lock = None
    if lock is not None and len(raw) == len(entries):
        if lock.series_sha256 != series_sha256(series_bytes, raw):
            what, todo = stale_lock_advice(
                lock, names, raw, series_sha256=series_sha256(series_bytes, raw), note=read_note(root),
                hand_edited=None if body is None else {n for n, _ in body.problems} | unreadable,
                unchecked=None if body is None else set(body.unchecked))
            problems.append(f"targets.lock is stale ({what}); {todo}")
        else:
            firsts: dict[str, str] = {}
            for p in patches:
                for s in p.sections:
                    firsts.setdefault(s.path, s.base_sha256)
            locked = {t.path: t for t in lock.targets}
            for path in sorted(set(firsts) ^ set(locked)):
                problems.append(f"targets.lock and the patches disagree on target {path!r}; run `imgquilt lock`.")
            for path, base in firsts.items():
                if path in locked and locked[path].base_sha256 != base:
                    problems.append(f"targets.lock pins {path!r} at {locked[path].base_sha256}, the series starts from {base}.")
                if path in last and path in locked and locked[path].final_sha256 != last[path][1]:
                    problems.append(f"targets.lock says {path!r} ends at {locked[path].final_sha256}, the series ends at {last[path][1]}.")
    return problems, patches
