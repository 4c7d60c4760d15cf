"""`audit` over a fleet: several --image (or --images-from), or --merge of shards' documents: a
patches x images matrix (a table on a terminal, tab-separated rows in a pipe, one document with --json)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BadInput, ImgquiltError, NotLive, UsageError
from .annotations import Format, annotate
from .common import AUDIT_COLOR, G, emit_outcome, load, open_ref, say, table


def image_refs(images: list[str], images_from: Path | None) -> list[str]:
    from ..verbs.fleet import read_image_list, unique

    return unique([*images, *(read_image_list(images_from) if images_from is not None else [])])


def fleet_cmd(refs: list[str], platform: str | None, expect: str, format: Format, trust=None, *, strict: bool = False) -> None:
    from .documents import fleet_image, fleet_unreadable
    from ..verbs.fleet import audit_fleet, fleet_document

    if not refs:
        raise UsageError("No image to audit.", hint="Pass --image REF (repeatable) or --images-from FILE.")
    q = load()
    entries = audit_fleet(q, refs, lambda ref: open_ref(ref, platform), trust=trust, expect=expect)
    images = []
    for e in entries:
        if e.report is not None:
            images.append(fleet_image(e.report, expect, e.profile_by))
        else:
            images.append(fleet_unreadable(e.ref, platform, expect, e.error))
    _finish(fleet_document(images, expect, strict=strict), format)


def merge_cmd(files: list[Path], expect: str | None, format: Format) -> None:
    from ..util.regular import read_regular_file
    from ..verbs.fleet import merge_documents, parse_shard

    docs = []
    for f in files:
        try:
            data = read_regular_file(f)
        except OSError as exc:
            raise UsageError(f"--merge {f}: cannot be read ({exc.strerror or exc}).") from None
        if data is None:
            raise UsageError(f"--merge {f}: no such file.")
        docs.append((str(f), parse_shard(str(f), data)))
    _finish(merge_documents(docs, expect), format)


BY = {"record": "its apply record", "digest": "its digest's pin", "match": "it matches", "closest": "closest match"}


def _profiles_table(doc: dict[str, Any], expect: str) -> None:
    """On a queue with profiles: which profile judged each image, and why that one (docs/profiles.md)."""
    from ..verbs.fleet import image_ref, not_as_expected

    rows: list[list[str | tuple[str, str]]] = []
    for d in doc["images"]:
        if d.get("error") and not d.get("patches"):
            continue
        bad = not_as_expected(d, expect, strict=bool(doc.get("strict")))
        rows.append([image_ref(d), d.get("profile") or "(default)", BY.get(d.get("profile_by") or "", d.get("profile_by") or ""),
                     ("not " + expect, "red") if bad else (expect, "green")])
    table("Profile of each image", ["image", "profile", "chosen by", "verdict"], rows)


def _finish(doc: dict[str, Any], format: Format) -> None:
    from ..verbs.fleet import image_ref, not_as_expected

    expect = doc["expect"]
    failing = [d for d in doc["images"] if not_as_expected(d, expect, strict=bool(doc.get("strict")))]
    broken = [d for d in doc["images"] if d.get("error") and not d.get("patches")]
    failure: ImgquiltError | None = None
    if broken:
        failure = BadInput(f"{len(broken)} of {len(doc['images'])} image(s) could not be audited: "
                           + "; ".join(f"{image_ref(d)}: {d['error']['message']}" for d in broken),
                           hint="The matrix holds the others; fix the reference (or the registry access) and run again.")
    elif failing:
        failure = NotLive(f"{len(failing)} of {len(doc['images'])} image(s) have a patch that is not {expect}: "
                          + ", ".join(image_ref(d) for d in failing) + ".",
                          hint="Rebuild those images with the queue applied (`imgquilt apply --output-image`).")
    if G.json:
        emit_outcome(doc, failure)
        return
    if format is Format.github:
        for d in failing:
            whose = f" (profile {d['profile']})" if d.get("profile") else ""
            for p in d["patches"]:
                if p["state"] != expect:
                    annotate("error", f"patches/{p['name']}", "imgquilt audit",
                             f"{p['name']} is {p['state']}, not {expect}, in {image_ref(d)}{whose}.")
    refs = [image_ref(d) for d in doc["images"]]
    rows: list[list[str | tuple[str, str]]] = []
    for name in doc["patches"]:
        states = doc["matrix"][name]
        rows.append([name, *((states[r], AUDIT_COLOR.get(states[r], "white")) if r in states else ("-", "dim") for r in refs)])
    table(f"Audit of {len(refs)} image(s) (expect {expect})", ["patch", *refs], rows)
    if doc.get("profiles"):
        _profiles_table(doc, expect)
    for d in doc["images"]:
        if d.get("error") and not d.get("patches"):
            say(f"{image_ref(d)}: not audited: {d['error']['message']}")
        elif d.get("attestation"):
            say(f"{image_ref(d)}: {d['attestation']['note']}.")
    s = doc["summary"]
    say(f"{s['images']} image(s): {s['as_expected']} with every patch {expect}, {s['not_as_expected']} not, {s['unreadable']} unreadable.")
    if failure is not None:
        raise failure
