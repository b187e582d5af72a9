"""What a release believes: the verdict judged again from the checks, the trust policy file, a verifier's signed
statement (accepted only when a named verifier signed it about the exact image), and build facts against what
the signed report measured. Tables of (input, exact message)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagesmith import pipeline
from imagesmith.edges import signing
from imagesmith.errors import UserError, ValidationError
from imagesmith.model import policy
from imagesmith.model.loader import LoadError
from imagesmith.stages import artifacts
from imagesmith.stages.evidence import attestation, trust
from imagesmith.stages.verify import verify
from tests.doubles import EngineBase, verify_report
from tests.unit.model.test_buildreport import PLAN, record
from tests.unit.trustkeys import key_files, verifier

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
IMAGE_ID = "sha256:" + "1" * 64
STAGED = trust.Subject("127.0.0.1:5000/ml/staging", DIGEST)


def check(cid: str, status: str = "pass", optional: bool = False, detail: str = "") -> dict[str, Any]:
    return {"id": cid, "status": status, "optional": optional, "detail": detail, "value": None, "threshold": None,
            "unit": "", "percent_of_baseline": None}


def report(*checks: dict[str, Any], ok: bool = True, **env: Any) -> dict[str, Any]:
    environment = {"torch": "2.13.0+cpu", "cuda": None, "cudnn": None, "python": "3.11.2"} | env
    return {"schema": verify.REPORT_SCHEMA, "state": "complete", "tier": "quick", "nonce": "n" * 32,
            "environment": environment, "checks": list(checks), "summary": {"ok": ok}, "image": {"id": IMAGE_ID}}


# -- the verdict: from the checks under the shipped registry, never from summary.ok ------------------------

DECLARED = {"versions.torch": False, "gpu.devices": False, "perf.gemm": True}


@pytest.mark.parametrize("checks, ok, why", [
    ([check("versions.torch")], True, ""),
    ([], False, "the report lists no checks"),
    ([check("versions.torch", "fail")], False, "required check failed: versions.torch"),  # summary.ok says true
    ([check("versions.torch", "fail", optional=True)], False, "required check failed: versions.torch"),  # not optional in the registry
    ([check("perf.gemm", "fail", optional=False)], True, ""),  # optional in the registry
    ([check("made.up", "fail", optional=True)], False, "required check failed: made.up"),  # unknown to the registry: required
    ([check("versions.torch", "fail"), check("gpu.devices", "fail")], False, "required checks failed: versions.torch, gpu.devices"),
    ([check("gemm.bf16", "inconclusive")], True, ""),  # it measured a tenant's share: no failure of the image
])
def test_the_verdict_is_judged_from_the_checks(checks: list[Any], ok: bool, why: str) -> None:
    doc = {"checks": checks, "summary": {"ok": True}}
    assert policy.verdict(verify_report(doc), DECLARED) == policy.Verdict(ok, why)
    assert policy.predicate_verdict(doc, DECLARED) == policy.Verdict(ok, why)  # a predicate's checks, judged alike


@pytest.mark.parametrize("checks, where, why", [
    ([check("versions.torch", "passed")], r"report\.checks\[0\]\.status: expected one of pass, warn, fail, skip, inconclusive",
     "checks[0] (versions.torch): status 'passed' is not one of pass, warn, fail, skip, inconclusive"),
    ([{"status": "pass"}], r"report\.checks\[0\]\.id: ", "checks[0] is not a check (no id)"),
    (["pass"], r"report\.checks\[0\]: expected an object", "checks[0] is not a check (no id)"),
])
def test_a_check_that_is_not_one_is_refused_by_the_parse_and_fails_a_predicate(checks: list[Any], where: str, why: str) -> None:
    doc = {"checks": checks, "summary": {"ok": True}}
    with pytest.raises(LoadError, match=where):  # a report: refused where it says it, before anything judges it
        verify_report(doc)
    assert policy.predicate_verdict(doc, DECLARED) == policy.Verdict(False, why)  # a predicate read from a registry


def test_a_report_that_claims_ok_with_a_failed_required_check_is_not_a_pass() -> None:
    forged = verify_report(report(check("versions.torch", "fail", detail="torch 9.9.9 is not 2.13.0"), ok=True))
    assert verify.VerifyOutcome(forged).ok is False
    assert policy.evidence(forged, verify.declared_checks()).ok is False
    predicate = attestation.verification_predicate(forged, verify.declared_checks())
    assert predicate["passed"] is False and predicate["checks"][0]["detail"] == "torch 9.9.9 is not 2.13.0"
    assert attestation.predicate_problems(predicate) == []


@pytest.mark.parametrize("env, mode, words", [
    ({"cuda": "13.0"}, {"mode": "cpu", "gpus": 0, "reason": "no GPU visible"}, "NOT GPU-verified: no GPU visible"),
    ({"cuda": None}, {"mode": "cpu", "gpus": 0, "reason": "no GPU visible"}, "CPU-only image (no CUDA), verified on a CPU"),
    ({"cuda": "13.0", "gpus": [{"name": "NVIDIA H200"}]}, {"mode": "gpu", "gpus": 1, "status": "pass"}, "GPU-verified on 1 GPU"),
    ({"cuda": "13.0", "gpus": [{"name": "NVIDIA H200"}]}, {"mode": "gpu", "gpus": 1, "status": "pass", "unwatched": True},
     "NOT GPU-verified: GPU exclusivity not measured: the engine is remote"),
])
def test_an_attestation_says_in_plain_words_whether_it_was_gpu_verified(env: dict[str, Any], mode: dict[str, Any],
                                                                        words: str) -> None:
    watched: dict[str, Any] = {"exclusive": None if mode.pop("unwatched", False) else True, "allowed": False, "foreign": [],
               "reason": "the engine is remote"}
    rep = verify_report(report(check("versions.torch"), **env) | {"mode": mode, "sharing": watched})
    predicate = attestation.verification_predicate(rep, verify.declared_checks())
    assert predicate["gpu_verification"] == words and attestation.predicate_problems(predicate) == []


# -- the trust policy ----------------------------------------------------------------------------------------

FIX = "; see docs/trust.md (the trust policy)"


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    key_files(tmp_path, "gpu")
    key_files(tmp_path, "other")
    return tmp_path


@pytest.mark.parametrize("text, message", [
    ("version: 1\n", f":1 (top): 'verifiers' is a required property{FIX}"),
    ("version: 2\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\n", f":1 version: '1' was expected{FIX}"),
    ("version: 1\nverifiers: []\n", f":2 verifiers: [] should be non-empty{FIX}"),
    ("version: 1\nverifiers:\n  - {name: GPU_1, key: gpu.pub, classes: ['*']}\n",
     f":3 verifiers[0].name: 'GPU_1' does not match '^[a-z][a-z0-9-]{{0,62}}$'{FIX}"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: gpu.pub}\n", f":3 verifiers[0]: 'classes' is a required property{FIX}"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: gpu.pub, classes: ['*'], keys: x}\n",
     f":3 verifiers[0]: Additional properties are not allowed ('keys' was unexpected){FIX}"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: nowhere.pub, classes: ['*']}\n",
     ":3 verifiers[0].key: public key {dir}/nowhere.pub: cannot be read (No such file or directory); give the verifier's PEM public key "
     "(openssl pkey -in verifier.key -pubout) as a path or inline"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: gpu.key, classes: ['*']}\n",
     ":3 verifiers[0].key: public key {dir}/gpu.key is not a PEM public key (Valid PEM but no BEGIN PUBLIC KEY/END PUBLIC KEY "
     "delimiters. Are you sure this is a public key?); give the verifier's PEM public key (openssl pkey -in verifier.key "
     "-pubout) as a path or inline"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: gpu.pub, classes: ['*']}\n  - {name: gpu, key: other.pub, classes: [h200]}\n",
     ":4 verifiers[1].name: the same name as verifiers[0]; one entry per verifier, one key per verifier"),
    ("version: 1\nverifiers:\n  - {name: gpu, key: gpu.pub, classes: ['*']}\n  - {name: h200, key: gpu.pub, classes: [h200]}\n",
     ":4 verifiers[1].key: the same key as verifiers[0]; one entry per verifier, one key per verifier"),
    ("version: 1\nverifiers: !!python/object:os.system [ls]\n",
     ":2 verifiers: the tag '!!python/object:os.system' is not allowed; write plain YAML (strings, numbers, true/false, lists, mappings)"),
])
def test_a_bad_trust_policy_is_refused_naming_file_line_and_key(keys: Path, text: str, message: str) -> None:
    path = keys / "trust-policy.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError) as err:
        trust.load_policy(path)
    assert str(err.value) == f"{path}" + message.replace("{dir}", str(keys))


def test_a_trust_policy_names_its_verifiers_by_path_or_inline_pem(keys: Path) -> None:
    inline = " ".join((keys / "other.pub").read_text().split())  # the PEM on one line
    path = keys / "trust-policy.yaml"
    path.write_text(f"version: 1\nverifiers:\n  - name: gpu-h200\n    key: gpu.pub\n    classes: [h200]\n"
                    f"  - name: cpu\n    key: {inline}\n    classes: ['*']\n")
    loaded = trust.load_policy(path)
    assert [(v.name, v.classes) for v in loaded.verifiers] == [("gpu-h200", ("h200",)), ("cpu", ("*",))]
    assert loaded.verifiers[1].keyid == signing.load_public_key(keys / "other.pub").keyid
    assert loaded.to_json()["file"] == str(path) and len(loaded.to_json()["sha256"]) == 64


# -- accepting a signed statement ----------------------------------------------------------------------------


@pytest.fixture
def signer(tmp_path: Path) -> tuple[signing.Key, trust.TrustPolicy]:
    return verifier(tmp_path / "trusted", "gpu-h200")


def test_a_statement_signed_by_a_named_verifier_about_this_digest_is_accepted(signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    key, pol = signer
    rep = verify_report(report(check("versions.torch")))
    data = trust.sign(rep, {"python_packages": []}, STAGED, key)
    got = trust.accept(data, "v.dsse.json", pol, STAGED)
    assert (got.verifier, got.subject, got.report, got.inventory) == ("gpu-h200", STAGED, rep, {"python_packages": []})
    assert got.to_json() == {"verifier": "gpu-h200", "keyid": key.keyid, "subject": f"{STAGED.name}@{DIGEST}",
                             "statement": "v.dsse.json"}


REFUSALS = [
    ("unsigned", "v.dsse.json: carries no signature; only a verification signed by a trusted verifier key is released "
                 "(verify on a runner that holds one, or add its public key to {policy})"),
    ("unknown key", "v.dsse.json: is signed by no verifier that {policy} names (1 signature(s) by other keys); only a "
                    "verification signed by a trusted verifier key is released (verify on a runner that holds one, or add "
                    "its public key to {policy})"),
    ("other digest", f"v.dsse.json: its subject is {STAGED.name}@{OTHER}, not the image being released "
                     f"({STAGED.name}@{DIGEST}); verify that image again"),
    ("image id for a staged image", f"v.dsse.json: its subject is docker-image-id@{IMAGE_ID}, not the image being released "
                                    f"({STAGED.name}@{DIGEST}); verify that image again"),
    ("not json", "v.dsse.json: not a DSSE envelope (not JSON (Expecting value) at line 1 column 1); verify again "
                 "with --verifier-key"),
    ("other predicate", f"v.dsse.json: predicate type '{attestation.VERIFICATION_PREDICATE}' is not {trust.PREDICATE}"),
    ("no report", "v.dsse.json: the signed predicate holds no verify report (report.checks)"),
]


def forged(kind: str, key: signing.Key, stranger: signing.Key) -> bytes:
    rep = verify_report(report(check("versions.torch")))
    if kind == "unsigned":
        return signing.envelope(trust.statement(rep, None, STAGED), attestation.PAYLOAD_TYPE, None)
    if kind == "unknown key":
        return trust.sign(rep, None, STAGED, stranger)
    if kind == "other digest":
        return trust.sign(rep, None, dataclasses.replace(STAGED, digest=OTHER), key)
    if kind == "image id for a staged image":
        return trust.sign(rep, None, trust.Subject(trust.IMAGE_ID_SUBJECT, IMAGE_ID), key)
    if kind == "not json":
        return b"verify.json says passed"
    if kind == "other predicate":
        st = attestation.Statement(STAGED.name, DIGEST, attestation.VERIFICATION_PREDICATE, {"passed": True})
        return signing.envelope(attestation.statement_bytes(st), attestation.PAYLOAD_TYPE, key)
    st = attestation.Statement(STAGED.name, DIGEST, trust.PREDICATE, {"summary": {"ok": True}})
    return signing.envelope(attestation.statement_bytes(st), attestation.PAYLOAD_TYPE, key)


@pytest.mark.parametrize("kind, message", REFUSALS, ids=[k for k, _ in REFUSALS])
def test_a_statement_publish_must_not_believe_is_refused(tmp_path: Path, signer: tuple[signing.Key, trust.TrustPolicy],
                                                         kind: str, message: str) -> None:
    key, pol = signer
    stranger, _ = verifier(tmp_path / "stranger")
    with pytest.raises(trust.Refused) as err:
        trust.accept(forged(kind, key, stranger), "v.dsse.json", pol, STAGED)
    assert str(err.value) == message.format(policy=pol.file)


# -- facts: build.json against what the signed report measured -----------------------------------------------


@pytest.mark.parametrize("claimed, env, message", [
    ({"torch": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.13.0", "python": "3.12.3"},
     {"torch": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.13.0", "python": "3.12.3"}, ""),
    ({"torch": "2.14.1+cpu", "cuda": None, "python": "3.12.3"},
     {"torch": "2.14.1+cu130", "cuda": "13.0", "cudnn": "9.13.0", "python": "3.12.3"},
     "b.json: its facts disagree with the signed verification v.dsse.json: torch: build.json says '2.14.1+cpu', the signed "
     "report measured '2.14.1+cu130'; cuda: build.json says 'cpu', the signed report measured '13.0'; cudnn: build.json "
     "says '(none)', the signed report measured '9.13.0'; nothing is released from a build record that misstates its "
     "image: build it again"),
    (None, {"torch": "2.13.0+cpu", "cuda": None, "python": "3.11.2"},
     "b.json: its facts disagree with the signed verification v.dsse.json: torch: build.json says '(none)', the signed "
     "report measured '2.13.0+cpu'; python: build.json says '(none)', the signed report measured '3.11.2'; nothing is "
     "released from a build record that misstates its image: build it again"),
])
def test_build_facts_must_agree_with_the_signed_measurement(claimed: dict[str, Any] | None, env: dict[str, Any],
                                                            message: str) -> None:
    rep = verify_report({"environment": env})
    if not message:
        assert trust.check_facts(claimed, rep, "b.json", "v.dsse.json")["cuda"] == "13.0"
        return
    with pytest.raises(UserError) as err:
        trust.check_facts(claimed, rep, "b.json", "v.dsse.json")
    assert str(err.value) == message


# -- publish's view of a folder of artifacts -----------------------------------------------------------------


def artifact(out: Path, **kw: Any) -> artifacts.Found:
    rec = record(0, facts={"torch": "2.13.0+cpu", "python": "3.11.2"}, **kw)
    path = out / rec.target.id / artifacts.BUILD_FILE
    artifacts.write_build(path, rec)
    return artifacts.Found(artifacts.read_build(path), path.parent)


def test_an_unsigned_verify_json_stops_the_release(tmp_path: Path, signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    found = artifact(tmp_path / "out")
    found.verify_path.write_text(json.dumps(report(check("versions.torch"))))  # written by the build job
    with pytest.raises(trust.Refused) as err:
        pipeline.signed_verifications([found], signer[1])
    assert str(err.value) == (f"{found.verify_path}: unsigned (no verify.dsse.json beside it); a verify report is released "
                              f"only as a statement signed by a verifier key the trust policy names: verify {PLAN.targets[0].id} "
                              f"on a runner that holds one (imagesmith verify --verifier-key)")


def test_a_signed_statement_gives_publish_the_measured_facts_and_the_inventory(
        tmp_path: Path, signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    found = artifact(tmp_path / "out")
    assert found.record.staged is not None
    subject = trust.Subject(found.record.staged.repository, found.record.staged.digest)
    rep = verify_report(report(check("versions.torch")) | {"image": {"id": found.record.image_id}})
    (found.folder / trust.STATEMENT_FILE).write_bytes(trust.sign(rep, {"dpkg": []}, subject, signer[0]))
    signed = pipeline.signed_verifications([found], signer[1])
    tid = found.record.target.id
    assert signed.outcomes[tid].ok and signed.accepted[tid].verifier == "gpu-h200"
    assert signed.records[0].facts == {"torch": "2.13.0+cpu", "python": "3.11.2", "cuda": None, "cudnn": None}
    assert signed.inventories(EngineBase())(str(found.record.image_id)) == {"dpkg": []}
    assert signed.to_json()["targets"][tid]["subject"] == f"{subject.name}@{subject.digest}"


def test_a_signed_report_about_another_image_id_is_refused(tmp_path: Path, signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    found = artifact(tmp_path / "out", staged=None)
    (found.folder / trust.STATEMENT_FILE).write_bytes(
        trust.sign(verify_report(report(check("versions.torch")) | {"image": {"id": OTHER}}), None,
                   trust.Subject(trust.IMAGE_ID_SUBJECT, str(found.record.image_id)), signer[0]))
    with pytest.raises(trust.Refused) as err:
        pipeline.signed_verifications([found], signer[1])
    assert str(err.value) == (f"{found.folder / trust.STATEMENT_FILE}: the signed report verified image {OTHER}, not the built "
                              f"{found.record.image_id}; verify that image again")


# -- round 3: the policy's max_age and fleet rule, roles apart, the signed report's schema ------------------------


@pytest.mark.parametrize("text, message", [
    ("version: 1\nmax_age: 7 days\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\n",
     ":2 max_age: '7 days' does not match '^(?=.*[0-9])([0-9]{{1,4}}d)?([0-9]{{1,6}}h)?([0-9]{{1,8}}m)?([0-9]{{1,9}}s)?$'" + FIX),
    ("version: 1\nmax_age: 9999d\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\n",
     ":2 max_age: '9999d' is not an age from 1s to 3650d; write e.g. 36h or 7d" + FIX),
    ("version: 1\nmax_age: 0s\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\n",
     ":2 max_age: '0s' is not an age from 1s to 3650d; write e.g. 36h or 7d" + FIX),
    ("version: 1\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\nfleet:\n  require: [h200]\n  classes: {l40s: {gpus: 1, gpu: L40S}}\n",
     ":4 fleet.require[0]: class h200 is required but fleet.classes does not describe it (its gpu and gpus)" + FIX),
    ("version: 1\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\nfleet:\n  require: [h200]\n  classes: {h200: {gpus: 2}}\n",
     ":5 fleet.classes.h200: class h200 runs on GPUs but names no gpu model" + FIX),
    ("version: 1\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\nfleet:\n  require: [h200]\n",
     ":3 fleet: 'classes' is a required property" + FIX),
    ("version: 1\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\nfleet:\n  require: [h200]\n  classes: {h200: {gpus: many}}\n",
     ":5 fleet.classes.h200.gpus: 'many' does not match '^[0-9]{{1,3}}$'" + FIX),
])
def test_a_bad_max_age_or_fleet_rule_is_refused(keys: Path, text: str, message: str) -> None:
    path = keys / "trust-policy.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError) as err:
        trust.load_policy(path)
    assert str(err.value) == f"{path}" + message.format()


def test_a_policy_names_its_ages_and_fleet_rule(keys: Path) -> None:
    path = keys / "trust-policy.yaml"
    path.write_text("version: 1\nmax_age: 36h\nverifiers:\n  - {name: gpu, key: gpu.pub, classes: [h200], max_age: 90m}\n"
                    "  - {name: other, key: other.pub, classes: ['*']}\n"
                    "fleet:\n  require: [h200]\n  classes: {h200: {gpus: 8, gpu: NVIDIA H200}, gh200: {gpus: 1, gpu: NVIDIA GH200, platform: linux/arm64}}\n")
    pol = trust.load_policy(path)
    assert (pol.max_age_s, [v.max_age_s for v in pol.verifiers]) == (36 * 3600, [90 * 60, None])
    assert pol.max_age(pol.verifiers[0]) == (5400, f"the max_age of verifier gpu in {path}")
    assert pol.max_age(pol.verifiers[1]) == (129600, f"the max_age of {path}")
    assert pol.require == ("h200",) and [(c.name, c.gpus, c.gpu, c.platform.docker) for c in pol.classes] == [
        ("h200", 8, "NVIDIA H200", "linux/amd64"), ("gh200", 1, "NVIDIA GH200", "linux/arm64")]
    assert pol.to_json()["fleet"]["classes"]["h200"] == {"gpus": 8, "gpu": "NVIDIA H200", "platform": "linux/amd64"}
    path.write_text("version: 1\nverifiers: [{name: gpu, key: gpu.pub, classes: ['*']}]\n")
    assert trust.load_policy(path).max_age_s == 30 * 86400  # no max_age: 30 days


@pytest.mark.parametrize("same, message", [
    ("verifier", "{policy}: verifiers[0] (gpu-h200) has the release key (--signing-key, key ID {kid}) as its key; roles stay "
                 "apart: a verifier key signs verifications on GPU runners, the release key signs what publish attaches; "
                 "give the verifier a key of its own"),
    ("verify-key", "--verifier-key and --signing-key are the same key (key ID {kid}); roles stay apart: give the verify stage "
                   "a verifier key of its own, and name it in {policy}"),
    ("none", ""),
])
def test_roles_stay_apart(tmp_path: Path, signer: tuple[signing.Key, trust.TrustPolicy], same: str, message: str) -> None:
    key, pol = signer
    other, _ = verifier(tmp_path / "other")
    release = {"verifier": key, "verify-key": other, "none": other}[same]
    verify_key = other if same == "verify-key" else None
    if not message:
        trust.check_roles(pol, release.public, key.public)
        return
    with pytest.raises(UserError) as err:
        trust.check_roles(pol, release.public, verify_key.public if verify_key else None)
    assert str(err.value) == message.format(policy=pol.file, kid=release.keyid[:16])


def test_a_signed_statement_names_its_signed_time(signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    import datetime as dt

    when = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    data = trust.sign(verify_report(report(check("versions.torch"))), None, STAGED, signer[0], now=when)
    st = attestation.parse_statement(signing.open_envelope(data, []).payload)
    assert st.predicate["signed_at"] == "2026-11-30T06:00:00+00:00"
    got = trust.accept(data, "v.dsse.json", signer[1], STAGED, now=when + dt.timedelta(days=1))
    assert got.signed_at == when and got.fleet_run is None


UNSIGNED_BY_SCHEMA = [
    ({"schema": "imagesmith.verify-report/2"}, "report.schema: 'imagesmith.verify-report/2' is not 'imagesmith.verify-report/1'"),
    ({"mode": {"mode": "gpu", "gpus": "8"}}, "report.mode.gpus: expected integer, got '8'"),
    ({"tier": ["quick"]}, "report.tier: expected string, got a list"),
]


@pytest.mark.parametrize("change, where", UNSIGNED_BY_SCHEMA, ids=[w for _, w in UNSIGNED_BY_SCHEMA])
def test_a_signed_report_is_held_to_the_verify_report_schema(signer: tuple[signing.Key, trust.TrustPolicy],
                                                             change: dict[str, Any], where: str) -> None:
    import datetime as dt

    key, pol = signer
    bad = report(check("versions.torch")) | change
    field, _, why = where.partition(": ")
    with pytest.raises(LoadError, match=re.escape(f"<test>: {field}: ")):  # the verifier never reads it, so never signs it ...
        verify_report(bad)
    predicate = {"report": bad, "inventory": None, "signed_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    st = attestation.Statement(STAGED.name, DIGEST, trust.PREDICATE, predicate)
    forged = signing.envelope(attestation.statement_bytes(st), attestation.PAYLOAD_TYPE, key)
    with pytest.raises(trust.Refused) as err:  # ... and one signed by hand is not believed
        trust.accept(forged, "v.dsse.json", pol, STAGED)
    assert str(err.value) == (f"v.dsse.json: the signed report does not follow imagesmith.verify-report/1: {field}: {why}; "
                              "a report imagesmith does not read is not released as verified")


def test_a_report_holding_nan_is_never_signed(signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    bad = report(check("versions.torch") | {"value": float("nan")})  # a check's value: the parse reads it as a number
    with pytest.raises(trust.Unsignable) as err:
        trust.sign(verify_report(bad), None, STAGED, signer[0])
    assert str(err.value) == ("the verify report:1:"
                              f"{json.dumps(bad).index('NaN') + 1}: NaN is not JSON (NaN and Infinity are not numbers JSON allows); "
                              "nothing was signed: the image under test wrote a report imagesmith does not believe")


def test_a_statement_without_a_signed_time_is_refused(signer: tuple[signing.Key, trust.TrustPolicy]) -> None:
    st = attestation.Statement(STAGED.name, DIGEST, trust.PREDICATE, {"report": report(check("versions.torch")), "inventory": None})
    data = signing.envelope(attestation.statement_bytes(st), attestation.PAYLOAD_TYPE, signer[0])
    with pytest.raises(trust.Refused) as err:
        trust.accept(data, "v.dsse.json", signer[1], STAGED)
    assert str(err.value) == ("v.dsse.json: the statement carries no signed time (signed_at, with its time zone): it cannot be "
                              "ordered or expire; verify again with this imagesmith")


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                           ["_type", "subject", "digest", "sha256", "predicateType", "predicate", "report", "checks", "mode",
                            "gpus", "signed_at", "fleet", "class", "run_id", "inventory", "x"]), inner, max_size=4), max_leaves=16)


def _about_staged(predicate: Any) -> dict[str, Any]:
    """A statement about the staged image with this predicate (so the fuzz gets past the subject check)."""
    return {"_type": attestation.STATEMENT_TYPE, "subject": [{"name": STAGED.name, "digest": {"sha256": DIGEST[7:]}}],
            "predicateType": trust.PREDICATE, "predicate": predicate}


REPORTISH = st.fixed_dictionaries({"report": st.fixed_dictionaries({"checks": JSONISH}, optional={
    "schema": st.just(verify.REPORT_SCHEMA) | JSONISH, "mode": JSONISH, "summary": JSONISH, "environment": JSONISH}),
    "signed_at": st.just("2026-11-30T00:00:00+00:00") | JSONISH}, optional={"inventory": JSONISH, "fleet": JSONISH})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JSONISH | JSONISH.map(_about_staged) | REPORTISH.map(_about_staged))
def test_any_signed_payload_is_accepted_or_refused_never_a_crash(signer: tuple[signing.Key, trust.TrustPolicy], doc: Any) -> None:
    """A verifier key signs anything it is handed: what publish makes of it is an Accepted or a Refused, nothing else."""
    data = signing.envelope(json.dumps(doc).encode(), attestation.PAYLOAD_TYPE, signer[0])
    try:
        trust.accept(data, "v.dsse.json", signer[1], STAGED)
    except trust.Refused as exc:
        assert str(exc).startswith("v.dsse.json: ")
