"""``imagesmith doctor --release`` against a small fake Harbor: an HTTP
server on 127.0.0.1 answering the registry v2 calls (Bearer token, blob
upload and its cancellation) and Harbor's REST API with the response bodies
Harbor documents (GET /api/v2.0/systeminfo, GET
/api/v2.0/projects/{project}/immutabletagrules). No Harbor runs here; the
registry half (push probe) is also run against the real docker-registry in
the integration tests."""

from __future__ import annotations

import http.server
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from imagesmith.edges import harbor
from imagesmith.stages.tools import doctor
from imagesmith.stages.tools.doctor import FAIL, OK, WARN, Result
from tests.loopback import serve
from tests.unit.stages.tools.test_doctor import FakeHost

PROJECT, REPO = "ml", "ml/pytorch-cuda"
USER, SECRET = "robot$ml+ci", "robot-s3cret"
SYSTEMINFO = {"auth_mode": "db_auth", "harbor_version": "v2.11.0-6e0c3a9c", "primary_auth_mode": False,
              "self_registration": False, "has_ca_root": False, "registry_url": "harbor.example.com"}


def rule(rule_id: int, tags: str, repos: str = "**", disabled: bool = False, tag_decoration: str = "matches") -> dict[str, Any]:
    """An ImmutableRule as Harbor's API returns it."""
    return {"id": rule_id, "project_id": 2, "disabled": disabled, "priority": 0, "action": "immutable",
            "template": "immutable_template", "params": {},
            "tag_selectors": [{"kind": "doublestar", "decoration": tag_decoration, "pattern": tags, "extras": ""}],
            "scope_selectors": {"repository": [{"kind": "doublestar", "decoration": "repoMatches", "pattern": repos, "extras": ""}]}}


@dataclass
class FakeHarbor:
    port: int = 0
    rules: list[dict[str, Any]] = field(default_factory=list)
    may_push: bool = True
    requests: list[str] = field(default_factory=list)
    project: dict[str, Any] | None = None  # GET /api/v2.0/projects/{name} (None: 404)


@pytest.fixture()
def fake_harbor() -> Iterator[FakeHarbor]:
    state = FakeHarbor()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def reply(self, status: int, body: Any = None, **headers: str) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(key.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def route(self) -> None:
            state.requests.append(f"{self.command} {self.path.split('?')[0]}")
            token = self.headers.get("Authorization") == "Bearer t0ken"
            path = self.path.split("?")[0]
            if path == "/api/v2.0/systeminfo":
                return self.reply(200, SYSTEMINFO)
            if path == f"/api/v2.0/projects/{PROJECT}/immutabletagrules" and self.headers.get("X-Is-Resource-Name") == "true":
                return self.reply(200, state.rules)
            if path == f"/api/v2.0/projects/{PROJECT}" and self.headers.get("X-Is-Resource-Name") == "true" and state.project:
                return self.reply(200, state.project)
            if path == "/service/token":
                return self.reply(200, {"token": "t0ken", "expires_in": 1800})
            if path.startswith("/v2/") and not token:
                return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "unauthorized"}]},
                                  WWW_Authenticate=f'Bearer realm="http://127.0.0.1:{state.port}/service/token",service="harbor-registry"')
            if self.command == "POST" and path == f"/v2/{REPO}/blobs/uploads/":
                if not state.may_push:
                    return self.reply(403, {"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]})
                return self.reply(202, None, Location=f"/v2/{REPO}/blobs/uploads/42?_state=x")
            if self.command == "DELETE" and path == f"/v2/{REPO}/blobs/uploads/42":
                return self.reply(204)
            if path == "/v2/":
                return self.reply(200, {})
            return self.reply(404, {"errors": [{"code": "NOT_FOUND", "message": path}]})

        do_GET = do_POST = do_DELETE = do_HEAD = route  # noqa: N815

    with serve(Handler) as state.port:
        yield state


def release_results(write_matrix: Any, fake: FakeHarbor) -> list[Result]:
    path = write_matrix(f"""\
image: {{repository: {REPO}, registry: "127.0.0.1:{fake.port}"}}
matrix: {{torch: ["2.9"], cuda: ["12.8"], python: ["3.12"], os: [ubuntu24.04]}}
layers: {{base: {{}}}}
tags:
  floating: ["v{{torch_minor}}-{{layer}}", latest]
""")
    host = FakeHost(environ={"IMAGESMITH_REGISTRY_USER": USER, "IMAGESMITH_REGISTRY_PASSWORD": SECRET})
    return [r for r in doctor.diagnose(host, path, publish=True) if r.id in ("push", "tag immutability")]


def test_a_robot_that_may_push_and_no_rule_in_the_way(write_matrix: Any, fake_harbor: FakeHarbor) -> None:
    fake_harbor.rules = [rule(1, "release-*"), rule(2, "**", disabled=True)]
    assert release_results(write_matrix, fake_harbor) == [
        Result("push", OK, f"127.0.0.1:{fake_harbor.port}/{REPO}: a push was accepted (blob upload started and cancelled): "
                           "images, SBOMs, attestations and signatures can be pushed"),
        Result("tag immutability", OK, "Harbor v2.11.0-6e0c3a9c: no rule of project ml blocks 2 floating tags or the signature tags")]
    assert f"POST /v2/{REPO}/blobs/uploads/" in fake_harbor.requests and f"DELETE /v2/{REPO}/blobs/uploads/42" in fake_harbor.requests


def test_rules_that_would_block_a_floating_tag_or_the_signature_tags_warn(write_matrix: Any, fake_harbor: FakeHarbor) -> None:
    fake_harbor.rules = [rule(3, "{latest,v*}", repos="pytorch-*"), rule(4, "sha256-*", repos="**")]
    fix = "in Harbor: Projects > ml > Policy > Tag Immutability, exclude these tags from the rule"
    found = release_results(write_matrix, fake_harbor)
    assert found[1:] == [
        Result("tag immutability", WARN, "floating tag latest matches rule 3 (tags matches {latest,v*}; repositories "
                                         "repoMatches pytorch-*): Harbor will refuse to move it", fix),
        Result("tag immutability", WARN, "floating tag v2.9-base matches rule 3 (tags matches {latest,v*}; repositories "
                                         "repoMatches pytorch-*): Harbor will refuse to move it", fix),
        Result("tag immutability", WARN, "sha256-<digest>.sig tags match an immutability rule: a second signature of an "
                                         "image cannot be added", fix)]


def test_a_robot_without_push_permission_fails_with_the_fix(write_matrix: Any, fake_harbor: FakeHarbor) -> None:
    fake_harbor.may_push = False
    push = release_results(write_matrix, fake_harbor)[0]
    assert (push.id, push.status) == ("push", FAIL)
    assert push.detail.startswith(f"push 127.0.0.1:{fake_harbor.port}/{REPO} failed: HTTP 403 DENIED: requested access to the resource is denied")
    assert push.fix == f"give the account push permission on 127.0.0.1:{fake_harbor.port}/{REPO} (Harbor: a robot account with push and pull on the project)"


@pytest.mark.parametrize("pattern, decoration, repo, tag, blocks", [
    ("**", "matches", "pytorch-cuda", "latest", True),
    ("v*", "matches", "pytorch-cuda", "latest", False),
    ("v*", "excludes", "pytorch-cuda", "latest", True),
    ("{v2.*,latest}", "matches", "pytorch-cuda", "v2.9-base", True),
    ("*", "matches", "pytorch-cuda", "sha256-00.sig", True),
])
def test_doublestar_selectors(pattern: str, decoration: str, repo: str, tag: str, blocks: bool) -> None:
    rules = harbor.rules_from([rule(1, pattern, tag_decoration=decoration)])
    assert rules[0].blocks(repo, tag) is blocks
    assert harbor.rules_from([rule(1, pattern, repos="other/**", tag_decoration=decoration)])[0].blocks(repo, tag) is False


def test_not_harbor_means_no_immutability_row(write_matrix: Any, tmp_path: Path) -> None:
    facts = doctor.ReleaseFacts(push_error=None, harbor=None)
    needs = doctor.Needs(matrix="m.yaml", registry="127.0.0.1:5000", repository="imagesmith/local", publish=True)
    assert doctor.immutability_check(doctor.Facts(release=facts), needs) == []


def test_no_login_says_how_to_log_in() -> None:
    facts = doctor.Facts(release=doctor.ReleaseFacts(push_error="push 127.0.0.1:5000/imagesmith/local failed: HTTP 401 UNAUTHORIZED"))
    needs = doctor.Needs(matrix="m.yaml", registry="127.0.0.1:5000", repository="imagesmith/local", publish=True)
    assert doctor.push_check(facts, needs) == [Result(
        "push", FAIL, "push 127.0.0.1:5000/imagesmith/local failed: HTTP 401 UNAUTHORIZED",
        "docker login 127.0.0.1:5000   (or export IMAGESMITH_REGISTRY_USER=... IMAGESMITH_REGISTRY_PASSWORD=..., e.g. a Harbor robot account)")]


# -- Harbor's scan-on-push and prevent-vulnerable settings (GET /api/v2.0/projects/{name}, the Project shape
# Harbor's v2.0 API documents: metadata values are strings) against the matrix's vulnerabilities.threshold

OSV = Path(__file__).resolve().parents[3] / "fixtures" / "osv"


def project(auto_scan: str | None = "true", prevent_vul: str | None = "true", severity: str | None = "critical",
            allowlist: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Project as Harbor's API returns it (GET /api/v2.0/projects/{project_name_or_id})."""
    meta = {k: v for k, v in {"public": "false", "auto_scan": auto_scan, "prevent_vul": prevent_vul, "severity": severity,
                              "enable_content_trust": "false", "reuse_sys_cve_allowlist": "false"}.items() if v is not None}
    return {"project_id": 2, "name": PROJECT, "owner_name": "admin", "repo_count": 3, "registry_id": None,
            "creation_time": "2026-01-10T09:00:00.000Z", "update_time": "2026-11-01T09:00:00.000Z", "metadata": meta,
            "cve_allowlist": {"id": 1, "project_id": 2, "expires_at": None, "items": [{"cve_id": c} for c in allowlist]}}


def scan_results(write_matrix: Any, fake: FakeHarbor, vulnerabilities: str = "", advisories: bool = True) -> list[Result]:
    shutil.copytree(OSV, write_matrix("").parent / "osv", dirs_exist_ok=True)
    path = write_matrix(f"""\
image: {{repository: {REPO}, registry: "127.0.0.1:{fake.port}"}}
matrix: {{torch: ["2.9"], cuda: ["12.8"], python: ["3.12"], os: [ubuntu24.04]}}
layers: {{base: {{}}}}
{"sources: {advisories: [osv]}" if advisories else ""}
{vulnerabilities}
""")
    host = FakeHost(environ={"IMAGESMITH_REGISTRY_USER": USER, "IMAGESMITH_REGISTRY_PASSWORD": SECRET})
    return [r for r in doctor.diagnose(host, path, publish=True) if r.id == "harbor scan"]


WHERE = f"in Harbor: Projects > {PROJECT} > Configuration"
CASES = [
    (project(), "", [Result("harbor scan", OK, f"Harbor v2.11.0-6e0c3a9c: project {PROJECT} scans on push and blocks pulls at "
                                                "critical and above; the matrix's threshold is critical")]),
    (project(severity="high"), "vulnerabilities: {threshold: critical}",
     [Result("harbor scan", FAIL, f"project {PROJECT} refuses pulls of images with high vulnerabilities, but the matrix releases "
                                  "images below critical: Harbor would block images imagesmith released",
             f"{WHERE}: set the prevent-vulnerable severity to critical, or set vulnerabilities.threshold: high in the matrix")]),
    (project(severity="critical"), "vulnerabilities: {threshold: high}",
     [Result("harbor scan", OK, f"Harbor v2.11.0-6e0c3a9c: project {PROJECT} scans on push and blocks pulls at critical and above; "
                                "the matrix's threshold is high")]),
    (project(auto_scan="false", prevent_vul="false"), "",
     [Result("harbor scan", WARN, f"project {PROJECT} does not scan images on push: only imagesmith's OSV match looks at them",
             f"{WHERE}: tick 'Automatically scan images on push'"),
      Result("harbor scan", WARN, f"project {PROJECT} lets images with vulnerabilities be pulled: imagesmith's threshold (critical) "
                                  "is the only gate", f"{WHERE}: tick 'Prevent vulnerable images from running' with severity critical")]),
    (project(auto_scan=None, prevent_vul=None, severity=None), "vulnerabilities: {threshold: high}",  # a project never configured
     [Result("harbor scan", WARN, f"project {PROJECT} does not scan images on push: only imagesmith's OSV match looks at them",
             f"{WHERE}: tick 'Automatically scan images on push'"),
      Result("harbor scan", WARN, f"project {PROJECT} lets images with vulnerabilities be pulled: imagesmith's threshold (high) "
                                  "is the only gate", f"{WHERE}: tick 'Prevent vulnerable images from running' with severity high")]),
    (project(severity="critical", allowlist=("CVE-2024-0001",)),
     "vulnerabilities:\n  allow: [{id: CVE-2023-45853, reason: no MiniZip, expires: 2027-03-01}]",
     [Result("harbor scan", WARN, f"the matrix allows CVE-2023-45853, which project {PROJECT}'s CVE allowlist lacks: Harbor may "
                                  "block images imagesmith released", f"{WHERE}: add CVE-2023-45853 to the CVE allowlist")]),
    (None, "", [Result("harbor scan", WARN, f"Harbor v2.11.0-6e0c3a9c: reading project {PROJECT}: HTTP 404 "
                                            f"(/api/v2.0/projects/{PROJECT}); the account needs read access to the project")]),
]


@pytest.mark.parametrize(("doc", "vulnerabilities", "expected"), CASES)
def test_harbor_scan_settings_against_the_threshold(write_matrix: Any, fake_harbor: FakeHarbor, doc: dict[str, Any] | None,
                                                   vulnerabilities: str, expected: list[Result]) -> None:
    fake_harbor.project = doc
    assert scan_results(write_matrix, fake_harbor, vulnerabilities) == expected
    assert f"GET /api/v2.0/projects/{PROJECT}" in fake_harbor.requests


def test_no_advisories_in_the_matrix_no_scan_check(write_matrix: Any, fake_harbor: FakeHarbor) -> None:
    fake_harbor.project = project(auto_scan="false")
    assert scan_results(write_matrix, fake_harbor, advisories=False) == []


@pytest.mark.parametrize(("doc", "policy"), [
    ({"metadata": {"auto_scan": "true", "prevent_vul": "true", "severity": "High"}, "cve_allowlist": {"items": [{"cve_id": "CVE-1"}]}},
     harbor.ScanPolicy(True, True, "high", ("CVE-1",))),
    ({"metadata": {"auto_scan": True, "severity": "extreme"}}, harbor.ScanPolicy(True, False, "", ())),
    ({"metadata": None, "cve_allowlist": {"items": "x"}}, harbor.ScanPolicy(False, False, "", ())),
    ([], harbor.ScanPolicy(False, False, "", ())),
])
def test_scan_policy_from_the_project_document(doc: Any, policy: harbor.ScanPolicy) -> None:
    assert harbor.scan_policy_from(doc) == policy


@pytest.mark.parametrize("doc, count", [([{"id": "x", "scope_selectors": ["repository"], "tag_selectors": "all"}], 1),
                                        ([{"id": True, "disabled": "yes"}], 1), ("rules", 0), ([None, 1, []], 0)])
def test_harbor_rules_of_any_shape_are_read_never_a_crash(doc: Any, count: int) -> None:
    rules = harbor.rules_from(doc)
    assert len(rules) == count and all(r.id == 0 and r.disabled is False and r.repositories == () for r in rules)
