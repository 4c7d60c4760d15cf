"""targets.lock: the pinned image and the pinned state of every target file (TOML, sorted, stable),
and one `[profile.NAME]` section per profile: the same keys for the patches that profile selects,
its guard selection and its environment defaults (docs/targets-lock.md)."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Callable, Sequence
from pathlib import Path


from ..errors import ImgquiltError, MalformedLock, in_words
from ..fs.content import Data
from ..fs.types import ImageInfo
from .hunks import sha256_hex
from ..util.names import ENV_KEY
from ..util.regular import read_regular_file

LOCK_VERSION = 1


@dataclass(frozen=True)
class LockTarget:
    """One target file as pinned."""

    path: str
    resolved: str
    base_sha256: str
    final_sha256: str
    mode: int
    uid: int
    gid: int
    layer: str | None
    patches: tuple[str, ...]
    link: bool = False  # the target is a symlink (its hashes are over the link's target); `kind = "symlink"`


@dataclass(frozen=True)
class Lock:
    """The whole targets.lock."""

    series_sha256: str
    image: ImageInfo
    targets: tuple[LockTarget, ...]
    version: int = LOCK_VERSION
    patch_sha256: tuple[tuple[str, str], ...] = ()  # (patch name, sha256 of its file) as locked; () in older locks

    def target(self, path: str) -> LockTarget | None:
        return next((t for t in self.targets if t.path == path), None)

    def changed_patches(self, names: list[str], raws: Sequence[Data]) -> tuple[list[str], list[str], list[str]] | None:
        """(patches whose file changed, patches new since, patches gone since) against what this lock was
        made from, in series order; None when the lock does not record its patches (an older imgquilt's)."""
        if not self.patch_sha256:
            return None
        known = dict(self.patch_sha256)
        changed = [n for n, raw in zip(names, raws) if n in known and known[n] != sha256_hex(raw)]
        return changed, [n for n in names if n not in known], [n for n in known if n not in names]


PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Profile:
    """One deployment in targets.lock (`[profile.NAME]`): the guards it selects, the environment
    defaults its images get, and its own pin of the patches it selects."""

    name: str
    select: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    lock: Lock


@dataclass(frozen=True)
class LockFile:
    """The whole targets.lock: the default pin (None: the file pins only profiles) and the profiles."""

    default: Lock | None
    profiles: tuple[Profile, ...] = ()

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def with_profile(self, profile: Profile) -> LockFile:
        others = tuple(p for p in self.profiles if p.name != profile.name)
        return replace(self, profiles=tuple(sorted((*others, profile), key=lambda p: p.name)))


@dataclass(frozen=True)
class LockUpdate:
    """What a command did about targets.lock (each of its pins: the default's and every profile's)."""

    pinned: bool  # the queue has a lock at all
    written: bool = False  # targets.lock follows the change (rewritten in the same transaction)
    path: Path | None = None
    why: str | None = None  # why a pin could not follow (it is stale now); several: `; `-joined, each named
    todo: str | None = None  # and the way on
    modules_read: bool = False  # the cross-module Python check read modules from the pinned image (never a base)

    def line(self) -> str | None:
        """The command's output about the lock (None: no lock, nothing to say)."""
        lines = []
        if self.written:
            lines.append("Updated targets.lock (no base read from the image; the Python check read the modules the "
                         "patched files import)." if self.modules_read else "Updated targets.lock (no image read).")
        if self.why:
            todo = self.todo or ""
            what = "targets.lock is stale now" if not self.written else "Part of it is stale now"
            lines.append(f"{what}: {self.why}; {todo[:1].lower() + todo[1:]}")
        return "\n".join(lines) or None


def patch_hashes(names: list[str], raws: list[Data]) -> tuple[tuple[str, str], ...]:
    return tuple((n, sha256_hex(raw)) for n, raw in zip(names, raws))


@dataclass(frozen=True)
class LockNote:
    """Why a command that changed the queue left targets.lock stale (it could not write it in the same
    transaction): kept in `.imgquilt/state/lock-note.json`, sealed with the user's key, and believed only
    while the queue is still what that command left (`series_sha256`)."""

    series_sha256: str
    command: str  # as the user typed it: "imgquilt refresh"
    why: str  # one sentence: what it could not do
    todo: str  # the way on


NOTE_FILE = "lock-note.json"


def render_note(note: LockNote) -> bytes:
    from ..util.sealing import seal

    doc = {"version": 1, "series_sha256": note.series_sha256, "command": note.command, "why": note.why, "todo": note.todo}
    doc["seal"] = seal(doc)
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def read_note(root: Path) -> LockNote | None:
    """The note a command left in this queue's local state; None when there is none or it is not ours."""
    from ..util.sealing import sealed_here
    from ..util.statedir import StateDir

    try:
        raw = StateDir(root, "state").read(NOTE_FILE)
        doc = json.loads(raw) if raw is not None else None
        if not isinstance(doc, dict) or doc.get("version") != 1 or not sealed_here(doc):
            return None
        return LockNote(str(doc["series_sha256"]), str(doc["command"]), str(doc["why"]), str(doc["todo"]))
    except (ImgquiltError, OSError, ValueError, KeyError, TypeError):
        return None


def stale_lock_advice(lock: Lock, names: list[str], raws: Sequence[Data], scope: str = "series", *, series_sha256: str = "",
                      note: LockNote | None = None, hand_edited: set[str] | None = None,
                      unchecked: set[str] | None = None) -> tuple[str, str]:
    """(what changed since the lock was made, and by whom, what to run): the real cause first.

    - a command left it stale (its `note`, for this very queue): what it could not do, and the way on;
    - patch files edited by hand: whose body no longer gives its Patched-SHA256 (`hand_edited`, found
      on the bases the object store holds) is re-pinned by `refresh --rehash`; a hand edit whose hashes
      still agree with its body needs only `imgquilt lock`; where no base was at hand to tell
      (`unchecked`, or no check at all) both ways are named;
    - series edited by hand (patches new, gone or moved): `imgquilt lock`.
    `scope`: what the patches enter and leave (a guarded series' pin: "the selection")."""
    from .patchfile import rehash_command  # on use: reading a lock reads no patch

    if note is not None and series_sha256 and note.series_sha256 == series_sha256:
        return f"`{note.command}` changed the queue and could not update it: {note.why}", note.todo
    found = lock.changed_patches(names, raws)
    if found is None:
        return "series or a patch changed since", "run `imgquilt lock`."
    changed, new, gone = found
    moved = not changed and not new and not gone
    what = [f"{', '.join(which)} {how}" for which, how in ((new, "new"), (gone, f"left {scope}")) if which]
    if moved:
        return f"{scope} edited by hand since it was made: its order or options changed", "run `imgquilt lock`."
    if not changed:
        return f"{scope} edited by hand since it was made: " + "; ".join(what), "run `imgquilt lock`."
    others = "".join(f"; {', '.join(which)} {how}" for which, how in ((new, "new"), (gone, f"left {scope}")) if which)
    if hand_edited is not None:
        bad = [n for n in changed if n in hand_edited]
        unknown = [n for n in changed if n in (unchecked or set()) and n not in hand_edited]
        if bad:
            return (f"{', '.join(bad)} edited by hand since it was made: its body no longer gives its Patched-SHA256{others}",
                    f"{rehash_command(bad)} re-pins a hand edit (and the patches after it) and writes the lock.")
        if not unknown:
            return (f"{', '.join(changed)} edited by hand since it was made: its hunks and hashes still agree{others}",
                    "run `imgquilt lock` (it verifies the series on the pinned image and writes the lock).")
    return (f"{', '.join(changed)} edited by hand since it was made{others}",
            f"{rehash_command(changed)} re-pins a hand edit (and the patches after it) and writes the lock; or run `imgquilt lock`.")


def rootfs_digest(pairs: list[tuple[str, str]]) -> str:
    """A digest for a filesystem with no manifest: over its (resolved path, base sha256) pairs."""
    h = hashlib.sha256()
    for resolved, sha in sorted(set(pairs)):
        h.update(f"{resolved}\0{sha}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest()


def _lock_doc(lock: Lock) -> dict:
    """The keys of one pin (top level or a profile's), sorted as written."""
    image = {"ref": lock.image.ref, "digest": lock.image.digest or ""}
    if lock.image.platform:
        image["platform"] = lock.image.platform
    targets = []
    for t in sorted(lock.targets, key=lambda t: t.path):
        entry = {
            "base_sha256": t.base_sha256,
            "final_sha256": t.final_sha256,
            "gid": t.gid,
            "mode": f"{t.mode:04o}",
            "path": t.path,
            "patches": list(t.patches),
            "resolved": t.resolved,
            "uid": t.uid,
        }
        if t.layer:
            entry["layer"] = t.layer
        if t.link:
            entry["kind"] = "symlink"
        targets.append(dict(sorted(entry.items())))
    doc: dict = {"series_sha256": lock.series_sha256, "image": dict(sorted(image.items()))}
    if lock.patch_sha256:
        doc["patch_sha256"] = dict(sorted(lock.patch_sha256))
    if targets:
        doc["target"] = targets
    return doc


def render_lock(lock: Lock) -> bytes:
    """TOML with sorted keys and targets sorted by path: one line changes per changed fact."""
    import tomli_w  # writing a lock only: `check` and `top` read one at most

    return tomli_w.dumps({"version": lock.version, **_lock_doc(lock)}).encode()


def render_lock_file(lf: LockFile) -> bytes:
    """The whole targets.lock: the default pin as render_lock writes it (a file without profiles is
    byte for byte what it always was), then one `[profile.NAME]` section per profile, by name."""
    import tomli_w

    out = render_lock(lf.default) if lf.default is not None else tomli_w.dumps({"version": LOCK_VERSION}).encode()
    for p in sorted(lf.profiles, key=lambda p: p.name):
        doc = _lock_doc(p.lock)
        targets = doc.pop("target", [])
        head: dict = {"select": list(p.select), "series_sha256": doc["series_sha256"]}
        if p.env:
            head["env"] = dict(p.env)
        head["image"] = doc["image"]
        if "patch_sha256" in doc:
            head["patch_sha256"] = doc["patch_sha256"]
        text = tomli_w.dumps({"profile": {p.name: head}})
        if targets:  # as [[profile.NAME.target]] tables, like the top level's, not inline
            text += "\n" + tomli_w.dumps({"target": targets}).replace("[[target]]", f"[[profile.{p.name}.target]]")
        out += b"\n" + text.encode()
    return out


def lock_with(current: bytes | None, lock: Lock, profile: str | None = None, *, source: str = "targets.lock") -> bytes:
    """The bytes of targets.lock after writing `lock` as the default pin (`profile` None) or as that
    profile's pin (its selection and env kept): every other section is kept as it is. Every command
    that writes a pin goes through here, so a pin never drops the others."""
    lf = parse_lock_file(current, source=source) if current else LockFile(None)
    if profile is None:
        return render_lock_file(replace(lf, default=lock))
    old = lf.profile(profile)
    if old is None:
        raise MalformedLock(f"{source} no longer declares profile {profile!r}, whose pin was to be written.",
                            hint=f"Declare it again with `imgquilt lock --profile {profile} --image REF`.")
    return render_lock_file(lf.with_profile(replace(old, lock=lock)))


def _id(value: object, key: str) -> int:
    """A uid or gid: a TOML integer in the 32-bit range (not a float, `inf` or a string)."""
    if type(value) is not int or not 0 <= value < 2**32:
        raise ValueError(f"{key} must be an integer from 0 to 4294967295, not {value!r}")
    return value


def _lock_mode(value: object) -> int:
    """An octal string of permission bits (setuid/setgid/sticky allowed: the lock records what the image holds)."""
    if not isinstance(value, str) or not re.fullmatch(r"[0-7]{3,4}", value):
        raise ValueError(f"mode must be an octal string such as \"0644\", not {value!r}")
    return int(value, 8)


def _opt_str(value: object, key: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def _kind(value: object) -> bool:
    if value not in ("file", "symlink"):
        raise ValueError(f"kind must be \"file\" or \"symlink\", not {value!r}")
    return value == "symlink"


def _patch_hashes(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for v in value.values()):
        raise ValueError("[patch_sha256] must map patch names to 64-hex sha256 strings")
    return tuple((str(k), v) for k, v in value.items())


def _tables(value: object) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ValueError("[[target]] must be a list of tables")
    return value


def _parse_pin(doc: dict) -> Lock:
    img = doc["image"]
    if not isinstance(img, dict):
        raise ValueError("[image] must be a table")
    ref = img["ref"]
    if not isinstance(ref, str) or not ref.strip():  # an image reference is a word, never taken from a number
        raise ValueError(f"[image] ref must be an image reference (a non-empty string), not {ref!r}")
    info = ImageInfo(
        ref=ref,
        digest=str(img.get("digest") or "") or None,
        platform=img.get("platform"),
        kind="rootfs" if ref.startswith("rootfs:") else "image",
    )
    targets = tuple(
        LockTarget(
            path=str(t["path"]),
            resolved=str(t["resolved"]),
            base_sha256=str(t["base_sha256"]),
            final_sha256=str(t["final_sha256"]),
            mode=_lock_mode(t["mode"]),
            uid=_id(t["uid"], "uid"),
            gid=_id(t["gid"], "gid"),
            layer=_opt_str(t.get("layer"), "layer"),
            patches=tuple(str(p) for p in t["patches"]),
            link=_kind(t.get("kind", "file")),
        )
        for t in _tables(doc.get("target", []))
    )
    seen: set[str] = set()
    for t in targets:
        if t.path in seen:
            raise ValueError(f"[[target]] {t.path!r} is pinned twice")
        seen.add(t.path)
    return Lock(str(doc["series_sha256"]), info, targets, patch_sha256=_patch_hashes(doc.get("patch_sha256", {})))


def _parse_profile(name: str, doc: object) -> Profile:
    if not isinstance(doc, dict):
        raise ValueError(f"[profile.{name}] must be a table")
    if not PROFILE_NAME.fullmatch(name) or name == "all":
        raise ValueError(f"{name!r} is not a profile name (letters, digits, `_` and `-`; not `all`)")
    select = doc.get("select", [name])
    if not isinstance(select, list) or not all(isinstance(g, str) and g and g[0] not in "+-" and not any(c.isspace() or c == "#" for c in g) for g in select):
        raise ValueError(f"[profile.{name}] select must be a list of guard names (no +/-, no blank, no #)")
    env = doc.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and ENV_KEY.fullmatch(k) and isinstance(v, str) and "\0" not in v
                                            for k, v in env.items()):
        raise ValueError(f"[profile.{name}.env] must map variable names to strings")
    return Profile(name, tuple(select), tuple(sorted(env.items())), _parse_pin(doc))


def toml_doc(data: bytes) -> dict:
    """The TOML document `data` holds (tomllib's errors as it raises them)."""
    import tomllib  # on use: a queue without a lock never parses TOML

    return tomllib.loads(data.decode("utf-8"))


def parse_lock_file(data: bytes, *, source: str = "targets.lock", loads: Callable[[bytes], dict] = toml_doc) -> LockFile:
    """Read targets.lock, profiles included; any missing or mistyped key is MalformedLock. `loads`:
    what turns the bytes into the TOML document (toml_doc, or a caller's cache of exactly its result)."""
    import tomllib

    try:
        doc = loads(data)
        if type(doc.get("version")) is not int or doc.get("version") != LOCK_VERSION:  # 1.0 and true are no version
            raise MalformedLock(f"{source}: unsupported version {doc.get('version')!r} (this imgquilt reads {LOCK_VERSION}).")
        profiles = doc.get("profile", {})
        if not isinstance(profiles, dict):
            raise ValueError("[profile] must hold one table per profile")
        default = _parse_pin(doc) if ("image" in doc or not profiles) else None
        return LockFile(default, tuple(_parse_profile(str(n), p) for n, p in sorted(profiles.items())))
    except MalformedLock:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MalformedLock(
            f"{source} cannot be read: {in_words(exc)}.",
            hint="Regenerate it with `imgquilt lock` (docs/targets-lock.md describes the format).",
        ) from None


def parse_lock(data: bytes, *, source: str = "targets.lock") -> Lock:
    """Read targets.lock's default pin; any missing or mistyped key is MalformedLock."""
    lf = parse_lock_file(data, source=source)
    if lf.default is None:
        raise MalformedLock(f"{source} pins only profiles ({', '.join(lf.names)}), no default image.",
                            hint="Name one with --profile NAME, or pin a default with `imgquilt lock --image REF`.")
    return lf.default


def read_lock(path: Path) -> Lock | None:
    """The default pin of the lock at `path`, or None when there is none (no file, or only profiles)."""
    return read_lock_file(path).default


def read_lock_file(path: Path) -> LockFile:
    """The whole lock at `path` (no file: no pin, no profile)."""
    data = read_regular_file(path)
    if data is None:
        return LockFile(None)
    return parse_lock_file(data, source=str(path))
