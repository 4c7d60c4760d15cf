"""Building real test images: layer tars from entry lists, OCI layouts with umoci, conversions
with skopeo, and the few things neither tool writes (zstd or uncompressed layers, multi-platform
indexes, Docker 25+ OCI-in-tar archives, corrupt blobs).

Layers are described as lists of entries made with `file`, `dir_`, `symlink`, `hardlink`,
`whiteout` and `opaque`, or as an existing directory (tarred as it is). Parent directories of
entries are added explicitly unless `parents=False`.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any, Callable, Iterable

import zstandard

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
LAYER_TYPES = {
    None: "application/vnd.oci.image.layer.v1.tar",
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}


# --- entries -----------------------------------------------------------------------------
def file(path: str, data: bytes | str, *, mode: int = 0o644, uid: int = 0, gid: int = 0) -> dict[str, Any]:
    if isinstance(data, str):
        data = data.encode()
    return {"kind": "file", "path": path, "data": data, "mode": mode, "uid": uid, "gid": gid}


def dir_(path: str, *, mode: int = 0o755, uid: int = 0, gid: int = 0) -> dict[str, Any]:
    return {"kind": "dir", "path": path, "mode": mode, "uid": uid, "gid": gid}


def symlink(path: str, target: str) -> dict[str, Any]:
    return {"kind": "symlink", "path": path, "target": target}


def hardlink(path: str, target: str, *, mode: int = 0o644, uid: int = 0, gid: int = 0) -> dict[str, Any]:
    return {"kind": "hardlink", "path": path, "target": target, "mode": mode, "uid": uid, "gid": gid}


def whiteout(path: str) -> dict[str, Any]:
    parent, _, name = path.rpartition("/")
    return {"kind": "file", "path": f"{parent}/.wh.{name}" if parent else f".wh.{name}", "data": b"",
            "mode": 0o644, "uid": 0, "gid": 0}


def opaque(directory: str) -> dict[str, Any]:
    return {"kind": "file", "path": f"{directory}/.wh..wh..opq", "data": b"", "mode": 0o644, "uid": 0, "gid": 0}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- layer tars --------------------------------------------------------------------------
def layer_bytes(entries: Iterable[dict[str, Any]], *, parents: bool = True, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """An uncompressed layer tar holding `entries` in order (explicit parents first)."""
    buf = io.BytesIO()
    done: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for e in entries:
            if parents:
                parts = e["path"].split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    p = "/".join(parts[:i])
                    if p not in done:
                        done.add(p)
                        ti = tarfile.TarInfo(p)
                        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(ti)
            ti = tarfile.TarInfo(e["path"])
            ti.uid, ti.gid = e.get("uid", 0), e.get("gid", 0)
            ti.mode = e.get("mode", 0o644)
            ti.mtime = 1700000000
            kind = e["kind"]
            if kind == "file":
                ti.size = len(e["data"])
                tar.addfile(ti, io.BytesIO(e["data"]))
            elif kind == "dir":
                ti.type = tarfile.DIRTYPE
                done.add(e["path"])
                tar.addfile(ti)
            elif kind == "symlink":
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, e["target"], 0o777
                tar.addfile(ti)
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, e["target"]
                tar.addfile(ti)
            else:
                raise ValueError(kind)
    return buf.getvalue()


def dir_layer_bytes(root: Path) -> bytes:
    """An uncompressed tar of a directory's content, paths relative to it, sorted."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = Path(dirpath) / name
                tar.add(full, arcname=str(full.relative_to(root)), recursive=False)
    return buf.getvalue()


def compress(data: bytes, compression: str | None) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


# --- tools -------------------------------------------------------------------------------
def run(*cmd: str | Path) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


def skopeo_copy(src: str, dst: str, *extra: str) -> None:
    run("skopeo", "--insecure-policy", "copy", "--quiet", *extra, src, dst)


# --- OCI layouts -------------------------------------------------------------------------
def build_oci(layout: Path, layers: list[list[dict[str, Any]] | Path | bytes], *, tag: str = "latest",
              compression: str | None | list[str | None] = "gzip", platform: str | None = None,
              parents: bool = True) -> Path:
    """An OCI layout whose image `tag` has `layers` (bottom first), built with umoci.

    umoci writes gzip layers; `compression` (one value, or one per layer) rewrites them afterwards.
    """
    layout = Path(layout)
    if not (layout / "oci-layout").exists():
        run("umoci", "init", "--layout", layout)
    run("umoci", "new", "--image", f"{layout}:{tag}")
    tmp = layout.parent / f".{layout.name}-layer.tar"
    for spec in layers:
        if isinstance(spec, bytes):
            data = spec
        elif isinstance(spec, Path):
            data = dir_layer_bytes(spec)
        else:
            data = layer_bytes(spec, parents=parents)
        tmp.write_bytes(data)
        run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", tmp)
    tmp.unlink(missing_ok=True)
    if platform is not None:
        os_, arch, *variant = platform.split("/")
        args = ["--os", os_, "--architecture", arch]
        run("umoci", "config", "--image", f"{layout}:{tag}", *args)
        if variant:
            set_config(layout, tag, lambda c: c.update(variant=variant[0]))
    comps = compression if isinstance(compression, list) else [compression] * len(layers)
    for i, comp in enumerate(comps):
        if comp != "gzip":
            recompress_layer(layout, tag, i, comp)
    return layout


def umoci_edit(layout: Path, tag: str, edit: Callable[[Path], None], *, new_tag: str | None = None) -> None:
    """Unpack `tag`, let `edit` change the rootfs, repack as a new layer (real umoci diffs and whiteouts)."""
    bundle = layout.parent / f".{layout.name}-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    run("umoci", "unpack", "--image", f"{layout}:{tag}", bundle)
    edit(bundle / "rootfs")
    run("umoci", "repack", "--image", f"{layout}:{new_tag or tag}", bundle)
    shutil.rmtree(bundle)


def blob_path(layout: Path, digest: str) -> Path:
    algo, hexpart = digest.split(":")
    return Path(layout) / "blobs" / algo / hexpart


def put_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + sha256_hex(data)
    path = blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def read_index(layout: Path) -> dict[str, Any]:
    return json.loads((Path(layout) / "index.json").read_text())


def write_index(layout: Path, index: dict[str, Any]) -> None:
    (Path(layout) / "index.json").write_text(json.dumps(index))


def tag_descriptor(layout: Path, tag: str) -> dict[str, Any]:
    for d in read_index(layout)["manifests"]:
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            return d
    raise KeyError(tag)


def manifest(layout: Path, tag: str) -> tuple[str, dict[str, Any]]:
    d = tag_descriptor(layout, tag)
    return d["digest"], json.loads(blob_path(layout, d["digest"]).read_bytes())


def set_manifest(layout: Path, tag: str, m: dict[str, Any]) -> str:
    """Store manifest `m` and point `tag` at it; returns its digest."""
    data = json.dumps(m).encode()
    digest = put_blob(layout, data)
    index = read_index(layout)
    for d in index["manifests"]:
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            d.update(digest=digest, size=len(data), mediaType=m.get("mediaType", OCI_MANIFEST))
    write_index(layout, index)
    return digest


def set_config(layout: Path, tag: str, change: Callable[[dict[str, Any]], None]) -> None:
    _, m = manifest(layout, tag)
    config = json.loads(blob_path(layout, m["config"]["digest"]).read_bytes())
    change(config)
    data = json.dumps(config).encode()
    m["config"].update(digest=put_blob(layout, data), size=len(data))
    set_manifest(layout, tag, m)


def layer_digests(layout: Path, tag: str) -> list[str]:
    return [layer["digest"] for layer in manifest(layout, tag)[1]["layers"]]


def uncompressed_layer(layout: Path, digest: str) -> bytes:
    data = blob_path(layout, digest).read_bytes()
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


def recompress_layer(layout: Path, tag: str, index: int, compression: str | None,
                     media_type: str | None = None) -> str:
    """Rewrite layer `index` of `tag` with another compression (None: uncompressed); new digest."""
    _, m = manifest(layout, tag)
    layer = m["layers"][index]
    blob = compress(uncompressed_layer(layout, layer["digest"]), compression)
    layer.update(digest=put_blob(layout, blob), size=len(blob), mediaType=media_type or LAYER_TYPES[compression])
    set_manifest(layout, tag, m)
    return layer["digest"]


def make_index(layout: Path, members: dict[str, str], tag: str, *, keep_members: bool = False) -> str:
    """Tag `tag` as an image index over the images tagged by `members` {platform: tag}; unless
    `keep_members`, those tags are removed from index.json so the index is the only way to them."""
    manifests = []
    for platform, member_tag in members.items():
        d = tag_descriptor(layout, member_tag)
        os_, arch, *variant = platform.split("/")
        p = {"os": os_, "architecture": arch}
        if variant:
            p["variant"] = variant[0]
        manifests.append({"mediaType": d.get("mediaType", OCI_MANIFEST), "digest": d["digest"],
                          "size": d["size"], "platform": p})
    data = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()
    digest = put_blob(layout, data)
    index = read_index(layout)
    if not keep_members:
        index["manifests"] = [d for d in index["manifests"] if d.get("annotations", {}).get(
            "org.opencontainers.image.ref.name") not in members.values()]
    index["manifests"].append({"mediaType": OCI_INDEX, "digest": digest, "size": len(data),
                               "annotations": {"org.opencontainers.image.ref.name": tag}})
    write_index(layout, index)
    return digest


def docker25_archive(layout: Path, tag: str, out: Path, repo_tag: str) -> Path:
    """A Docker 25+ `docker save` archive of `layout:tag`: OCI layout + manifest.json in one tar."""
    digest, m = manifest(layout, tag)
    members: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}'}
    for d in [m["config"], *m["layers"], {"digest": digest}]:
        members["blobs/sha256/" + d["digest"].split(":")[1]] = blob_path(layout, d["digest"]).read_bytes()
    name = repo_tag if "/" in repo_tag.split(":")[0] else "docker.io/library/" + repo_tag
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [{
        "mediaType": OCI_MANIFEST, "digest": digest, "size": len(blob_path(layout, digest).read_bytes()),
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": repo_tag.rsplit(":", 1)[1]}}]}
    members["index.json"] = json.dumps(index).encode()
    members["manifest.json"] = json.dumps([{
        "Config": "blobs/sha256/" + m["config"]["digest"].split(":")[1],
        "RepoTags": [repo_tag],
        "Layers": ["blobs/sha256/" + layer["digest"].split(":")[1] for layer in m["layers"]],
    }]).encode()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for dname in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(dname)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return out


def flip_byte(path: Path, offset: int) -> None:
    """Corrupt one byte of a file in place (same size, different content)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def merge_docker_archives(archives: list[Path], out: Path) -> Path:
    """One legacy docker archive holding the images of several (as `docker save a b` writes)."""
    entries: list[Any] = []
    repositories: dict[str, Any] = {}
    seen: set[str] = set()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for archive in archives:
            with tarfile.open(archive) as src:
                for m in src:
                    if m.name == "manifest.json":
                        entries += json.loads(src.extractfile(m).read())
                    elif m.name == "repositories":
                        repositories.update(json.loads(src.extractfile(m).read()))
                    elif m.name not in seen:
                        seen.add(m.name)
                        dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name, obj in (("manifest.json", entries), ("repositories", repositories)):
            data = json.dumps(obj).encode()
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            dst.addfile(ti, io.BytesIO(data))
    return out


SERVICE = b"def port():\n    return 8000\n"


def service_on_top(tmp_path: Path) -> tuple[Path, Path]:
    """`oci:LAYOUT:v1` whose top layer holds srv/app/svc.py over two layers no target needs, and a
    queue (tmp_path/queue) of one patch to it: for tests that lower layers are never read."""
    from support.qtools import write_patch

    layout = tmp_path / "img"
    build_oci(layout, [
        [file("usr/share/big/data.bin", bytes(range(256)) * 4096)],
        [file("usr/lib/other.py", "x = 1\n")],
        [file("srv/app/svc.py", SERVICE.decode())],
    ], tag="v1")
    q = tmp_path / "queue"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SERVICE, SERVICE.replace(b"8000", b"9000"))])
    return layout, q


# --- a private containers-storage store -------------------------------------------------------
def private_store(where: Path, driver: str | None = "vfs") -> dict[str, str]:
    """A containers-storage store of its own under `where` (graph root, run root, podman's tmp dir) and
    the environment that makes podman, buildah, skopeo and imgquilt use it: CONTAINERS_STORAGE_CONF
    (naming `driver`, or none: the first tool to touch the store picks) and CONTAINERS_CONF. Tests use
    one so they never depend on, nor change, the machine's own store and the driver its first user chose."""
    where.mkdir(parents=True, exist_ok=True)
    for d in ("graph", "run", "tmp"):
        (where / d).mkdir(exist_ok=True)
    lines = ["[storage]", *([f'driver = "{driver}"'] if driver else []),
             f'graphroot = "{where / "graph"}"', f'runroot = "{where / "run"}"']
    (where / "storage.conf").write_text("\n".join(lines) + "\n")
    (where / "containers.conf").write_text(f'[engine]\ntmp_dir = "{where / "tmp"}"\nevents_logger = "none"\n')
    return {"CONTAINERS_STORAGE_CONF": str(where / "storage.conf"), "CONTAINERS_CONF": str(where / "containers.conf")}


def drop_store(where: Path, env: dict[str, str]) -> None:
    """Remove what the tests made in a private store (containers, pods, images), then the store itself."""
    full = {**os.environ, **env}
    graph = where / "graph"
    if shutil.which("podman") and graph.is_dir() and any(graph.iterdir()):  # a store never used: nothing to remove
        for args in (["pod", "rm", "-a", "-f"], ["rm", "-a", "-f"], ["rmi", "-a", "-f"]):
            subprocess.run(["podman", *args], env=full, capture_output=True)
    # the overlay driver bind-mounts its own directory (graph/overlay) and skopeo leaves it mounted
    inside = str(where.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split()[4].replace("\\040", " ") for ln in f]
    for m in sorted((m for m in mounts if m.startswith(inside)), key=len, reverse=True):
        subprocess.run(["umount", m], capture_output=True)
    shutil.rmtree(where, ignore_errors=True)
