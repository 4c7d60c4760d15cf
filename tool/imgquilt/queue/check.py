"""Lint a queue: series vs patches/, hash chains, Requires order, lock freshness."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..util.regular import read_regular_file
from ..errors import ImgquiltError, UsageError
from .lock import Lock, LockFile, LockNote, read_lock_file, read_note, stale_lock_advice
from .patchfile import Patch, read_patch, rehash_command
from .queue import series_sha256
from .series import SeriesEntry, has_guards, parse_series, pushable, selected_entries, selection_text


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


@dataclass(frozen=True)
class Lint:
    """What `check` found: problems of the queue itself, and problems of a selection (a profile, or
    the default selection of a guarded series) whose patches do not chain or miss a Requires."""

    problems: tuple[str, ...]
    selections: tuple[str, ...]
    patches: tuple[Patch, ...]
    unselected: tuple[str, ...] = ()  # a line per patch no pin selects (a guard typo drops a fix everywhere)


def check_queue(root: Path, bodies: BodyCheck | None = None) -> tuple[list[str], list[Patch]]:
    """Every problem found (empty: the queue is sound) and the patches that parsed, in order."""
    lint = lint_queue(root, bodies)
    return [*lint.problems, *lint.selections], list(lint.patches)


def lint_queue(root: Path, bodies: BodyCheck | None = None) -> Lint:
    """Lint the queue (see check_queue); selection problems kept apart (they are exit 3, not 6).

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
        return Lint((exc.message,), (), ())
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
    raw: list = []
    unreadable: set[str] = set()  # patch files that do not parse: edited by hand, surely
    for e in entries:
        f = pdir / e.name
        try:
            patch = read_patch(f, e.name, strip=e.strip, raw_out=raw)
            if patch is None:
                problems.append(f"series line {e.line} lists {e.name!r}, but patches/{e.name} does not exist.")
                continue
            patches.append(patch)
        except UsageError:
            raise  # the command's or the environment's (a bad IMGQUILT_* size), not this patch's: said once
        except ImgquiltError as exc:
            unreadable.add(e.name)
            problems.append(f"{exc.message} {exc.hint}" if getattr(exc, "recount", False) else exc.message)
    guarded = has_guards(entries)
    if not guarded:
        problems += chain_breaks(patches)
    body = bodies(root, patches) if bodies is not None else None
    if body is not None:
        problems += [text for _, text in body.problems]
    hand = Hand(read_note(root), None if body is None else {n for n, _ in body.problems} | unreadable,
                None if body is None else set(body.unchecked))
    order = {n: i for i, n in enumerate(names)}
    for p in patches:
        for req in p.header.requires:
            if req not in order:
                problems.append(f"{p.name}: Requires {req!r}, which is not in series.")
            elif order[req] >= order[p.name]:
                problems.append(f"{p.name}: Requires {req!r}, which comes after it in series.")
    try:
        lf = read_lock_file(root / "targets.lock")
    except ImgquiltError as exc:
        problems.append(exc.message)
        lf = LockFile(None)
        guarded_pins = False  # its pins are unknown: no patch can be said to be selected by none
    else:
        guarded_pins = guarded
    whole = len(raw) == len(entries)
    pins: list[tuple[str | None, tuple[str, ...], Lock | None]] = []
    if lf.default is not None or not lf.profiles:
        pins.append((None, (), lf.default))
    pins += [(p.name, p.select, p.lock) for p in lf.profiles]
    selections: list[str] = []
    by_name = {p.name: p for p in patches}
    for profile, select, lock in pins:
        keep = selected_entries(entries, select) if guarded else list(entries)
        chosen = [by_name[e.name] for e in keep if e.name in by_name]
        if guarded:
            label = f"profile {profile}" if profile is not None else "the default selection (no --profile)"
            selections += selection_breaks(label, entries, patches, {e.name for e in keep}, lock)
        if lock is not None and whole:
            text = selection_text(keep) if guarded else series_bytes
            raws = [raw[i] for i, e in enumerate(entries) if e in keep]
            problems += lock_problems(profile, text, [e.name for e in keep], raws, chosen, lock,
                                      "the selection" if guarded else "series", hand)
    return Lint(tuple(problems), tuple(selections), tuple(patches), unselected_lines(entries, pins) if guarded_pins else ())


def unselected_lines(entries: Sequence[SeriesEntry], pins: Sequence[tuple[str | None, tuple[str, ...], object]]) -> tuple[str, ...]:
    """A line for each entry that no pin's selection applies, naming the guard that keeps it out and
    the selected name it is likely a typo of."""
    from ..util.names import did_you_mean

    selected = [g for _, select, _ in pins for g in select]
    names = [n for n, _, _ in pins if n is not None]
    out: list[str] = []
    for e in entries:
        if any(pushable(e.guards, select)[0] for _, select, _ in pins):
            continue
        strays = [g[1:] for g in e.guards if g[0] == "+" and g[1:] not in selected]
        near = "".join(did_you_mean(g, [*selected, *names]) for g in strays)
        who = ", ".join(n or "the default" for n, _, _ in pins) or "none"
        out.append(f"{e.name} ({' '.join(e.guards)}): no pin selects it (pins: {who}), so no deployment applies it.{near}")
    return tuple(out)


@dataclass(frozen=True)
class Hand:
    """What tells a stale lock's causes apart (queue.lock.stale_lock_advice): the note of a command that
    left it stale, the patches whose bodies no longer give their pins, those not testable here."""

    note: LockNote | None = None
    edited: set[str] | None = None
    unchecked: set[str] | None = None


def lock_problems(profile: str | None, series_text: bytes, names: list[str], raws: list[bytes], patches: list[Patch],
                  lock: Lock, scope: str = "series", hand: Hand = Hand()) -> list[str]:
    """Is one pin of targets.lock fresh for the patches it selects (docs/targets-lock.md)?"""
    where = "targets.lock" if profile is None else f"targets.lock [profile.{profile}]"
    relock = "`imgquilt lock`" if profile is None else f"`imgquilt lock --profile {profile}`"
    problems: list[str] = []
    if lock.series_sha256 != series_sha256(series_text, raws):
        what, todo = stale_lock_advice(lock, names, raws, scope, series_sha256=series_sha256(series_text, raws),
                                       note=hand.note, hand_edited=hand.edited, unchecked=hand.unchecked)
        return [f"{where} is stale ({what}); {todo.replace('`imgquilt lock`', relock)}"]
    firsts: dict[str, str] = {}
    last: dict[str, str] = {}
    for p in patches:
        for s in p.sections:
            firsts.setdefault(s.path, s.base_sha256)
            last[s.path] = s.patched_sha256
    locked = {t.path: t for t in lock.targets}
    for path in sorted(set(firsts) ^ set(locked)):
        problems.append(f"{where} and the patches disagree on target {path!r}; run {relock}.")
    for path, base in firsts.items():
        if path in locked and locked[path].base_sha256 != base:
            problems.append(f"{where} pins {path!r} at {locked[path].base_sha256}, the series starts from {base}.")
        if path in last and path in locked and locked[path].final_sha256 != last[path]:
            problems.append(f"{where} says {path!r} ends at {locked[path].final_sha256}, the series ends at {last[path]}.")
    return problems


def selection_breaks(label: str, entries: list[SeriesEntry], patches: list[Patch], selected: set[str],
                     lock: Lock | None) -> list[str]:
    """Where the patches a selection applies do not chain: per file, each selected patch's Base must
    be the previous selected patch's result, else the file in the image the selection pins (else
    the base the whole series starts from). A Base that only a patch outside the selection produces
    is named with that patch; so is a Requires on a patch the selection leaves out."""
    guards = {e.name: e.guards for e in entries}
    pinned = {t.path: t.base_sha256 for t in lock.targets} if lock is not None else {}
    first: dict[str, str] = {}
    for p in patches:
        for s in p.sections:
            first.setdefault(s.path, s.base_sha256)
    out: list[str] = []
    last: dict[str, tuple[str, str]] = {}
    outside: dict[str, list[tuple[str, str]]] = {}  # path -> (patch, result) of earlier patches the selection leaves out
    for p in patches:
        if p.name not in selected:
            for s in p.sections:
                outside.setdefault(s.path, []).append((p.name, s.patched_sha256))
            continue
        for s in p.sections:
            if s.path in last:
                prev, expected = last[s.path]
                there = f"{prev} leaves it at {expected}"
            elif s.path in pinned:
                expected = pinned[s.path]
                there = f"the image it pins holds {expected}"
            else:
                expected = first[s.path]
                there = f"the series starts it from {expected}"
            last[s.path] = (p.name, s.patched_sha256)
            if s.base_sha256 == expected:
                continue
            culprit = next((n for n, h in reversed(outside.get(s.path, [])) if h == s.base_sha256), None)
            if culprit is not None:
                tag = " ".join(f"#{g}" for g in guards.get(culprit, ())) or "no guard"
                out.append(f"{label}: {p.name}: {s.path}: Base-SHA256 {s.base_sha256} is what {culprit} leaves, and "
                           f"{label} does not select {culprit} ({tag}): {p.name} silently depends on it; in {label} "
                           f"{there}.")
            else:
                out.append(f"{label}: {p.name}: {s.path}: Base-SHA256 {s.base_sha256} does not continue the chain: "
                           f"in {label} {there}.")
    for p in patches:
        if p.name not in selected:
            continue
        for req in p.header.requires:
            if req in guards and req not in selected:
                tag = " ".join(f"#{g}" for g in guards[req]) or "no guard"
                out.append(f"{label}: {p.name}: Requires {req!r}, which {label} does not select ({tag}).")
    return out
