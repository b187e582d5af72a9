"""Keys, DSSE envelopes and cosign simple-signing payloads; every signature
is also checked by openssl, which shares no code with imagesmith."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from imagesmith.edges import signing
from imagesmith.errors import UserError


def openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    out = {}
    for name, algo in (("key", "ec_paramgen_curve:P-256"), ("other", "ec_paramgen_curve:P-256"), ("p384", "ec_paramgen_curve:P-384")):
        out[name] = folder / f"{name}.pem"
        assert openssl("genpkey", "-algorithm", "EC", "-pkeyopt", algo, "-out", str(out[name])).returncode == 0
        out[name + ".pub"] = folder / f"{name}.pub"
        assert openssl("pkey", "-in", str(out[name]), "-pubout", "-out", str(out[name + ".pub"])).returncode == 0
    out["rsa"] = folder / "rsa.pem"
    assert openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(out["rsa"])).returncode == 0
    out["folder"] = folder
    return out


def openssl_verifies(keys: dict[str, Path], pub: str, data: bytes, sig_b64: str) -> bool:
    (keys["folder"] / "data").write_bytes(data)
    (keys["folder"] / "sig").write_bytes(base64.b64decode(sig_b64))
    done = openssl("dgst", "-sha256", "-verify", str(keys[pub]), "-signature", str(keys["folder"] / "sig"), str(keys["folder"] / "data"))
    return done.returncode == 0


def test_a_key_from_a_file_or_the_environment_signs_what_openssl_verifies(keys: dict[str, Path]) -> None:
    from_file = signing.load_signing_key(keys["key"], {})
    from_env = signing.load_signing_key(None, {signing.ENV_KEY: keys["key"].read_text()})
    assert from_file and from_env and from_file.keyid == from_env.keyid == signing.load_public_key(keys["key.pub"]).keyid
    assert from_env.source == "environment (IMAGESMITH_SIGNING_KEY)" and signing.load_signing_key(None, {}) is None
    sig = signing.sign(from_file, b"payload")
    assert openssl_verifies(keys, "key.pub", b"payload", sig) and not openssl_verifies(keys, "other.pub", b"payload", sig)


def test_an_encrypted_key_opens_with_its_password_only(keys: dict[str, Path]) -> None:
    locked = keys["folder"] / "locked.pem"
    assert openssl("pkey", "-in", str(keys["key"]), "-aes256", "-passout", "pass:s3cret", "-out", str(locked)).returncode == 0
    assert signing.load_signing_key(locked, {signing.ENV_PASSWORD: "s3cret"}) is not None
    with pytest.raises(UserError) as err:
        signing.load_signing_key(locked, {})
    assert str(err.value).startswith(f"signing key from file {locked} is not a PEM private key that opens (")
    assert "an encrypted key needs IMAGESMITH_SIGNING_KEY_PASSWORD" in str(err.value)


@pytest.mark.parametrize("name, message", [
    ("rsa", "signing key from file {path} is not an ECDSA P-256 key (cosign's kind); " + signing.KEY_FIX),
    ("p384", "signing key from file {path} is not an ECDSA P-256 key (cosign's kind); " + signing.KEY_FIX),
    ("key.pub", "signing key from file {path} is not a PEM private key that opens"),
])
def test_other_keys_are_refused_with_the_fix(keys: dict[str, Path], name: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        signing.load_signing_key(keys[name], {})
    assert str(err.value).startswith(message.format(path=keys[name]))


def test_a_dsse_envelope_verifies_and_one_changed_byte_does_not(keys: dict[str, Path]) -> None:
    key = signing.load_signing_key(keys["key"], {})
    pub, other = signing.load_public_key(keys["key.pub"]), signing.load_public_key(keys["other.pub"])
    data = signing.envelope(b'{"a":1}', "application/vnd.in-toto+json", key)
    opened = signing.open_envelope(data, [pub, other])
    assert (opened.payload, opened.signatures, opened.signed_by) == (b'{"a":1}', 1, (pub.keyid,))
    env = json.loads(data)
    pae = b"DSSEv1 28 application/vnd.in-toto+json 7 " + b'{"a":1}'
    assert openssl_verifies(keys, "key.pub", pae, env["signatures"][0]["sig"])
    env["payload"] = base64.b64encode(b'{"a":2}').decode()
    assert signing.open_envelope(json.dumps(env).encode(), [pub]).signed_by == ()
    assert signing.open_envelope(signing.envelope(b"x", "t", None), [pub]).signatures == 0
    with pytest.raises(ValueError, match="not a DSSE envelope"):
        signing.open_envelope(b'{"payload": "eA=="}', [pub])


def test_the_simple_signing_payload_is_what_cosign_and_containers_image_read() -> None:
    payload = signing.simple_signing_payload("127.0.0.1:5000/imagesmith/local", "sha256:" + "ab" * 32)
    doc = json.loads(payload)
    assert set(doc) == {"critical", "optional"}
    assert doc["critical"] == {"identity": {"docker-reference": "127.0.0.1:5000/imagesmith/local"},
                               "image": {"docker-manifest-digest": "sha256:" + "ab" * 32}, "type": "cosign container image signature"}
    assert signing.simple_signing_digest(payload) == ("sha256:" + "ab" * 32, "127.0.0.1:5000/imagesmith/local")
    with pytest.raises(ValueError, match="not a cosign simple-signing payload"):
        signing.simple_signing_digest(b'{"critical": {}}')


COSIGN = Path(__file__).parent.parent.parent / "fixtures" / "cosign"


def test_a_signature_made_by_cosign_verifies_with_imagesmith() -> None:
    """The other direction: cosign's own output (a containers/image test fixture) read by imagesmith's verifier."""
    stored = json.loads(COSIGN.joinpath("signature-1").read_bytes().split(b"\n", 1)[1])
    payload = base64.b64decode(stored["payload"])
    manifest_digest = "sha256:" + hashlib.sha256(COSIGN.joinpath("manifest.json").read_bytes()).hexdigest()
    assert stored["mimeType"] == signing.SIMPLE_SIGNING_MEDIA_TYPE
    assert signing.simple_signing_digest(payload) == (manifest_digest, "192.168.64.2:5000/cosign-signed-single-sample")
    cosign_key = signing.load_public_key(COSIGN / "cosign.pub")
    signature = signing.decode_signature(stored["annotations"][signing.SIGNATURE_ANNOTATION])
    assert signing.signed_by([cosign_key], payload, signature) == [cosign_key.keyid]
    assert signing.signed_by([cosign_key], payload.replace(b"sample", b"sampla"), signature) == []


# -- hostile key files and envelopes: exit 1 naming the file, never a hang, a MemoryError or a RecursionError -------


@pytest.mark.parametrize("kind, message", [
    ("dev-zero", "signing key /dev/zero: is not a regular file (a folder, FIFO, socket or device); " + signing.KEY_FIX),
    ("fifo", "signing key {folder}/fifo.key: is not a regular file (a folder, FIFO, socket or device); " + signing.KEY_FIX),
    ("huge", "signing key {folder}/huge.key: is 209,715,200 bytes, over the 65,536-byte limit for this kind of file; " + signing.KEY_FIX),
    ("proc", "signing key /proc/self/environ: is a file of /proc or /sys, not a file anyone wrote; " + signing.KEY_FIX),
])
def test_a_signing_key_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str, message: str) -> None:
    import os

    path = {"dev-zero": Path("/dev/zero"), "proc": Path("/proc/self/environ")}.get(kind, tmp_path / f"{kind}.key")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as fh:
            fh.truncate(200 * 1024 * 1024)
    with pytest.raises(UserError) as err:
        signing.load_signing_key(path, {})
    assert str(err.value) == message.format(folder=tmp_path)
    with pytest.raises(UserError) as err:
        signing.load_public_key(path)
    assert str(err.value) == message.format(folder=tmp_path).replace("signing key", "public key").removesuffix("; " + signing.KEY_FIX)


def test_a_key_in_the_environment_is_bounded() -> None:
    with pytest.raises(UserError) as err:
        signing.load_signing_key(None, {signing.ENV_KEY: "x" * 70000})
    assert str(err.value) == f"IMAGESMITH_SIGNING_KEY holds 70,000 characters, more than a PEM key (65,536); {signing.KEY_FIX}"


SIG = base64.b64encode(b"\x30\x06\x02\x01\x01\x02\x01\x01").decode()


@pytest.mark.parametrize("data, message", [
    (b"[" * 100_000 + b"]" * 100_000, "not a DSSE envelope (nested deeper than 64 levels)"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": [], "x": NaN}',
     "not a DSSE envelope (NaN is not JSON (NaN and Infinity are not numbers JSON allows) at line 1 column 64)"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": {}}', "not a DSSE envelope (expected an object with a list of signatures)"),
    (b"[]", "not a DSSE envelope (expected an object with a list of signatures)"),
    (json.dumps({"payload": "eA==", "payloadType": "t", "signatures": [{"sig": SIG}] * 17}).encode(),
     "17 signatures, more than the 16 an envelope may carry"),
    (b'{"payload": "!!", "payloadType": "t", "signatures": []}', "not a DSSE envelope (Error: Only base64 data is allowed)"),
    (b'{"payload": "eA==", "payloadType": 5, "signatures": []}', "not a DSSE envelope (payloadType is not text)"),
    (b'{"payload": "eA==", "payloadType": "t", "signatures": ["x"]}', "not a DSSE envelope (TypeError: string indices must be integers, not 'str')"),
])
def test_a_hostile_envelope_is_a_value_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as err:
        signing.open_envelope(data, [])
    assert str(err.value) == message
