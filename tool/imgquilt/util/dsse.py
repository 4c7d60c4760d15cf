"""DSSE envelopes (https://github.com/secure-systems-lab/dsse): sign and verify bytes with a PEM key.

The cryptography is the `cryptography` package's; this module only spells the envelope. What is
signed is the PAE of the payload: "DSSEv1" SP len(type) SP type SP len(body) SP body (lengths as
ASCII decimal). Keys: Ed25519, and ECDSA P-256 with SHA-256 (what `cosign generate-key-pair`
makes); an ECDSA signature is DER, as cosign and sigstore write it. A key's id is the lowercase hex
sha256 of its public key's DER SubjectPublicKeyInfo, the same bytes `openssl pkey -pubout -outform
DER` prints, so anyone can compute it. The id only says which key a signature claims; the
signature itself decides.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import BadInput, BadKey, UsageError
from .regular import read_regular_file

PASSWORD_ENV = "IMGQUILT_KEY_PASSWORD"  # the passphrase of an encrypted private key
KEY_CAP = 1 << 20
ENVELOPE_CAP = 16 << 20


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE pre-authentication encoding: what a signature covers."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


@dataclass(frozen=True, eq=False)
class PublicKey:
    """A key that verifies: its algorithm ("ed25519" or "ecdsa-p256") and id."""

    key: Any  # cryptography's Ed25519PublicKey or EllipticCurvePublicKey
    algorithm: str
    key_id: str
    path: str

    def verifies(self, signature: bytes, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            if self.algorithm == "ed25519":
                self.key.verify(signature, data)
            else:
                self.key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, eq=False)
class PrivateKey:
    """A key that signs, with the public half it is checked by."""

    key: Any
    public: PublicKey

    def sign(self, data: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if self.public.algorithm == "ed25519":
            return self.key.sign(data)
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))  # DER, as cosign writes it


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        data = read_regular_file(path, cap=KEY_CAP)
    except BadInput as exc:  # a FIFO, a directory, a huge file: the reader says which
        raise BadKey(f"The {what} {path} cannot be read: {exc.message}", hint=exc.hint) from None
    if data is None:
        raise UsageError(f"The {what} {path} does not exist.")
    return data


def _algorithm(key: Any, path: Path, what: str) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return "ed25519"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and isinstance(key.curve, ec.SECP256R1):
        return "ecdsa-p256"
    raise BadKey(f"The {what} {path} is a {_kind(key)} key; imgquilt signs and verifies "
                 "with Ed25519 and ECDSA P-256 keys.",
                 hint="Make one with `openssl genpkey -algorithm ed25519 -out key.pem` (or `cosign generate-key-pair`).")


def _kind(key: Any) -> str:
    name = type(key).__name__.lstrip("_")
    return name.replace("PrivateKey", "").replace("PublicKey", "") or name


def key_id(public_key: Any) -> str:
    """sha256 (hex) of the DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def load_private_key(path: Path) -> PrivateKey:
    """A PEM private key (PKCS#8 or the traditional forms openssl writes); an encrypted one takes its
    passphrase from IMGQUILT_KEY_PASSWORD."""
    from cryptography.hazmat.primitives import serialization

    data = _read_key_file(path, "signing key")
    from ..settings import current

    password = current().of(PASSWORD_ENV)
    try:
        try:
            key = serialization.load_pem_private_key(data, None)
        except TypeError:  # encrypted
            if not password:
                raise BadKey(f"The signing key {path} is encrypted and {PASSWORD_ENV} is not set.",
                             hint=f"Put its passphrase in {PASSWORD_ENV}.") from None
            key = serialization.load_pem_private_key(data, password.encode())
    except BadKey:
        raise
    except Exception as exc:  # noqa: BLE001 - cryptography's parse errors vary (ValueError, UnsupportedAlgorithm)
        hint = ("That is a public key: sign with the private half." if b"PUBLIC KEY" in data
                else "Give a PEM private key (`openssl genpkey -algorithm ed25519 -out key.pem`).")
        raise BadKey(f"The signing key {path} is not a PEM private key imgquilt can read ({exc}).", hint=hint) from None
    algorithm = _algorithm(key, path, "signing key")
    public = key.public_key()
    return PrivateKey(key, PublicKey(public, algorithm, key_id(public), str(path)))


def load_public_key(path: Path) -> PublicKey:
    """A PEM public key (SubjectPublicKeyInfo, as `openssl pkey -pubout` and cosign write it)."""
    from cryptography.hazmat.primitives import serialization

    data = _read_key_file(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except Exception as exc:  # noqa: BLE001 - as above
        hint = ("That is a private key: give its public half (`openssl pkey -in key.pem -pubout -out key.pub`)."
                if b"PRIVATE KEY" in data else "Give a PEM public key (`openssl pkey -in key.pem -pubout -out key.pub`).")
        raise BadKey(f"The public key {path} is not a PEM public key imgquilt can read ({exc}).", hint=hint) from None
    return PublicKey(key, _algorithm(key, path, "public key"), key_id(key), str(path))


# --- envelopes ------------------------------------------------------------------------------------
def sign_envelope(payload_type: str, payload: bytes, key: PrivateKey) -> bytes:
    """The envelope (JSON bytes) over `payload`, one signature by `key`."""
    sig = key.sign(pae(payload_type, payload))
    doc = {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": key.public.key_id, "sig": base64.b64encode(sig).decode()}]}
    return json.dumps(doc, separators=(",", ":")).encode()


Failure = Literal["malformed", "wrong-key", "bad-signature"]


@dataclass(frozen=True)
class Opened:
    """What verify_envelope found: the payload when a signature by the key verified, else why not."""

    payload_type: str | None
    payload: bytes | None
    verified: bool
    failure: Failure | None = None
    reason: str = ""
    key_ids: tuple[str, ...] = ()  # the ids the signatures claim


def _b64(text: object) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not a string")
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except binascii.Error:
        return base64.urlsafe_b64decode(padded)  # the spec allows either alphabet


def verify_envelope(data: bytes, key: PublicKey) -> Opened:
    """Check a DSSE envelope with `key`. Never raises for a bad envelope: the reason is in the answer."""
    try:
        doc = json.loads(data[: ENVELOPE_CAP + 1]) if len(data) <= ENVELOPE_CAP else None
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        return Opened(None, None, False, "malformed", "not a DSSE envelope (not a JSON object)")
    payload_type, signatures = doc.get("payloadType"), doc.get("signatures")
    try:
        payload = _b64(doc.get("payload"))
    except (ValueError, binascii.Error):
        return Opened(None, None, False, "malformed", "the envelope's payload is not base64")
    if not isinstance(payload_type, str) or not isinstance(signatures, list) or not signatures:
        return Opened(None, None, False, "malformed", "the envelope has no payloadType or no signatures")
    signed = pae(payload_type, payload)
    ids: list[str] = []
    ours = False
    for s in signatures:
        if not isinstance(s, dict):
            continue
        given = s.get("keyid")
        kid = given if isinstance(given, str) else ""
        ids.append(kid)
        ours = ours or kid == key.key_id
        try:
            sig = _b64(s.get("sig"))
        except (ValueError, binascii.Error):
            continue
        if key.verifies(sig, signed):
            return Opened(payload_type, payload, True, key_ids=tuple(ids))
    if ours:
        return Opened(payload_type, payload, False, "bad-signature",
                      f"bad signature: the signature by key {key.key_id[:16]}… does not verify (the envelope was changed)",
                      tuple(ids))
    named = ", ".join(i[:16] + "…" if i else "(no keyid)" for i in ids)
    return Opened(payload_type, payload, False, "wrong-key",
                  f"wrong key: signed by {named}, not by {key.key_id[:16]}… ({key.path})", tuple(ids))
