"""The statement builder on recorded verify reports: the predicate follows
its JSON schema, statements pass in-toto-attestation's own validator, and
what comes back from a registry is checked field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement as ReferenceStatement

from imagesmith.model import policy
from imagesmith.stages.evidence import attestation, evidence, reuse
from imagesmith.stages.evidence.attestation import Statement, StatementError
from tests.doubles import verify_report

ROOT = Path(__file__).parent.parent.parent.parent.parent
GPU_REPORT = ROOT / "bench" / "results" / "h200-quick.json"
STANDARD_REPORT = ROOT / "bench" / "results" / "h200-standard.json"
CPU_REPORT = ROOT / "tests" / "fixtures" / "reports" / "verify-cpu.json"
DIGEST = "sha256:" + "ab" * 32


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


@pytest.mark.parametrize("path, mode, gpu, driver, measured_torch, summary", [
    (GPU_REPORT, "gpu", {"model": "NVIDIA H200", "count": 1, "capability": "9.0", "memory_gib": 139.8}, "580.159.04",
     "2.11.0+cu130", {"pass": 23, "warn": 1, "fail": 0, "skip": 8, "inconclusive": 0}),
    (CPU_REPORT, "cpu", None, None, "2.13.0+cpu", {"pass": 5, "warn": 0, "fail": 0, "skip": 4, "inconclusive": 0}),
])
def test_the_predicate_is_the_report_in_brief(path: Path, mode: str, gpu: Any, driver: Any, measured_torch: str,
                                              summary: dict[str, int]) -> None:
    report = load(path)
    p = attestation.verification_predicate(verify_report(report))
    assert attestation.predicate_problems(p) == []
    assert (p["mode"], p["gpu"], p["driver"], p["measured"]["torch"], p["summary"], p["tier"], p["passed"]) == \
        (mode, gpu, driver, measured_torch, summary, "quick", True)
    assert [c["id"] for c in p["checks"]] == [c["id"] for c in report["checks"]]
    first = report["checks"][0]
    assert p["checks"][0] == {k: first[k] for k in ("id", "status", "value", "threshold", "unit", "percent_of_baseline", "optional",
                                                    "detail")}
    assert p["verifier"]["name"] == "imagesmith" and p["verifier"]["report_schema"] == "imagesmith.verify-report/1"


EMULATED = {"image": "linux/arm64", "host": "linux/amd64", "by": "qemu-user through binfmt_misc"}


@pytest.mark.parametrize("blocks, platform, words", [
    ({"platform": {"image": "linux/arm64", "host": "linux/amd64"}, "emulation": EMULATED},
     {"image": "linux/arm64", "host": "linux/amd64", "emulated": True, "emulator": "qemu-user through binfmt_misc"},
     "linux/arm64, emulated on a linux/amd64 host (qemu-user through binfmt_misc)"),
    ({"platform": {"image": "linux/amd64", "host": "linux/amd64"}},
     {"image": "linux/amd64", "host": "linux/amd64", "emulated": False, "emulator": None}, "linux/amd64, native"),
    ({"emulation": EMULATED},  # a report of the first multi-platform release: only its emulation block
     {"image": "linux/arm64", "host": "linux/amd64", "emulated": True, "emulator": "qemu-user through binfmt_misc"},
     "linux/arm64, emulated on a linux/amd64 host (qemu-user through binfmt_misc)"),
])
def test_the_predicate_says_where_it_ran_and_whether_emulated(blocks: dict[str, Any], platform: dict[str, Any], words: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from imagesmith.cli.evidence import print_evidence

    p = attestation.verification_predicate(verify_report(load(CPU_REPORT) | blocks))
    st = Statement("h/r", DIGEST, attestation.VERIFICATION_PREDICATE, p)
    found = evidence.Evidence("h/r", DIGEST, "m", 1, "referrers API", (), [evidence.Attestation(
        "sha256:" + "11" * 32, evidence.VERIFICATION_ARTIFACT, 10, "verification", attestation.VERIFICATION_PREDICATE, statement=st)])
    assert found.to_json()["verification"][0]["platform"] == platform
    print_evidence(found)  # imagesmith evidence
    assert f"quick tier on CPU mode (no GPU), {words}, at " in capsys.readouterr().out
    assert attestation.predicate_problems(p) == [] and p["platform"] == platform and p["mode"] == "cpu"
    assert evidence.ran_where(p) == words
    emulated = " emulated" in words
    assert p["gpu_verification"] == "CPU-only image (no CUDA), verified on a CPU" + (
        ", emulated: linux/arm64 on a linux/amd64 host (qemu-user through binfmt_misc)" if emulated else "")
    reused = reuse.where_from(p)  # a reused verification keeps it: the release policy reads it back
    assert policy.evidence(verify_report(reused | {"checks": []})).emulated == ("linux/arm64 on a linux/amd64 host (qemu-user through binfmt_misc)" if emulated else "")


def test_a_statement_signed_before_platforms_were_recorded_reads_as_not_recorded() -> None:
    old = {k: v for k, v in attestation.verification_predicate(verify_report(load(CPU_REPORT))).items() if k != "platform"}
    assert attestation.predicate_problems(old) == []  # still a valid statement
    assert evidence.ran_on(old) == (None, None) and evidence.ran_where(old) == "platform not recorded"
    assert reuse.where_from(old) == {}  # reused, it claims no platform: its mode (cpu) decides, as it always did
    bad = attestation.verification_predicate(verify_report(load(CPU_REPORT))) | {"platform": {"image": "linux/arm64"}}
    assert "predicate['platform']: 'emulated' is a required property" in attestation.predicate_problems(bad)


def test_percent_of_baseline_travels_with_each_throughput_check() -> None:
    predicate = attestation.verification_predicate(verify_report(load(STANDARD_REPORT)))
    checks = {c["id"]: c for c in predicate["checks"]}
    assert attestation.predicate_problems(predicate) == [] and predicate["tier"] == "standard"
    assert checks["gemm.bf16"] == {"id": "gemm.bf16", "status": "pass", "value": 803.45, "threshold": 588.0, "unit": "TFLOP/s",
                                   "percent_of_baseline": 102.5, "optional": False,
                                   "detail": "bf16 8192^3 on GPU 0 102.5% of baseline 784 TFLOP/s"}


def test_a_mixed_host_names_both_models() -> None:
    report = load(GPU_REPORT)
    report["environment"]["gpus"] = [{"name": "NVIDIA H200"}, {"name": "NVIDIA A100-SXM4-80GB"}]
    assert attestation.verification_predicate(verify_report(report))["gpu"]["model"] == "NVIDIA A100-SXM4-80GB + NVIDIA H200"


@pytest.mark.parametrize("change, problem", [
    ({"tier": "fast"}, "predicate['tier']: 'fast' is not one of ['quick', 'standard', 'soak']"),
    ({"mode": None}, "predicate['mode']: None is not one of ['gpu', 'cpu']"),
    ({"passed": "yes"}, "predicate['passed']: 'yes' is not of type 'boolean'"),
    ({"extra": 1}, "predicate: Additional properties are not allowed ('extra' was unexpected)"),
])
def test_the_schema_refuses_what_it_does_not_describe(change: dict[str, Any], problem: str) -> None:
    p = attestation.verification_predicate(verify_report(load(CPU_REPORT))) | change
    assert attestation.predicate_problems(p) == [problem]


def test_statements_pass_the_in_toto_attestation_validator_and_read_back() -> None:
    predicate = attestation.verification_predicate(verify_report(load(GPU_REPORT)))
    st = Statement("127.0.0.1:5000/imagesmith/local", DIGEST, attestation.VERIFICATION_PREDICATE, predicate)
    data = attestation.statement_bytes(st)
    proto = json_format.Parse(data.decode(), statement_pb2.Statement())
    ReferenceStatement.copy_from_pb(proto).validate()
    assert json.loads(data)["predicate"]["gpu"]["count"] == 1  # an integer, not 1.0
    assert attestation.parse_statement(data) == st
    assert data == attestation.statement_bytes(attestation.parse_statement(data))


@pytest.mark.parametrize("doc, message", [
    (b"{", "not JSON (Expecting property name enclosed in double quotes) at line 1 column 2"),
    (b'{"_type": NaN}', "NaN is not JSON (NaN and Infinity are not numbers JSON allows) at line 1 column 11"),
    (b'{"_type": 1e400}', "the number '1e400' is too large to be finite at line 1 column 11"),
    (b'{"_type": "a", "_type": "b"}', "the key '_type' appears twice in one object (JSON readers disagree on which wins)"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
    (b"\xff", "is not UTF-8 text (at line 1 column 1; Latin-1?)"),
    (b'{"_type": "https://in-toto.io/Statement/v0.2"}',
     "_type is not https://in-toto.io/Statement/v1 or https://in-toto.io/Statement/v0.1"),
    (b'{"_type": "https://in-toto.io/Statement/v0.1", "subject": []}', "subject: expected exactly one"),
    (b'{"_type": "https://in-toto.io/Statement/v1", "subject": []}', "subject: expected exactly one"),
    (b'{"_type": "https://in-toto.io/Statement/v1", "subject": [{"digest": {"sha512": "00"}}]}', "subject[0].digest: no sha256"),
    (b'{"_type": "https://in-toto.io/Statement/v1", "subject": [{"digest": {"sha256": "00"}}], "predicateType": "x"}',
     "predicateType or predicate missing"),
])
def test_a_malformed_statement_is_refused_with_the_field_named(doc: bytes, message: str) -> None:
    with pytest.raises(StatementError) as err:
        attestation.parse_statement(doc)
    assert str(err.value) == message
