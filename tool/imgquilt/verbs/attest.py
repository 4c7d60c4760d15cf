"""Provenance: a signed in-toto statement of what `apply` put into an image, and checking one.

`apply --attest KEY` signs, for each image manifest it writes, an in-toto Statement v1 whose subject
is that manifest's digest and whose predicate holds the apply record (var/lib/imgquilt/applied.json,
embedded as a value: every field the record gains flows into the predicate), the platform and the
new layer. The statement travels in a DSSE envelope, stored as an OCI 1.1 referrer of the image
(image.referrers). `verify` and `audit --trust-attestation` find the image's referrers, check the
signature with a public key, the subject and that the record matches the current queue. See
docs/provenance.md.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .audit import LIVE, AuditReport, FileAudit, PatchAudit, RecordCheck, TrustCheck, check_record
from ..engine.record import read_record_seen
from ..engine.result import RECORD_PATH, ApplyResult
from ..errors import NotAttested
from ..fs.content import held
from ..fs.types import ImageInfo
from ..image.mediatypes import OCI_MANIFEST
from ..image.model import Image
from ..image.referrers import Found, Referrer, Subject, find_referrers, holds_referrers
from ..image.sinks.mutate import NewImage
from ..queue.hunks import ABSENT
from ..queue.queue import Queue
from ..util.dsse import PrivateKey, PublicKey, sign_envelope, verify_envelope

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://imgquilt.example/attestation/apply/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE_TYPE = "application/vnd.dsse.envelope.v1+json"  # the referrer's artifactType and its layer's media type
ANNOTATION_PREDICATE = "in-toto.io/predicate-type"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"  # `apply --boot --attest`: predicate.boot
ARTIFACT_TYPES = frozenset({ENVELOPE_TYPE, PAYLOAD_TYPE})  # what a candidate may be listed as
PAYLOAD_MEDIA_TYPES = frozenset({ENVELOPE_TYPE})


# --- signing --------------------------------------------------------------------------------------
def applied_record(result: ApplyResult) -> dict[str, Any]:
    """The apply record as written into the image (the bytes at RECORD_PATH), as a JSON value."""
    for f in result.files:
        if f.target.path == RECORD_PATH and f.final is not None:
            return json.loads(held(f.final, RECORD_PATH))
    raise AssertionError("an apply result always holds its record")


def subject_name(ref: str) -> str:
    """The statement subject's name: the repository for a registry (as cosign names it), else the
    image's tag; never a local path, so the same apply signs the same statement on any machine."""
    if ref.startswith("docker://"):
        from ..image.registry import parse_registry_ref

        r = parse_registry_ref(ref)
        return f"{r.domain}/{r.repository}"
    from ..image.sinks.image import parse_output_ref

    return parse_output_ref(ref).tag or "image"


def boot_predicate(report: Any, patched_digest: str) -> dict[str, Any]:
    """`apply --boot`'s report as an in-toto test-result v0.1 predicate: every probe a test (a module
    that boots passed, one that cannot be told warned), the base and the patched images as its
    configuration."""
    passed = sorted({p.module or p.path for p in report.probes if p.verdict == "boots"})
    warned = sorted({p.module or p.path for p in report.probes if p.verdict == "cannot tell"})
    failed = sorted({p.module or p.path for p in report.probes if p.verdict == "fails"})
    config = [{"name": "base", "digest": {"sha256": report.digest.split(":", 1)[1]}}] if report.digest else []
    config.append({"name": "patched", "digest": {"sha256": patched_digest.split(":", 1)[1]}})
    return {"predicateType": TEST_RESULT_TYPE,
            "predicate": {"result": "FAILED" if failed else ("WARNED" if warned else "PASSED"), "configuration": config,
                          "passedTests": passed, "warnedTests": warned, "failedTests": failed,
                          "verdicts": {p.name: p.verdict for p in report.patches}}}


def statement(result: ApplyResult, img: NewImage, ref: str, platform: str, boot: Any = None) -> bytes:
    """The in-toto Statement v1 for `img` (a manifest apply wrote from `result`); with `boot` (a boot
    report), its test-result predicate as `predicate.boot`."""
    doc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name(ref), "digest": {"sha256": img.manifest_digest.split(":", 1)[1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "record": applied_record(result),
            "platform": platform,
            "layer": None if img.layer is None else {"digest": img.layer.digest, "diff_id": img.layer.diff_id},
        },
    }
    if boot is not None:
        doc["predicate"]["boot"] = boot_predicate(boot, img.manifest_digest)  # type: ignore[index]
    return json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Attester:
    """`apply --attest KEY`: signs one attestation per image manifest written."""

    key: PrivateKey
    boot: Any = None  # `apply --boot`: the boot report that let the image be written

    def referrer(self, result: ApplyResult, img: NewImage, ref: str, platform: str | None = None) -> Referrer:
        """The signed statement as a referrer of `img`'s manifest."""
        payload = statement(result, img, ref, platform or result.info.platform or "unknown", self.boot)
        return Referrer(Subject(OCI_MANIFEST, img.manifest_digest, len(img.manifest)), ENVELOPE_TYPE, ENVELOPE_TYPE,
                        sign_envelope(PAYLOAD_TYPE, payload, self.key), {ANNOTATION_PREDICATE: PREDICATE_TYPE})

    def stored_json(self, stored: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
        """`outputs.image.attestations`: each referrer stored and where it is listed."""
        return [{"digest": digest, "where": where, "key_id": self.key.public.key_id, "predicate_type": PREDICATE_TYPE}
                for digest, where in stored]


# --- verifying ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One referrer that might attest the image, and what checking it found."""

    digest: str
    where: str
    verified: bool
    kind: str  # "verified", or why not: "unreadable", "malformed", "wrong-key", "bad-signature", "other-predicate",
    #            "other-subject", "stale-series", "file-hashes", "boot" (a boot result that did not pass),
    #            "env" (a profile's defaults not attested)
    reason: str
    key_ids: tuple[str, ...] = ()
    record: dict[str, Any] | None = None  # the attested apply record (a verified signature only)
    predicate: dict[str, Any] | None = None


@dataclass(frozen=True)
class Verification:
    """The attestations of one image manifest, each checked with one key against the queue."""

    ref: str
    digest: str
    platform: str
    key: PublicKey
    candidates: tuple[Candidate, ...]
    looked_in: str  # where referrers were looked for ("" when the transport holds none)

    @property
    def verified(self) -> Candidate | None:
        return next((c for c in self.candidates if c.verified), None)

    def failure(self) -> NotAttested:
        """The exit-3 error naming why each candidate failed (or that there was none)."""
        what = f"{self.ref} ({self.digest}, {self.platform})"
        if not self.candidates:
            where = f" (looked in {self.looked_in})" if self.looked_in else " (this transport holds no referrers)"
            return NotAttested(f"No attestation found for {what}{where}.",
                               hint="Attest it when it is written: `imgquilt apply --attest KEY --output-image REF`.")
        lines = "\n".join(f"  - {c.digest} ({c.where}): {c.reason}" for c in self.candidates)
        return NotAttested(f"No attestation of {what} verifies with key {self.key.key_id} ({self.key.path}) "
                           f"and matches the queue:\n{lines}",
                           hint="Give the public key that signed it, or apply the current queue again with --attest.")


def _queue_mismatches(queue: Queue, record: dict[str, Any]) -> list[str]:
    """Where the attested record's patches and file hashes differ from the queue's."""
    got = [p.get("name") for p in record.get("patches") or [] if isinstance(p, dict)]
    if got != queue.names:
        return [f"the attested patches are {got}, the series lists {queue.names}"]
    out = []
    for patch, attested in zip(queue.patches, record["patches"]):
        files = {f.get("path"): f for f in attested.get("files") or [] if isinstance(f, dict)}
        for s in patch.sections:
            f = files.get(s.path) or {}
            for key, want in (("base_sha256", s.base_sha256), ("patched_sha256", s.patched_sha256)):
                if f.get(key) != want:
                    out.append(f"{patch.name}: {s.path}: attested {key} {f.get(key)}, the patch pins {want}")
        extra = sorted(set(files) - {s.path for s in patch.sections}, key=str)
        out += [f"{patch.name}: {p}: attested, but the patch does not touch it" for p in extra]
    return out


def check_candidate(found: Found, digest: str, key: PublicKey, queue: Queue, env: tuple[tuple[str, str], ...] = ()) -> Candidate:
    """Signature, statement, subject, then the record against the queue: the first failure is the reason."""
    def no(kind: str, reason: str, ids: tuple[str, ...] = (), **more: Any) -> Candidate:
        return Candidate(found.digest, found.where, False, kind, reason, ids, **more)

    if found.payload is None:
        return no("unreadable", f"cannot be read: {found.problem}")
    opened = verify_envelope(found.payload, key)
    if not opened.verified:
        return no(opened.failure or "malformed", opened.reason, opened.key_ids)
    ids = opened.key_ids
    if opened.payload_type != PAYLOAD_TYPE:
        return no("malformed", f"the envelope's payloadType is {opened.payload_type!r}, not {PAYLOAD_TYPE}", ids)
    try:
        doc = json.loads(opened.payload or b"")
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        return no("malformed", f"the signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})", ids)
    if doc.get("predicateType") != PREDICATE_TYPE:
        return no("other-predicate", f"predicate type {doc.get('predicateType')!r}, not imgquilt's {PREDICATE_TYPE}", ids)
    hexes = [s.get("digest", {}).get("sha256") for s in doc.get("subject") or [] if isinstance(s, dict) and isinstance(s.get("digest"), dict)]
    if digest.split(":", 1)[1] not in hexes:
        named = ", ".join(f"sha256:{h}" for h in hexes if isinstance(h, str)) or "nothing"
        return no("other-subject", f"other subject: the statement attests {named}, not this image's {digest}", ids)
    predicate = doc.get("predicate")
    record = predicate.get("record") if isinstance(predicate, dict) else None
    try:
        read_record_seen(json.dumps(record).encode())
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return no("malformed", "the predicate holds no readable apply record", ids)
    assert isinstance(record, dict) and isinstance(predicate, dict)
    if record.get("series_sha256") != queue.series_sha256:
        return no("stale-series", f"stale series: attested for series sha256 {record.get('series_sha256')}, the queue is now "
                  f"{queue.series_sha256} (the queue changed since this apply)", ids, record=record, predicate=predicate)
    mismatches = _queue_mismatches(queue, record)
    if mismatches:
        return no("file-hashes", "the attested file hashes differ from the queue: " + "; ".join(mismatches[:5]), ids,
                  record=record, predicate=predicate)
    booted = predicate.get("boot")
    if booted is not None:  # apply --boot: a test-result that passed (or could not tell), for this very image
        inner = booted.get("predicate") if isinstance(booted, dict) else None
        digests = [c.get("digest", {}).get("sha256") for c in (inner or {}).get("configuration") or []
                   if isinstance(c, dict) and c.get("name") == "patched" and isinstance(c.get("digest"), dict)]
        if (not isinstance(inner, dict) or booted.get("predicateType") != TEST_RESULT_TYPE
                or inner.get("result") not in ("PASSED", "WARNED") or digest.split(":", 1)[1] not in digests):
            return no("boot", "the attested boot result is not a passing test-result for this image", ids,
                      record=record, predicate=predicate)
    attested_env = record.get("env") or {}
    if env and attested_env != dict(env):
        return no("env", f"the attested environment defaults are {attested_env}, the profile's are {dict(env)}", ids,
                  record=record, predicate=predicate)
    return Candidate(found.digest, found.where, True, "verified", "", ids, record, predicate)


def verify_image(queue: Queue, image: Image, ref: str, key: PublicKey, env: tuple[tuple[str, str], ...] = ()) -> Verification:
    """Every attestation of `image`'s manifest (where `ref` lives), each checked (`env`: a profile's
    environment defaults, which the attested record must hold)."""
    digest = image.manifest_digest
    if not holds_referrers(ref):
        return Verification(ref, digest, image.platform, key, (), "")
    if ref.startswith("docker://"):
        from ..image.referrers import fallback_tag

        looked = f"the referrers API, else the tag {fallback_tag(digest)}"
    else:
        looked = "index.json"
    candidates = []
    for found in find_referrers(ref, digest, ARTIFACT_TYPES, PAYLOAD_MEDIA_TYPES):  # one candidate held at a time
        c = check_candidate(found, digest, key, queue, env)
        candidates.append(c if c.verified else replace(c, record=None, predicate=None))  # keep only why, not what
    return Verification(ref, digest, image.platform, key, tuple(candidates), looked)


# --- audit from an attestation --------------------------------------------------------------------
def trust_check(v: Verification) -> TrustCheck:
    ok = v.verified
    rejected = tuple((c.digest, c.reason) for c in v.candidates if not c.verified)
    if ok is not None:
        return TrustCheck("attestation", ok.digest, v.key.key_id, rejected, f"answered from attestation {ok.digest}")
    why = v.failure().message.split("\n", 1)[0]
    return TrustCheck("layers", None, v.key.key_id, rejected, f"{why.rstrip('.:')}; the layers were read")


def attested_report(queue: Queue, v: Verification, info: ImageInfo) -> AuditReport:
    """The audit a layer read would give, from a verified attestation that matches the queue: every
    patch is live (the apply verified each result, and the manifest digest pins those bytes)."""
    ok = v.verified
    assert ok is not None and ok.record is not None
    record = ok.record
    rec = read_record_seen(json.dumps(record).encode())
    resolved = {(p["name"], f["path"]): f.get("resolved") or f["path"] for p in record["patches"] for f in p.get("files", [])}
    final: dict[str, str] = {}
    for p in queue.patches:
        for s in p.sections:
            final[resolved[(p.name, s.path)]] = s.patched_sha256  # the last section on a file decides
    layer = ((ok.predicate or {}).get("layer") or {}).get("digest")
    patches = []
    for p in queue.patches:
        files = []
        for s in p.sections:
            where = resolved[(p.name, s.path)]
            deleted = final[where] == ABSENT and s.base_sha256 != ABSENT and layer
            files.append(FileAudit(s.path, where, LIVE, s.base_sha256, s.patched_sha256, final[where],
                                   f"deleted (whited out) by layer {layer}" if deleted else "", rec.files[p.name].get(s.path)))
        patches.append(PatchAudit(p.name, LIVE, tuple(files), "applied"))
    check = RecordCheck(RECORD_PATH, rec.series_sha256, rec.series_sha256 == queue.series_sha256, rec.image_ref,
                        rec.image_digest, rec.version, tuple(rec.files), tuple(check_record(queue, rec, patches)))
    return AuditReport(info, queue.series_sha256, tuple(patches), check, trust=trust_check(v))


def audit_trusting(queue: Queue, source, key: PublicKey) -> AuditReport:
    """audit --trust-attestation: from a verified attestation that matches the queue (no layer is
    read), else from the layers as always, saying why no attestation answered."""
    from dataclasses import replace

    from .audit import audit_source
    from ..sources import BackedByImage

    info = source.info()
    if not isinstance(source, BackedByImage) or info.kind != "image":
        report = audit_source(queue, source)
        note = f"{info.ref} is a {info.kind}, which holds no attestations; the files were read"
        return replace(report, trust=TrustCheck("layers", None, key.key_id, (), note))
    v = verify_image(queue, source.image, info.ref, key)
    if v.verified is not None:
        from ..image.base_image import base_of

        return replace(attested_report(queue, v, info), base=base_of(source.image))
    return replace(audit_source(queue, source), trust=trust_check(v))

