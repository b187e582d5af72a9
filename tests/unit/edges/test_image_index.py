"""The OCI image index document: one entry per platform, pinned by digest, in a fixed order (the same platforms
and digests always make the same bytes, so the same digest)."""

from __future__ import annotations

import json

import pytest

from imagesmith.edges.registry import OCI_INDEX, OCI_MANIFEST, IndexEntry, index_document

AMD = IndexEntry("sha256:" + "a" * 64, OCI_MANIFEST, 500, "linux", "amd64")
ARM = IndexEntry("sha256:" + "b" * 64, OCI_MANIFEST, 501, "linux", "arm64", "v8")


def test_the_index_pins_each_platform_by_digest_in_a_fixed_order() -> None:
    data = index_document([ARM, AMD])
    assert data == index_document([AMD, ARM])
    doc = json.loads(data)
    assert doc == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": OCI_MANIFEST, "digest": AMD.digest, "size": 500, "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": OCI_MANIFEST, "digest": ARM.digest, "size": 501,
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}}]}
    assert ARM.platform == "linux/arm64/v8"


def test_two_manifests_for_one_platform_are_refused() -> None:
    with pytest.raises(ValueError, match="linux/amd64 came more than once"):
        index_document([AMD, IndexEntry("sha256:" + "c" * 64, OCI_MANIFEST, 1, "linux", "amd64")])
