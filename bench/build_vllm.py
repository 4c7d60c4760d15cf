#!/usr/bin/env python3
"""Build a vLLM 0.10.1 image for the benchmarks (issue 28): the PyPI wheel and its pure-Python
dependencies, on a base of this machine's /etc, /usr/share and Python standard library.

    python3 bench/build_vllm.py [--workdir /tmp/imgquilt-vllm]   # prints the image reference

Layers (gzip, built as bench/build_image.py builds them): `base` (etc, usr/share, usr/lib/python3.11
of this machine), `deps` (the pure-Python wheels vLLM requires, unpacked into
usr/local/lib/python3.12/site-packages), `vllm` (the vllm-0.10.1 wheel, unpacked there too: 1.2 GB,
its compiled kernels included). The wheels are fetched once with pip (`--only-binary=:all:
--no-deps`; only py3-none-any wheels are kept besides vllm's own) into WORKDIR/wheels. Binary
dependencies (torch, tokenizers, ...) are left out: they would only make the image larger, and
what is measured is reading and writing layers, not running vLLM.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_image import MEDIA_LAYER, LayerPlan, _json, _sha, build_layer  # noqa: E402

SITE = "usr/local/lib/python3.12/site-packages"
PURE = ["cachetools", "requests", "tqdm", "py-cpuinfo", "transformers==4.55.2", "fastapi==0.116.1", "openai==1.99.9",
        "prometheus_client", "prometheus-fastapi-instrumentator", "lm-format-enforcer==0.10.12", "diskcache==5.6.3",
        "lark==1.2.2", "typing_extensions", "filelock", "partial-json-parser", "gguf", "mistral_common==1.8.3", "einops",
        "compressed-tensors==0.10.2", "depyf==0.19.0", "cloudpickle", "python-json-logger", "six", "setuptools==79.0.1",
        "urllib3", "idna", "certifi", "huggingface-hub", "starlette", "pydantic", "jinja2", "sympy", "networkx", "mpmath",
        "astor", "dill", "packaging", "interegular", "jsonschema", "referencing", "attrs", "anyio", "httpx", "httpcore",
        "h11", "sniffio", "distro", "fsspec"]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fetch(wheels: Path) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("vllm-0.10.1-*.whl")):
        say("downloading vllm 0.10.1 (414 MB) ...")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels), "vllm==0.10.1"], check=True)
    if len(list(wheels.glob("*.whl"))) < 10:
        say("downloading its pure-Python dependencies ...")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                        "--platform", "manylinux2014_x86_64", "--implementation", "cp", "-d", str(wheels), *PURE], check=True)


def stage(wheels: Path, work: Path) -> tuple[Path, Path]:
    deps, vllm = work / "stage-deps", work / "stage-vllm"
    if not (deps / SITE).is_dir():
        shutil.rmtree(deps, ignore_errors=True)
        for w in sorted(wheels.glob("*.whl")):
            if w.name.startswith("vllm-") or not w.name.endswith("-none-any.whl"):
                continue
            zipfile.ZipFile(w).extractall(deps / SITE)
    if not (vllm / SITE / "vllm").is_dir():
        shutil.rmtree(vllm, ignore_errors=True)
        (w,) = wheels.glob("vllm-0.10.1-*.whl")
        zipfile.ZipFile(w).extractall(vllm / SITE)
    return deps, vllm


def build(work: Path) -> str:
    layout = work / "image"
    tag = "vllm"
    if (layout / "index.json").is_file():
        return f"oci:{layout}:{tag}"
    wheels = work / "wheels"
    fetch(wheels)
    deps, vllm = stage(wheels, work)
    shutil.rmtree(layout, ignore_errors=True)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layers = []
    for root, plan in ((Path("/"), LayerPlan("base", ("etc", "usr/share", "usr/lib/python3.11"))),
                       (deps, LayerPlan("deps", ("usr",))), (vllm, LayerPlan("vllm", ("usr",)))):
        say(f"building layer {plan.name} ...")
        built = build_layer(root, plan, blobs, level=3)
        assert built is not None
        say(f"  {built.tar_size / 1e6:,.0f} MB tar -> {built.size / 1e6:,.0f} MB gzip")
        layers.append(built)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"]},
              "rootfs": {"type": "layers", "diff_ids": [l.diff_id for l in layers]},
              "history": [{"created_by": f"bench layer {l.name}"} for l in layers]}
    cfg = _json(config)
    (blobs / _sha(cfg).split(":", 1)[1]).write_bytes(cfg)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(cfg), "size": len(cfg)},
                "layers": [{"mediaType": MEDIA_LAYER, "digest": l.digest, "size": l.size} for l in layers]}
    man = _json(manifest)
    (blobs / _sha(man).split(":", 1)[1]).write_bytes(man)
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _sha(man),
                                                 "size": len(man), "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (layout / "index.json").write_bytes(_json(index))
    total = sum(l.size for l in layers)
    say(f"image: {sum(l.tar_size for l in layers) / 1e9:.2f} GB tar, {total / 1e6:,.0f} MB gzip, {len(layers)} layers")
    return f"oci:{layout}:{tag}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/imgquilt-vllm"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(build(args.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
