"""``imagesmith vulns recheck`` end to end against a real docker-registry (htpasswd, the referrers tag schema):
two releases of one line, each a small OCI image whose config carries the labels publish reads and whose SBOM (the
real bookworm inventory, tests/fixtures/inventory; torch 2.13.0+cpu in the newer, 2.12.0+cpu in the older) was
attached and signed by the release evidence step; the floating tags on the newer. A new advisory
(``last_affected: 2.13.0``, a GHSA record and a PYSEC twin with no severity of its own) hits the newer one:
recheck reports one critical finding on it, and with --hold-floating moves both floating tags to the older, clean
release, signed; skopeo reads the tags back.

No Docker engine and no image build: images are pushed with imagesmith's registry client (a few KB each)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith import cli
from imagesmith.edges import signing
from imagesmith.edges.registry import OCI_MANIFEST, Credentials, Registry
from imagesmith.stages.evidence import evidence
from tests.integration.conftest import PASSWORD, USER, RegistryServer, _missing_tools

pytestmark = [pytest.mark.integration, pytest.mark.registry]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = "ml/recheck"
INVENTORY = json.loads((FIXTURES / "inventory" / "debian12-cpu-base.json").read_text())["inventory"]
LAYER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # gzip of nothing
EMPTY_DIFF = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
OLD, NEW = "2.12.0-cpu-py3.11-debian12-base-20261110", "2.13.0-cpu-py3.11-debian12-base-20261125"
UNSIGNED = "2.12.1-cpu-py3.11-debian12-base-20261115"  # newer than OLD, but nothing signed is attached: never a target
FLOATING = ("latest", "v2-cpu")


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[RegistryServer]:
    missing = _missing_tools("docker-registry", "skopeo", "htpasswd", "openssl")
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (bash scripts/ensure-host.sh installs them)")
    srv = RegistryServer(tmp_path / "registry", tls=False)
    srv.root.mkdir()
    srv.configure()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def inventory_with(torch: str) -> dict[str, Any]:
    inv = json.loads(json.dumps(INVENTORY))
    inv["distributions"] = [d | {"version": torch} if d["name"] == "torch" else d for d in inv["distributions"]]
    inv["packages"]["torch"] = torch
    return dict(inv)


def release(reg: Registry, key: signing.Key | None, out: Path, tag: str, torch: str, created: str) -> str:
    """A small image labelled as publish labels a release, its SBOM attached and signed (no key: nothing attached);
    its digest."""
    labels = {"io.imagesmith.torch": torch, "io.imagesmith.cuda": "cpu", "io.imagesmith.python": "3.11.2",
              "io.imagesmith.os": "debian12", "io.imagesmith.layer": "base", "io.imagesmith.cell": "cpu-py3.11-debian12",
              "org.opencontainers.image.created": created}
    config = json.dumps({"architecture": "amd64", "os": "linux", "created": created, "config": {"Labels": labels},
                         "rootfs": {"type": "layers", "diff_ids": [EMPTY_DIFF]}}).encode()
    config_digest, _ = reg.push_blob(REPO, config)
    layer_digest, _ = reg.push_blob(REPO, LAYER)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest,
                                       "size": len(LAYER)}]}).encode()
    digest = reg.push_manifest(REPO, tag, OCI_MANIFEST, manifest).digest
    if key is None:
        return digest
    step = evidence.ReleaseEvidence(reg, REPO, key, lambda image_id: inventory_with(torch), out)
    step(evidence.Subject(tag, digest, config_digest, "imagesmith/debian:bookworm", created, {"torch": torch}, None))
    return digest


def advisory_snapshot(folder: Path, modified: str) -> Path:
    """A new advisory as OSV's PyPI export carries it twice: the GitHub record (rated) and the PyPI database's twin
    (aliases only, no severity). Constructed for this test (the ids are not real records'); the shape is the
    published one (tests/fixtures/osv)."""
    affected = [{"package": {"ecosystem": "PyPI", "name": "torch", "purl": "pkg:pypi/torch"},
                 "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "2.13.0"}, {"last_affected": "2.13.0"}]}]}]
    ghsa = {"schema_version": "1.4.0", "id": "GHSA-test-2130-rchk", "modified": modified, "published": modified,
            "aliases": ["CVE-2099-13001"], "summary": "torch 2.13.0 only: a constructed advisory for the recheck test",
            "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
            "affected": affected, "database_specific": {"severity": "CRITICAL"}}
    pysec = {"id": "PYSEC-2099-TEST2", "modified": modified, "aliases": ["CVE-2099-13001", "GHSA-test-2130-rchk"],
             "details": "The PyPI database's record of the same vulnerability.", "affected": affected}
    (folder / "PyPI").mkdir(parents=True)
    for doc in (ghsa, pysec):
        (folder / "PyPI" / f"{doc['id']}.json").write_text(json.dumps(doc, indent=1))
    return folder


def matrix_file(folder: Path, host: str) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(f"version: 1\nimage: {{registry: '{host}', repository: {REPO}}}\n"
                    'matrix: {torch: ["2.13"], cuda: [cpu], python: ["3.11"], os: [debian12]}\n'
                    'tags:\n  floating: ["v{torch_major}-{accel}", latest]\n'
                    "vulnerabilities: {threshold: high}\n")
    return path


def recheck(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        cli.main(["vulns", "recheck", *args])
    except SystemExit as exc:
        captured = capsys.readouterr()
        return int(exc.code or 0), captured.out + captured.err
    raise AssertionError("main() always exits")


def test_a_new_advisory_moves_the_floating_tags_to_the_older_clean_release(server: RegistryServer, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    key_file, pub = tmp_path / "release.key", tmp_path / "release.pub"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key_file)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(key_file), "-pubout", "-out", str(pub)], check=True)
    key = signing.load_signing_key(key_file, {})
    assert key is not None
    reg = Registry(server.host, Credentials(USER, PASSWORD, "test"))
    old = release(reg, key, tmp_path / "r1", OLD, "2.12.0+cpu", "2026-11-10T00:00:00Z")
    new = release(reg, key, tmp_path / "r2", NEW, "2.13.0+cpu", "2026-11-25T00:00:00Z")
    unsigned = release(reg, None, tmp_path / "r3", UNSIGNED, "2.12.1+cpu", "2026-11-15T00:00:00Z")
    image = reg.manifest(REPO, new)
    assert image is not None
    for tag in FLOATING:
        reg.put_manifest(REPO, tag, image)
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    snapshot = advisory_snapshot(tmp_path / "osv", yesterday)
    creds = tmp_path / "credentials"
    creds.write_text(f"{server.host} {USER}:{PASSWORD}\n")
    common = ["-m", str(matrix_file(tmp_path, server.host)), "--advisories", str(snapshot), "--key", str(pub),
              "--credentials", str(creds)]

    # without --hold-floating: reported, exit 1, nothing moves
    code, out = recheck(capsys, *common, "--out", str(tmp_path / "report"))
    assert code == 1, out
    assert "latest (" in out and "GHSA-test-2130-rchk (CVE-2099-13001, PYSEC-2099-TEST2) critical: torch 2.13.0+cpu" in out
    assert all(server.inspect(REPO, tag)["Digest"] == new for tag in FLOATING)
    doc = json.loads((tmp_path / "report" / "recheck.json").read_text())
    assert {h["tag"]: h["action"] for h in doc["floating"]} == {"latest": "would-move", "v2-cpu": "would-move"}

    # with it: both floating tags move to the older, clean release; signed; the held digest carries the new VEX
    code, out = recheck(capsys, *common, "--hold-floating", "--signing-key", str(key_file), "--out", str(tmp_path / "held"))
    assert code == 0, out
    assert all(server.inspect(REPO, tag)["Digest"] == old for tag in FLOATING)  # read back by skopeo
    doc = json.loads((tmp_path / "held" / "recheck.json").read_text())
    assert doc["ok"] is True
    rows = {r["tag"]: (r["kind"], r["digest"], r["status"], r["blocking"]) for r in doc["tags"]}
    assert rows == {OLD: ("immutable", old, "clean", 0), NEW: ("immutable", new, "vulnerable", 1),
                    UNSIGNED: ("immutable", unsigned, "not-judged", None),
                    "latest": ("floating", old, "clean", 0), "v2-cpu": ("floating", old, "clean", 0)}
    [skipped] = [i for i in doc["images"] if i["digest"] == unsigned]
    assert skipped["problem"] == (f"its evidence does not check out: no signature of {server.host}/{REPO}@{unsigned} verifies "
                                  "with the given key")
    [vulnerable] = [i for i in doc["images"] if i["digest"] == new]
    [finding] = vulnerable["vulnerabilities"]["findings"]  # one vulnerability, two records
    assert [(r["id"], r["severity"]) for r in finding["records"]] == [("GHSA-test-2130-rchk", "critical"), ("PYSEC-2099-TEST2", "unknown")]
    assert vulnerable["vulnerabilities"]["counts"] == {"critical": 1, "high": 0, "medium": 0, "low": 0, "unknown": 0}
    holds = {h["tag"]: h for h in doc["floating"]}
    assert {t: (h["action"], h["previous"], h["digest"]) for t, h in holds.items()} == {t: ("moved", new, old) for t in FLOATING}
    assert holds["latest"]["reason"].startswith(f"moved to the newest clean release of its line, {OLD} ({old[:19]}), off {new[:19]}: "
                                                "known vulnerabilities at or above high: GHSA-test-2130-rchk")
    prom = (tmp_path / "held" / "recheck.prom").read_text()
    assert (f'imagesmith_vulnerabilities{{digest="{new}",kind="immutable",repository="{server.host}/{REPO}",severity="critical",'
            f'tag="{NEW}"}} 1.0') in prom
    assert f'imagesmith_vulnerabilities_blocking{{digest="{old}",kind="floating",repository="{server.host}/{REPO}",tag="latest"}} 0.0' in prom

    held = evidence.Reader(reg, REPO, [signing.load_public_key(pub)]).read(new)
    assert held.ok, held.all_problems()
    vexes = [a.statement.predicate for a in held.of_kind("vulnerabilities") if a.signed_by and a.statement]
    assert [[v["id"] for v in doc["vulnerabilities"]] for doc in vexes] == [["GHSA-test-2130-rchk"]]
    assert evidence.Reader(reg, REPO, [signing.load_public_key(pub)]).read(old).ok  # the digest the tags name: signed

    # a second run finds every floating tag clean: exit 0, nothing to move
    code, out = recheck(capsys, *common, "--hold-floating", "--signing-key", str(key_file), "--out", str(tmp_path / "again"))
    assert code == 0, out
    assert json.loads((tmp_path / "again" / "recheck.json").read_text())["floating"] == []
