"""`audit` over a fleet: several --image (or --images-from), or --merge of shards' documents: a
patches x images matrix (a table on a terminal, tab-separated rows in a pipe, one document with --json)."""
from __future__ import annotations

from typing import Any

from ..errors import BadInput, ImgquiltError, NotLive
from .annotations import Format, annotate
from .common import AUDIT_COLOR, G, emit_outcome, say, table


def say_fleet(done, expect: str, format: Format, *, strict: bool = False) -> None:
    """A fleet audit's entries (verbs.audit_verb.FleetAudited) as the patches x images matrix."""
    from ..verbs.fleet import fleet_document
    from .documents import fleet_image, fleet_unreadable

    images = []
    for e in done.entries:
        if e.report is not None:
            images.append(fleet_image(e.report, expect, e.profile_by))
        else:
            images.append(fleet_unreadable(e.ref, done.platform, expect, e.error))
    finish(fleet_document(images, expect, strict=strict), format)


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


def finish(doc: dict[str, Any], format: Format) -> None:
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
