#!/usr/bin/env python3
"""Build the demo image `examples/demo-image/` (an OCI layout, tag `latest`) reproducibly.

    python3 examples/build_demo.py            # (re)write examples/demo-image
    python3 examples/build_demo.py --rootfs DIR   # write the flattened filesystem to DIR

The file contents live under `examples/demo-layers/{base,service,update}/`; this script adds what
git cannot hold (modes, owners, symlinks, whiteouts, an opaque directory, a hard link) and writes
each layer as a sorted PAX tar with mtime 0, gzipped with a fixed header, so every digest is the
same on every machine, run after run.

  layer 1 "base"    merged /usr (`bin -> usr/bin`, `lib -> usr/lib`), `usr/bin/which` 0755,
                    `etc/os-release -> ../usr/lib/os-release`, the absolute symlink
                    `etc/alternatives/demo-tool -> /usr/lib/demo-tool/tool.py`, and
                    `home/app/config.toml` owned by 1000:1000
  layer 2 "service" the `demosvc` Python package and `etc/demosvc/conf.d/`
  layer 3 "update"  whites out `demosvc/legacy.py`, makes `etc/demosvc/conf.d/` opaque (new
                    content only), overwrites `demosvc/config.py`, and adds `usr/local/bin/demosvc`
                    with a hard link `usr/local/bin/demosvc-serve`

The rootfs writer (`materialize_rootfs`) applies the same layers with a runtime's semantics; it
sets the owners with chown only when run as root.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import struct
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
LAYERS_DIR = HERE / "demo-layers"
IMAGE_DIR = HERE / "demo-image"
TAG = "latest"
SITE = "usr/local/lib/python3.11/site-packages"

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"

Kind = Literal["dir", "file", "symlink", "hardlink", "whiteout", "opaque"]


@dataclass(frozen=True)
class Entry:
    """One member of a demo layer."""

    path: str
    kind: Kind
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    target: str = ""  # symlink target (verbatim) or hard link target (a path in the same layer)


@dataclass(frozen=True)
class LayerSpec:
    name: str
    comment: str
    modes: dict[str, int]  # path -> mode, for files and directories (default 0644 / 0755)
    owners: dict[str, tuple[int, int]]  # path -> (uid, gid)
    extra: tuple[Entry, ...]  # symlinks, hard links, whiteouts, opaque markers


LAYERS: tuple[LayerSpec, ...] = (
    LayerSpec(
        name="base",
        comment="merged-/usr base: which, os-release, demo-tool alternative, app user",
        modes={
            "usr/bin/which": 0o755,
            "usr/lib/demo-tool/tool.py": 0o755,
            "home/app": 0o750,
            "home/app/config.toml": 0o640,
        },
        owners={"home/app": (1000, 1000), "home/app/config.toml": (1000, 1000)},
        extra=(
            Entry("bin", "symlink", 0o777, target="usr/bin"),
            Entry("lib", "symlink", 0o777, target="usr/lib"),
            Entry("etc/os-release", "symlink", 0o777, target="../usr/lib/os-release"),
            Entry("etc/alternatives/demo-tool", "symlink", 0o777, target="/usr/lib/demo-tool/tool.py"),
            Entry("usr/bin/demo-tool", "symlink", 0o777, target="/etc/alternatives/demo-tool"),
            Entry("root", "dir", 0o700),
            Entry("tmp", "dir", 0o1777),
            Entry("var/lib", "dir", 0o755),
            Entry("var/log", "dir", 0o755),
            Entry("usr/local/bin", "dir", 0o755),
            Entry(SITE, "dir", 0o755),
        ),
    ),
    LayerSpec(
        name="service",
        comment="demosvc 1.4.2 and its configuration",
        modes={},
        owners={},
        extra=(),
    ),
    LayerSpec(
        name="update",
        comment="demosvc 1.4.3: drop legacy.py, replace conf.d, new config.py, launcher",
        modes={"usr/local/bin/demosvc": 0o755},
        owners={},
        extra=(
            Entry(f"{SITE}/demosvc/.wh.legacy.py", "whiteout"),
            Entry("etc/demosvc/conf.d/.wh..wh..opq", "opaque"),
            Entry("usr/local/bin/demosvc-serve", "hardlink", 0o755, target="usr/local/bin/demosvc"),
        ),
    ),
)


# --- layer entries ----------------------------------------------------------------------------
def _tree_key(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


def layer_entries(spec: LayerSpec) -> list[Entry]:
    """Every member of one layer, in tree order (a directory right before its children)."""
    root = LAYERS_DIR / spec.name
    entries: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            uid, gid = spec.owners.get(rel, (0, 0))
            entries[rel] = Entry(rel, "file", spec.modes.get(rel, 0o644), uid, gid, full.read_bytes())
    for e in spec.extra:
        entries[e.path] = e
    for path in list(entries):
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in entries:
                uid, gid = spec.owners.get(d, (0, 0))
                entries[d] = Entry(d, "dir", spec.modes.get(d, 0o755), uid, gid)
    return sorted(entries.values(), key=lambda e: _tree_key(e.path))


def _tarinfo(e: Entry) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(e.path)
    ti.mtime = 0
    ti.uid, ti.gid = e.uid, e.gid
    ti.uname = ti.gname = ""
    ti.mode = e.mode
    if e.kind == "dir":
        ti.type = tarfile.DIRTYPE
    elif e.kind == "symlink":
        ti.type, ti.linkname = tarfile.SYMTYPE, e.target
    elif e.kind == "hardlink":
        ti.type, ti.linkname = tarfile.LNKTYPE, e.target
    else:  # file, whiteout, opaque marker: regular files (markers are empty)
        ti.type = tarfile.REGTYPE
        ti.size = len(e.data)
    return ti


def layer_tar(spec: LayerSpec) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for e in layer_entries(spec):
            tar.addfile(_tarinfo(e), io.BytesIO(e.data) if e.kind in ("file", "whiteout", "opaque") else None)
    return buf.getvalue()


def gzip_fixed(data: bytes) -> bytes:
    """gzip with a fixed header (mtime 0, no name, OS unknown): the same bytes everywhere."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
    body = comp.compress(data) + comp.flush()
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + body + struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)


# --- the OCI layout ---------------------------------------------------------------------------
def _json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_blobs() -> tuple[dict[str, bytes], dict]:
    """(digest -> blob bytes, the index document) for the demo image."""
    blobs: dict[str, bytes] = {}
    layers, diff_ids, history = [], [], []
    for spec in LAYERS:
        tar = layer_tar(spec)
        blob = gzip_fixed(tar)
        blobs[_sha(blob)] = blob
        layers.append({"mediaType": MEDIA_LAYER_GZIP, "digest": _sha(blob), "size": len(blob)})
        diff_ids.append(_sha(tar))
        history.append({"created": "1970-01-01T00:00:00Z", "created_by": f"build_demo.py: {spec.name}", "comment": spec.comment})
    config = {
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": "1000:1000",
            "Env": ["PATH=/usr/local/bin:/usr/bin", "PYTHONPATH=/" + SITE],
            "Cmd": ["/usr/local/bin/demosvc"],
            "WorkingDir": "/home/app",
            "Labels": {"org.opencontainers.image.title": "imgquilt demo", "org.opencontainers.image.version": "1.4.3"},
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_bytes = _json(config)
    blobs[_sha(config_bytes)] = config_bytes
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": _sha(config_bytes), "size": len(config_bytes)},
        "layers": layers,
    }
    manifest_bytes = _json(manifest)
    blobs[_sha(manifest_bytes)] = manifest_bytes
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _sha(manifest_bytes),
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": TAG},
            }
        ],
    }
    return blobs, index


def build_image(dest: Path = IMAGE_DIR) -> str:
    """Write the OCI layout to `dest` (replacing it whole); return the manifest digest."""
    blobs, index = image_blobs()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        (tmp / "blobs" / "sha256").mkdir(parents=True)
        for digest, data in blobs.items():
            (tmp / "blobs" / "sha256" / digest.split(":", 1)[1]).write_bytes(data)
        (tmp / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
        (tmp / "index.json").write_bytes(_json(index))
        for p in [tmp, *tmp.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return index["manifests"][0]["digest"]


# --- the flattened filesystem -----------------------------------------------------------------
def flatten() -> dict[str, tuple[Entry, int]]:
    """The merged filesystem: path -> (entry, layer number), as a runtime stacks the layers."""
    fs: dict[str, tuple[Entry, int]] = {}

    def drop_below(prefix: str) -> None:
        for p in [p for p in fs if p.startswith(prefix + "/")]:
            del fs[p]

    for n, spec in enumerate(LAYERS):
        entries = layer_entries(spec)
        for e in entries:  # whiteouts and opaque markers act on the lower layers only
            parent, _, name = e.path.rpartition("/")
            if e.kind == "opaque":
                drop_below(parent)
            elif e.kind == "whiteout":
                gone = f"{parent}/{name[len('.wh.'):]}" if parent else name[len(".wh."):]
                fs.pop(gone, None)
                drop_below(gone)
        for e in entries:
            if e.kind in ("opaque", "whiteout"):
                continue
            if e.path in fs and fs[e.path][0].kind == "dir" and e.kind != "dir":
                drop_below(e.path)
            fs[e.path] = (e, n)
    return fs


def materialize_rootfs(dest: Path) -> Path:
    """Write the flattened demo filesystem into `dest` (created; must not exist or be empty).

    Owners are set with chown only when running as root; a hard link becomes a real hard link.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty")
    as_root = os.geteuid() == 0
    fs = flatten()
    dirs = []
    for path in sorted(fs, key=_tree_key):
        e, _ = fs[path]
        target = dest / path
        if e.kind == "dir":
            target.mkdir(exist_ok=True)
            dirs.append((target, e))
            continue
        if e.kind == "symlink":
            os.symlink(e.target, target)
            if as_root:
                os.lchown(target, e.uid, e.gid)
            continue
        if e.kind == "hardlink":
            os.link(dest / e.target, target)
            continue
        target.write_bytes(e.data)
        if as_root:
            os.chown(target, e.uid, e.gid)
        os.chmod(target, e.mode)
    for target, e in reversed(dirs):  # last, so a 0750 directory does not block its own children
        if as_root:
            os.chown(target, e.uid, e.gid)
        os.chmod(target, e.mode)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", type=Path, help="write the flattened filesystem here instead")
    parser.add_argument("--output", type=Path, default=IMAGE_DIR, help="the OCI layout to write")
    args = parser.parse_args(argv)
    if args.rootfs:
        materialize_rootfs(args.rootfs)
        print(f"demo rootfs written to {args.rootfs}")
        return 0
    digest = build_image(args.output)
    print(f"demo image written: oci:{args.output}:{TAG} ({digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
