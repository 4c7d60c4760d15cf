"""Fleet audit: one queue against many images, read concurrently, as one patches x images matrix.

Images are read by a small pool of threads (a registry serves a few streams well, and the machine
decompresses on every core). Within the run a layer blob that several images share is downloaded
once (image.registry.blob_memo). An image that cannot be read does not stop the others: its entry
carries the error. `merge_documents` joins the JSON documents of several shards (single-image or
fleet documents) into the document one run over all their images would have printed.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .audit import STATES, AuditReport, audit_source
from ..errors import BadInput, ImgquiltError, UsageError, os_error, os_why
from ..fs.types import Source
from ..image.registry.blob_memo import shared_downloads
from ..queue.queue import Queue

WORKERS = 4


@dataclass(frozen=True)
class FleetEntry:
    """One image of the fleet: its audit, or why it could not be read."""

    ref: str
    report: AuditReport | None
    error: ImgquiltError | None = None
    profile_by: str | None = None  # on a queue with profiles: how the image's profile was chosen (verbs.profiles.judge_own)


def read_image_list(path: Path) -> list[str]:
    """`--images-from FILE`: one reference per line; blank lines and `#` comments are skipped."""
    from ..util.regular import read_regular_file

    try:
        data = read_regular_file(path)  # a FIFO or device is exit 6, never a hang
        if data is None:
            raise FileNotFoundError(2, "no such file")
        text = data.decode("utf-8")
    except OSError as exc:
        raise UsageError(f"--images-from {path}: cannot be read ({os_why(exc)[0]}).",
                         hint="Name a text file of image references, one a line.") from None
    except UnicodeDecodeError:
        raise UsageError(f"--images-from {path}: cannot be read (it is not UTF-8 text).",
                         hint="Name a text file of image references, one a line.") from None
    refs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            refs.append(line.split(" #", 1)[0].strip())  # a reference holds no space: the rest is a comment
    if not refs:
        raise UsageError(f"--images-from {path}: no image reference in it (one per line, # comments).")
    return refs


def unique(refs: Sequence[str]) -> list[str]:
    """The references in their order, each once (a ref named twice is audited once)."""
    return list(dict.fromkeys(refs))


def audit_fleet(queue: Queue, refs: Sequence[str], open_source: Callable[[str], Source], *,
                workers: int = WORKERS, trust=None, expect: str = "live") -> list[FleetEntry]:
    """Audit every image of `refs` (in that order in the result), at most `workers` at a time; with
    `trust` (a public key), each from a verified attestation where one matches the queue. On a queue
    with profiles each image is judged by its own profile (verbs.profiles.judge_own, which needs the
    `expect`ed state), as `audit --profile all` judges it."""
    from .attest import audit_trusting
    from .profiles import judge_own, lock_file

    lf = lock_file(queue.root)

    def one(ref: str) -> FleetEntry:
        try:
            source = open_source(ref)
            if lf.profiles:
                report, by = judge_own(queue, lf, source, expect, trust)
                return FleetEntry(ref, report, profile_by=by)
            return FleetEntry(ref, audit_trusting(queue, source, trust) if trust is not None else audit_source(queue, source))
        except ImgquiltError as exc:
            return FleetEntry(ref, None, exc)
        except OSError as exc:  # a path the system refuses (too long, a loop, no permission): this image's error only
            return FleetEntry(ref, None, os_error(exc, f"image {ref}"))

    with shared_downloads(), ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="imgquilt-audit") as pool:
        return list(pool.map(one, refs))


# --- documents ----------------------------------------------------------------------------------
def fleet_document(images: list[dict[str, Any]], expect: str, *, strict: bool = False) -> dict[str, Any]:
    """The fleet document over single-image documents (each with `image` and `patches`, or `error`).
    `strict` (audit --strict): an image with a file whose running code imgquilt cannot tell is not as expected."""
    names: list[str] = []
    for d in images:
        for p in d.get("patches") or []:
            if p["name"] not in names:
                names.append(p["name"])
    series = sorted({d["series_sha256"] for d in images if d.get("series_sha256")})
    matrix = {n: {} for n in names}
    for d in images:
        ref = image_ref(d)
        for p in d.get("patches") or []:
            matrix[p["name"]][ref] = p["state"]
    failing = [image_ref(d) for d in images if not_as_expected(d, expect, strict=strict)]
    errors = [image_ref(d) for d in images if d.get("error") and not d.get("patches")]
    profiles = {image_ref(d): d["profile"] for d in images if d.get("profile")}
    return {
        "expect": expect,
        **({"strict": True} if strict else {}),
        "series_sha256": series[0] if len(series) == 1 else None,
        **({"profiles": profiles} if profiles else {}),
        "patches": names,
        "images": images,
        "matrix": matrix,
        "summary": {"images": len(images), "as_expected": len(images) - len(failing) - len(errors),
                    "not_as_expected": len(failing), "unreadable": len(errors)},
        **_attested(images),
    }


def _attested(images: list[dict[str, Any]]) -> dict[str, Any]:
    """--trust-attestation: which images were answered from attestations (absent without it)."""
    if not any("answered_from" in d for d in images):
        return {}
    return {"answered_from_attestations": [image_ref(d) for d in images if d.get("answered_from") == "attestation"]}


def image_ref(doc: dict[str, Any]) -> str:
    image = doc.get("image") or {}
    return str(image.get("ref") or doc.get("ref") or "?")


def not_as_expected(doc: dict[str, Any], expect: str, *, strict: bool = False) -> bool:
    """A readable image with a patch not in the expected state, or (live) lacking an environment default
    of its profile (`strict`: or a pyc imgquilt cannot tell)."""
    patches = doc.get("patches") or []
    if any(p["state"] != expect for p in patches):
        return True
    env = doc.get("env")
    if expect == "live" and isinstance(env, dict) and env.get("missing"):
        return True  # a profile's environment default the image lacks (as audit's own exit 5)
    return strict and any(b.get("verdict") == "cannot-tell" for p in patches for f in p.get("files") or []
                          for b in f.get("bytecode") or [])


MAX_DEPTH = 64  # an audit document nests six levels; a shard nested deeper is not one
EXPECTS = ("live", "pending")


def parse_shard(name: str, data: bytes) -> Any:
    """A shard's JSON: strict (no NaN or Infinity, no lone surrogate, bounded nesting), else BadInput."""
    import json

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    try:
        doc = json.loads(data, parse_constant=refuse)
    except RecursionError:
        raise BadInput(f"--merge {name}: nested too deeply to be an imgquilt audit document.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"--merge {name}: not JSON ({exc}).", hint="Merge what `imgquilt audit --json` printed.") from None
    problem = _json_problem(doc, 0)
    if problem:
        raise BadInput(f"--merge {name}: {problem}.", hint="Merge what `imgquilt audit --json` printed.")
    return doc


def _json_problem(value: Any, depth: int) -> str | None:
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone surrogate (not UTF-8)"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        problem = _json_problem(key, depth + 1) if isinstance(key, str) else None
        problem = problem or _json_problem(item, depth + 1)
        if problem:
            return problem
    return None


def _shape_problem(part: Any) -> str | None:
    """What in one image's document is not as `audit --json` writes it (only what the matrix reads)."""
    if not isinstance(part, dict):
        return "an image's document is not a JSON object"
    patches = part.get("patches", [])
    if not isinstance(patches, list):
        return "`patches` is not a list"
    for p in patches:
        if not (isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("state"), str)):
            return "a patch entry lacks a string `name` and `state`"
        if p["state"] not in STATES:
            return f"a patch's state is not one of {', '.join(STATES)}"
    image = part.get("image", {})
    if image is not None and not isinstance(image, dict):
        return "`image` is not an object"
    if isinstance(image, dict) and not isinstance(image.get("ref"), (str, type(None))):
        return "`image.ref` is not a string"
    if not isinstance(part.get("ref"), (str, type(None))):
        return "`ref` is not a string"
    if not isinstance(part.get("series_sha256"), (str, type(None))):
        return "`series_sha256` is not a string"
    if not isinstance(part.get("profile"), (str, type(None))):
        return "`profile` is not a string"
    error = part.get("error")
    if error is not None and not (isinstance(error, dict) and isinstance(error.get("message", ""), str)):
        return "`error` is not an error object with a string `message`"
    if part.get("expect", "live") not in EXPECTS:
        return f"`expect` is not one of {', '.join(EXPECTS)}"
    return None


def merge_files(files: Sequence[Path], expect: str | None) -> dict[str, Any]:
    """`audit --merge FILE...`: each shard read (a regular file, as every queue file) and parsed
    strictly, then merged (merge_documents)."""
    from ..util.regular import read_regular_file

    docs = []
    for f in files:
        try:
            data = read_regular_file(f)
        except OSError as exc:
            raise UsageError(f"--merge {f}: cannot be read ({exc.strerror or exc}).") from None
        if data is None:
            raise UsageError(f"--merge {f}: no such file.")
        docs.append((str(f), parse_shard(str(f), data)))
    return merge_documents(docs, expect)


def merge_documents(docs: Sequence[tuple[str, Any]], expect: str | None) -> dict[str, Any]:
    """One fleet document from shards' documents (`docs`: (file name, parsed JSON)).

    Every shard must have audited the same series, with the same --expect (unless `expect` overrides).
    A document not shaped as `audit --json` writes it is BadInput naming what is wrong.
    """
    images: list[dict[str, Any]] = []
    expects: set[str] = set()
    for name, doc in docs:
        if not isinstance(doc, dict):
            raise BadInput(f"{name}: not an imgquilt audit document (a JSON object is expected).")
        if isinstance(doc.get("images"), list):
            parts = doc["images"]
        elif "patches" in doc or "error" in doc:
            # a single image's document: its own verdict (exit 5) is the matrix's to give again
            parts = [{k: v for k, v in doc.items() if k != "error"} if doc.get("patches") else doc]
        else:
            raise BadInput(f"{name}: not an imgquilt audit document (neither `images` nor `patches`).",
                           hint="Merge what `imgquilt audit --json` printed for each shard.")
        if doc.get("expect", "live") not in EXPECTS:
            raise BadInput(f"{name}: not an imgquilt audit document (`expect` is not one of {', '.join(EXPECTS)}).")
        expects.add(doc.get("expect", "live"))
        for part in parts:
            problem = _shape_problem(part)
            if problem:
                raise BadInput(f"{name}: not an imgquilt audit document ({problem}).",
                               hint="Merge what `imgquilt audit --json` printed for each shard.")
            images.append(part)
    # each profile's images must have been judged by one version of its selection (no profile: the series)
    series: dict[str | None, set[str]] = {}
    for d in images:
        if d.get("series_sha256"):
            series.setdefault(d.get("profile"), set()).add(d["series_sha256"])
    for profile, seen in series.items():
        if len(seen) > 1:
            whose = f" for profile {profile}" if profile else ""
            raise BadInput(f"The documents audited different series{whose} ({', '.join(sorted(seen))}): their states cannot share one matrix.",
                           hint="Audit every shard from the same commit of the queue.")
    if expect is None:
        if len(expects) > 1:
            raise BadInput(f"The documents were audited with different --expect ({', '.join(sorted(expects))}).",
                           hint="Pass --expect to say which state the merged matrix checks.")
        expect = expects.pop() if expects else "live"
    return fleet_document(images, expect)
