"""The SBOM builder on recorded facts: inventory validation (exact messages), CycloneDX output checked by CycloneDX's own
JSON schema validator, deterministic bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from imagesmith.errors import UserError
from imagesmith.stages.evidence import sbom

RECORDED = Path(__file__).parent.parent.parent.parent / "fixtures" / "inventory" / "debian12-cpu-base.json"
IMAGE = sbom.ImageIdentity("127.0.0.1:5000/imagesmith/local", "sha256:" + "ab" * 32, "sha256:" + "cd" * 32,
                           "imagesmith/debian:bookworm", "2026-11-30T10:00:00Z", {"torch": "2.13.0+cpu", "cuda": "cpu"})

def inventory_doc(**changes: Any) -> dict[str, Any]:
    doc = {"schema": "imagesmith.inventory/1", "python": "3.11.2", "os_release": {"ID": "debian", "VERSION_ID": "12"},
           "distributions": [{"name": "torch", "version": "2.13.0+cpu"}],
           "dpkg": [{"package": "libc6", "version": "2.36-9", "architecture": "amd64", "source": "glibc", "source_version": "2.36-9"}]}
    return doc | changes


@pytest.mark.parametrize("changes, message", [
    ({"schema": "imagesmith.inventory/0"},
     "image inventory: schema 'imagesmith.inventory/0' is not imagesmith.inventory/1; the payload is out of date"),
    ({"distributions": {"torch": "2.13"}}, "image inventory: distributions is not a list of objects"),
    ({"distributions": [{"name": "torch", "version": 213}]},
     "image inventory: distributions[0].version is not a plain string of at most 256 characters ('213')"),
    ({"dpkg": [{"package": "a\nb", "version": "1", "architecture": "all", "source": "a", "source_version": "1"}]},
     "image inventory: dpkg[0].package is not a plain string of at most 256 characters ('a\\nb')"),
    ({"distributions": [{"name": "x" * 300, "version": "1"}]},
     f"image inventory: distributions[0].name is not a plain string of at most 256 characters ('{'x' * 40}')"),
])
def test_a_malformed_inventory_is_refused_with_the_field_named(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as err:
        sbom.inventory_from(inventory_doc(**changes))
    assert str(err.value) == message


def recorded() -> sbom.Inventory:
    return sbom.inventory_from(json.loads(RECORDED.read_text())["inventory"])


def test_the_recorded_image_gives_a_valid_cyclonedx_1_6_document() -> None:
    inv = recorded()
    data = sbom.build_bom(inv, IMAGE)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    bom = json.loads(data)
    assert sbom.counts(bom) == {"components": len(inv.distributions) + len(inv.dpkg), "python": len(inv.distributions),
                                "deb": len(inv.dpkg), "base_image": "imagesmith/debian:bookworm", "spec_version": "1.6"}
    assert len(inv.dpkg) > 100 and len(inv.distributions) > 5
    purls = {c["name"]: c["purl"] for c in bom["components"]}
    assert purls["torch"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    assert purls["libc6"].startswith("pkg:deb/debian/libc6@") and purls["libc6"].endswith("?arch=amd64&distro=debian-12&upstream=glibc%40" + purls["libc6"].split("@")[1].split("?")[0])
    root = bom["metadata"]["component"]
    assert (root["type"], root["name"], root["version"]) == ("container", IMAGE.name, IMAGE.digest)
    assert root["purl"] == f"pkg:oci/local@{IMAGE.digest}?repository_url=127.0.0.1:5000/imagesmith/local"
    assert {p["name"]: p["value"] for p in bom["metadata"]["properties"]} == {"imagesmith:cuda": "cpu", "imagesmith:torch": "2.13.0+cpu"}
    assert bom["metadata"]["timestamp"] == "2026-11-30T10:00:00+00:00"


def test_the_same_image_gives_the_same_bytes_and_another_digest_other_bytes() -> None:
    inv = recorded()
    assert sbom.build_bom(inv, IMAGE) == sbom.build_bom(inv, IMAGE)
    other = sbom.ImageIdentity(**{**IMAGE.__dict__, "digest": "sha256:" + "ef" * 32})
    assert json.loads(sbom.build_bom(inv, other))["serialNumber"] != json.loads(sbom.build_bom(inv, IMAGE))["serialNumber"]
