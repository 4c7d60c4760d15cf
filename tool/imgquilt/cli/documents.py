"""Every `--json` document the CLI prints, one renderer per document (docs/json.md, docs/schemas/).

A renderer takes what the verb returned (and the few values the command adds, such as the top
patch after it) and returns the dict the command prints; it reads nothing and writes nothing.
`DOCUMENTS` maps each schema in docs/schemas/ to its renderers, and tests/cli/test_documents.py renders
real results through them and validates each against its schema.

Files imgquilt keeps (the rebase and port state, the apply record, targets.lock, attestations) are
formats, not documents: their `to_json` stays beside their types.

Cheap to import (the error tree alone): a renderer loads what it needs when it runs, so a command
that prints no document never imports the verbs of another.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ..errors import ImgquiltError

if TYPE_CHECKING:
    from ..cache import Usage
    from ..cache.usage import CacheReport
    from ..engine.result import ApplyResult
    from ..queue.patchfile import Header
    from ..queue.lock import LockUpdate
    from ..queue.patchfile import Patch
    from ..rebase.port import Ported
    from ..rebase.report import RebaseReport
    from ..rebase.upstream import UpstreamDiff
    from ..verbs.attest import Verification
    from ..verbs.audit import AuditReport
    from ..verbs.boot import BootReport, CommandBoot, PatchBoot
    from ..verbs.history import History
    from ..verbs.platforms import PlatformAudit


# --- failures (every schema's `failure` branch) ---------------------------------------------------
def error_doc(exc: ImgquiltError) -> dict[str, Any]:
    """The JSON document a failing command prints with --json (DESIGN: one document, success or failure)."""
    found = getattr(exc, "problems", None) or []
    problems = [p if isinstance(p, str) else p.render() for p in found]
    return {
        "error": {
            "code": exc.exit_code,
            "kind": error_kind(exc),
            "message": exc.message,
            "hint": exc.hint,
            **({"problems": problems} if problems else {}),
        }
    }


def error_kind(exc: BaseException) -> str:
    """A stable kebab-case kind from the error class: BaseDrift -> base-drift."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", type(exc).__name__).lower()


def bug_doc(exc: BaseException) -> dict[str, Any]:
    """Exit 1: the document of an error imgquilt has no words for (a bug)."""
    return {
        "error": {
            "code": 1,
            "kind": "internal-error",
            "message": f"{exc.__class__.__name__}: {exc}",
            "hint": "This is a bug; run with --debug for the traceback.",
        }
    }


# --- parts several documents share ----------------------------------------------------------------
def targets_lock(update: LockUpdate | None) -> dict | None:
    """`targets_lock`: what a command that changed the queue did about targets.lock (null: the queue has none)."""
    if update is None or not update.pinned:
        return None
    return {
        "updated": update.written,
        "path": str(update.path) if update.path else None,
        "stale": update.why,
        "todo": update.todo,
    }


def patch_files(patch: Patch) -> list[dict]:
    """`files` of a patch: each section's path, hashes and modes."""
    return [
        {
            "path": s.path,
            "base_sha256": s.base_sha256,
            "patched_sha256": s.patched_sha256,
            **({"mode": f"{s.mode:04o}"} if s.mode is not None else {}),
            **({"kind": "symlink"} if s.link else {}),
            **({"new_mode": f"{s.new_mode:04o}"} if s.new_mode is not None else {}),
        }
        for s in patch.sections
    ]


# --- setup, lock, apply, check ----------------------------------------------------------------------
def init_doc(root: Any, created: list[str]) -> dict:
    return {"queue": str(root), "created": created}


def locked_doc(done: Any) -> dict:
    """`lock` (verbs' Locked): the pin written, and for a profile its selection."""
    doc = {
        "lock": str(done.path),
        "image": {"ref": done.ref, "digest": done.digest, "platform": done.platform},
        "series_sha256": done.series_sha256,
        "targets": done.targets,
    }
    if done.profile is not None:
        doc.update(profile=done.profile, select=list(done.select), env=dict(done.env), patches=done.patches)
    return doc


def lock_doc(done: Any) -> dict:
    """`lock` (also `--profile NAME`)."""
    return locked_doc(done)


def lock_profiles_doc(done: Sequence[Any]) -> dict:
    """`lock --profile all`: every profile re-pinned."""
    return {"lock": str(done[0].path), "profiles": [locked_doc(d) for d in done]}


def apply_result(result: ApplyResult, profile: str | None = None) -> dict:
    """The verified series on one image: what every `apply` document starts from."""
    from ..queue.hunks import sha256_hex
    from ..verbs.apply import changes_image

    return {
        **({} if profile is None else {"profile": profile, "env": dict(result.env)}),
        "image": {"ref": result.info.ref, "digest": result.info.digest, "platform": result.info.platform},
        "pinned": result.pinned,
        "series_sha256": result.series_sha256,
        "patches": list(result.patches),
        "files": [
            {
                "path": f.target.path,
                "resolved": f.resolved,
                "base_sha256": sha256_hex(f.target.data),
                "final_sha256": sha256_hex(f.final),
                "mode": f"{f.mode:04o}",
                "uid": f.uid,
                "gid": f.gid,
                "patches": list(f.patches),
                **({"kind": "symlink"} if f.link else {}),
            }
            for f in result.files
        ],
        "notes": list(result.notes),
        "bytecode": [{"path": b.path, "source": b.source, "action": "removed"} for b in result.bytecode],
        "changes": changes_image(result),
    }


def apply_doc(result: ApplyResult, outputs: dict, profile: str | None = None, boot: BootReport | None = None) -> dict:
    """`apply` on one image (also `--profile NAME`)."""
    doc = apply_result(result, profile)
    doc["outputs"] = outputs
    if boot is not None:
        doc["boot"] = boot_report(boot)
    return doc


def apply_profiles_doc(done: Sequence[Any]) -> dict:
    """`apply --profile all`: the first profile's document, and one per profile."""
    docs = [{**apply_result(d.result, d.profile), "outputs": d.outputs} for d in done]
    return {**docs[0], "profiles": docs}


def apply_platforms_doc(ref: str, results: Sequence[tuple[str, ApplyResult]], written: dict) -> dict:
    """`apply --platform all`: every platform's files in one list (each naming its platform), and one document per platform."""
    docs = [{**apply_result(r), "platform": p} for p, r in results]
    first = {k: v for k, v in docs[0].items() if k != "platform"}
    return {
        **first,
        "image": {"ref": ref, "digest": written.get("image", {}).get("digest"), "platform": "all"},
        "files": [{**f, "platform": d["platform"]} for d in docs for f in d["files"]],
        "bytecode": [{**b, "platform": d["platform"]} for d in docs for b in d["bytecode"]],
        "notes": [n for d in docs for n in d["notes"]],
        "platforms": docs,
        "outputs": written,
    }


def restored_doc(done: Any, reverse: bool = False) -> dict:
    """`restore`, and `apply --reverse` (which adds what it took off)."""
    return {
        "root": str(done.root),
        "written": list(done.written),
        "removed": list(done.removed),
        "already": list(done.already),
        **({"series_sha256": done.series_sha256, "bytecode_not_restored": list(done.bytecode)} if reverse else {}),
    }


def check_doc(
    checked: Any, ok: bool, problems: list[str], profiled: bool = False, boot: BootReport | None = None
) -> dict:
    """`check`: whether the queue is sound, what was checked (and booted, with --boot)."""
    doc: dict[str, Any] = {"ok": ok, "problems": problems, "patches": list(checked.patches)}
    if checked.unchecked:  # only when there are: the document of a queue without stays as it was
        doc["unchecked"] = list(checked.unchecked)
    if profiled:
        doc["profiles"] = list(checked.profiles)
    if boot is not None:
        doc["boot"] = boot_report(boot)
    return doc


def overlay_args_doc(found: list[str] | dict, format: str) -> dict:
    return found if isinstance(found, dict) else {"format": format, "args": found}


# --- boot -------------------------------------------------------------------------------------------
def _patch_boot(p: PatchBoot) -> dict:
    return {
        "name": p.name,
        "verdict": p.verdict,
        "modules": list(p.modules),
        "why": p.why,
        "failures": [{"module": m, **f.json()} for m, f in p.failures],
    }


def _command_boot(c: CommandBoot) -> dict:
    def side(r: Any) -> dict:
        return {
            "exit_code": r.code,
            "timed_out": r.timed_out,
            "seconds": round(r.seconds, 3),
            "stdout_tail": r.tail("stdout"),
            "stderr_tail": r.tail("stderr"),
        }

    return {"argv": list(c.argv), "verdict": c.verdict, "base": side(c.base), "patched": side(c.patched)}


def boot_report(r: BootReport) -> dict:
    """One image's boot (a probe's own form, `Probe.json`, is also what the rebase state keeps)."""
    return {
        "image": {"ref": r.ref, "digest": r.digest},
        "profile": r.profile,
        "env": dict(r.env),
        "timeout": r.timeout,
        "patches": [_patch_boot(p) for p in r.patches],
        "probes": [p.json() for p in r.probes],
        "command": None if r.command is None else _command_boot(r.command),
        "ok": not r.failed,
        "sandbox_seconds": round(r.sandbox_seconds, 3),
        "sandbox_cpu_seconds": round(r.sandbox_cpu_seconds, 3),
        "patched_digest": r.patched_digest,
    }


def boot_doc(reports: Sequence[BootReport], ok: bool) -> dict:
    """`boot` (also `--format json`): one image, or with several profiles the first and one per profile."""
    if len(reports) == 1:
        return boot_report(reports[0])
    return {**boot_report(reports[0]), "profiles": [boot_report(r) for r in reports], "ok": ok}


# --- audit, verify ----------------------------------------------------------------------------------
def audit_report(report: AuditReport) -> dict:
    """One image's audit (docs/schemas/audit.schema.json): image, patches, summary, and the record check."""
    from ..verbs.audit import iso_time

    info = report.info
    rec = report.record
    trust = report.trust
    return {
        **({} if report.profile is None else {"profile": report.profile}),
        **(
            {}
            if report.env is None
            else {
                "env": {
                    "expected": dict(report.env.expected),
                    "checked": report.env.found is not None,
                    **({"source": report.env.source} if report.env.found is not None else {}),
                    "missing": [{"key": k, "value": v, "found": got} for k, v, got in report.env.missing],
                }
            }
        ),
        "image": {
            "ref": info.ref,
            "digest": info.digest,
            "platform": info.platform,
            "kind": info.kind,
            "base": None if report.base is None else report.base.json(),
        },
        **(
            {}
            if trust is None
            else {
                "answered_from": trust.answered_from,
                "attestation": {
                    "digest": trust.attestation,
                    "key_id": trust.key_id,
                    "note": trust.note,
                    "rejected": [{"digest": d, "reason": r} for d, r in trust.rejected],
                },
            }
        ),
        "series_sha256": report.series_sha256,
        "patches": [
            {
                "name": p.name,
                "state": p.state,
                "record": p.record,
                "files": [
                    {
                        "path": f.path,
                        "resolved": f.resolved,
                        "state": f.state,
                        "expected_base": f.expected_base,
                        "expected_patched": f.expected_patched,
                        "actual": f.actual,
                        "detail": f.detail or None,
                        "record": f.recorded,
                        "bytecode": [
                            {"path": v.bytecode.path, "verdict": v.verdict, "reason": v.reason} for v in f.bytecode
                        ],
                    }
                    for f in p.files
                ],
            }
            for p in report.patches
        ],
        "summary": report.summary,
        "record": None
        if rec is None
        else {
            "path": rec.path,
            "series_sha256": rec.series_sha256,
            "series_matches": rec.series_matches,
            "image": {"ref": rec.image_ref, "digest": rec.image_digest},
            "imgquilt_version": rec.imgquilt_version,
            "patches": list(rec.patches),
            "agrees": not rec.problems,
        },
        "process": None
        if report.process is None
        else {
            "pid": report.process.pid,
            "root": report.process.root,
            "started": iso_time(report.process.started),
        },
        "record_problems": []
        if rec is None
        else [{"kind": x.kind, "patch": x.patch, "path": x.path, "message": x.message} for x in rec.problems],
    }


def history(h: History) -> dict:
    """`audit --history`: what git says happened to each patch."""

    def commit(c: Any) -> dict:
        return {"commit": c.hexsha, "short": c.short, "subject": c.subject, "date": c.date, "author": c.author}

    return {
        "repo": h.repo,
        "queue_path": h.queue_path,
        "commits": h.commits,
        "patches": [
            {
                "name": p.name,
                "in_series": p.in_series,
                "events": [{"kind": e.kind, **commit(e.commit), "detail": e.detail or None} for e in p.events],
            }
            for p in h.patches
        ],
        "flags": [{"kind": f.kind, "patch": f.patch, **commit(f.commit), "message": f.message} for f in h.flags],
    }


def audit_doc(report: AuditReport | None, expect: str, hist: History | None = None) -> dict:
    """`audit` of one image, root or process (no report: the queue has no patch to judge)."""
    from ..verbs.audit import RUNTIME_STATES, STATES

    doc = (
        audit_report(report)
        if report is not None
        else {"image": None, "patches": [], "summary": {s: 0 for s in STATES if s not in RUNTIME_STATES}}
    )
    doc["expect"] = expect
    if hist is not None:
        doc["history"] = history(hist)
    return doc


def audit_profiles_doc(audits: Sequence[Any], expect: str, matching: list[str], named: bool) -> dict:
    """`audit --profile all`: one document per profile and the ones that match (`named`: one image, root or process was given)."""
    docs = [{**audit_report(a.report), "expect": expect, "matches": a.matches} for a in audits if a.report is not None]
    first = docs[0]
    return {
        "image": first["image"] if named else None,
        "patches": [],
        "summary": {},
        "expect": expect,
        "profiles": docs,
        "matching": matching,
    }


def audit_platforms_doc(ref: str, audits: Sequence[PlatformAudit], expect: str) -> dict:
    """`audit --platform all`: per patch the state every platform shares (else partial), and `platforms`,
    one single-image document per platform."""
    from ..verbs.audit import LIVE, PARTIAL

    docs = [{**audit_report(a.report), "expect": expect} for a in audits]
    names = [p.name for p in audits[0].report.patches] if audits else []
    patches = []
    for i, name in enumerate(names):
        states = {a.report.patches[i].state for a in audits}
        files = [{**f, "platform": a.platform} for a, d in zip(audits, docs) for f in d["patches"][i]["files"]]
        patches.append(
            {"name": name, "state": states.pop() if len(states) == 1 else PARTIAL, "record": None, "files": files}
        )
    summary: dict[str, int] = {s: 0 for s in (audits[0].report.summary if audits else {LIVE: 0})}
    for p in patches:
        summary[p["state"]] = summary.get(p["state"], 0) + 1
    return {
        "image": {"ref": ref, "digest": None, "platform": "all", "kind": "image"},
        "series_sha256": audits[0].report.series_sha256 if audits else None,
        "patches": patches,
        "summary": summary,
        "expect": expect,
        "platforms": docs,
    }


def fleet_image(report: AuditReport, expect: str, profile_by: str | None = None) -> dict:
    """One image of a fleet audit (verbs.fleet makes the fleet document of them, and merges shards' documents)."""
    return {**audit_report(report), **({"profile_by": profile_by} if profile_by else {}), "expect": expect}


def fleet_unreadable(ref: str, platform: str | None, expect: str, error: ImgquiltError | None) -> dict:
    """An image of a fleet audit that could not be read: its reference and why."""
    assert error is not None
    return {
        "image": {"ref": ref, "digest": None, "platform": platform},
        "patches": [],
        "summary": {},
        "expect": expect,
        "error": error_doc(error)["error"],
    }


def verification(v: Verification) -> dict[str, Any]:
    """One image's attestation check."""
    from ..verbs.attest import PREDICATE_TYPE

    ok = v.verified
    return {
        "image": {"ref": v.ref, "digest": v.digest, "platform": v.platform},
        "key": {"path": v.key.path, "key_id": v.key.key_id, "algorithm": v.key.algorithm},
        "verified": ok is not None,
        "attestation": None
        if ok is None
        else {
            "digest": ok.digest,
            "where": ok.where,
            "predicate_type": PREDICATE_TYPE,
            "series_sha256": (ok.record or {}).get("series_sha256"),
            "base_digest": ((ok.record or {}).get("image") or {}).get("digest"),
            "predicate": ok.predicate,
        },
        "candidates": [
            {
                "digest": c.digest,
                "where": c.where,
                "verified": c.verified,
                "kind": c.kind,
                "reason": c.reason or None,
                "key_ids": list(c.key_ids),
            }
            for c in v.candidates
        ],
    }


def verify_doc(found: Sequence[Verification], image: str | None, all_platforms: bool) -> dict:
    """`verify`: one image, or with `--platform all` one document per platform."""
    docs = [verification(v) for v in found]
    if not all_platforms:
        return docs[0]
    return {
        "image": {"ref": found[0].ref if found else image, "digest": None, "platform": "all"},
        "key": docs[0]["key"] if docs else None,
        "verified": all(v.verified is not None for v in found),
        "platforms": docs,
    }


# --- rebase, port, diff --upstream --------------------------------------------------------------------
def rebase_doc(report: RebaseReport) -> dict:
    """`rebase` (also `--continue`, `--skip`, `--status`): done or stopped on a conflict. A patch's own
    form (`PatchOutcome.to_json`) is also what the sealed rebase state keeps."""
    doc = {
        "status": report.status,
        "image": {"old": report.old_image, "new": report.new_image},
        "patches": [p.to_json() for p in report.patches],
        "summary": report.summary(),
        "notes": list(report.notes),
    }
    if report.profile is not None:
        doc["profile"] = report.profile
    if report.pins:
        doc["profiles"] = [dict(d) for d in report.pins]
    if report.vendor:
        doc["vendor"] = report.vendor
    if report.status == "stopped":
        doc["conflict"] = {
            "patch": report.conflict_patch,
            "files": [
                {"path": f.path, "work": f.work, "kind": f.conflict, "detail": f.detail} for f in report.conflicts
            ],
            "next": ["imgquilt rebase --continue", "imgquilt rebase --abort"],
        }
        if report.pins:  # resolved once for every profile it stands in
            doc["conflict"]["profiles"] = list(report.conflict_profiles)
    return doc


def rebase_aborted_doc(report: RebaseReport | None, restored: list[str]) -> dict:
    """`rebase --abort`: the report so far (none: the rebase had changed nothing) and the files put back."""
    doc = rebase_doc(report) if report else {"status": "aborted"}
    doc["restored"] = restored
    return doc


def rebase_none_doc() -> dict:
    """`rebase --status` with no rebase under way."""
    return {"status": "none"}


def rebase_forgotten_doc(n: int) -> dict:
    """`rebase --forget`: how many kept resolutions were dropped."""
    return {"status": "forgotten", "forgotten": n}


def port_doc(r: Ported) -> dict:
    """`port` (also `--continue`, `--abort`). A file's own form (`PortedFile.to_json`) is also what the port state keeps."""
    doc = {
        "status": r.status,
        "patch": r.patch,
        "profile": r.profile,
        "copy": r.copy,
        "guards": list(r.guards),
        "copy_guards": list(r.copy_guards),
        "image": dict(r.image),
        "files": [f.to_json() for f in r.files],
        "notes": list(r.notes),
        "kept": list(r.kept),
    }
    if r.lock is not None:
        doc["targets_lock"] = targets_lock(r.lock)
    if r.status == "stopped":
        doc["conflict"] = {
            "files": [{"path": f.path, "work": f.work, "kind": f.kind, "detail": f.detail} for f in r.conflicts],
            "next": ["imgquilt port --continue", "imgquilt port --abort"],
        }
    return doc


def upstream_doc(d: UpstreamDiff) -> dict:
    """`diff --upstream PATCH`: upstream's change of the regions the patch edits (per profile in a rebase of several)."""
    doc = {
        "patch": d.patch,
        "old": d.old,
        "new": d.new,
        "files": list(d.paths),
        "upstream": [c.to_json() for c in d.changes],
    }
    if d.profile is not None:
        doc["profile"] = d.profile
    if d.lanes:
        doc["profiles"] = [upstream_doc(one) for one in d.lanes]
    return doc


# --- the quilt workflow --------------------------------------------------------------------------------
def new_doc(
    name: str, file: Any, top: str | None, header: Header, guards: Iterable[str], lock: LockUpdate | None
) -> dict:
    return {
        "patch": name,
        "file": str(file),
        "top": top,
        "header": header.raw.decode("utf-8", "replace"),
        "guards": list(dict.fromkeys(guards)),
        "targets_lock": targets_lock(lock),
    }


def add_doc(top: str, added: list[str], already: list[str], work: Mapping[str, Any], **extra: Any) -> dict:
    """`add` and `edit` (which adds what the editor did)."""
    return {"patch": top, "added": added, "already": already, "work": {p: str(w) for p, w in work.items()}, **extra}


def edit_doc(top: str, added: list[str], already: list[str], work: Mapping[str, Any], **extra: Any) -> dict:
    return add_doc(top, added, already, work, **extra)


def refresh_doc(r: Any, file: Any) -> dict:
    """`refresh` (work.refresh.Refreshed)."""
    return {
        "patch": r.name,
        "changed": r.changed,
        "file": str(file),
        "files": patch_files(r.patch),
        "targets_lock": targets_lock(r.lock) if r.lock else None,
    }


def rehash_doc(r: Any, file: Any) -> dict:
    """`refresh --rehash` (work.rehash.Rehashed): the hashes re-pinned and the patches re-chained after."""
    changed = [s for s in r.sections if s.old != s.new]
    return {
        "patch": r.name,
        "changed": r.name in r.written,
        "file": str(file),
        "files": patch_files(r.patch),
        "patches": list(r.names),
        "written": list(r.written),
        "repinned": [
            {"patch": s.patch, "path": s.path, "old_patched_sha256": s.old, "patched_sha256": s.new} for s in changed
        ],
        "rechained": [
            {
                "patch": c.patch,
                "path": c.path,
                "old_base_sha256": c.old_base,
                "base_sha256": c.base,
                "old_patched_sha256": c.old_patched,
                "patched_sha256": c.patched,
            }
            for c in r.rechained
        ],
        "lock": str(r.lock) if r.lock is not None else None,
        "notes": list(r.notes),
    }


def diff_doc(p: Patch) -> dict:
    """`diff` (also `-z`): each file's section with its diff text."""
    from ..fs.content import held

    return {
        "patch": p.name,
        "files": [
            {**f, "diff": held(s.raw, s.path).decode("utf-8", "replace")} for f, s in zip(patch_files(p), p.sections)
        ],
    }


def fold_doc(top: str, paths: list[str], notes: list[str]) -> dict:
    return {"patch": top, "files": paths, "notes": notes}


def push_doc(pushed: Sequence[Any], top: str | None) -> dict:
    """`push` (also the patches a refused push left applied)."""
    return {"pushed": [p.name for p in pushed], "files": {p.name: list(p.files) for p in pushed}, "top": top}


def pop_doc(popped: list[str], top: str | None) -> dict:
    return {"popped": popped, "top": top}


def top_doc(top: str | None) -> dict:
    return {"top": top}


def next_doc(name: str | None) -> dict:
    return {"next": name}


def previous_doc(name: str | None) -> dict:
    return {"previous": name}


def applied_doc(names: list[str]) -> dict:
    return {"applied": names}


def unapplied_doc(names: list[str]) -> dict:
    return {"unapplied": names}


def series_doc(names: list[str], applied: list[str], guarded: list[str]) -> dict:
    return {
        "series": names,
        "applied": applied,
        "top": applied[-1] if applied else None,
        **({"guarded": guarded} if guarded else {}),
    }


def header_doc(name: str, header: Header, changed: bool, asked: bool = False, lock: LockUpdate | None = None) -> dict:
    """`header` (after --set/--unset/--edit: whether it changed, and targets.lock)."""
    return {
        "patch": name,
        "header": header.raw.decode("utf-8", "replace"),
        "fields": [[k, v] for k, v in header.fields],
        "changed": changed,
        **({"targets_lock": targets_lock(lock)} if asked else {}),
    }


def files_doc(name: str, paths: list[str]) -> dict:
    return {"patch": name, "files": paths}


def remove_doc(top: str, paths: list[str], dropped: list[str], lock: LockUpdate | None) -> dict:
    return {
        "patch": top,
        "removed": list(dict.fromkeys(paths)),
        "sections_dropped": dropped,
        "targets_lock": targets_lock(lock),
    }


def revert_doc(top: str, changed: list[str]) -> dict:
    return {"patch": top, "reverted": changed}


def delete_doc(gone: str, removed_file: bool, top: str | None, lock: LockUpdate | None) -> dict:
    return {"deleted": gone, "removed_file": removed_file, "top": top, "targets_lock": targets_lock(lock)}


def rename_doc(old: str, new: str, touched: list[str], lock: LockUpdate | None) -> dict:
    return {"renamed": old, "to": new, "requires_updated": touched, "targets_lock": targets_lock(lock)}


def move_doc(m: Any, lock_path: Any, top: str | None) -> dict:
    """`move` (work.series_edit.Moved); `lock_path`: targets.lock, written with it."""
    return {
        "moved": m.name,
        "after": m.after,
        "applied": list(m.applied),
        "rechained": list(m.rechained),
        "lock": str(lock_path) if m.lock else None,
        "top": top,
    }


def guard_list_doc(entries: Iterable[Any]) -> dict:
    """`guard --list`: every patch's guards."""
    return {"guards": {e.name: list(e.guards) for e in entries}}


def guard_doc(
    name: str, guards: Iterable[str], changed: bool, lock: LockUpdate | None = None, set_: bool = False
) -> dict:
    """`guard [PATCH]` (shown) and `guard PATCH +G -G` (`set_`: changed, with targets.lock)."""
    return {
        "patch": name,
        "guards": list(guards),
        "changed": changed,
        **({"targets_lock": targets_lock(lock)} if set_ else {}),
    }


def select_doc(
    profile: str | None, guards: Iterable[str], chosen: list[str], every: list[str], popped: list[str]
) -> dict:
    return {
        "profile": profile,
        "select": list(guards),
        "patches": chosen,
        "guarded": [n for n in every if n not in chosen],
        "popped": popped,
    }


def import_doc(
    done: Sequence[Any],
    items: Sequence[Any],
    patches_dir: Any,
    top: str | None,
    placed: Sequence[Any],
    skipped: Iterable[tuple[str, str, str]],
    others: Mapping[str, Iterable[str]],
    lock: LockUpdate | None,
) -> dict:
    """`import`: each patch imported (its guards from a vendor series), where they went, what was skipped."""
    return {
        "imported": [
            {
                "name": d.name,
                "kind": d.kind,
                "file": str(patches_dir / d.name),
                "files": patch_files(d.patch),
                "notes": list(d.notes),
                **({"guards": list(g)} if (g := next((it.guards for it in items if it.name == d.name), ())) else {}),
            }
            for d in done
        ],
        "top": top,
        "after": placed[0].after if placed else None,
        "rechained": list(placed[0].rechained) if placed else [],
        "skipped": [{"source": src, "subject": subject, "why": why} for src, subject, why in skipped],
        **({"guarded": {n: list(g) for n, g in others.items()}} if others else {}),
        "targets_lock": targets_lock(lock),
    }


# --- cache ------------------------------------------------------------------------------------------
def _usage(u: Usage) -> dict:
    return {"entries": u.entries, "bytes": u.bytes}


def cache_doc(r: CacheReport) -> dict:
    return {
        "cache": {
            "path": str(r.root),
            "cap_bytes": r.cap,
            **_usage(r.total),
            "parts": {name: _usage(u) for name, u in r.parts.items()},
        }
    }


def cache_pruned_doc(removed: Usage, root: Any) -> dict:
    return {"pruned": _usage(removed), "cache": {"path": str(root)}}


# Each schema in docs/schemas/ and the renderers of its documents (tests/cli/test_documents.py holds them equal).
DOCUMENTS: dict[str, tuple[Callable[..., Any], ...]] = {
    "init": (init_doc,),
    "check": (check_doc,),
    "lock": (lock_doc, lock_profiles_doc),
    "apply": (apply_doc, apply_profiles_doc, apply_platforms_doc, restored_doc),
    "restore": (restored_doc,),
    "overlay-args": (overlay_args_doc,),
    "audit": (audit_doc, audit_profiles_doc, audit_platforms_doc, fleet_image, fleet_unreadable),
    "verify": (verify_doc,),
    "rebase": (rebase_doc, rebase_aborted_doc, rebase_none_doc, rebase_forgotten_doc),
    "boot": (boot_doc,),
    "import": (import_doc,),
    "new": (new_doc,),
    "add": (add_doc,),
    "edit": (edit_doc,),
    "refresh": (refresh_doc, rehash_doc),
    "push": (push_doc,),
    "pop": (pop_doc,),
    "top": (top_doc,),
    "applied": (applied_doc,),
    "unapplied": (unapplied_doc,),
    "series": (series_doc,),
    "diff": (diff_doc, upstream_doc),
    "header": (header_doc,),
    "delete": (delete_doc,),
    "rename": (rename_doc,),
    "move": (move_doc,),
    "guard": (guard_list_doc, guard_doc),
    "select": (select_doc,),
    "port": (port_doc,),
    "fold": (fold_doc,),
    "cache": (cache_doc, cache_pruned_doc),
    "files": (files_doc,),
    "remove": (remove_doc,),
    "revert": (revert_doc,),
    "next": (next_doc,),
    "previous": (previous_doc,),
}
