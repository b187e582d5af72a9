"""The fleet use case, :func:`run_fleet`: every REF@sha256 (and every image a release pushed) on every GPU class of
a fleet file, one job per (digest x class), one fleet report; the figures exported, the verdict a UserError."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from imagesmith.errors import UserError
from imagesmith.model import fleet as config
from imagesmith.model import loader, releasereport
from imagesmith.model.ref import ImageRef


@dataclass(frozen=True)
class FleetJob:
    """One ``imagesmith fleet verify``, its options parsed."""

    fleet: config.Fleet
    refs: tuple[str, ...]
    out: Path
    release: Path | None = None  # --release: also every image this release report pushed
    tier: str | None = None
    classes: tuple[str, ...] = ()
    registry: str | None = None  # the host the --release report's images are on (declared: their jobs get credentials)
    credentials_file: Path | None = None
    poll_s: float = 5.0
    metrics_file: Path | None = None
    pushgateway: str | None = None
    verifier_key: Path | None = None  # the fleet verifier's private key: each cell's report is signed
    run_name: str | None = None  # --run-id (checked by the command), else the UTC time and a random suffix


def check_outputs(metrics_file: Path | None, pushgateway: str | None) -> None:
    """--metrics and --pushgateway, checked before anything is submitted."""
    from imagesmith.stages import metrics

    if metrics_file is not None:
        metrics.check_textfile(metrics_file)
    if pushgateway is not None:
        metrics.check_gateway(pushgateway)


def run_fleet(job: FleetJob, say: Callable[[str], None], show: Callable[[Sequence[Any]], None]) -> Any:
    """Submit every cell, follow them (``say``: progress lines), ``show`` the cells at the end; the fleet report
    (imagesmith.model.fleetreport.FleetReport). A UserError when a cell failed; ``runner.Interrupted`` (its
    report and the jobs cancelled) on Ctrl-C."""
    from imagesmith.stages import metrics
    from imagesmith.stages.fleet import runner

    jobs = runner.cell_jobs(job.fleet, refs_of(job.refs, job.release), job.out, job.run_name or runner.run_id(), job.tier,
                            job.classes, job.credentials_file)
    jobs = without_credentials(jobs, undeclared_refs(job.refs, job.release, job.registry))
    signer = None
    if job.verifier_key is not None:
        from imagesmith.edges import signing

        signer = signing.load_signing_key(job.verifier_key, {})
    run = runner.FleetRun(jobs, schedulers(), job.out, job.fleet, say, job.poll_s, signer=signer)
    say(f"fleet run {jobs[0].run_id}: {len(jobs)} jobs ({len({j.ref for j in jobs})} images x "
        f"{len({j.klass.name for j in jobs})} classes); files in {job.out}")
    rep = run.run()
    show(rep.cells)
    if job.metrics_file is not None or job.pushgateway is not None:
        metrics.export_fleet(rep, job.out, job.metrics_file, job.pushgateway, say)
    failed = [c for c in rep.cells if not c.ok]
    if failed:
        raise UserError(f"fleet verification failed in {len(failed)} of {len(rep.cells)} cells: "
                        + "; ".join(f"{c.klass} {c.digest[7:19]}: {c.reason}" for c in failed))
    return rep


def refs_of(refs: Sequence[str], release: Path | None) -> list[ImageRef]:
    """The REFs named and the images of the ``release`` report; a UserError when there are none."""
    found = [config.parse_ref(r) for r in refs]
    if release is not None:
        found += release_refs(release)
    if not found:
        raise UserError("nothing to verify: give REGISTRY/REPO@sha256:... references, or --release build/release.json")
    return found


def undeclared_refs(refs: Sequence[str], release: Path | None, registry: str | None) -> set[ImageRef]:
    """The --release report's images on a host the operator did not declare (--registry): their jobs get no
    credentials. A report naming another host than --registry is a UserError (nothing is submitted)."""
    from imagesmith.edges.credentials import check_artifact_host

    named = {config.parse_ref(r) for r in refs}
    found = [r for r in (release_refs(release) if release is not None else []) if r not in named]
    for ref in found:
        check_artifact_host(ref.host, registry, str(release), "release registry", "--registry HOST")
    return set() if registry else set(found)


def without_credentials(jobs: Sequence[Any], refs: set[ImageRef]) -> list[Any]:
    return [dataclasses.replace(j, credentials=None) if j.ref in refs else j for j in jobs]


def release_refs(path: Path) -> list[ImageRef]:
    """Every image a release report pushed or found unchanged, by digest (read through
    :mod:`imagesmith.model.loader`: confined, bounded, strict JSON, schema release-1; then
    :func:`imagesmith.model.releasereport.parse`)."""
    doc = loader.load_json_artifact(path, schema=releasereport.SCHEMA, fix="give the release.json that imagesmith publish wrote")
    release = releasereport.parse(doc, str(path))
    name = f"{release.registry}/{release.repository}"
    return [config.parse_ref(f"{name}@{t.digest}") for t in release.targets if t.ok and t.digest]


def schedulers() -> dict[str, Any]:
    from imagesmith.stages.fleet.kubernetes import Kubernetes
    from imagesmith.stages.fleet.slurm import Slurm

    return {"slurm": Slurm(), "kubernetes": Kubernetes()}
