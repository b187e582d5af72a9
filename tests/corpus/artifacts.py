"""Hostile and careless artifacts: one corpus per loader (tests/unit/stages/test_artifact_corpus.py runs them).

Each case is a name and a function that writes the case's file into a folder (and
returns its path): bytes that are not text, JSON that is not strict, shapes that
break the schema, files that are not regular or lead out of their folder. They are
made at test time rather than stored, because a 200 MB file, a FIFO and symbolic
links to /dev/zero do not belong in a repository. Every case must end in exit 1
(a UserError naming the file) through the real CLI, never exit 3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

Make = Callable[[Path, str], Path]  # (folder, file name) -> the path to give the command
DIGEST = "sha256:" + "ab" * 32


def _bytes(data: bytes) -> Make:
    def make(folder: Path, name: str) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path
    return make


def _doc(doc: Any) -> Make:
    return _bytes(json.dumps(doc).encode())


def _with(base: dict[str, Any], path: str, value: Any) -> Make:
    """``base`` with the value at a dotted path (``a.0.b``) replaced."""
    doc = json.loads(json.dumps(base))
    node: Any = doc
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return _doc(doc)


def _symlink(target: str) -> Make:
    def make(folder: Path, name: str) -> Path:
        path = folder / name
        os.symlink(target, path)
        return path
    return make


def _outside(folder: Path, name: str) -> Path:
    """A link to a JSON file one folder up: outside the folder the loader reads."""
    secret = folder.parent / f"outside-{name}"
    secret.write_text('{"schema": "x"}')
    os.symlink(secret, folder / name)
    return folder / name


def _fifo(folder: Path, name: str) -> Path:
    os.mkfifo(folder / name)
    return folder / name


def _folder(folder: Path, name: str) -> Path:
    (folder / name).mkdir()
    return folder / name


def _huge(folder: Path, name: str) -> Path:
    """200 MB (sparse: no disk used), starting like JSON: read whole, it would take seconds and memory."""
    path = folder / name
    with path.open("wb") as fh:
        fh.write(b'{"schema": "')
        fh.truncate(200 * 1024 * 1024)
    return path


def _loop(folder: Path, name: str) -> Path:
    os.symlink(name + ".b", folder / name)
    os.symlink(name, folder / (name + ".b"))
    return folder / name


def bytes_cases(schema: str) -> dict[str, Make]:
    """What every JSON loader must refuse, whatever its kind."""
    head = '{"schema": "' + schema + '", "x": '
    return {
        "empty": _bytes(b""),
        "not-json": _bytes(b"{half"),
        "nan": _bytes((head + "NaN}").encode()),
        "infinity": _bytes((head + "Infinity}").encode()),
        "minus-infinity": _bytes((head + "-Infinity}").encode()),
        "float-overflow": _bytes((head + "1e400}").encode()),
        "int-5000-digits": _bytes((head + "9" * 5000 + "}").encode()),
        "int-digits-negative": _bytes((head + "-" + "1" * 25 + "}").encode()),
        "latin-1": _bytes((head + '"caf\xe9"}').encode("latin-1")),
        "utf-16": _bytes((head + '"x"}').encode("utf-16")),
        "utf-16-no-bom": _bytes((head + '"x"}').encode("utf-16-le")),
        "utf-32": _bytes((head + '"x"}').encode("utf-32")),
        "utf-8-bom": _bytes(b"\xef\xbb\xbf" + (head + '"x"}').encode()),
        "nul-byte": _bytes((head + '"x"}').encode() + b"\x00"),
        "control-in-string": _bytes((head + '"a\x01b"}').encode()),
        "lone-surrogate": _bytes((head + '"\\ud800"}').encode()),
        "lone-surrogate-key": _bytes(('{"schema": "' + schema + '", "\\udfff": 1}').encode()),
        "duplicate-key": _bytes(('{"schema": "' + schema + '", "schema": "' + schema + '"}').encode()),
        "deep-100000": _bytes((head + "[" * 100_000 + "]" * 100_000 + "}").encode()),
        "deep-70": _bytes((head + "[" * 70 + "]" * 70 + "}").encode()),
        "deep-objects": _bytes((head + '{"a":' * 500 + "1" + "}" * 500 + "}").encode()),
        "top-list": _bytes(b"[1, 2]"),
        "top-string": _bytes(b'"imagesmith"'),
        "top-null": _bytes(b"null"),
        "wrong-schema": _doc({"schema": "imagesmith.nope/1"}),
        "schema-number": _doc({"schema": 1}),
        "binary-png": _bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))),
        "huge-200mb": _huge,
        "symlink-dev-zero": _symlink("/dev/zero"),
        "symlink-etc-passwd": _symlink("/etc/passwd"),
        "symlink-outside": _outside,
        "symlink-loop": _loop,
        "symlink-dangling": _symlink("/nonexistent/imagesmith"),
        "fifo": _fifo,
        "folder": _folder,
    }


# -- valid documents of each kind (the shape cases break one key of) ------------------------------------


def verify_report(detail: str = "ok") -> dict[str, Any]:
    return {"schema": "imagesmith.verify-report/1", "tier": "quick", "started_at": "2026-11-30T00:00:00+00:00", "duration_s": 1.0,
            "state": "complete", "environment": {"torch": "2.13.0", "gpus": []},
            "image": {"ref": "127.0.0.1:5001/ml/x:1", "labels": {"io.imagesmith.target": "t"}},
            "checks": [{"id": "versions.torch", "status": "pass", "title": "torch", "detail": detail, "optional": False},
                       {"id": "gemm.fp32", "status": "fail", "title": "GEMM", "detail": detail, "value": 1.0, "unit": "TFLOP/s",
                        "threshold": 2.0, "baseline": 3.0, "percent_of_baseline": 33.3}],
            "summary": {"pass": 1, "warn": 0, "fail": 1, "skip": 0, "ok": False}}


def release(text: str = "ok") -> dict[str, Any]:
    return {"schema": "imagesmith.release/1", "ok": True, "registry": "harbor.example.com", "repository": "ml/pytorch",
            "date": "20261130", "started_at": "x", "seconds": 1.0, "pushed": [], "unchanged": [], "floating": [], "errors": [],
            "targets": [{"target": "t", "status": "pushed", "digest": DIGEST, "reference": "harbor.example.com/ml/pytorch:t",
                         "note": text, "error": None, "versions": {"torch": "2.13.0"}, "floating": []}]}


def build_report(text: str = "ok") -> dict[str, Any]:
    return {"schema": "imagesmith.build-report/1", "matrix": "m.yaml", "started_at": "x", "seconds": 1.0, "ok": False,
            "state": "complete", "base_images": {},
            "targets": [{"target": "t", "status": "failed", "image": "x", "image_id": None, "seconds": 1.0, "size_bytes": 0,
                         "error": text, "log": "", "dockerfile": "", "mismatches": []}]}


def run_report(text: str = "ok") -> dict[str, Any]:
    return {"schema": "imagesmith.run-report/1", "state": "complete", "build": build_report(text),
            "verify": {"t": verify_report(text)}, "release": release(text)}


def fleet_report(text: str = "ok") -> dict[str, Any]:
    return {"schema": "imagesmith.fleet-report/1", "ok": False, "fleet_file": "fleet.yaml", "run_id": "r1", "tier": "quick",
            "started_at": "x", "wall_s": 1.0, "interrupted": False, "requires": ["h200"],
            "cells": [{"ref": f"harbor.example.com/ml/pytorch@{DIGEST}", "class": "h200", "scheduler": "slurm", "status": "fail",
                       "reason": text, "tier": "quick", "job_id": "1", "state": "FAILED", "node": "n1", "restarts": 0,
                       "queued_s": 1.0, "ran_s": 2.0, "summary": {"pass": 1}, "failed_checks": [text], "gpus": [text],
                       "figures": [{"check": text, "value": 1.0, "unit": "x", "baseline": 2.0, "percent": 50.0, "status": "fail"}]}]}


def shape_cases(base: dict[str, Any], changes: dict[str, tuple[str, Any]]) -> dict[str, Make]:
    return {name: _with(base, path, value) for name, (path, value) in changes.items()}


VERIFY_SHAPES = {
    "checks-not-list": ("checks", {"a": 1}),
    "check-status-pwned": ("checks.0.status", "pwned"),
    "check-id-list": ("checks.0.id", ["x"]),
    "check-threshold-text": ("checks.1.threshold", "2"),
    "check-baseline-1e308": ("checks.1.baseline", 1e308),
    "duration-text": ("duration_s", "long"),
    "summary-ok-text": ("summary.ok", "yes"),
    "image-labels-list": ("image.labels", ["a"]),
    "nvml-gpus-text": ("nvml", {"gpus": "all"}),
    "nvml-series-text": ("nvml", {"gpus": [{"index": 0, "series": {"t": ["x"]}}]}),
    "state-pwned": ("state", "done"),
    "schema-old": ("schema", "imagesmith.verify-report/0"),
}
RELEASE_SHAPES = {
    "targets-not-list": ("targets", "all"),
    "target-not-object": ("targets.0", "x"),
    "digest-bad": ("targets.0.digest", "sha256:xyz"),
    "registry-number": ("registry", 5),
    "repository-null": ("repository", None),
    "traffic-text": ("traffic", {"pushed_bytes": "lots"}),
    "errors-objects": ("errors", [{"a": 1}]),
    "gpu-verified-text": ("targets.0.gpu_verified", "yes"),
}
RUN_SHAPES = {
    "build-list": ("build", [1]),
    "verify-list": ("verify", [1]),
    "verify-part-no-schema": ("verify", {"t": {"checks": []}}),
    "verify-part-bad-check": ("verify", {"t": {"schema": "imagesmith.verify-report/1", "checks": [{"id": "x", "status": "?"}]}}),
    "release-bad": ("release", {"schema": "imagesmith.release/1", "targets": 1}),
    "build-targets-text": ("build", {"schema": "imagesmith.build-report/1", "targets": "t"}),
    "build-seconds-1e308": ("build", build_report() | {"seconds": 1e308}),
}
FLEET_REPORT_SHAPES = {
    "cells-text": ("cells", "all"),
    "cell-ref-not-pinned": ("cells.0.ref", "harbor.example.com/ml/pytorch:latest"),
    "cell-status-pwned": ("cells.0.status", "pwned"),
    "cell-restarts-float": ("cells.0.restarts", 1.5),
    "cell-figure-value-text": ("cells.0.figures.0.value", "fast"),
    "wall-1e308": ("wall_s", 1e308),
    "requires-numbers": ("requires", [1, 2]),
}


def fleet_yaml_cases() -> dict[str, Make]:
    """fleet.yaml: the matrix loader's guards, now on the fleet file too."""
    head = "classes:\n  h200:\n    gpu: NVIDIA H200\n"
    slurm = "    slurm: {partition: gpu}\n"
    return {
        "gpus-5000-digits": _bytes((head + "    gpus: " + "9" * 5000 + "\n" + slurm).encode()),
        "gpus-superscript": _bytes((head + '    gpus: "\u00b2"\n' + slurm).encode()),
        "gpus-arabic-digits": _bytes((head + '    gpus: "\u0663"\n' + slurm).encode()),
        "gpus-float": _bytes((head + "    gpus: 1e400\n" + slurm).encode()),
        "latin-1": _bytes((head.replace("H200", "H200\xe9") + slurm).encode("latin-1")),
        "utf-16": _bytes((head + slurm).encode("utf-16")),
        "nul": _bytes((head + slurm).encode() + b"\x00"),
        "control": _bytes((head.replace("H200", "H200\x1b[2J") + slurm).encode()),
        "tagged": _bytes((head + "    gpus: !!python/object:os.system ls\n" + slurm).encode()),
        "alias-bomb": _bytes(("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefg", "bcdefgh"))).encode()),
        "duplicate-key": _bytes((head + "    gpus: 1\n    gpus: 2\n" + slurm).encode()),
        "deep": _bytes(("classes: " + "[" * 200 + "]" * 200 + "\n").encode()),
        "top-list": _bytes(b"- 1\n- 2\n"),
        "duration-huge": _bytes((head + "    slurm: {partition: gpu, time_limit: " + "9" * 5000 + "m}\n").encode()),
        "huge-200mb": _huge,
        "symlink-dev-zero": _symlink("/dev/zero"),
        "symlink-outside": _outside,
        "symlink-loop": _loop,
        "fifo": _fifo,
        "folder": _folder,
    }


# -- hostile text that is valid input: it must reach the outputs inert ------------------------------------

LIVE = [
    "[click](https://evil.example/a)",
    "![x](https://track.example/p.png)",
    "<https://evil.example/auto>",
    "<img src=x onerror=alert(1)>",
    "<a href='https://evil.example/h'>h</a>",
    "see https://evil.example/bare and www.evil.example and mail@evil.example",
    "[ref]: https://evil.example/def",
    "`code` and ``x`` and \\](y)",
    "a|b\n| --- |\nc",
]


# -- signed statements: hostile payloads under a valid signature, hostile envelopes ----------------------------------

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE = "https://imagesmith.dev/attestations/verify-report/v1"
GOOD_CHECK = {"id": "versions.torch", "status": "pass", "optional": False, "detail": "ok"}


def _statement(about: tuple[str, str], predicate: Any, **changes: Any) -> bytes:
    name, digest = about
    doc = {"_type": STATEMENT_TYPE, "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
           "predicateType": PREDICATE, "predicate": predicate} | changes
    return json.dumps(doc).encode()


def _report(**changes: Any) -> dict[str, Any]:
    return {"schema": "imagesmith.verify-report/1", "state": "complete", "tier": "quick", "checks": [GOOD_CHECK],
            "summary": {"ok": True}, "environment": {"torch": "2.13.0+cpu"}} | changes


def statement_payloads(subject: tuple[str, str], signed_at: str) -> dict[str, bytes]:
    """In-toto statements a verifier key would sign, each hostile in one way (``signed_at``: a recent time)."""
    head = _statement(subject, {"report": _report(), "inventory": None, "signed_at": signed_at})
    good = json.loads(head)
    return {
        "payload-deep-100000": b"[" * 100_000 + b"]" * 100_000,
        "payload-deep-in-report": head.replace(b'"checks": [', b'"deep": ' + b"[" * 70 + b"]" * 70 + b', "checks": ['),
        "payload-nan-gpus": head.replace(b'"tier": "quick"', b'"tier": "quick", "mode": {"mode": "gpu", "gpus": NaN}'),
        "payload-infinity": head.replace(b'"tier": "quick"', b'"tier": "quick", "wall_s": Infinity'),
        "payload-1e400": head.replace(b'"tier": "quick"', b'"tier": "quick", "wall_s": 1e400'),
        "payload-duplicate-subject": head.replace(b'"subject": [', b'"subject": [], "subject": ['),
        "payload-latin-1": head.replace(b'"quick"', '"quick\xe9"'.encode("latin-1")),
        "payload-not-json": b"verify.json says passed",
        "payload-top-list": b"[1, 2]",
        "payload-two-subjects": _statement(subject, good["predicate"], subject=good["subject"] * 2),
        "payload-predicate-list": _statement(subject, [good["predicate"]]),
        "report-other-schema": _statement(subject, good["predicate"] | {"report": _report(schema="imagesmith.verify-report/2")}),
        "report-gpus-text": _statement(subject, good["predicate"] | {"report": _report(mode={"mode": "gpu", "gpus": "NaN"})}),
        "report-checks-text": _statement(subject, good["predicate"] | {"report": _report(checks="all passed")}),
        "report-huge-number": _statement(subject, good["predicate"] | {"report": _report(duration_s=1e300)}),
        "no-signed-time": _statement(subject, {"report": _report(), "inventory": None}),
        "signed-2015": _statement(subject, good["predicate"] | {"signed_at": "2015-01-01T00:00:00+00:00"}),
        "signed-in-2100": _statement(subject, good["predicate"] | {"signed_at": "2100-01-01T00:00:00+00:00"}),
        "signed-at-no-zone": _statement(subject, good["predicate"] | {"signed_at": "2026-11-30T00:00:00"}),
        "signed-at-text": _statement(subject, good["predicate"] | {"signed_at": "yesterday"}),
        "inventory-list": _statement(subject, good["predicate"] | {"inventory": [1]}),
    }


def envelope_bytes() -> dict[str, bytes]:
    """DSSE envelopes that are not one (or carry too much), whatever signed them."""
    sig = {"keyid": "", "sig": "MEUCIQ=="}
    return {
        "envelope-deep": b'{"payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "envelope-nan": b'{"payload": "eA==", "payloadType": "application/vnd.in-toto+json", "signatures": [], "n": NaN}',
        "envelope-signatures-object": json.dumps({"payload": "eA==", "payloadType": "application/vnd.in-toto+json",
                                                  "signatures": {"a": 1}}).encode(),
        "envelope-10000-signatures": json.dumps({"payload": "eA==", "payloadType": "application/vnd.in-toto+json",
                                                 "signatures": [sig] * 10_000}).encode(),
        "envelope-payload-not-base64": json.dumps({"payload": "!!", "payloadType": "application/vnd.in-toto+json",
                                                   "signatures": []}).encode(),
        "envelope-sig-not-base64": json.dumps({"payload": "eA==", "payloadType": "application/vnd.in-toto+json",
                                               "signatures": [{"keyid": "", "sig": "%%"}]}).encode(),
        "envelope-type-number": json.dumps({"payload": "eA==", "payloadType": 7, "signatures": []}).encode(),
        "envelope-utf-16": json.dumps({"payload": "eA=="}).encode("utf-16"),
    }


# -- files the operator names: keys and trust policies -------------------------------------------------------------


def operator_files() -> dict[str, Make]:
    """A key or a policy path that is no regular file, or one too big: exit 1 naming it, never a hang or MemoryError."""
    return {"dev-zero": lambda folder, name: Path("/dev/zero"), "fifo": _fifo, "huge-200mb": _huge, "folder": _folder,
            "proc-self-environ": lambda folder, name: Path("/proc/self/environ"), "symlink-dev-zero": _symlink("/dev/zero")}
