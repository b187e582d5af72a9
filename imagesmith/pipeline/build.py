"""The build use case: ``imagesmith build`` (one job's targets, staged or not), and with ``--verify``/``--push`` the
whole sequence: build -> verify -> release, recorded in one run report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol

from imagesmith import runstate
from imagesmith.edges.credentials import CredentialStore
from imagesmith.edges.protocols import EngineProtocol
from imagesmith.edges.runcontext import RunContext
from imagesmith.errors import UserError
from imagesmith.model.buildreport import BuildRecord, BuildReport, Release, TargetResult
from imagesmith.model.matrix import Matrix
from imagesmith.model.plan import Plan
from imagesmith.pipeline.release import NEEDS_TRUST, ReleaseOptions, release_targets, signed_verifications
from imagesmith.pipeline.runreport import RunOutcome, RunReport
from imagesmith.pipeline.verify import options_from
from imagesmith.pipeline.verify_built import EarlyVerify, staging_auth, verify_one, verify_results
from imagesmith.progress import Display
from imagesmith.stages import artifacts
from imagesmith.stages.building import build
from imagesmith.stages.verify import verify


@dataclass(frozen=True)
class BuildJob:
    """One ``imagesmith build``: the targets of ``plan`` (the whole plan) that ``only``/``layers`` pick, built into
    ``out``; with ``stage_repo``, pushed to that staging repository and ancestors adopted from other jobs' artifacts."""

    matrix: Matrix
    plan: Plan
    out: Path
    only: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    jobs: int = 2
    prune: bool = True
    stage_repo: str | None = None
    store: CredentialStore = field(default_factory=CredentialStore)
    ca_file: Path | None = None

    @property
    def whole(self) -> bool:
        return not self.only and not self.layers


def build_stage(engine: EngineProtocol, job: BuildJob, display: Display, run: RunReport | None = None,
                on_finished: Callable[[TargetResult], None] | None = None) -> tuple[Plan, BuildReport]:
    """Build what ``job`` picks (OUT/report.json, OUT/<target>/build.json); after a build of the whole plan the
    artifacts of targets it no longer has are removed. The plan built (less what staging adopted) and its
    report; a stop (an error, Ctrl-C) marks ``run`` interrupted. ``on_finished`` is told of each target as it
    finishes."""
    try:
        p, stage = job.plan.select(job.only, job.layers), None
        if job.stage_repo:
            from imagesmith.stages.building import staging

            stage = staging.open_stage(job.stage_repo, job.matrix.image.name, engine, job.out, job.store, job.ca_file, display)
            p = stage.prepare(p, job.plan.picked(job.only, job.layers), job.matrix)
        report = build.Builder(p, job.matrix, engine, job.out, job.jobs, display, prune=job.prune, stage=stage,
                               store=job.store, on_finished=on_finished).run()
        for gone in artifacts.remove_stale(job.out, {t.id for t in job.plan.targets}) if job.whole else []:
            display.note(f"{gone}: no longer planned; its build artifact in {job.out} was removed (publish will not release it)")
    except BaseException as exc:
        if run is not None:
            run.tracked.stop(exc)
        raise
    return p, report


def records_of(report: BuildReport, plan: Plan, spec: Release) -> list[BuildRecord]:
    """A build job's results as the records it saved (OUT/<target>/build.json), in plan order."""
    results = {r.target: r for r in report.results}
    return [artifacts.record_of(results[t.id], t, spec) for t in plan.targets if t.id in results]


def verify_and_release(engine: EngineProtocol, report: BuildReport, plan: Plan, spec: Release, out: Path,
                       display: Display, run: RunReport, options: verify.VerifyOptions, release: ReleaseOptions,
                       push: bool, jobs: int = 1, early: Mapping[str, verify.VerifyOutcome] | None = None) -> RunOutcome:
    """After a build of ``plan`` (``imagesmith build --verify/--push``): verify every image it made
    (OUT/<target>/verify.json; ``early``: those verified while the build went on), then, with ``push``, release
    what passed (OUT/release.json) as ``spec`` says. ``run`` records each stage and ends ``complete``
    (``interrupted`` when a stage raises)."""
    with run:
        run.built(report.to_json() | {"state": runstate.COMPLETE})  # as the build wrote it to report.json
        if push and not release.can_release_verified:
            raise UserError(NEEDS_TRUST)
        auth = staging_auth(report.results, release.store, {r.target: out / r.target for r in report.results})
        outcomes = verify_results(engine, report.results, options, out, display, run, auth, signer=release.verifier_key,
                                  jobs=jobs, early=early)
        rel = None
        if push:
            found = [artifacts.Found(r, out / r.target.id) for r in records_of(report, plan, spec)]
            signed = signed_verifications(found, release.trust)
            rel = release_targets(engine, spec, signed.records, signed.outcomes, out, display, release, None,
                           signed.inventories(engine), signed)
        if rel is not None:
            run.released(rel.to_json() | {"state": runstate.COMPLETE})  # as the release wrote it to release.json
        return RunOutcome(tuple(report.results), outcomes, rel, run.complete())


@dataclass(frozen=True)
class BuildRun:
    """One ``imagesmith build``: the ``job``, and with ``verify`` or ``push`` the rest of the sequence under ``release``."""

    job: BuildJob
    date: str
    verify: bool = False
    push: bool = False
    release: ReleaseOptions = field(default_factory=ReleaseOptions)


class BuildPrinter(Protocol):
    """What the command shows while :func:`run_build` goes on."""

    def display(self, title: str) -> Display: ...  # the per-target progress of a stage
    def built(self, report: BuildReport, more: bool) -> None: ...  # the build's table (``more``: verify follows)
    def verified(self, done: RunOutcome) -> None: ...  # every image's verification, and the release when one ran


def run_build(context: RunContext, run: BuildRun, show: BuildPrinter) -> None:
    """``imagesmith build``: build what the job picks, then (``verify``/``push``) verify and release, one writer of OUT
    from the build to the release; a UserError when a target did not build, verify or release."""
    job = run.job
    picked = len(job.plan.select(job.only, job.layers).targets)
    if not picked:
        raise UserError(f"no target matches --only {' '.join(job.only)} --layer {' '.join(job.layers)}")
    engine, display = context.engine, show.display(f"building {picked} targets")
    with artifacts.locked(job.out, "imagesmith build", display.note):
        report_run = RunReport(job.out) if run.push or run.verify else None  # replaces the last run's report at once: running
        options = options_from(job.matrix, allow_cpu_verification=run.release.allow_cpu_verification) if report_run is not None else None
        early = _early(engine, run, options, display) if options is not None else None
        try:
            p, report = build_stage(engine, job, display, report_run, early.built if early else None)
            done_early = early.outcomes() if early else {}
        finally:
            if early:
                early.close()
            display.close()
        show.built(report, report_run is not None)
        if report_run is not None and options is not None:
            _verify_and_release(engine, run, p, report, report_run, show, options, done_early)
    if report_run is None and not report.ok:
        raise UserError(f"{sum(not r.ok for r in report.results)} of {len(report.results)} targets did not build; see above")


def _early(engine: EngineProtocol, run: BuildRun, options: verify.VerifyOptions, display: Display) -> EarlyVerify | None:
    """Verification beside the build (:class:`EarlyVerify`), unless the release would refuse to start for want of
    a trust policy (it says so after the build, as before)."""
    if run.push and not run.release.can_release_verified:
        return None

    def one(r: TargetResult) -> verify.VerifyOutcome:
        auth = staging_auth([r], run.release.store, {})
        return verify_one(engine, r, options, run.job.out / r.target, display, auth, run.release.verifier_key)
    return EarlyVerify(one)


def _verify_and_release(engine: EngineProtocol, run: BuildRun, p: Plan, report: BuildReport, report_run: RunReport,
                        show: BuildPrinter, options: verify.VerifyOptions, early: Mapping[str, verify.VerifyOutcome]) -> None:
    m = run.job.matrix
    display = show.display(f"verifying {sum(r.ok for r in report.results)} images")
    try:
        done = verify_and_release(engine, report, p, Release.of(m, run.date), run.job.out, display, report_run,
                                  options, run.release, run.push, run.job.jobs, early)
    finally:
        display.close()
    show.verified(done)
    if done.failed or done.unbuilt:
        raise UserError(f"{done.unbuilt} targets did not build, {len(done.failed)} did not verify: {', '.join(done.failed) or '-'}")
