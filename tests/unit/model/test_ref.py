"""ImageRef: one reference, parsed once by the reference grammar."""

from __future__ import annotations

import pytest

from imagesmith.errors import UserError
from imagesmith.model.ref import ImageRef

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text, host, repository, tag, digest, name, registry", [
    ("ubuntu", "", "ubuntu", None, None, "ubuntu", "docker.io"),
    ("ubuntu:24.04", "", "ubuntu", "24.04", None, "ubuntu", "docker.io"),
    ("pytorch/pytorch:latest", "", "pytorch/pytorch", "latest", None, "pytorch/pytorch", "docker.io"),
    ("localhost/x", "localhost", "x", None, None, "localhost/x", "localhost"),
    ("127.0.0.1:5000/imagesmith/local:latest", "127.0.0.1:5000", "imagesmith/local", "latest", None,
     "127.0.0.1:5000/imagesmith/local", "127.0.0.1:5000"),
    (f"harbor.example.com/ml/x@{D}", "harbor.example.com", "ml/x", None, D, "harbor.example.com/ml/x", "harbor.example.com"),
    (f"harbor.example.com:8443/ml/x:v1@{D}", "harbor.example.com:8443", "ml/x", "v1", D, "harbor.example.com:8443/ml/x",
     "harbor.example.com:8443"),
])
def test_parts(text: str, host: str, repository: str, tag: str | None, digest: str | None, name: str, registry: str) -> None:
    ref = ImageRef.parse(text)
    assert (ref.host, ref.repository, ref.tag, ref.digest) == (host, repository, tag, digest)
    assert (ref.name, ref.registry, str(ref)) == (name, registry, text)


@pytest.mark.parametrize("text, message", [
    ("", "'' is not an image reference (repository name must have at least one component); write e.g. ubuntu:24.04 or "
         "registry.example.com/base/ubuntu@sha256:..."),
    ("Harbor example/x", "'Harbor example/x' is not an image reference (invalid reference format); write e.g. ubuntu:24.04 or "
                         "registry.example.com/base/ubuntu@sha256:..."),
    ("reg.test/x@md5:1", "'reg.test/x@md5:1' is not an image reference (invalid reference format); write e.g. ubuntu:24.04 or "
                         "registry.example.com/base/ubuntu@sha256:..."),
])
def test_not_a_reference(text: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        ImageRef.parse(text)
    assert str(err.value) == message
    assert ImageRef.maybe(text) is None


def test_with_tag_and_digest() -> None:
    ref = ImageRef.parse("reg.test/ml/x:v1")
    assert str(ref.with_digest(D)) == f"reg.test/ml/x:v1@{D}" and ref.with_digest(D).pinned
    assert str(ref.with_tag("v2")) == "reg.test/ml/x:v2" and not ref.pinned
    assert str(ref.with_digest(D).with_tag(None)) == f"reg.test/ml/x@{D}"
    assert (ref.basename, ImageRef.parse("pytorch").basename) == ("x", "pytorch")
    assert not ImageRef.parse("reg.test/ml/x@sha512:" + "0" * 128).pinned


def test_sha256_only_of_a_pinned_reference() -> None:
    assert ImageRef.parse(f"reg.test/ml/x:v1@{D}").sha256 == D
    for text in ("reg.test/ml/x:v1", "reg.test/ml/x@sha512:" + "0" * 128):
        with pytest.raises(ValueError, match="is not pinned by a sha256 digest"):
            _ = ImageRef.parse(text).sha256
