"""Provenance documents, keys and subjects, for the provenance and verify tests."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from support.qtools import REPO
from support.registry_server import skopeo

DSSE = "application/vnd.dsse.envelope.v1+json"


DEMO = f"oci:{REPO}/examples/demo-image:latest"


# --- keys and the independent check ---------------------------------------------------------------
def openssl(*args: str) -> bytes:
    return subprocess.run(["openssl", *args], check=True, capture_output=True).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """ed / ec (P-256) / other (a second Ed25519) private keys and their .pub halves, made by openssl."""
    d = tmp_path_factory.mktemp("keys")
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(d / "ed.pem"))
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(d / "ec.pem"))
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(d / "other.pem"))
    for name in ("ed", "ec", "other"):
        openssl("pkey", "-in", str(d / f"{name}.pem"), "-pubout", "-out", str(d / f"{name}.pub"))
    return {**{n: d / f"{n}.pem" for n in ("ed", "ec", "other")}, **{f"{n}.pub": d / f"{n}.pub" for n in ("ed", "ec", "other")}}


def subject_of(ref: str) -> dict:
    raw = skopeo("inspect", "--raw", "--tls-verify=false", ref).encode()
    return {"mediaType": json.loads(raw)["mediaType"], "digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "size": len(raw)}
