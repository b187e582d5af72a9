"""The whole pipeline over the stages' artifacts on disk, one module per use case:

    OUT/report.json (build, all targets of one job)
    OUT/<target>/build.json (build, one target: buildreport.BuildRecord, with its staged digest)
        -> OUT/<target>/verify.json -> OUT/release.json
        -> OUT/run-report.json (all three, one versioned file)

Each step reads what the previous one wrote, so CI can split them over jobs
and machines (`imagesmith build --stage`, `imagesmith verify --build-report`,
`imagesmith publish`): per-target files from many jobs gathered into one
folder are the whole build.

The use cases: :mod:`.plan` (render, validate), :mod:`.build` (build; build --verify/--push), :mod:`.verify`
(verify IMAGE, --local, --build-report: :mod:`.verify_built`), :mod:`.release` (publish from the artifacts),
:mod:`.fleet` (fleet verify); what
they share: :mod:`.inputs` (the builds read back) and :mod:`.runreport` (OUT/run-report.json). This face hands
their entries on, each loaded when first asked: a command loads only the use case it runs (``verify --local``
needs no signing stack).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imagesmith.pipeline.build import BuildJob, BuildRun, build_stage, records_of, run_build, verify_and_release
    from imagesmith.pipeline.fleet import FleetJob, run_fleet
    from imagesmith.pipeline.inputs import (
        BuildInput,
        builds_input,
        complete,
        merge_inputs,
        out_of,
        read_build,
        read_build_input,
        read_builds,
    )
    from imagesmith.pipeline.plan import Rendered, render, validate
    from imagesmith.pipeline.release import (
        NEEDS_TRUST,
        ReleaseOptions,
        Signed,
        check_agrees,
        check_declared_hosts,
        publish_artifacts,
        signed_verifications,
    )
    from imagesmith.pipeline.runreport import RUN_REPORT, RunOutcome, RunReport, write_run_report
    from imagesmith.pipeline.verify import AttachedEvidence, VerifyJob, attached_evidence, gpu_model, options_from, run_verify
    from imagesmith.pipeline.verify_built import (
        sign_outcome,
        sign_outcome_or_say,
        sign_report,
        staged_host,
        staging_auth,
        subject_of,
        verify_builds,
        verify_one,
        verify_results,
    )

WHERE = {name: module for module, names in {
    "plan": ("Rendered", "render", "validate"),
    "inputs": ("read_build", "BuildInput", "read_build_input", "complete", "builds_input", "merge_inputs", "read_builds", "out_of"),
    "runreport": ("RUN_REPORT", "RunReport", "write_run_report", "RunOutcome"),
    "verify_built": ("verify_results", "verify_one", "subject_of", "sign_outcome", "sign_report", "sign_outcome_or_say", "verify_builds", "staged_host", "staging_auth"),
    "verify": ("options_from", "AttachedEvidence", "attached_evidence", "gpu_model", "VerifyJob", "run_verify"),
    "release": ("ReleaseOptions", "NEEDS_TRUST", "Signed", "signed_verifications", "publish_artifacts", "check_declared_hosts", "check_agrees"),
    "fleet": ("FleetJob", "run_fleet"),
    "build": ("BuildJob", "BuildRun", "run_build", "build_stage", "records_of", "verify_and_release"),
}.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{WHERE[name]}"), name)


__all__ = [
    "NEEDS_TRUST",
    "RUN_REPORT",
    "AttachedEvidence",
    "BuildInput",
    "BuildJob",
    "BuildRun",
    "FleetJob",
    "ReleaseOptions",
    "Rendered",
    "RunOutcome",
    "RunReport",
    "Signed",
    "VerifyJob",
    "attached_evidence",
    "build_stage",
    "builds_input",
    "check_agrees",
    "check_declared_hosts",
    "complete",
    "gpu_model",
    "merge_inputs",
    "options_from",
    "out_of",
    "publish_artifacts",
    "read_build",
    "read_build_input",
    "read_builds",
    "records_of",
    "render",
    "run_build",
    "run_fleet",
    "run_verify",
    "sign_outcome",
    "sign_outcome_or_say",
    "sign_report",
    "signed_verifications",
    "staged_host",
    "staging_auth",
    "subject_of",
    "validate",
    "verify_and_release",
    "verify_builds",
    "verify_one",
    "verify_results",
    "write_run_report",
]
