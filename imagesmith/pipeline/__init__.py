"""The whole pipeline over the stages' artifacts on disk, one module per use case:

    OUT/report.json (build, all targets of one job)
    OUT/<target>/build.json (build, one target: artifacts.BuildRecord, with its staged digest)
        -> OUT/<target>/verify.json -> OUT/release.json
        -> OUT/run-report.json (all three, one versioned file)

Each step reads what the previous one wrote, so CI can split them over jobs
and machines (`imagesmith build --stage`, `imagesmith verify --build-report`,
`imagesmith publish`): per-target files from many jobs gathered into one
folder are the whole build.

The use cases: :mod:`.plan` (render, validate), :mod:`.build` (build; build --verify/--push), :mod:`.verify`
(verify --build-report; the evidence attached to an image), :mod:`.release` (publish from the artifacts); what
they share: :mod:`.inputs` (the builds read back) and :mod:`.runreport` (OUT/run-report.json). This face hands
their entries on.
"""

from __future__ import annotations

from imagesmith.pipeline.build import BuildJob, build_stage, records_of, verify_and_release
from imagesmith.pipeline.inputs import (
    BuildInput,
    build_results,
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
from imagesmith.pipeline.verify import (
    AttachedEvidence,
    attached_evidence,
    gpu_model,
    options_from,
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

__all__ = [
    "NEEDS_TRUST",
    "RUN_REPORT",
    "AttachedEvidence",
    "BuildInput",
    "BuildJob",
    "ReleaseOptions",
    "Rendered",
    "RunOutcome",
    "RunReport",
    "Signed",
    "attached_evidence",
    "build_results",
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
