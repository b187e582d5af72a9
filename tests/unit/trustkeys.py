"""Verifier keys and trust policies for tests: a fresh ECDSA P-256 key pair written as PEM files (the form
``openssl genpkey`` writes and ``make release`` makes), and a trust policy naming its public half."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagesmith.edges import signing
from imagesmith.stages.evidence import trust


def key_files(folder: Path, name: str = "verifier") -> tuple[Path, Path]:
    """``folder/name.key`` (PKCS#8 PEM) and ``folder/name.pub`` (SubjectPublicKeyInfo PEM)."""
    folder.mkdir(parents=True, exist_ok=True)
    private = ec.generate_private_key(ec.SECP256R1())
    key, pub = folder / f"{name}.key", folder / f"{name}.pub"
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pub


def verifier(folder: Path, name: str = "verifier") -> tuple[signing.Key, trust.TrustPolicy]:
    """A verifier key and a trust policy (``folder/trust-policy.yaml``) that names it."""
    key, pub = key_files(folder, name)
    policy = folder / "trust-policy.yaml"
    policy.write_text(trust.policy_text([(name, pub.name, ["*"])]))
    loaded = signing.load_signing_key(key, {})
    assert loaded is not None
    return loaded, trust.load_policy(policy)


def policy_file(folder: Path, name: str = "verifier") -> Path:
    """The trust policy in ``folder`` (one naming a fresh verifier key when there is none yet): for commands that
    need --trust-policy to get going, or that publish what :func:`verifier` signed there."""
    policy = folder / "trust-policy.yaml"
    if policy.is_file():
        return policy
    _, pub = key_files(folder, name)
    policy.write_text(trust.policy_text([(name, pub.name, ["*"])]))
    return policy
