"""The SBOM of an image: CycloneDX 1.6 JSON built with cyclonedx-python-lib
from what ``verify/facts.py --inventory`` measured inside the image.

Pure: an inventory (validated into frozen records at once: it comes out of an
image, so it is untrusted) and the image's identity in, bytes out. The same
image gives the same bytes (serial number from the digest, timestamp from
the image's creation), so a re-run can see that nothing changed.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from cyclonedx.contrib.this.builders import this_component
from cyclonedx.model import Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType, Pedigree
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from imagesmith.errors import UserError
from imagesmith.model.ref import ImageRef

INVENTORY_SCHEMA = "imagesmith.inventory/1"
MEDIA_TYPE = "application/vnd.cyclonedx+json"
PROPERTY_PREFIX = "imagesmith:"
MAX_TEXT = 256  # a name or version longer than this is not a package's


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str


@dataclass(frozen=True)
class DebPackage:
    package: str
    version: str
    architecture: str
    source: str
    source_version: str


@dataclass(frozen=True)
class Inventory:
    python: str
    os_id: str  # debian | ubuntu | ...
    os_version: str  # 12 | 22.04
    distributions: tuple[PythonDist, ...]
    dpkg: tuple[DebPackage, ...]


@dataclass(frozen=True)
class ImageIdentity:
    name: str  # registry/repository
    digest: str  # the manifest digest the SBOM describes
    image_id: str  # the config digest
    base_image: str  # the reference the bottom layer was built FROM
    created: str  # ISO 8601; the SBOM's timestamp
    properties: Mapping[str, str]  # measured versions (torch, cuda, ...)


# -- the inventory, validated ----------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT or any(c in value for c in "\n\r\0"):
        raise UserError(f"image inventory: {where} is not a plain string of at most {MAX_TEXT} characters ({str(value)[:40]!r})")
    return value


def inventory_from(doc: Mapping[str, Any]) -> Inventory:
    """``facts.py --inventory`` output as records; a malformed one is a UserError naming the field."""
    if doc.get("schema") != INVENTORY_SCHEMA:
        raise UserError(f"image inventory: schema {doc.get('schema')!r} is not {INVENTORY_SCHEMA}; the payload is out of date")
    release = doc.get("os_release") or {}
    dists = tuple(PythonDist(_text(d.get("name"), f"distributions[{i}].name"), _text(d.get("version"), f"distributions[{i}].version"))
                  for i, d in enumerate(_list(doc, "distributions")))
    keys = ("package", "version", "architecture", "source", "source_version")
    debs = tuple(DebPackage(*(_text(p.get(k), f"dpkg[{i}].{k}") for k in keys)) for i, p in enumerate(_list(doc, "dpkg")))
    return Inventory(_text(doc.get("python", ""), "python"), _text(release.get("ID", ""), "os_release.ID"),
                     _text(release.get("VERSION_ID", ""), "os_release.VERSION_ID"), dists, debs)


def _list(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = doc.get(key)
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise UserError(f"image inventory: {key} is not a list of objects")
    return value


# -- components --------------------------------------------------------------------------------


def python_component(d: PythonDist) -> Component:
    purl = PackageURL(type="pypi", name=d.name, version=d.version)
    return Component(type=ComponentType.LIBRARY, name=d.name, version=d.version, purl=purl, bom_ref=purl.to_string())


def deb_component(p: DebPackage, inv: Inventory) -> Component:
    qualifiers = {"arch": p.architecture, "distro": f"{inv.os_id}-{inv.os_version}"}
    if p.source != p.package or p.source_version != p.version:
        qualifiers["upstream"] = f"{p.source}@{p.source_version}"
    purl = PackageURL(type="deb", namespace=inv.os_id or "debian", name=p.package, version=p.version, qualifiers=qualifiers)
    return Component(type=ComponentType.LIBRARY, name=p.package, version=p.version, purl=purl, bom_ref=purl.to_string())


def image_component(image: ImageIdentity) -> Component:
    host_repo = image.name
    purl = PackageURL(type="oci", name=ImageRef.parse(host_repo).basename, version=image.digest,
                      qualifiers={"repository_url": host_repo})
    base = Component(type=ComponentType.CONTAINER, name=image.base_image, bom_ref="base-image",
                     properties=[Property(name=PROPERTY_PREFIX + "role", value="base-image")])
    return Component(type=ComponentType.CONTAINER, name=host_repo, version=image.digest, purl=purl, bom_ref="image",
                     pedigree=Pedigree(ancestors=[base]),
                     properties=[Property(name=PROPERTY_PREFIX + "image-id", value=image.image_id)])


def build_bom(inv: Inventory, image: ImageIdentity) -> bytes:
    """The CycloneDX 1.6 JSON document (compact, deterministic)."""
    root = image_component(image)
    props = [Property(name=PROPERTY_PREFIX + k, value=v) for k, v in sorted(image.properties.items()) if v]
    meta = BomMetaData(component=root, timestamp=_timestamp(image.created), properties=props)
    meta.tools.components.add(this_component())
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"{image.name}@{image.digest}"), metadata=meta)
    components = [python_component(d) for d in inv.distributions] + [deb_component(p, inv) for p in inv.dpkg]
    for component in components:
        bom.components.add(component)
    bom.register_dependency(root, components)
    return JsonV1Dot6(bom).output_as_string(indent=None).encode()


def _timestamp(created: str) -> dt.datetime:
    try:
        stamp = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc)


# -- reading one back ------------------------------------------------------------------------------


def counts(bom: Mapping[str, Any]) -> dict[str, Any]:
    """What ``imagesmith evidence`` prints about an SBOM: components by kind, base image."""
    purls = [str(c.get("purl", "")) for c in _components(bom.get("components"))]
    root = (bom.get("metadata") or {}).get("component") or {}
    ancestors = _components((root.get("pedigree") or {}).get("ancestors"))
    return {"components": len(purls), "python": sum(p.startswith("pkg:pypi/") for p in purls),
            "deb": sum(p.startswith("pkg:deb/") for p in purls),
            "base_image": ", ".join(str(a.get("name", "")) for a in ancestors) or None,
            "spec_version": bom.get("specVersion")}


def _components(value: Any) -> Iterable[Mapping[str, Any]]:
    return [c for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []
