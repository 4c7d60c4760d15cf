"""Profiles: one queue, several deployments. A profile resolves here, at the edge, into what every
verb already takes: the queue of the patches it selects (Queue.selection) and its pin of
targets.lock, plus its environment defaults. Nothing below the verbs knows the word.

    name      `[profile.NAME]` in targets.lock; `all` names every one
    select    the guards it turns on (default: its own name); MQ's pushable decides (queue.series)
    lock      its own pin: image, digest, platform, targets, series_sha256 over its selection
    env       KEY=VALUE defaults written into the Env of every image applied for it

No --profile is the default: the top-level pin of targets.lock, no guard selected.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import UsageError, control_character
from ..fs.types import Source
from ..cache.parsed import remembered
from ..queue.lock import PROFILE_NAME, Lock, LockFile, parse_lock_file, toml_doc
from ..queue.queue import Queue
from ..queue.series import check_guard_name
from ..util.names import ENV_KEY, nearest
from ..util.regular import read_regular_file

ALL = "all"
PLACEHOLDER = "{profile}"


@dataclass(frozen=True)
class Resolved:
    """A profile (or the default) as the verbs take it."""

    name: str | None  # None: the default (no --profile)
    queue: Queue  # the patches it selects
    lock: Lock | None  # its pin (None: not pinned; only the default can be)
    select: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return f"profile {self.name}" if self.name is not None else "the default (no --profile)"


def check_profile_name(name: str) -> str:
    """A name a profile can be declared under (exit 2 otherwise)."""
    if name == ALL:
        raise UsageError("`all` names every profile; it cannot be a profile's own name.")
    if not PROFILE_NAME.fullmatch(name):
        raise UsageError(f"{name!r} is not a profile name.",
                         hint="Use letters, digits, `_` and `-` (at most 64, starting with a letter or digit), e.g. glm53.")
    return name


def parse_env(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--env KEY=VALUE` values: KEY a valid variable name ([A-Za-z_][A-Za-z0-9_]*), each once; VALUE
    printable (no newline, tab or escape: errors.shown)."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--env wants KEY=VALUE, not {item!r}.", hint="Example: --env VLLM_GLM53_PREP_FUSED=0")
        if not ENV_KEY.fullmatch(key):
            raise UsageError(f"--env {item!r}: {key!r} is not a valid variable name.",
                             hint="A name is letters, digits and `_`, not starting with a digit (as a shell takes it).")
        if "\0" in value:
            raise UsageError(f"--env {key}: a value cannot hold a NUL byte.")
        bad = control_character(value)
        if bad is not None:  # it would print as a line of its own, or move the terminal, wherever the value is shown
            raise UsageError(f"--env {key}: the value holds {bad!r}, a control character; an environment default "
                             "imgquilt writes into images is one line of printable text.",
                             hint=f"Give {key} a value without newlines, tabs or escape sequences.")
        if key in out and out[key] != value:
            raise UsageError(f"--env sets {key} twice ({out[key]!r} and {value!r}).")
        out[key] = value
    return tuple(sorted(out.items()))


def parse_select(items: Sequence[str]) -> tuple[str, ...]:
    """`--select G,...` (repeatable): guard names, checked by MQ's rules, each once, in order."""
    names = [g for item in items for g in item.split(",")]
    for g in names:
        check_guard_name(g)
    return tuple(dict.fromkeys(names))


def lock_file(root: Path) -> LockFile:
    """The queue's whole lock; a large one's TOML parse kept in the shared cache, sealed (cache.parsed:
    a 1000-patch lock is 0.6 MB, 0.07-0.2 s of parsing every run otherwise)."""
    path = root / "targets.lock"
    data = read_regular_file(path)
    if data is None:
        return LockFile(None)
    return parse_lock_file(data, source=str(path), loads=lambda raw: remembered("targets.lock", raw, toml_doc))


def unknown(name: str, lf: LockFile) -> UsageError:
    """`Unknown profile`, naming the declared one it is likely a typo of."""
    known = ", ".join(lf.names) or "none"
    near = nearest(name, lf.names)
    if near is not None:
        return UsageError(f"Unknown profile {name!r}: targets.lock declares {known}. Did you mean {near!r}?",
                          hint=f"Use --profile {near}; a new profile is declared with `imgquilt lock --profile NAME --image REF`.")
    if name == ALL:  # a command of one profile (port, rebase --continue, ...): `all` is no profile's name
        return UsageError(f"This command takes one profile, not `all`: targets.lock declares {known}.",
                          hint="Name one of them with --profile NAME." if lf.names else
                          "Declare one with `imgquilt lock --profile NAME --image REF`.")
    if not PROFILE_NAME.fullmatch(name):  # never suggest declaring a name `lock` refuses
        return UsageError(f"Unknown profile {name!r}: targets.lock declares {known}, and {name!r} is not a profile name.",
                          hint="Profile names are letters, digits, `_` and `-` (at most 64, starting with a letter or digit), "
                               "e.g. glm53; `imgquilt lock --profile NAME --image REF` declares one.")
    return UsageError(f"Unknown profile {name!r}: targets.lock declares {known}.",
                      hint=f"Declare it with `imgquilt lock --profile {name} --image REF [--select GUARD,...] [--env KEY=VALUE]`.")


def resolve(q: Queue, name: str | None, lf: LockFile | None = None) -> Resolved:
    """One profile (None: the default) as a selection of `q` and its pin."""
    lf = lf if lf is not None else lock_file(q.root)
    if name is None:
        return Resolved(None, q.selection(()), lf.default)
    if name == ALL:
        raise UsageError("`--profile all` runs every profile; this takes one.", hint="Name one: --profile NAME.")
    p = lf.profile(name)
    if p is None:
        raise unknown(name, lf)
    return Resolved(p.name, q.selection(p.select), p.lock, p.select, p.env)


def need_pin(chosen: Resolved, lf: LockFile, image: object) -> None:
    """The default, asked to work on its pinned image, when targets.lock pins only profiles: say so."""
    if chosen.name is None and chosen.lock is None and image is None and lf.profiles:
        raise UsageError(f"targets.lock pins only profiles ({', '.join(lf.names)}), no default image.",
                         hint="Name one with --profile NAME (or --profile all), or give --image REF.")


def need_profile(chosen: Resolved, lf: LockFile) -> None:
    """`apply` with no --profile on a queue that pins only profiles: which deployment is meant is not
    for imgquilt to guess (the default selection is no deployment there)."""
    if chosen.name is None and lf.default is None and lf.profiles:
        raise UsageError(f"targets.lock pins only profiles ({', '.join(lf.names)}), no default: name the deployment to apply.",
                         hint="Give --profile NAME (or --profile all); a default pin is declared with `imgquilt lock --image REF`.")


def other_pins(chosen: Resolved, lf: LockFile, digest: str | None) -> list[str | None]:
    """The other pins (profile names; None: the default) whose image is `digest`, when it is not the
    chosen one's own: the image of another deployment."""
    if digest is None or (chosen.lock is not None and chosen.lock.image.digest == digest):
        return []
    pins: list[tuple[str | None, Lock | None]] = [(None, lf.default), *((p.name, p.lock) for p in lf.profiles)]
    return [n for n, lock in pins if n != chosen.name and lock is not None and lock.image.digest == digest]


def resolve_many(q: Queue, name: str | None, lf: LockFile | None = None) -> list[Resolved]:
    """`--profile NAME` as one, `--profile all` as every declared profile (by name), none as the default."""
    lf = lf if lf is not None else lock_file(q.root)
    if name != ALL:
        return [resolve(q, name, lf)]
    if not lf.profiles:
        raise UsageError("`--profile all`: targets.lock declares no profile.",
                         hint="Declare one with `imgquilt lock --profile NAME --image REF`.")
    return [resolve(q, p.name, lf) for p in lf.profiles]


def check_placeholders(count: int, **outputs: object) -> None:
    """With several profiles, every output path must hold {profile}, so no profile's output lands
    on another's (checked before any work)."""
    if count <= 1:
        return
    for option, value in outputs.items():
        if value is not None and PLACEHOLDER not in str(value):
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} {value} would be written once per profile ({count} profiles): it needs the "
                             f"{PLACEHOLDER} placeholder, or each profile would overwrite the one before.",
                             hint=f"Example: {flag} {_example(option)}. Nothing was read or written.")


def _example(option: str) -> str:
    return {"output_image": "oci:out:{profile}", "layer": "build/{profile}.tar.gz", "overlay": "build/{profile}-overlay",
            "attest": "key.pem"}.get(option, "out-{profile}")


def fill(value: object, name: str | None, option: str) -> str | None:
    """An output with {profile} replaced by the profile's name. With no profile selected, an output that
    holds {profile} is a usage error: written as given, it would name a file `{profile}.tar.gz`."""
    if value is None:
        return None
    if name is None:
        if PLACEHOLDER in str(value):
            raise UsageError(f"{option} {value} holds {PLACEHOLDER}, but no profile is selected: there is no name "
                             "to put in its place.",
                             hint="Give --profile NAME (or --profile all), or write the name out. Nothing was read or written.")
        return str(value)
    return str(value).replace(PLACEHOLDER, name)


def pins(q: Queue, lf: LockFile) -> list[Resolved]:
    """Every pin of targets.lock as the verbs take it: the default (if pinned) first, then the profiles."""
    return ([resolve(q, None, lf)] if lf.default is not None else []) + [resolve(q, p.name, lf) for p in lf.profiles]


def named_pin(q: Queue, lf: LockFile, source: Source) -> tuple[Resolved | None, str, list[Resolved]]:
    """The pin a filesystem names itself: (the pin whose selection its apply record names, by
    series_sha256, "record"), else (the only pin on its digest or on the base digest its record names,
    "digest"), else (None, "", the pins on that digest, several or none)."""
    import json

    from ..engine.record import read_record_target
    from ..errors import ImgquiltError

    candidates = pins(q, lf)
    paths = list(dict.fromkeys(p for r in candidates for p in r.queue.target_paths()))
    try:
        source.read_targets(paths)  # first, so the record below is read no deeper than the targets are
    except ImgquiltError:
        pass  # audit reports what cannot be read
    digests = {source.info().digest}
    record = read_record_target(source)
    if record is not None and record.data is not None:
        try:
            doc = json.loads(record.data)
            series, base = doc.get("series_sha256"), (doc.get("image") or {}).get("digest")
        except (ValueError, AttributeError):
            series, base = None, None
        hits = [r for r in candidates if r.queue.series_sha256 == series]
        if len(hits) == 1:
            return hits[0], "record", hits
        digests.add(base)
    hits = [r for r in candidates if r.lock is not None and r.lock.image.digest in digests - {None}]
    if len(hits) == 1:
        return hits[0], "digest", hits
    return None, "", hits


def identify(q: Queue, lf: LockFile, source: Source) -> Resolved:
    """Which pin a filesystem is, for `audit` without --profile on a queue with profiles: the one
    whose selection its apply record names (by series_sha256), else the only one pinned to its
    digest (or to the digest its record names as the base), else the default pin."""
    named, _, hits = named_pin(q, lf, source)
    if named is not None:
        return named
    if lf.default is not None:
        return resolve(q, None, lf)
    which = ", ".join(r.name or "" for r in hits) if hits else "none of them"
    raise UsageError(f"Which profile is {source.info().ref}? targets.lock declares {', '.join(lf.names)}; its apply record names "
                     f"none of their selections, and its digest is pinned by {which}.",
                     hint="Judge one with --profile NAME, or every one with --profile all (it says which the image matches).")


def audit_as(chosen: Resolved, source: Source, trust: Any = None, environ: dict[str, str] | None = None) -> Any:
    """`source` judged as one pin: its selection's patches (from a verified attestation with `trust`,
    a public key) and, with a profile, its environment defaults: in the image's config, or in
    `environ` (a running process's environment, audit --pid) (an AuditReport)."""
    from .audit import audit_source, with_env

    if trust is not None:
        from .attest import audit_trusting

        report = audit_trusting(chosen.queue, source, trust)
    else:
        report = audit_source(chosen.queue, source)
    return with_env(report, source, chosen.env, chosen.name, environ)


# how a fleet audit chose an image's profile (the `profile_by` of docs/json.md)
BY_RECORD, BY_DIGEST, BY_MATCH, BY_CLOSEST = "record", "digest", "match", "closest"


def judge_own(q: Queue, lf: LockFile, source: Source, expect: str, trust: Any = None) -> tuple[Any, str]:
    """A fleet's image judged by its own pin (docs/profiles.md, "Audits"): the one its apply record or
    its digest names (named_pin); else, of the pins on its digest (or every pin when none is), the
    first that it matches in the `expect`ed state (as `audit --profile all` says), else the one with
    the largest share of patches in that state (ties: the order of targets.lock). (report, how chosen)."""
    from .audit import matches

    named, by, hits = named_pin(q, lf, source)
    if named is not None:
        return audit_as(named, source, trust), by
    judged = [audit_as(r, source, trust) for r in (hits or pins(q, lf))]
    for report in judged:
        if matches(report, expect):
            return report, BY_MATCH

    def share(report: Any) -> tuple[float, int]:
        n = sum(p.state == expect for p in report.patches)
        return (n / len(report.patches) if report.patches else 0.0, n)

    return max(judged, key=share), BY_CLOSEST  # max keeps the first of equals


def with_record_owner(report: Any, q: Queue, lf: LockFile, chosen: Resolved) -> Any:
    """An apply record written for another pin's selection is not "the queue changed since this
    apply": name the profile that wrote it (the report as it is otherwise)."""
    from dataclasses import replace

    record = report.record
    if record is None or record.series_matches or record.series_sha256 is None or not lf.profiles:
        return report
    pins = [None] * (lf.default is not None) + [p.name for p in lf.profiles]
    owners = [n for n in pins if n != chosen.name and resolve(q, n, lf).queue.series_sha256 == record.series_sha256]
    if not owners:
        return report
    who = "the default pin" if owners[0] is None else f"profile {owners[0]}"
    flag = "no --profile" if owners[0] is None else f"--profile {owners[0]}"
    problems = tuple(replace(p, message=f"the record was written by an apply of {who}'s selection, not {chosen.label}'s "
                                        f"(judge it as that deployment with {flag}).") if p.kind == "series" else p
                     for p in record.problems)
    return replace(report, record=replace(record, problems=problems, written_by=(who, flag)))
