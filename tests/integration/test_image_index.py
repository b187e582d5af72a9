"""The image index of a multi-platform tag, against the real registry (Debian's docker-registry, distribution 2.8)
and read back with skopeo: our own client writes it with every platform's digest pinned, takes each platform from
the image's own config (never from the caller), and refuses what is not one image manifest per platform."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagesmith.edges.registry import OCI_INDEX, OCI_MANIFEST, Credentials, Registry, RegistryHTTPError, sha256_digest
from tests.integration.conftest import PASSWORD, USER, RegistryServer

pytestmark = [pytest.mark.integration, pytest.mark.registry]
REPO = "ml/multi"


def image(reg: Registry, arch: str, payload: bytes) -> str:
    """A one-layer image of ``arch`` pushed by digest (config and layer blobs, then the manifest); its digest."""
    layer, _ = reg.push_blob(REPO, payload)
    config = json.dumps({"architecture": arch, "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [layer]}}, sort_keys=True).encode()
    config_digest, _ = reg.push_blob(REPO, config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                                      "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer,
                                       "size": len(payload)}]}, sort_keys=True).encode()
    return reg.push_manifest(REPO, sha256_digest(manifest), OCI_MANIFEST, manifest).digest


def test_a_tag_becomes_an_index_of_the_verified_digests_and_skopeo_reads_both(plain_registry: RegistryServer, tmp_path: Path) -> None:
    reg = Registry(plain_registry.host, Credentials(USER, PASSWORD, "test"))
    amd64, arm64 = image(reg, "amd64", b"amd64 layer"), image(reg, "arm64", b"arm64 layer")
    digest = reg.push_index(REPO, "2.9.1-cu128-py3.12-debian12-base", [arm64, amd64])

    raw = plain_registry.skopeo("inspect", "--raw", f"docker://{plain_registry.host}/{REPO}:2.9.1-cu128-py3.12-debian12-base")
    assert raw.returncode == 0, raw.stderr
    doc = json.loads(raw.stdout)
    assert sha256_digest(raw.stdout.encode()) == digest and doc["mediaType"] == OCI_INDEX
    assert [(m["platform"]["architecture"], m["digest"]) for m in doc["manifests"]] == [("amd64", amd64), ("arm64", arm64)]
    for arch, layer in (("arm64", b"arm64 layer"), ("amd64", b"amd64 layer")):  # each platform resolves its own image
        picked = plain_registry.skopeo("inspect", "--override-arch", arch, "--override-os", "linux",
                                       f"docker://{plain_registry.host}/{REPO}:2.9.1-cu128-py3.12-debian12-base")
        assert picked.returncode == 0, picked.stderr
        seen = json.loads(picked.stdout)  # its Digest is the index's (what the tag names); the rest is the platform's
        assert (seen["Digest"], seen["Architecture"], seen["Layers"]) == (digest, arch, [sha256_digest(layer)])


def test_an_index_holds_one_image_manifest_per_platform(plain_registry: RegistryServer) -> None:
    reg = Registry(plain_registry.host, Credentials(USER, PASSWORD, "test"))
    one, again = image(reg, "arm64", b"first"), image(reg, "arm64", b"second")
    with pytest.raises(ValueError, match="an index holds one manifest per platform; linux/arm64 came more than once"):
        reg.push_index(REPO, "twice", [one, again])
    index = reg.push_index(REPO, "ok", [one, image(reg, "amd64", b"third")])
    with pytest.raises(RegistryHTTPError, match="is not an image manifest in the registry"):
        reg.push_index(REPO, "nested", [index])  # an index inside an index
    with pytest.raises(RegistryHTTPError, match="is not an image manifest in the registry"):
        reg.push_index(REPO, "missing", ["sha256:" + "0" * 64])
    assert plain_registry.list_tags(REPO) == ["ok"]  # nothing was written for a refused index
