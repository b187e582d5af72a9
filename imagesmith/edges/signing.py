"""Keys and signatures: DSSE envelopes for attestations, cosign-format
("sigstore simple signing") signatures for image digests.

All cryptography is securesystemslib's (``CryptoSigner``, ``SSlibKey``,
``dsse.Envelope``) over pyca/cryptography; this module only chooses formats:

* a DSSE envelope (``application/vnd.dsse.envelope.v1+json``) signs
  PAE(payloadType, payload) with ECDSA P-256 / SHA-256, signature base64 DER;
* a simple-signing payload (``application/vnd.dev.cosign.simplesigning.v1+json``,
  the JSON ``{"critical": {"identity": {"docker-reference"}, "image":
  {"docker-manifest-digest"}, "type": "cosign container image signature"},
  "optional": {...}}``) is signed the same way; the base64 signature goes in
  the ``dev.cosignproject.cosign/signature`` annotation (what cosign and
  containers/image's ``sigstoreSigned`` policy verify).

Keys: a PEM PKCS#8 ECDSA P-256 private key (``openssl genpkey``; cosign's
``import-key-pair`` reads the same PEM), from ``--signing-key FILE`` or the
``IMAGESMITH_SIGNING_KEY`` variable (the PEM text), with an optional
``IMAGESMITH_SIGNING_KEY_PASSWORD``. Public keys are PEM SubjectPublicKeyInfo,
the form ``cosign verify --key`` and a containers policy.json ``keyPath`` take.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import Error as SslibError
from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from imagesmith import __version__
from imagesmith.errors import UserError
from imagesmith.model import loader

ENV_KEY = "IMAGESMITH_SIGNING_KEY"
ENV_PASSWORD = "IMAGESMITH_SIGNING_KEY_PASSWORD"
SCHEME = "ecdsa-sha2-nistp256"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIMPLE_SIGNING_TYPE = "cosign container image signature"
MAX_SIGNATURES = 16  # one envelope: cosign writes one; each is checked against every key of the policy
KEY_FIX = ("make one with: openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing.key && "
           "openssl pkey -in signing.key -pubout -out signing.pub")


@dataclass(frozen=True)
class Key:
    """A signing key: securesystemslib's signer and its public half."""

    signer: CryptoSigner
    public: SSlibKey
    source: str

    @property
    def keyid(self) -> str:
        return str(self.public.keyid)


# -- keys ----------------------------------------------------------------------------------------


def load_signing_key(path: Path | None, environ: Mapping[str, str]) -> Key | None:
    """The key from ``path``, else from ``IMAGESMITH_SIGNING_KEY``; None when neither is given."""
    if path is not None:
        pem, source = read_key(path, "signing key", KEY_FIX), f"file {path}"
    elif environ.get(ENV_KEY):
        if len(environ[ENV_KEY]) > loader.KEY_CAP:
            raise UserError(f"{ENV_KEY} holds {len(environ[ENV_KEY]):,} characters, more than a PEM key "
                            f"({loader.KEY_CAP:,}); {KEY_FIX}")
        pem, source = environ[ENV_KEY].encode(), f"environment ({ENV_KEY})"
    else:
        return None
    password = environ.get(ENV_PASSWORD)
    try:
        private = serialization.load_pem_private_key(pem, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise UserError(f"signing key from {source} is not a PEM private key that opens ({_why(exc)}); "
                        f"an encrypted key needs {ENV_PASSWORD}; {KEY_FIX}") from None
    if not isinstance(private, ec.EllipticCurvePrivateKey) or not isinstance(private.curve, ec.SECP256R1):
        raise UserError(f"signing key from {source} is not an ECDSA P-256 key (cosign's kind); {KEY_FIX}")
    public = SSlibKey.from_crypto(private.public_key(), scheme=SCHEME)
    return Key(CryptoSigner(private, public), public, source)


def read_key(path: Path, what: str, fix: str = "") -> bytes:
    """A key file's bytes through the one loader: a regular file (no FIFO, device or /proc file) of at most
    :data:`imagesmith.model.loader.KEY_CAP` bytes; a UserError naming ``what`` and the path otherwise."""
    try:
        return loader.read_regular(path, cap=loader.KEY_CAP)
    except loader.LoadError as exc:
        raise UserError(f"{what} {path}: {exc.why}" + (f"; {fix}" if fix else "")) from None


def load_public_key(path: Path) -> SSlibKey:
    """A PEM public key (``cosign.pub``, ``openssl pkey -pubout``)."""
    return public_key_from_pem(read_key(path, "public key"), f"public key {path}")


def public_key_from_pem(pem: bytes, source: str) -> SSlibKey:
    """A PEM ECDSA P-256 public key; ``source`` names it in the UserError otherwise."""
    try:
        public = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise UserError(f"{source} is not a PEM public key ({_why(exc)})") from None
    if not isinstance(public, ec.EllipticCurvePublicKey) or not isinstance(public.curve, ec.SECP256R1):
        raise UserError(f"{source} is not an ECDSA P-256 key; imagesmith signs with P-256 (as cosign)")
    return SSlibKey.from_crypto(public, scheme=SCHEME)


def public_pem(key: SSlibKey) -> str:
    return str(key.keyval["public"])


def _why(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


# -- raw signatures (shared by both formats) ---------------------------------------------------------


def sign(key: Key, data: bytes) -> str:
    """ECDSA P-256 / SHA-256 over ``data``; the base64 DER signature."""
    return base64.b64encode(bytes.fromhex(key.signer.sign(data).signature)).decode()


def verifies(public: SSlibKey, data: bytes, signature: bytes) -> bool:
    try:
        public.verify_signature(Signature(public.keyid, signature.hex()), data)
    except (UnverifiedSignatureError, ValueError):
        return False
    return True


def signed_by(keys: Sequence[SSlibKey], data: bytes, signature: bytes) -> list[str]:
    """The key ids of ``keys`` whose signature over ``data`` ``signature`` is."""
    return [k.keyid for k in keys if verifies(k, data, signature)]


def decode_signature(text: str) -> bytes:
    """A base64 signature (an annotation); b'' when it is not base64."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return b""


# -- DSSE ------------------------------------------------------------------------------------------


def envelope(payload: bytes, payload_type: str, key: Key | None) -> bytes:
    """A DSSE envelope (JSON) of ``payload``, signed by ``key`` (unsigned without one)."""
    env = Envelope(payload, payload_type, {})
    if key is not None:
        env.sign(key.signer)
    return json.dumps(env.to_dict(), sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class OpenedEnvelope:
    payload: bytes
    payload_type: str
    signatures: int  # how many the envelope carries
    signed_by: tuple[str, ...]  # key ids among the given keys that signed it


def open_envelope(data: bytes, keys: Sequence[SSlibKey]) -> OpenedEnvelope:
    """Parse a DSSE envelope and check its signatures against ``keys`` (any key id in the
    envelope is ignored: cosign writes none). A malformed envelope is a ValueError."""
    try:
        doc = loader.parse_json_line(data, "the envelope")
    except loader.LoadError as exc:
        raise ValueError(f"not a DSSE envelope ({exc.why})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("signatures"), list):
        raise ValueError("not a DSSE envelope (expected an object with a list of signatures)")
    if len(doc["signatures"]) > MAX_SIGNATURES:
        raise ValueError(f"{len(doc['signatures']):,} signatures, more than the {MAX_SIGNATURES} an envelope may carry")
    try:
        env = Envelope.from_dict(doc)
        signatures = [bytes.fromhex(s.signature) for s in env.signatures.values()]
    except (KeyError, TypeError, AttributeError, ValueError, SslibError) as exc:
        raise ValueError(f"not a DSSE envelope ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(env.payload_type, str):
        raise ValueError("not a DSSE envelope (payloadType is not text)")
    pae = env.pae()
    found = {kid for sig in signatures for kid in signed_by(keys, pae, sig)}
    return OpenedEnvelope(env.payload, env.payload_type, len(env.signatures), tuple(sorted(found)))


# -- cosign simple signing ------------------------------------------------------------------------


def simple_signing_payload(docker_reference: str, digest: str) -> bytes:
    """What cosign signs for an image: its repository and manifest digest (no timestamp, so a
    re-run produces the same bytes and finds its signature already there)."""
    doc = {"critical": {"identity": {"docker-reference": docker_reference}, "image": {"docker-manifest-digest": digest},
                        "type": SIMPLE_SIGNING_TYPE},
           "optional": {"creator": f"imagesmith {__version__}"}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def simple_signing_digest(payload: bytes) -> tuple[str, str]:
    """(docker-manifest-digest, docker-reference) a payload claims; ValueError if it is not one."""
    try:
        critical = loader.parse_json_line(payload, "the payload")["critical"]
        if critical["type"] != SIMPLE_SIGNING_TYPE:
            raise KeyError(f"type {str(critical['type'])[:80]!r}")
        return str(critical["image"]["docker-manifest-digest"]), str(critical["identity"]["docker-reference"])
    except loader.LoadError as exc:
        raise ValueError(f"not a cosign simple-signing payload ({exc.why})") from None
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a cosign simple-signing payload ({str(exc)[:200]})") from None
