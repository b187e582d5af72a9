"""The verify use case, :func:`run_verify`: one image (``imagesmith verify IMAGE``, its attached evidence first), this
host (``--local``) or every image some builds made (``--build-report``, :mod:`.verify_built`). Loads no signing
stack unless it signs or reads evidence (a GPU host may lack it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.runcontext import RunContext
from imagesmith.errors import UserError
from imagesmith.model import policy
from imagesmith.model.matrix import Matrix
from imagesmith.model.ref import DOCKER_HUB, ImageRef
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.pipeline.inputs import out_of, read_builds
from imagesmith.pipeline.runreport import RunOutcome
from imagesmith.progress import Display
from imagesmith.stages.verify import incontainer, judge, onhost, verify

if TYPE_CHECKING:
    from imagesmith.edges.signing import Key


def options_from(matrix: Matrix, allow_cpu_verification: bool = False, **overrides: Any) -> verify.VerifyOptions:
    """Verify options as the matrix's ``verify:`` section sets them (``require_gpu``
    unset: a GPU for CUDA images); ``allow_cpu_verification`` lets CUDA images be
    verified in CPU mode where no GPU is visible (they are then not GPU-verified)."""
    v = matrix.verify
    base = dict(tier=v.tier, gpus=v.gpus, shm_size=v.shm_size, memory=v.memory,
                timeout_s=float(v.timeout_s), thresholds=v.thresholds, require_gpu=v.require_gpu,
                allow_cpu=True if allow_cpu_verification else None)
    return verify.VerifyOptions(**(base | {k: val for k, val in overrides.items() if val is not None}))


@dataclass(frozen=True)
class AttachedEvidence:
    """What ``imagesmith verify IMAGE`` found attached to IMAGE's digest, and whether a signed verification there
    stands for a fresh run (:func:`attached_evidence`); the command prints it, in this order."""

    found: Any = None  # an imagesmith.stages.evidence.evidence.Evidence; None: nothing read (``note`` says why, when there is a why)
    note: str | None = None  # why the registry gave no evidence
    reused: VerifyReport | None = None  # the verify report of the attestation that stands for a fresh run
    why_not: tuple[str, ...] = ()  # --reuse-evidence asked, nothing reusable: the reasons, one per attestation
    match: Any = None  # the reused attestation (imagesmith.stages.evidence.evidence.Attestation)
    gpu_model: str | None = None  # this host's GPU model as --gpus selects them (None: CPU mode)


def attached_evidence(image: ImageRef, public_keys: Sequence[Path], store: CredentialStore, options: verify.VerifyOptions,
                      reuse: bool, max_age_days: int | None = None, read: Callable[..., Any] | None = None,
                      gpus: Callable[[str], tuple[str | None, int]] | None = None) -> AttachedEvidence:
    """The evidence attached to IMAGE's digest (a registry reference; none read from Docker Hub), its signatures
    checked with the public keys in ``public_keys``; with ``reuse`` (--reuse-evidence), the verify report of a signed attestation that stands for a fresh
    run with ``options`` (:func:`imagesmith.stages.evidence.reuse.reusable`), else the reasons none does. ``read`` and
    ``gpus`` are the registry read and this host's GPU inventory (a test passes doubles)."""
    from imagesmith.edges import signing
    from imagesmith.stages.evidence import evidence
    from imagesmith.stages.evidence.reuse import Wanted, reusable, reused_report

    if image.registry == DOCKER_HUB:
        return AttachedEvidence()
    keys = [signing.load_public_key(k) for k in public_keys]
    try:
        found = (read or evidence.read)(image, keys, store)
    except UserError as exc:
        return AttachedEvidence(note=f"no evidence read from the registry ({exc})")
    if not reuse:
        return AttachedEvidence(found)
    model, count = (gpus or gpu_model)(options.gpus)
    wanted = Wanted(options.tier, model, count, dict(options.expect), bool(options.require_gpu),
                    options.require_non_root, bool(options.only or options.skip), max_age_days)
    match, why = reusable(found, wanted)
    if match is None:
        return AttachedEvidence(found, why_not=tuple(why), gpu_model=model)
    return AttachedEvidence(found, reused=reused_report(found, match, str(image)), match=match, gpu_model=model)


def gpu_model(gpus: str) -> tuple[str | None, int]:
    """This host's GPU model and count as --gpus selects them (None: CPU mode)."""
    from imagesmith.edges.hostinfo import inventory
    from imagesmith.stages.evidence.attestation import model_name

    found = inventory().gpus if gpus != "none" else ()
    wanted = {g.strip() for g in gpus.split(",")} if gpus not in ("all", "none") else None
    names = [g.name for g in found if wanted is None or str(g.index) in wanted or g.uuid in wanted]
    return (model_name(names), len(names)) if names else (None, 0)


# -- imagesmith verify: one entry for its three modes ------------------------------------------------


@dataclass(frozen=True)
class VerifyJob:
    """One ``imagesmith verify``, its options parsed: IMAGE (``image``), this host (``local``, with ``python``), or
    every image some builds made (``build_reports``); ``export`` sends a report's figures on (--metrics,
    --pushgateway; :func:`metrics_export`)."""

    options: verify.VerifyOptions
    image: ImageRef | None = None  # IMAGE, parsed once by the command
    local: bool = False
    python: str | None = None
    build_reports: tuple[Path, ...] = ()
    json_out: Path | None = None
    pull: bool = True
    public_keys: tuple[Path, ...] = ()
    reuse_evidence: bool = False
    max_age_days: int | None = None
    signer: Key | None = None
    export: Callable[[VerifyReport | Path, str], None] = lambda report, source: None


class VerifyPrinter(Protocol):
    """What the command shows while :func:`run_verify` goes on (a quiet command shows nothing)."""

    def note(self, line: str) -> None: ...  # something the operator should know ("note: ...")
    def progress(self, local: bool) -> Callable[[str], None] | None: ...  # where the payload's progress lines go
    def display(self, title: str) -> Display: ...  # the per-image progress of --build-report
    def evidence(self, attached: AttachedEvidence, tier: str) -> None: ...  # what IMAGE's digest carries
    def report(self, report: VerifyReport, json_out: Path | None) -> None: ...  # one image's verdict
    def outcomes(self, done: RunOutcome) -> None: ...  # --build-report: every image's
    def signed(self, statement: Path) -> None: ...


def run_verify(context: RunContext, job: VerifyJob, show: VerifyPrinter) -> None:
    """``imagesmith verify``: run the job, show it through ``show``, export its figures; a UserError (exit 1) when
    it failed or was not measured on a GPU of its own."""
    if job.build_reports:
        return _verify_build_reports(context, job, show)
    from imagesmith.runstate import Tracked

    shown = str(job.image) if job.image else None  # IMAGE as the report names it (None: --local)
    if job.image and not job.local:
        attached = attached_evidence(job.image, job.public_keys, context.store, job.options, job.reuse_evidence, job.max_age_days)
        show.evidence(attached, job.options.tier)
        if attached.reused is not None:  # the same --json report, the same verdict, as a fresh run judged by that evidence
            with Tracked(job.json_out, judge.running_report(shown, job.options.tier)) as tracked:
                tracked.complete(attached.reused.to_json())
            return show.report(attached.reused, job.json_out)
    with Tracked(job.json_out, judge.running_report(shown, job.options.tier)) as tracked:  # --json FILE: running at once
        outcome = (onhost.run_local(job.options, job.python, progress=show.progress(True)) if job.local
                   else _verify_image(context, job, show))
        tracked.complete(outcome.report.to_json())
    show.report(outcome.report, job.json_out)
    if job.signer is not None and job.json_out is not None and job.image is not None:
        show.signed(_sign_image(context, job.image, outcome.report, job.signer, job.json_out, show.note))
    job.export(outcome.report, str(job.json_out or "the verify report"))
    if not outcome.ok:
        raise UserError(f"verification failed: {verify_failures(outcome.report)}")
    if policy.evidence(outcome.report).exclusive is False and not job.options.allow_shared_gpu:
        raise UserError(f"not verified: {policy.sharing_line(outcome.report)}; run it again with the GPU to itself, "
                        "or pass --allow-shared-gpu to measure this tenant's share")


def _verify_image(context: RunContext, job: VerifyJob, show: VerifyPrinter) -> verify.VerifyOutcome:
    """IMAGE in a container: pulled with the store's login for its host; its registry read for which platform image
    of an index ran (none on Docker Hub)."""
    assert job.image is not None
    host = job.image.registry
    creds = context.store.for_host(host)
    index_reader = context.registry(host, creds) if host != DOCKER_HUB else None
    return incontainer.verify_image(context.engine, str(job.image), job.options, pull=job.pull, progress=show.progress(False),
                               auth=creds.auth_config() if creds else None, registry=index_reader)


def statement_path(json_out: Path) -> Path:
    """Where ``verify --json FILE --verifier-key`` writes its statement: FILE's stem + ``.dsse.json`` beside it
    (``verify.json`` -> ``verify.dsse.json``, the name publish reads)."""
    return json_out.with_name(json_out.name.removesuffix(".json") + ".dsse.json")


def _sign_image(context: RunContext, image: ImageRef, report: VerifyReport, signer: Key, json_out: Path,
                note: Callable[[str], None]) -> Path:
    """The report of ``verify IMAGE`` and the inventory measured inside that image, signed as a statement about
    IMAGE's digest (the subject is the REPOSITORY@sha256 the operator named, which the payload ran on: the command
    takes IMAGE only so pinned when it signs, :func:`imagesmith.model.fleet.parse_ref`)."""
    from imagesmith.pipeline.verify_built import sign_report
    from imagesmith.stages.evidence import trust

    return sign_report(context.engine, report, trust.Subject(image.name, image.sha256), signer, statement_path(json_out), note)


def _verify_build_reports(context: RunContext, job: VerifyJob, show: VerifyPrinter) -> None:
    """verify --build-report: every image the builds made, one run report."""
    from imagesmith.pipeline.verify_built import verify_builds

    built = read_builds(job.build_reports)
    display = show.display(f"verifying {sum(r.ok and bool(r.image_id) for r in built.results)} images")
    try:
        done = verify_builds(built, out_of(job.build_reports[0]), job.options, display, context.store, job.json_out,
                             engine=context.engine_given, signer=job.signer)
    finally:
        display.close()
    show.outcomes(done)
    job.export(Path(done.run_report), str(done.run_report))
    if done.failed:
        raise UserError(f"verification failed for {len(done.failed)} of {len(done.outcomes)} images: {', '.join(done.failed)}")


def verify_failures(report: VerifyReport) -> str:
    """Which required checks failed; else why the report could not be judged at all."""
    return ", ".join(policy.failed_required(report)) or policy.verdict(report, verify.declared_checks()).why or "no report"


def local_series(metrics_file: Path | None, python: str | None) -> str:
    """The ``digest`` label of a ``verify --local`` run (no image, no digest): ``local:`` and the --metrics file's name, so
    two jobs writing two files into one textfile folder never export the same series; with only --pushgateway, ``local:``
    and the Python it ran (the group of that Python on this host)."""
    return "local:" + (metrics_file.name if metrics_file is not None else str(python or sys.executable))[:120]


def metrics_export(metrics_file: Path | None, pushgateway: str | None, say: Callable[[str], None],
                   local: str | None = None) -> Callable[[VerifyReport | Path, str], None]:
    """verify --metrics/--pushgateway, checked now (before anything runs); the function exports a report (the typed
    report, or a run report's file; its name in messages); ``local``: the digest label of a --local run."""
    from imagesmith.stages import metrics

    if metrics_file is not None:
        metrics.check_textfile(metrics_file)
    if pushgateway is not None:
        metrics.check_gateway(pushgateway)

    def export(report: VerifyReport | Path, source: str) -> None:
        if metrics_file is None and pushgateway is None:
            return
        from imagesmith.report import load, verify_run

        run = load(report) if isinstance(report, Path) else verify_run(report, source)
        metrics.export_run(run, metrics_file, pushgateway, local=local, say=say)
    return export
